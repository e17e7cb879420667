// The gRPC client's streams: `ModelStreamInfer` calls on the generated stub's callback API, the
// requests written one at a time from the caller's threads, the responses read until the call
// ends.

#include "core/detail/end_elsewhere.hpp"
#include "grpc/client_state.hpp"
#include "grpc/messages.hpp"

#include <oip/grpc/client.hpp>
#include <oip/grpc/codec.hpp>

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <utility>

namespace oip::grpc {

using detail::calling_back_for;
using detail::placed_outputs;
using detail::version_text;

namespace {

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

}  // namespace

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

client::stream::stream(std::unique_ptr<detail::stream_state> state) : state_{std::move(state)} {}

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

}  // namespace oip::grpc
