// ModelStreamInfer: one request read at a time and handed to the service, the replies written in
// the order the requests came (a sequence's replies in its order, which the sequence manager
// keeps), reading paused while too many wait.

#include "grpc/infer_stream.hpp"

#include <oip/reply_sink.hpp>
#include <oip/trace.hpp>

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <utility>

namespace oip::grpc {

namespace {

class stream_reactor;

// What a stream's completions share with it: they may run after the stream is gone.
struct stream_state {
  // Recursive: grpc++ may run a reaction inline from a Start call made under this lock.
  std::recursive_mutex mutex;
  stream_reactor* reactor = nullptr;  // null once the stream is done
  // One per request read, in the order they came: replies leave in that order, as in Triton
  // (a reply that is ready waits for the replies of the requests before it).
  struct queued_reply {
    ::grpc::ByteBuffer bytes;           // a serialized ModelStreamInferResponse
    std::shared_ptr<open_trace> trace;  // the request's, when it was sampled
    bool ready = false;                 // whether `bytes` holds the reply yet
  };
  std::deque<queued_reply> replies;
  std::uint64_t front_sequence = 0;        // the number of the request that replies.front() answers
  tracer::clock::time_point read_started;  // when the read in progress was started
  bool writing = false;
  bool reads_done = false;
  bool reading_paused = false;
  bool finished = false;
  cancellation cancel;
};

// Requests read and not yet answered, past which the stream stops reading until they drain.
constexpr std::size_t max_outstanding_per_stream = 1024;

class stream_reactor final : public stream_reactor_base {
 public:
  explicit stream_reactor(inference_service& service)
      : service_{service}, shared_{std::make_shared<stream_state>()} {
    shared_->reactor = this;
    read_next();
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      const std::lock_guard lock{shared_->mutex};
      shared_->reads_done = true;
      finish_if_done();
      return;
    }
    tracer::clock::time_point read_started;
    std::uint64_t sequence = 0;
    {
      const std::lock_guard lock{shared_->mutex};
      if (shared_->finished) return;  // cancelled meanwhile: a late request is not run
      read_started = shared_->read_started;
      sequence = shared_->front_sequence + shared_->replies.size();
      shared_->replies.emplace_back();
    }
    inference::ModelInferRequest message;
    const status parsed = parse(incoming_, message);
    incoming_.Clear();
    if (parsed.ok()) {
      dispatch(message, read_started, sequence);
    } else {
      ::grpc::ByteBuffer error = error_reply(parsed, "");
      const std::lock_guard lock{shared_->mutex};
      reply(sequence, error);
    }
    const std::lock_guard lock{shared_->mutex};
    if (shared_->finished) return;
    if (shared_->replies.size() < max_outstanding_per_stream) {
      read_next();
    } else {
      shared_->reading_paused = true;
    }
  }

  void OnWriteDone(bool ok) override {
    const std::lock_guard lock{shared_->mutex};
    shared_->writing = false;
    if (!ok) {  // the client is gone: stop, and let running requests finish into the void
      shared_->replies.clear();
      shared_->cancel.cancel();
      finish(::grpc::Status{::grpc::StatusCode::UNAVAILABLE, "the stream could not be written"});
      return;
    }
    if (const std::shared_ptr<open_trace>& trace = shared_->replies.front().trace) {
      trace->stamp("GRPC_SEND_END");
    }
    shared_->replies.pop_front();  // and with it a sampled request's trace, which is written
    ++shared_->front_sequence;
    write_next();
    resume_reading();
    finish_if_done();
  }

  void OnCancel() override {
    shared_->cancel.cancel();
    const std::lock_guard lock{shared_->mutex};
    finish(::grpc::Status::CANCELLED);
  }

  void OnDone() override {
    {
      const std::lock_guard lock{shared_->mutex};
      shared_->reactor = nullptr;
    }
    delete this;
  }

  // Puts in the reply to request number `sequence` (from any thread), taking its contents; the
  // caller holds the shared mutex. (grpc++'s ByteBuffer has no move operations: a "move" would
  // copy it.)
  void reply(std::uint64_t sequence, ::grpc::ByteBuffer& message,
             std::shared_ptr<open_trace> trace = nullptr) {
    if (shared_->finished) return;
    if (trace) trace->stamp("GRPC_SEND_START");
    stream_state::queued_reply& slot = shared_->replies[sequence - shared_->front_sequence];
    slot.bytes.Swap(&message);
    slot.trace = std::move(trace);
    slot.ready = true;
    write_next();
  }

 private:
  // The reply to one request of the stream, put in its place in the stream's order.
  struct stream_reply final : reply_sink {
    std::shared_ptr<stream_state> shared;
    std::uint64_t sequence = 0;
    std::shared_ptr<transport_trace> trace;  // while tracing is on
    inference::ModelInferResponse failed;    // the reply's fields for an error
    inference::ModelStreamInferResponse message;
    status encoded{errc::internal, "the model completed the request without a response"};

    void on_response(inference_response response) override {
      inference::ModelInferResponse& answer = *message.mutable_infer_response();
      encoded = encode_response(response, answer);
      mark_final(answer);
    }
    void on_complete(const status& outcome) override {
      std::shared_ptr<open_trace> sampled;
      if (trace) sampled = std::move(trace->sampled);
      status s = outcome.ok() ? encoded : outcome;
      ::grpc::ByteBuffer bytes;
      if (s.ok()) s = serialize(message, bytes);
      if (!s.ok()) {
        message.Clear();
        message.set_error_message(s.message());
        *message.mutable_infer_response() = failed;
        (void)serialize(message, bytes);  // as error_reply's, cannot fail
      }
      if (sampled) sampled->stamp("INFER_RESPONSE_COMPLETE");
      const std::lock_guard lock{shared->mutex};
      if (shared->reactor == nullptr) return;
      shared->reactor->reply(sequence, bytes, std::move(sampled));
      shared->reactor->resume_reading();
      shared->reactor->finish_if_done();
    }
  };

  void dispatch(inference::ModelInferRequest& message, tracer::clock::time_point read_started,
                std::uint64_t sequence) {
    const auto received = inference_service::clock::now();
    auto sink = std::make_shared<stream_reply>();
    sink->shared = shared_;
    sink->sequence = sequence;
    // Only while tracing is on: a request's part in its trace is an allocation here.
    if (service_.tracing_active()) {
      sink->trace = std::make_shared<transport_trace>();
      sink->trace->read = {trace_stamp{"GRPC_WAITREAD_START", read_started},
                           trace_stamp{"GRPC_WAITREAD_END", received}};
    }
    // A model's reply, a failed one too, says that it is the request's last, as Triton's do:
    // clients that ask for `triton_enable_empty_final_response` wait for it.
    sink->failed.set_id(message.id());
    sink->failed.set_model_name(message.model_name());
    sink->failed.set_model_version(message.model_version());
    mark_final(sink->failed);
    result<std::optional<std::uint64_t>> version = parse_model_version(message.model_version());
    if (!version) {
      ::grpc::ByteBuffer error = error_reply(version.error(), message.id());
      const std::lock_guard lock{shared_->mutex};
      reply(sequence, error);
      return;
    }
    transport_trace* trace = sink->trace.get();
    service_.infer(
        {.model = message.model_name(),
         .version = *version,
         .cancel = shared_->cancel,
         .received = received,
         .id = message.id(),
         .trace = trace},
        [&](const model_config&) {
          return decode_infer_message(message, service_.options().bounds);
        },
        std::move(sink));
  }

  static void mark_final(inference::ModelInferResponse& response) {
    (*response.mutable_parameters())["triton_final_response"].set_bool_param(true);
  }

  // An error message cannot fail to serialize: the service's messages are short, and the id is
  // the client's own, which arrived in a message of the same limit.
  static ::grpc::ByteBuffer error_reply(const status& s, const std::string& id) {
    inference::ModelStreamInferResponse message;
    message.set_error_message(s.message());
    message.mutable_infer_response()->set_id(id);
    ::grpc::ByteBuffer bytes;
    (void)serialize(message, bytes);
    return bytes;
  }

  // The callers below hold the shared mutex.
  void write_next() {
    if (shared_->writing || shared_->finished || shared_->replies.empty() ||
        !shared_->replies.front().ready) {
      return;
    }
    shared_->writing = true;
    StartWrite(&shared_->replies.front().bytes);
  }

  void resume_reading() {
    if (!shared_->reading_paused || shared_->finished) return;
    if (shared_->replies.size() >= max_outstanding_per_stream) return;
    shared_->reading_paused = false;
    read_next();
  }

  // The callers hold the shared mutex (or are the constructor).
  void read_next() {
    shared_->read_started = tracer::clock::now();
    StartRead(&incoming_);
  }

  void finish_if_done() {
    if (shared_->reads_done && shared_->replies.empty() && !shared_->writing) {
      finish(::grpc::Status::OK);
    }
  }

  void finish(const ::grpc::Status& s) {
    if (shared_->finished) return;
    shared_->finished = true;
    Finish(s);
  }

  inference_service& service_;
  std::shared_ptr<stream_state> shared_;
  ::grpc::ByteBuffer incoming_;
};

// A stream that ends as it opens, with `why`.

}  // namespace

stream_reactor_base* open_infer_stream(inference_service& service) {
  return new stream_reactor(service);
}

}  // namespace oip::grpc
