// The gRPC client: one channel, the generated stub's blocking calls for the small ones and its
// callback API for inference, unary and streamed.

#include "core/detail/end_elsewhere.hpp"
#include "core/detail/future_of.hpp"
#include "core/detail/run_callback.hpp"
#include "grpc/deadlock_detection.hpp"
#include "grpc/messages.hpp"

#include <oip/grpc/client.hpp>
#include <oip/grpc/codec.hpp>
#include <oip/grpc/grpc_service.grpc.pb.h>
#include <oip/shared_memory.hpp>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <new>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#include <fmt/format.h>
#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>

namespace oip::grpc {

namespace {

using Service = inference::GRPCInferenceService;

// The nearest errc for a gRPC code; the code itself is kept (`status::received_code`).
errc errc_of(::grpc::StatusCode code) {
  switch (code) {
    case ::grpc::StatusCode::INVALID_ARGUMENT:
    case ::grpc::StatusCode::OUT_OF_RANGE: return errc::invalid_argument;
    case ::grpc::StatusCode::NOT_FOUND: return errc::not_found;
    case ::grpc::StatusCode::ALREADY_EXISTS: return errc::already_exists;
    case ::grpc::StatusCode::DEADLINE_EXCEEDED: return errc::deadline_exceeded;
    case ::grpc::StatusCode::PERMISSION_DENIED: return errc::forbidden;
    case ::grpc::StatusCode::UNAUTHENTICATED: return errc::unauthenticated;
    case ::grpc::StatusCode::RESOURCE_EXHAUSTED: return errc::payload_too_large;
    case ::grpc::StatusCode::FAILED_PRECONDITION: return errc::failed_precondition;
    case ::grpc::StatusCode::UNIMPLEMENTED: return errc::not_implemented;
    case ::grpc::StatusCode::UNAVAILABLE:
    case ::grpc::StatusCode::CANCELLED:
    case ::grpc::StatusCode::ABORTED: return errc::unavailable;
    default: return errc::internal;
  }
}

status status_of(const ::grpc::Status& s) {
  if (s.ok()) return {};
  return status{errc_of(s.error_code()), s.error_message()}.received_as(
      received_over::grpc, static_cast<int>(s.error_code()));
}

grpc_compression_algorithm algorithm_of(wire_compression compression) {
  switch (compression) {
    case wire_compression::gzip: return GRPC_COMPRESS_GZIP;
    case wire_compression::deflate: return GRPC_COMPRESS_DEFLATE;
    case wire_compression::none: break;
  }
  return GRPC_COMPRESS_NONE;
}

std::string version_text(std::optional<std::uint64_t> version) {
  return version ? std::to_string(*version) : std::string{};
}

std::shared_ptr<::grpc::Channel> make_channel(const std::string& target,
                                              const client_options& options) {
  ::grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(static_cast<int>(
      std::min<std::size_t>(options.reply_bounds.max_body_bytes, std::size_t{INT32_MAX})));
  arguments.SetMaxSendMessageSize(-1);
  if (options.keepalive_time.count() > 0) {
    arguments.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, static_cast<int>(options.keepalive_time.count()));
    arguments.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                     static_cast<int>(options.keepalive_timeout.count()));
    arguments.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS,
                     options.keepalive_without_calls ? 1 : 0);
  }
  if (options.request_compression != wire_compression::none) {
    arguments.SetCompressionAlgorithm(algorithm_of(options.request_compression));
  }
  std::shared_ptr<::grpc::ChannelCredentials> credentials;
  if (options.tls.enabled) {
    ::grpc::SslCredentialsOptions tls;
    tls.pem_root_certs = options.tls.root_certificates;
    tls.pem_private_key = options.tls.private_key;
    tls.pem_cert_chain = options.tls.certificate_chain;
    credentials = ::grpc::SslCredentials(tls);
  } else {
    credentials = ::grpc::InsecureChannelCredentials();
  }
  return ::grpc::CreateCustomChannel(target, credentials, arguments);
}

std::string lower(std::string_view text) {
  std::string out{text};
  for (char& c : out) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return out;
}

// Whether grpc++ can send each header as metadata: a name of lower-case letters, digits, '-', '_'
// and '.' (names are sent in lower case), not one of the protocol's own (`grpc-`, `:`-prefixed),
// and, unless the name ends in "-bin", a value of printable ASCII. grpc++ aborts the process on a
// call with anything else, so it is refused when the client is made, as the HTTP client refuses
// what HTTP cannot carry.
status check_metadata(const std::vector<http_header>& headers) {
  for (const http_header& h : headers) {
    const std::string name = lower(h.name);
    const bool legal_name = !name.empty() && !name.starts_with("grpc-") &&
                            std::all_of(name.begin(), name.end(), [](char c) {
                              return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
                                     c == '_' || c == '.';
                            });
    const bool binary = name.ends_with("-bin");
    const bool legal_value = binary || std::all_of(h.value.begin(), h.value.end(),
                                                   [](char c) { return c >= 0x20 && c <= 0x7E; });
    if (!legal_name || !legal_value) {
      return status{errc::invalid_argument,
                    fmt::format("the header '{}' cannot be sent as gRPC metadata: a name of "
                                "letters, digits, '-', '_' and '.' (not 'grpc-'), and a value of "
                                "printable ASCII unless the name ends in '-bin'",
                                h.name.substr(0, 200))};
    }
  }
  return {};
}

}  // namespace

namespace detail {

class client_state {
 public:
  client_state(std::string target, client_options options)
      : options_{std::move(options)},
        headers_check_{check_metadata(options_.headers)},
        target_{std::move(target)},
        channel_{make_channel(target_, options_)},
        stub_{Service::NewStub(channel_)} {
    detail::settle_deadlock_detection(options_.keep_abseil_deadlock_detection);
  }

  // A context with the client's metadata, deadline and compression; the headers' error, if they
  // cannot be sent, for every call.
  [[nodiscard]] status prepare(::grpc::ClientContext& context) const {
    if (!headers_check_.ok()) return headers_check_;
    for (const http_header& h : options_.headers) context.AddMetadata(lower(h.name), h.value);
    if (options_.timeout.count() > 0) {
      context.set_deadline(std::chrono::system_clock::now() + options_.timeout);
    }
    if (options_.request_compression != wire_compression::none) {
      context.set_compression_algorithm(algorithm_of(options_.request_compression));
    }
    return {};
  }

  // A blocking call of the stub.
  template <class Request, class Response, class Method>
  status call(Method method, const Request& request, Response& response) {
    ::grpc::ClientContext context;
    if (status s = prepare(context); !s.ok()) return s;
    return status_of((stub_.get()->*method)(&context, request, &response));
  }

  [[nodiscard]] const client_options& options() const noexcept { return options_; }
  [[nodiscard]] Service::Stub& stub() noexcept { return *stub_; }
  [[nodiscard]] shared_memory_registry& regions() noexcept { return regions_; }
  [[nodiscard]] bool has_regions() const noexcept { return any_region_.load(); }
  void note_region() noexcept { any_region_.store(true); }

  // Asynchronous calls in flight, so that the client's end cancels them and waits until they are
  // gone. Once the client is closing, a call that a callback starts is refused (false): the end
  // would wait for it otherwise, and for each call its callback starts in turn.
  [[nodiscard]] bool begin_call(::grpc::ClientContext* context) {
    const std::lock_guard lock{mutex_};
    if (closing_) return false;
    cancellable_.insert(context);
    ++open_calls_;
    return true;
  }
  // The call's context is about to go: the client's end no longer cancels it.
  void stop_cancelling(::grpc::ClientContext* context) {
    const std::lock_guard lock{mutex_};
    cancellable_.erase(context);
  }
  // The call and its context are gone (`stop_cancelling` came first).
  void end_call() {
    const std::lock_guard lock{mutex_};
    if (--open_calls_ == 0) idle_.notify_all();
  }
  void cancel_calls() {
    std::unique_lock lock{mutex_};
    closing_ = true;
    for (::grpc::ClientContext* context : cancellable_) context->TryCancel();
    idle_.wait(lock, [this] { return open_calls_ == 0; });
  }

 private:
  client_options options_;
  status headers_check_;  // of the headers every call carries (`options_.headers`)
  std::string target_;
  std::shared_ptr<::grpc::Channel> channel_;
  std::unique_ptr<Service::Stub> stub_;
  shared_memory_registry regions_;
  std::atomic<bool> any_region_{false};
  std::mutex mutex_;
  std::condition_variable idle_;
  std::set<::grpc::ClientContext*> cancellable_;
  std::size_t open_calls_ = 0;
  bool closing_ = false;
};

}  // namespace detail

client::client(std::string host_port, client_options options)
    : state_{std::make_shared<detail::client_state>(std::move(host_port), std::move(options))} {}

namespace {

// The client whose callback runs on this thread, if any (a thread of grpc++'s).
thread_local const detail::client_state* calling_back_for = nullptr;

// Marks the thread for the scope: one of `owner`'s callbacks runs, or is destroyed (what it holds
// may be the client's last reference).
class callback_mark {
 public:
  explicit callback_mark(const detail::client_state& owner) noexcept
      : outer_{std::exchange(calling_back_for, &owner)} {}
  callback_mark(const callback_mark&) = delete;
  callback_mark& operator=(const callback_mark&) = delete;
  ~callback_mark() { calling_back_for = outer_; }

 private:
  const detail::client_state* outer_;
};

// The stream whose callback runs on this thread, if any: its end cannot come before that
// callback returns.
thread_local const void* calling_back_in_stream = nullptr;

class stream_callback_mark {
 public:
  explicit stream_callback_mark(const void* stream) noexcept
      : outer_{std::exchange(calling_back_in_stream, stream)} {}
  stream_callback_mark(const stream_callback_mark&) = delete;
  stream_callback_mark& operator=(const stream_callback_mark&) = delete;
  ~stream_callback_mark() { calling_back_in_stream = outer_; }

 private:
  const void* outer_;
};

// Runs one of the caller's callbacks of `owner`'s calls.
template <class Callback, class... Args>
void call_back(const detail::client_state& owner, Callback& callback, Args&&... args) noexcept {
  const callback_mark mark{owner};
  run_callback("oip::grpc::client", callback, std::forward<Args>(args)...);
}

// A reply decoded for the caller's callback, which is called whatever happens: an exception here,
// on grpc++'s thread, would end the call without it.
result<inference_response> decoded(inference::ModelInferResponse& reply, const limits& bounds,
                                   const shared_memory_output_source* placed) {
  try {
    return decode_response(reply, bounds, placed);
  } catch (const std::bad_alloc&) {
    return status{errc::unavailable, "no memory on this client for the reply's tensors"};
  }
}

}  // namespace

client::~client() {
  // On a thread of grpc++'s that runs a callback (this client's, or another's that held this
  // client's last reference), the wait could be for this very call, and the channel's last
  // reference must not go there.
  if (calling_back_for != nullptr) {
    // Ended by one of its own callbacks: the end waits for every call, that callback's included,
    // and the channel's last reference must not go on grpc++'s thread (it would join itself). A
    // thread of its own ends the client once the callback has returned.
    if (oip::detail::end_elsewhere([state = state_] { state->cancel_calls(); })) return;
    std::fputs("oip::grpc::client: ended in one of its own callbacks, with no thread to end it\n",
               stderr);
    std::abort();
  }
  state_->cancel_calls();
}

namespace {

// The outputs of `request` that go to regions registered through this client, if any.
result<std::shared_ptr<shared_memory_outputs>> placed_outputs(detail::client_state& state,
                                                              const inference_request& request) {
  if (!state.has_regions() || request.outputs.empty()) {
    return std::shared_ptr<shared_memory_outputs>{};
  }
  result<shared_memory_outputs> asked = shared_memory_outputs::of(request, state.regions());
  if (!asked) return std::move(asked).error();
  if (asked->outputs.empty()) return std::shared_ptr<shared_memory_outputs>{};
  return std::make_shared<shared_memory_outputs>(std::move(*asked));
}

contents_form form_of(const request_format& format) {
  return format.binary_inputs ? contents_form::raw : contents_form::typed;
}

}  // namespace

void client::async_infer(std::string_view model, const inference_request& request,
                         infer_callback done, const request_format& format,
                         std::optional<std::uint64_t> version) {
  // A call ends when its last owner lets it go: grpc++'s copy of the completion, on one of
  // grpc++'s threads, once the completion has run. Its context holds the channel, and the client's
  // end waits for the call to end, so the channel's last reference always goes on the caller's
  // thread. Released on one of grpc++'s threads, it would be the last user of grpc++'s callback
  // threads, which then join themselves and free their queue twice.
  struct call {
    explicit call(detail::client_state& state) : owner{state} {}
    call(const call&) = delete;
    call& operator=(const call&) = delete;
    ~call() {
      if (!counted) return;
      owner.stop_cancelling(&*context);
      context.reset();
      owner.end_call();
    }

    detail::client_state& owner;
    bool counted = false;  // by `begin_call`: the client's end waits for this call
    std::optional<::grpc::ClientContext> context{std::in_place};
    message_arena arena;
    inference::ModelInferRequest& message = arena.make<inference::ModelInferRequest>();
    inference::ModelInferResponse& reply = arena.make<inference::ModelInferResponse>();
    std::shared_ptr<shared_memory_outputs> placed;
    infer_callback done;
  };
  auto pending = std::make_shared<call>(*state_);
  if (status s =
          encode_request(request, model, version_text(version), form_of(format), pending->message);
      !s.ok()) {
    return done(std::move(s));
  }
  result<std::shared_ptr<shared_memory_outputs>> placed = placed_outputs(*state_, request);
  if (!placed) return done(std::move(placed).error());
  if (status s = state_->prepare(*pending->context); !s.ok()) return done(std::move(s));
  if (!state_->begin_call(&*pending->context)) {
    // Not errc::unavailable, which a callback that retries would retry.
    return done(
        status{errc::failed_precondition, "the client is closing: it starts no more calls"});
  }
  pending->counted = true;
  pending->placed = std::move(*placed);
  pending->done = std::move(done);
  ::grpc::ClientContext* context = &*pending->context;
  inference::ModelInferRequest* message = &pending->message;
  inference::ModelInferResponse* reply = &pending->reply;
  state_->stub().async()->ModelInfer(
      context, message, reply, [pending = std::move(pending)](const ::grpc::Status& outcome) {
        // The caller's callback is gone before the call ends (the client's end waits for that).
        infer_callback finish = std::move(pending->done);
        const callback_mark mark{pending->owner};  // `finish` goes under it too
        if (!outcome.ok()) {
          call_back(pending->owner, finish, status_of(outcome));
        } else {
          call_back(pending->owner, finish,
                    decoded(pending->reply, pending->owner.options().reply_bounds,
                            pending->placed.get()));
        }
        finish = nullptr;
      });
}

std::future<result<inference_response>> client::async_infer(std::string_view model,
                                                            const inference_request& request,
                                                            const request_format& format,
                                                            std::optional<std::uint64_t> version) {
  return future_of<result<inference_response>>(
      [&](infer_callback done) { async_infer(model, request, std::move(done), format, version); });
}

result<inference_response> client::infer(std::string_view model, const inference_request& request,
                                         const request_format& format,
                                         std::optional<std::uint64_t> version) {
  message_arena arena;
  auto& message = arena.make<inference::ModelInferRequest>();
  if (status s = encode_request(request, model, version_text(version), form_of(format), message);
      !s.ok()) {
    return s;
  }
  result<std::shared_ptr<shared_memory_outputs>> placed = placed_outputs(*state_, request);
  if (!placed) return std::move(placed).error();
  auto& reply = arena.make<inference::ModelInferResponse>();
  if (status s = state_->call(&Service::Stub::ModelInfer, message, reply); !s.ok()) return s;
  return decode_response(reply, state_->options().reply_bounds, placed->get());
}

namespace detail {

// One ModelStreamInfer call: a queue of requests written one at a time, responses read until the
// server ends the call. A hold keeps grpc++'s side of the call alive while requests may still be
// written from the caller's threads; it goes once the writes are done or have failed.
class stream_state final : public ::grpc::ClientBidiReactor<inference::ModelInferRequest,
                                                            inference::ModelStreamInferResponse> {
 public:
  stream_state(std::shared_ptr<client_state> owner, client::identified_callback on_response)
      : owner_{std::move(owner)}, on_response_{std::move(on_response)} {
    if (status s = owner_->prepare(context_); !s.ok()) {
      // Never started: every send and the finish answer why.
      refused_ = std::move(s);
      held_ = false;
      finished_ = true;
      return;
    }
    owner_->stub().async()->ModelStreamInfer(&context_, this);
    AddHold();
    StartRead(&reply_);
    StartCall();
  }
  stream_state(const stream_state&) = delete;
  stream_state& operator=(const stream_state&) = delete;
  ~stream_state() override {
    bool release = false;
    {
      const std::lock_guard lock{mutex_};
      if (!finished_) {
        cancelled_here_ = true;  // the owner is going: its callback is not told of this end
        context_.TryCancel();
      }
      release = take_hold();
    }
    if (release) RemoveHold();
    wait_for_end();
  }

  // The stream let go on a callback's thread, where its end cannot be waited for (it is waited
  // for elsewhere): the call is cancelled, and no callback of the caller's runs once this has
  // returned, so what the callback refers to may go.
  void let_go_here() {
    std::unique_lock lock{mutex_};
    let_go_ = true;
    if (!finished_) {
      cancelled_here_ = true;
      context_.TryCancel();
    }
    // A callback of this stream's on another thread returns first; this stream's own, which may
    // be the caller, is not waited for.
    if (calling_back_in_stream != this) callback_done_.wait(lock, [this] { return !in_callback_; });
  }

  [[nodiscard]] client_state& owner() noexcept { return *owner_; }

  // `placed`: where the request's outputs go in regions registered through the client, read
  // back when its responses come (matched by the request's id).
  status send(inference::ModelInferRequest message,
              std::shared_ptr<shared_memory_outputs> placed = nullptr) {
    std::unique_lock lock{mutex_};
    if (!refused_.ok()) return refused_;
    if (finished_ || closing_ || write_failed_ || read_ended_) {
      return status{errc::unavailable, "the stream has ended, or is finishing: no more requests"};
    }
    if (placed) placed_[message.id()].push_back(std::move(placed));
    queue_.push_back(std::move(message));
    if (writing_) return {};
    writing_ = true;
    current_ = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    StartWrite(&current_);  // the hold is still there: the writes are not done
    return {};
  }

  status finish() {
    if (calling_back_in_stream == this) {
      return status{errc::failed_precondition,
                    "a stream's finish was called in its own callback, where the stream's end "
                    "cannot come: call it elsewhere, or let the stream go there"};
    }
    std::unique_lock lock{mutex_};
    if (!refused_.ok()) return refused_;
    closing_ = true;
    const bool end_writes = !writing_ && !writes_done_ && !write_failed_ && !read_ended_;
    if (end_writes) writes_done_ = true;
    const bool release = !end_writes && !writing_ && take_hold();
    lock.unlock();
    if (end_writes) end_of_writes();
    if (release) RemoveHold();
    wait_for_end();
    const std::lock_guard ended{mutex_};
    if (write_failed_ && end_.ok()) {
      return status{errc::unavailable, "the stream ended before every request was sent"};
    }
    return status_of(end_);
  }

  void OnWriteDone(bool ok) override {
    std::unique_lock lock{mutex_};
    if (!ok) {  // the call is ending; requests still queued are not sent
      writing_ = false;
      write_failed_ = true;
      queue_.clear();
      const bool release = take_hold();
      lock.unlock();
      if (release) RemoveHold();
      return;
    }
    if (!queue_.empty()) {
      current_ = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      StartWrite(&current_);
      return;
    }
    writing_ = false;
    if (read_ended_) {  // the call is over: the hold goes, so that it can end
      const bool release = take_hold();
      lock.unlock();
      if (release) RemoveHold();
      return;
    }
    const bool end_writes = closing_ && !writes_done_;
    if (end_writes) writes_done_ = true;
    lock.unlock();
    if (end_writes) end_of_writes();
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // The call is over (the server ended it, with an error too, a deadline passed): no more
      // requests are taken, and the hold goes unless a write still has it, so that OnDone comes
      // and says how it ended.
      std::unique_lock lock{mutex_};
      read_ended_ = true;
      queue_.clear();
      // Not while a write, or the end of the writes that `finish` has begun, still needs the
      // call: those take the hold themselves when they are done.
      const bool release = !writing_ && !writes_done_ && take_hold();
      lock.unlock();
      if (release) RemoveHold();
      return;
    }
    // The placement of the outputs of the earliest open request of the response's id, if any;
    // gone with that request's last response: an error, one flagged final, or one of a server that
    // flags none (a reply per request).
    std::shared_ptr<shared_memory_outputs> placed;
    {
      const std::lock_guard lock{mutex_};
      if (const auto found = placed_.find(reply_.infer_response().id()); found != placed_.end()) {
        placed = found->second.front();
        const auto& flags = reply_.infer_response().parameters();
        const auto final = flags.find(std::string{parameter_names::triton_final_response});
        if (!reply_.error_message().empty() || final == flags.end() || final->second.bool_param()) {
          found->second.pop_front();
          if (found->second.empty()) placed_.erase(found);
        }
      }
    }
    // The server echoes the request's id in its error too (Triton does, so that a client knows
    // which request failed).
    const std::string id = reply_.infer_response().id();
    if (!reply_.error_message().empty()) {
      tell(id, status{errc::internal, reply_.error_message()});
    } else {
      tell(id,
           decoded(*reply_.mutable_infer_response(), owner_->options().reply_bounds, placed.get()));
    }
    StartRead(&reply_);
  }

  void OnDone(const ::grpc::Status& s) override {
    bool told_of_end = false;
    {
      const std::lock_guard lock{mutex_};
      end_ = s;
      told_of_end = !s.ok() && !cancelled_here_;
    }
    // A call that ends in an error (the server's status, a deadline) is the callback's last
    // result, as in Triton's clients, before `finish` returns it too.
    if (told_of_end) tell(std::string_view{}, status_of(s));
    const std::lock_guard lock{mutex_};
    finished_ = true;
    ended_.notify_all();
  }

 private:
  // Runs the caller's callback, unless the stream was let go.
  template <class Outcome>
  void tell(std::string_view id, Outcome&& outcome) {
    {
      const std::lock_guard lock{mutex_};
      if (let_go_) return;
      in_callback_ = true;
    }
    {
      const stream_callback_mark mark{this};
      call_back(*owner_, on_response_, id, std::forward<Outcome>(outcome));
    }
    const std::lock_guard lock{mutex_};
    in_callback_ = false;
    callback_done_.notify_all();
  }

  // Whether the hold is still to be removed (then it is this caller's to remove); under the lock.
  bool take_hold() {
    const bool had = held_;
    held_ = false;
    return had;
  }

  // The last write is done: say so, then let the call end when the server ends it.
  void end_of_writes() {
    StartWritesDone();
    bool release = false;
    {
      const std::lock_guard lock{mutex_};
      release = take_hold();
    }
    if (release) RemoveHold();
  }

  void wait_for_end() {
    std::unique_lock lock{mutex_};
    ended_.wait(lock, [this] { return finished_; });
  }

  std::shared_ptr<client_state> owner_;
  client::identified_callback on_response_;
  ::grpc::ClientContext context_;
  inference::ModelStreamInferResponse reply_;
  inference::ModelInferRequest current_;
  std::mutex mutex_;
  std::condition_variable ended_;
  std::deque<inference::ModelInferRequest> queue_;
  bool writing_ = false;
  bool closing_ = false;
  bool writes_done_ = false;
  bool write_failed_ = false;
  bool held_ = true;
  // Requests whose outputs go to shared memory, by id (several of one id in the order they were
  // sent), until their last response. A decoupled model's request whose end the server does not
  // flag keeps its place until the stream ends.
  std::map<std::string, std::deque<std::shared_ptr<shared_memory_outputs>>, std::less<>> placed_;
  bool read_ended_ = false;
  bool cancelled_here_ = false;
  bool let_go_ = false;
  bool in_callback_ = false;
  std::condition_variable callback_done_;
  bool finished_ = false;
  ::grpc::Status end_;
  status refused_;  // why the call was never started
};

}  // namespace detail

client::stream::stream(std::unique_ptr<detail::stream_state> state) : state_{std::move(state)} {}
namespace {

// Ends a stream. On a thread of grpc++'s that runs a callback (the stream's own, whose end cannot
// come before it returns, or another call's), the wait for the end and the last of the stream go
// to a thread of their own, as a client's end does; the call is cancelled here.
void let_go(std::unique_ptr<detail::stream_state>& state) {
  if (state == nullptr) return;
  if (calling_back_for == nullptr) {
    state.reset();
    return;
  }
  state->let_go_here();
  // Not moved into the thread's function: if no thread starts, that function is destroyed here,
  // and the stream with it would wait here for ever.
  detail::stream_state* const left = state.release();
  if (oip::detail::end_elsewhere([left] { delete left; })) return;  // NOLINT(*-owning-memory)
  std::fputs("oip::grpc::client::stream: ended in a callback, with no thread to end it\n", stderr);
  std::abort();
}

}  // namespace

client::stream::stream(stream&&) noexcept = default;
client::stream& client::stream::operator=(stream&& other) noexcept {
  if (this != &other) {
    let_go(state_);
    state_ = std::move(other.state_);
  }
  return *this;
}
client::stream::~stream() { let_go(state_); }

status client::stream::send(std::string_view model, const inference_request& request,
                            std::optional<std::uint64_t> version) {
  inference::ModelInferRequest message;
  if (status s = encode_request(request, model, version_text(version), contents_form::raw, message);
      !s.ok()) {
    return s;
  }
  result<std::shared_ptr<shared_memory_outputs>> placed = placed_outputs(state_->owner(), request);
  if (!placed) return std::move(placed).error();
  return state_->send(std::move(message), std::move(*placed));
}

status client::stream::finish() { return state_->finish(); }

client::stream client::open_stream(response_callback on_response) {
  return open_stream(identified_callback{
      [callback = std::move(on_response)](std::string_view /*request_id*/,
                                          result<inference_response> outcome) mutable {
        callback(std::move(outcome));
      }});
}

client::stream client::open_stream(identified_callback on_response) {
  return stream{std::make_unique<detail::stream_state>(state_, std::move(on_response))};
}

status client::infer_stream(std::string_view model, inference_request request,
                            std::function<void(inference_response)> on_response,
                            std::optional<std::uint64_t> version) {
  request.parameters.set("triton_enable_empty_final_response", true);
  status failed;
  // One request: the callbacks come one at a time, and all before `finish` returns.
  stream s = open_stream([&](result<inference_response> response) {
    if (!response) {
      if (failed.ok()) failed = std::move(response).error();
      return;
    }
    const bool* final = response->parameters.get<bool>(parameter_names::triton_final_response);
    const bool last = final != nullptr && *final;
    if (!last || !response->outputs.empty()) on_response(std::move(*response));
  });
  if (status sent = s.send(model, request, version); !sent.ok()) return sent;
  // A server that flags no final response (one that follows the protocol alone, an older
  // Triton) ends the call once the model is done: that end, with no error, ends the request too.
  if (status end = s.finish(); !end.ok()) return end;
  if (!failed.ok()) return failed;
  return {};
}

// --- the small calls ---------------------------------------------------------------------------

result<server_metadata> client::metadata() {
  inference::ServerMetadataResponse reply;
  if (status s =
          state_->call(&Service::Stub::ServerMetadata, inference::ServerMetadataRequest{}, reply);
      !s.ok()) {
    return s;
  }
  server_metadata out{reply.name(), reply.version(), {}};
  for (const std::string& e : reply.extensions()) out.extensions.push_back(e);
  return out;
}

result<model_metadata> client::metadata(std::string_view model,
                                        std::optional<std::uint64_t> version) {
  inference::ModelMetadataRequest request;
  request.set_name(std::string{model});
  request.set_version(version_text(version));
  inference::ModelMetadataResponse reply;
  if (status s = state_->call(&Service::Stub::ModelMetadata, request, reply); !s.ok()) return s;
  model_metadata out;
  out.name = reply.name();
  out.platform = reply.platform();
  for (const std::string& v : reply.versions()) out.versions.push_back(v);
  const auto read = [](const auto& tensors, std::vector<tensor_metadata>& into) -> status {
    for (const auto& t : tensors) {
      result<datatype> type = parse_datatype(t.datatype());
      if (!type) return std::move(type).error();
      into.push_back({t.name(), *type, shape_type(t.shape().begin(), t.shape().end()), {}});
    }
    return {};
  };
  if (status s = read(reply.inputs(), out.inputs); !s.ok()) return s;
  if (status s = read(reply.outputs(), out.outputs); !s.ok()) return s;
  return out;
}

bool client::live() {
  inference::ServerLiveResponse reply;
  return state_->call(&Service::Stub::ServerLive, inference::ServerLiveRequest{}, reply).ok() &&
         reply.live();
}

bool client::ready() {
  inference::ServerReadyResponse reply;
  return state_->call(&Service::Stub::ServerReady, inference::ServerReadyRequest{}, reply).ok() &&
         reply.ready();
}

bool client::ready(std::string_view model, std::optional<std::uint64_t> version) {
  inference::ModelReadyRequest request;
  request.set_name(std::string{model});
  request.set_version(version_text(version));
  inference::ModelReadyResponse reply;
  return state_->call(&Service::Stub::ModelReady, request, reply).ok() && reply.ready();
}

namespace {
result<std::string> json_of(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  std::string out;
  if (const auto s = google::protobuf::util::MessageToJsonString(message, &out, options); !s.ok()) {
    return status{errc::internal, "the reply cannot be written as JSON"};
  }
  return out;
}
}  // namespace

result<std::string> client::model_config(std::string_view model,
                                         std::optional<std::uint64_t> version) {
  inference::ModelConfigRequest request;
  request.set_name(std::string{model});
  request.set_version(version_text(version));
  inference::ModelConfigResponse reply;
  if (status s = state_->call(&Service::Stub::ModelConfig, request, reply); !s.ok()) return s;
  return json_of(reply.config());
}

result<std::string> client::statistics(std::string_view model,
                                       std::optional<std::uint64_t> version) {
  inference::ModelStatisticsRequest request;
  request.set_name(std::string{model});
  request.set_version(version_text(version));
  inference::ModelStatisticsResponse reply;
  if (status s = state_->call(&Service::Stub::ModelStatistics, request, reply); !s.ok()) return s;
  return json_of(reply);
}

result<std::vector<model_index_entry>> client::repository_index(bool ready_only) {
  inference::RepositoryIndexRequest request;
  request.set_ready(ready_only);
  inference::RepositoryIndexResponse reply;
  if (status s = state_->call(&Service::Stub::RepositoryIndex, request, reply); !s.ok()) return s;
  std::vector<model_index_entry> out;
  for (const auto& m : reply.models()) {
    model_index_entry entry{m.name(), 0, m.state(), m.reason()};
    if (!m.version().empty()) {
      const auto [end, error] = std::from_chars(
          m.version().data(), m.version().data() + m.version().size(), entry.version);
      if (error != std::errc{} || end != m.version().data() + m.version().size()) {
        return status{errc::invalid_argument,
                      fmt::format("the repository index gives model '{}' the version '{}', which "
                                  "is not a number",
                                  m.name(), m.version())};
      }
    }
    out.push_back(std::move(entry));
  }
  return out;
}

status client::load(std::string_view model, const parameters& settings) {
  inference::RepositoryModelLoadRequest request;
  request.set_model_name(std::string{model});
  if (status s = encode_load_parameters(settings, *request.mutable_parameters()); !s.ok()) return s;
  inference::RepositoryModelLoadResponse reply;
  return state_->call(&Service::Stub::RepositoryModelLoad, request, reply);
}

status client::unload(std::string_view model) {
  inference::RepositoryModelUnloadRequest request;
  request.set_model_name(std::string{model});
  inference::RepositoryModelUnloadResponse reply;
  return state_->call(&Service::Stub::RepositoryModelUnload, request, reply);
}

namespace {
result<log_settings> read_log_settings(const inference::LogSettingsResponse& reply) {
  log_settings out;
  for (const auto& [name, value] : reply.settings()) {
    if (name == "log_error") out.error = value.bool_param();
    if (name == "log_warning") out.warning = value.bool_param();
    if (name == "log_info") out.info = value.bool_param();
    if (name == "log_verbose_level") out.verbose_level = value.uint32_param();
    if (name == "log_format") {
      result<log_format> format = parse_log_format(value.string_param());
      if (!format) return std::move(format).error();
      out.format = *format;
    }
  }
  return out;
}

result<trace_settings_change> read_trace_settings(const inference::TraceSettingResponse& reply) {
  trace_settings_change out;
  for (const auto& [name, value] : reply.settings()) {
    out.settings.emplace_back(name,
                              std::vector<std::string>(value.value().begin(), value.value().end()));
  }
  return out;
}
}  // namespace

result<log_settings> client::log_settings() {
  inference::LogSettingsResponse reply;
  if (status s = state_->call(&Service::Stub::LogSettings, inference::LogSettingsRequest{}, reply);
      !s.ok()) {
    return s;
  }
  return read_log_settings(reply);
}

result<log_settings> client::update_log_settings(const log_settings_update& change) {
  inference::LogSettingsRequest request;
  auto& settings = *request.mutable_settings();
  if (change.error) settings["log_error"].set_bool_param(*change.error);
  if (change.warning) settings["log_warning"].set_bool_param(*change.warning);
  if (change.info) settings["log_info"].set_bool_param(*change.info);
  if (change.verbose_level) settings["log_verbose_level"].set_uint32_param(*change.verbose_level);
  if (change.format)
    settings["log_format"].set_string_param(std::string{to_string(*change.format)});
  if (change.file) settings["log_file"].set_string_param(*change.file);
  inference::LogSettingsResponse reply;
  if (status s = state_->call(&Service::Stub::LogSettings, request, reply); !s.ok()) return s;
  return read_log_settings(reply);
}

result<trace_settings_change> client::trace_settings(std::string_view model) {
  return update_trace_settings({}, model);
}

result<trace_settings_change> client::update_trace_settings(const trace_settings_change& change,
                                                            std::string_view model) {
  inference::TraceSettingRequest request;
  request.set_model_name(std::string{model});
  for (const auto& [name, values] : change.settings) {
    auto& setting = (*request.mutable_settings())[name];
    if (values) {
      for (const std::string& v : *values) setting.add_value(v);
    }
  }
  inference::TraceSettingResponse reply;
  if (status s = state_->call(&Service::Stub::TraceSetting, request, reply); !s.ok()) return s;
  return read_trace_settings(reply);
}

status client::register_system_shared_memory(const std::string& name, const std::string& key,
                                             std::uint64_t offset, std::uint64_t byte_size) {
  if (status mapped = state_->regions().register_region(name, key, offset, byte_size);
      !mapped.ok()) {
    return mapped;
  }
  inference::SystemSharedMemoryRegisterRequest request;
  request.set_name(name);
  request.set_key(key);
  request.set_offset(offset);
  request.set_byte_size(byte_size);
  inference::SystemSharedMemoryRegisterResponse reply;
  status registered = state_->call(&Service::Stub::SystemSharedMemoryRegister, request, reply);
  if (!registered.ok()) {
    state_->regions().unregister(name);
    return registered;
  }
  state_->note_region();
  return registered;
}

status client::unregister_system_shared_memory(std::string_view name) {
  inference::SystemSharedMemoryUnregisterRequest request;
  request.set_name(std::string{name});
  inference::SystemSharedMemoryUnregisterResponse reply;
  status s = state_->call(&Service::Stub::SystemSharedMemoryUnregister, request, reply);
  if (s.ok()) {
    if (name.empty()) {
      state_->regions().unregister_all();
    } else {
      state_->regions().unregister(name);
    }
  }
  return s;
}

result<std::vector<shared_memory_region>> client::system_shared_memory_status(
    std::string_view name) {
  inference::SystemSharedMemoryStatusRequest request;
  request.set_name(std::string{name});
  inference::SystemSharedMemoryStatusResponse reply;
  if (status s = state_->call(&Service::Stub::SystemSharedMemoryStatus, request, reply); !s.ok()) {
    return s;
  }
  std::vector<shared_memory_region> out;
  for (const auto& [region_name, region] : reply.regions()) {
    out.push_back({region.name(), region.key(), region.offset(), region.byte_size()});
  }
  return out;
}

}  // namespace oip::grpc
