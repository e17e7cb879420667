// ModelStreamInfer: one request read at a time and handed to the service. The reply of a model
// that answers once waits for the replies of the requests before it (a sequence's replies leave
// in its order, which the sequence manager keeps), as in Triton; a decoupled model's responses
// leave as they are made, interleaved with others'. Reading pauses while too many requests are
// open or have replies not yet written (a client that stops reading holds the stream back, not
// the server's memory), and a decoupled model's sends wait while too many of its responses are
// unwritten. Replies count against the memory budget until written.

#include "grpc/infer_stream.hpp"

#include "core/detail/utf8.hpp"
#include "grpc/infer_message.hpp"
#include "grpc/response_bytes.hpp"

#include <oip/memory_budget.hpp>
#include <oip/reply_sink.hpp>
#include <oip/trace.hpp>

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace oip::grpc {

namespace {

class stream_reactor;

// What a stream's completions share with it: they may run after the stream is gone.
struct stream_state {
  // Recursive: grpc++ may run a reaction inline from a Start call made under this lock.
  std::recursive_mutex mutex;
  stream_reactor* reactor = nullptr;  // null once the stream is done
  // One per request read, in the order they came, for the reply of a model that answers once: a
  // reply that is ready waits for the replies of the requests before it. A decoupled model's
  // request keeps no place (`streamed`: skipped).
  struct ordered_reply {
    ::grpc::ByteBuffer bytes;           // a serialized ModelStreamInferResponse
    memory_budget::lease held;          // the request's message and `bytes`, until written
    std::shared_ptr<open_trace> trace;  // the request's, when it was sampled
    // The status the stream ends with in this reply's place (stream_errors::end_stream).
    std::optional<::grpc::Status> ends_stream;
    bool ready = false;  // whether `bytes` holds the reply yet
    bool streamed = false;
  };
  std::deque<ordered_reply> ordered;
  std::uint64_t front_sequence = 0;  // the number of the request that ordered.front() answers
  // Decoupled models' responses in the order they were made, counted in `backlog` until written.
  struct streamed_response {
    ::grpc::ByteBuffer bytes;
    memory_budget::lease held;  // `bytes`, until written
    std::shared_ptr<open_trace> trace;
    std::optional<::grpc::Status> ends_stream;  // as for ordered replies
  };
  std::deque<streamed_response> streamed;
  response_backlog backlog;
  std::size_t open_requests = 0;           // read and not yet complete
  tracer::clock::time_point read_started;  // when the read in progress was started
  enum class write_kind : std::uint8_t { none, ordered, streamed };
  write_kind writing = write_kind::none;
  stream_errors errors = stream_errors::in_replies;
  bool reads_done = false;
  bool reading_paused = false;
  bool finished = false;
  cancellation cancel;
};

// Requests read and not yet complete, or whose replies wait to be written, past which the stream
// stops reading until they drain.
constexpr std::size_t max_unfinished_per_stream = 1024;

// A reply to a request that carries no outputs, flagged final: an error's, with `error`, or the
// empty final response a request may ask for. `names` holds the request's model name, version and
// id (none when the request could not be read); with no outputs, it cannot fail to serialize.
::grpc::ByteBuffer final_reply(const inference_response& names, std::string_view error = {}) {
  ::grpc::ByteBuffer bytes;
  // error_message is a protobuf string: a client refuses the whole message if it is not UTF-8,
  // and an error may quote the client's bytes (a BYTES element, cut where it was long).
  std::string valid;
  if (oip::detail::find_invalid_utf8(error) != std::string_view::npos) {
    valid = oip::detail::valid_utf8(error);
    error = valid;
  }
  (void)serialize_response(names, bytes,
                           {.in_stream = true, .final_response = true, .error_message = error});
  return bytes;
}

class stream_reactor final : public stream_reactor_base {
 public:
  stream_reactor(inference_service& service, stream_errors errors)
      : service_{service}, shared_{std::make_shared<stream_state>()} {
    shared_->reactor = this;
    shared_->errors = errors;
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
      sequence = shared_->front_sequence + shared_->ordered.size();
      try {
        shared_->ordered.emplace_back();
      } catch (const std::bad_alloc&) {
        return abandon();
      }
      ++shared_->open_requests;
    }
    status refused;
    try {
      // The message's bytes count against the memory budget until its request ends.
      result<memory_budget::lease> held = service_.memory().reserve(incoming_.Length());
      if (held) {
        infer_message message;
        refused = message.read(incoming_, service_.options().bounds);
        incoming_.Clear();
        if (refused.ok()) dispatch(message, read_started, sequence, std::move(*held));
      } else {
        incoming_.Clear();
        refused = held.error();
      }
    } catch (const std::bad_alloc&) {
      // The service answers out of memory once it holds the request; this is before then.
      refused = out_of_memory("reading the request");
    }
    if (!refused.ok()) {
      try {
        ::grpc::ByteBuffer error = final_reply({}, refused.message());
        const std::lock_guard lock{shared_->mutex};
        reply(sequence, error, nullptr, {}, &refused);
        --shared_->open_requests;
      } catch (const std::bad_alloc&) {
        const std::lock_guard lock{shared_->mutex};
        return abandon();
      }
    }
    const std::lock_guard lock{shared_->mutex};
    if (shared_->finished) return;
    if (may_read()) {
      read_next();
    } else {
      shared_->reading_paused = true;
    }
  }

  void OnWriteDone(bool ok) override {
    const std::lock_guard lock{shared_->mutex};
    const stream_state::write_kind wrote = shared_->writing;
    shared_->writing = stream_state::write_kind::none;
    if (!ok) {  // the client is gone: stop, and let running requests finish into the void
      shared_->ordered.clear();
      shared_->streamed.clear();
      shared_->backlog.close();
      shared_->cancel.cancel();
      finish(::grpc::Status{::grpc::StatusCode::UNAVAILABLE, "the stream could not be written"});
      return;
    }
    if (wrote == stream_state::write_kind::ordered) {
      if (const std::shared_ptr<open_trace>& trace = shared_->ordered.front().trace) {
        trace->stamp("GRPC_SEND_END");
      }
      shared_->ordered.pop_front();  // and with it a sampled request's trace, which is written
      ++shared_->front_sequence;
    } else {
      if (const std::shared_ptr<open_trace>& trace = shared_->streamed.front().trace) {
        trace->stamp("GRPC_SEND_END");
      }
      shared_->streamed.pop_front();
      shared_->backlog.written();
    }
    write_next();
    resume_reading();
    finish_if_done();
  }

  void OnCancel() override {
    shared_->cancel.cancel();
    shared_->backlog.close();
    const std::lock_guard lock{shared_->mutex};
    finish(::grpc::Status::CANCELLED);
  }

  void OnDone() override {
    {
      // Replies that were never written (a cancelled or abandoned stream) give their memory back
      // now, not when the last of the stream's requests ends.
      const std::lock_guard lock{shared_->mutex};
      shared_->reactor = nullptr;
      shared_->ordered.clear();
      shared_->streamed.clear();
    }
    delete this;
  }

  // The callers below hold the shared mutex. (grpc++'s ByteBuffer has no move operations: a
  // "move" would copy it, so messages are swapped in.)

  // Puts in the reply to request number `sequence`, in its place in the stream's order; `held`
  // (the request's lease, if any) keeps the reply's bytes counted until they are written. A reply
  // that says why the request failed (`error`) ends the stream in its place instead, when the
  // client asked for that.
  void reply(std::uint64_t sequence, ::grpc::ByteBuffer& message,
             std::shared_ptr<open_trace> trace = nullptr, memory_budget::lease held = {},
             const status* error = nullptr) {
    if (shared_->finished) return;
    if (trace) trace->stamp("GRPC_SEND_START");
    stream_state::ordered_reply& slot = shared_->ordered[sequence - shared_->front_sequence];
    slot.bytes.Swap(&message);
    slot.held = std::move(held);
    slot.held.add(slot.bytes.Length());
    slot.trace = std::move(trace);
    slot.ends_stream = ending_status(error);
    slot.ready = true;
    write_next();
  }

  // Request number `sequence` is a decoupled model's: its responses keep no place in the order.
  void stream_replies_of(std::uint64_t sequence) {
    if (shared_->finished) return;
    shared_->ordered[sequence - shared_->front_sequence].streamed = true;
    write_next();
  }

  // A decoupled model's response, written as soon as the stream can (or, for an error, as
  // `reply` says).
  void stream_out(::grpc::ByteBuffer& message, std::shared_ptr<open_trace> trace = nullptr,
                  const status* error = nullptr) {
    if (shared_->finished) return;
    if (trace) trace->stamp("GRPC_SEND_START");
    stream_state::streamed_response& out = shared_->streamed.emplace_back();
    out.bytes.Swap(&message);
    out.held = service_.memory().open();
    out.held.add(out.bytes.Length());
    out.trace = std::move(trace);
    out.ends_stream = ending_status(error);
    shared_->backlog.add();
    write_next();
  }

  // Ends the stream where memory ran out on the way to a reply, which could then never come and
  // would hold back every reply after it. (The message fits a string's inline capacity.)
  void abandon() {
    shared_->cancel.cancel();
    finish(::grpc::Status{::grpc::StatusCode::UNAVAILABLE, "out of memory"});
  }

  // A request is complete: its replies are all put in.
  void request_done() {
    --shared_->open_requests;
    resume_reading();
    finish_if_done();
  }

 private:
  // The replies to one request. A model that answers once has its reply put in its place when the
  // request completes; a decoupled model's responses are written as they come, each flagged final
  // or not, then (when the request asked for `triton_enable_empty_final_response`) an empty
  // final response if its last one was not final.
  struct stream_reply final : reply_sink {
    std::shared_ptr<stream_state> shared;
    memory_budget::lease held;  // the request's message, until its request ends
    std::uint64_t sequence = 0;
    std::shared_ptr<transport_trace> trace;  // while tracing is on
    inference_response names;                // the request's, for a reply without outputs
    ::grpc::ByteBuffer response_bytes;       // the response made, until it is put in
    status encoded{errc::internal, "the model completed the request without a response"};
    bool decoupled = false;
    bool empty_final = false;  // the request asked for an empty final response

    response_backlog* backlog() noexcept override { return decoupled ? &shared->backlog : nullptr; }

    void on_response(inference_response response, response_flag flag) override {
      encoded = serialize_response(
          response, response_bytes,
          {.in_stream = true,
           .final_response = flag == response_flag::final_response || !decoupled});
      if (!decoupled) return;  // put in with the request's end
      const status failed = encoded;
      ::grpc::ByteBuffer bytes = serialized(encoded);
      response_bytes.Clear();
      encoded = status{};
      if (flag == response_flag::final_response) {
        // Written with the request's end, which follows at once, and its trace.
        last_.emplace().Swap(&bytes);
        last_failed_ = failed;
        return;
      }
      const std::lock_guard lock{shared->mutex};
      if (shared->reactor != nullptr) {
        shared->reactor->stream_out(bytes, nullptr, failed.ok() ? nullptr : &failed);
      }
    }

    void on_complete(const status& outcome) override {
      try {
        complete(outcome);
      } catch (const std::bad_alloc&) {
        const std::lock_guard lock{shared->mutex};
        if (shared->reactor != nullptr) shared->reactor->abandon();
      }
    }

   private:
    void complete(const status& outcome) {
      std::shared_ptr<open_trace> sampled;
      if (trace) sampled = std::move(trace->sampled);
      if (sampled) sampled->stamp("INFER_RESPONSE_COMPLETE");
      if (!decoupled) {
        const status& made = outcome.ok() ? encoded : outcome;
        ::grpc::ByteBuffer bytes = serialized(made);
        const std::lock_guard lock{shared->mutex};
        if (shared->reactor == nullptr) return;
        shared->reactor->reply(sequence, bytes, std::move(sampled), std::move(held),
                               made.ok() ? nullptr : &made);
        shared->reactor->request_done();
        return;
      }
      ::grpc::ByteBuffer bytes;
      bool end_message = true;
      if (!outcome.ok()) {
        bytes = final_reply(names, outcome.message());
      } else if (last_) {
        bytes.Swap(&*last_);
      } else if (empty_final) {
        bytes = final_reply(names);
      } else {
        end_message = false;
      }
      const std::lock_guard lock{shared->mutex};
      if (shared->reactor == nullptr) return;
      if (end_message) {
        const status* error = !outcome.ok()        ? &outcome
                              : !last_failed_.ok() ? &last_failed_
                                                   : nullptr;
        shared->reactor->stream_out(bytes, std::move(sampled), error);
      }
      shared->reactor->request_done();
    }

    // The message made so far, or `s` in its place when it is an error (or it cannot be sent).
    ::grpc::ByteBuffer serialized(const status& s) {
      if (!s.ok()) return final_reply(names, s.message());
      ::grpc::ByteBuffer bytes;
      bytes.Swap(&response_bytes);
      return bytes;
    }
    std::optional<::grpc::ByteBuffer> last_;
    status last_failed_;  // why the final response could not be sent, where it could not
  };

  void dispatch(infer_message& message, tracer::clock::time_point read_started,
                std::uint64_t sequence, memory_budget::lease held) {
    const auto received = inference_service::clock::now();
    auto sink = std::make_shared<stream_reply>();
    sink->held = std::move(held);
    sink->shared = shared_;
    sink->sequence = sequence;
    // Only while tracing is on: a request's part in its trace is an allocation here.
    if (service_.tracing_active()) {
      sink->trace = std::make_shared<transport_trace>();
      sink->trace->read = {trace_stamp{"GRPC_WAITREAD_START", read_started},
                           trace_stamp{"GRPC_WAITREAD_END", received}};
    }
    // Every reply to the request names it and says that it is the request's last, as Triton's
    // do: a client that counts final responses does not wait forever for a refused request.
    sink->names.model_name = message.model_name();
    sink->names.model_version = message.model_version();
    if (!message.id().empty()) sink->names.id = message.id();
    sink->empty_final = message.empty_final_response();
    result<std::optional<std::uint64_t>> version = parse_model_version(message.model_version());
    if (!version) {
      ::grpc::ByteBuffer error = final_reply(sink->names, version.error().message());
      const std::lock_guard lock{shared_->mutex};
      reply(sequence, error, nullptr, {}, &version.error());
      --shared_->open_requests;
      return;
    }
    transport_trace* trace = sink->trace.get();
    stream_reply& replies = *sink;
    service_.infer(
        {.model = message.model_name(),
         .version = *version,
         .cancel = shared_->cancel,
         .received = received,
         .id = message.id(),
         .trace = trace},
        [&](const model_config& config) {
          if (config.decoupled) {
            replies.decoupled = true;
            const std::lock_guard lock{shared_->mutex};
            stream_replies_of(sequence);
          }
          return message.decode(service_.options().bounds);
        },
        std::move(sink));
  }

  void drop_streamed_places() {
    while (!shared_->ordered.empty() && shared_->ordered.front().streamed) {
      shared_->ordered.pop_front();
      ++shared_->front_sequence;
    }
  }

  void write_next() {
    if (shared_->writing != stream_state::write_kind::none || shared_->finished) return;
    drop_streamed_places();
    if (!shared_->ordered.empty() && shared_->ordered.front().ready) {
      if (shared_->ordered.front().ends_stream)
        return end_stream(*shared_->ordered.front().ends_stream);
      shared_->writing = stream_state::write_kind::ordered;
      StartWrite(&shared_->ordered.front().bytes);
    } else if (!shared_->streamed.empty()) {
      if (shared_->streamed.front().ends_stream)
        return end_stream(*shared_->streamed.front().ends_stream);
      shared_->writing = stream_state::write_kind::streamed;
      StartWrite(&shared_->streamed.front().bytes);
    }
  }

  // The status a failed request's reply ends the stream with, where the client asked for that.
  [[nodiscard]] std::optional<::grpc::Status> ending_status(const status* error) const {
    if (error == nullptr || error->ok() || shared_->errors != stream_errors::end_stream) {
      return std::nullopt;
    }
    return to_grpc(*error);
  }

  // Ends the stream with a failed request's status, in its reply's place: the replies before it
  // have been written, the requests still running are cancelled, and no more are read.
  void end_stream(const ::grpc::Status& why) {
    shared_->cancel.cancel();
    finish(why);
  }

  void resume_reading() {
    if (!shared_->reading_paused || shared_->finished || !may_read()) return;
    shared_->reading_paused = false;
    read_next();
  }

  // Whether another request may be read: `ordered` holds a place for every request read whose
  // reply is not yet written (or, a decoupled model's, not yet passed at the front).
  [[nodiscard]] bool may_read() const {
    return shared_->open_requests < max_unfinished_per_stream &&
           shared_->ordered.size() < max_unfinished_per_stream;
  }

  // The callers hold the shared mutex (or are the constructor).
  void read_next() {
    shared_->read_started = tracer::clock::now();
    StartRead(&incoming_);
  }

  void finish_if_done() {
    drop_streamed_places();
    if (shared_->reads_done && shared_->open_requests == 0 && shared_->ordered.empty() &&
        shared_->streamed.empty() && shared_->writing == stream_state::write_kind::none) {
      finish(::grpc::Status::OK);
    }
  }

  void finish(const ::grpc::Status& s) {
    if (shared_->finished) return;
    shared_->finished = true;
    shared_->backlog.close();
    Finish(s);
  }

  inference_service& service_;
  std::shared_ptr<stream_state> shared_;
  ::grpc::ByteBuffer incoming_;
};

}  // namespace

stream_reactor_base* open_infer_stream(inference_service& service, stream_errors errors) {
  return new stream_reactor(service, errors);
}

}  // namespace oip::grpc
