#pragma once
// What the gRPC client's calls (src/grpc/client.cpp) and its streams (src/grpc/client_stream.cpp)
// share: the channel and its settings, the calls in flight, and how a caller's callback runs on
// grpc++'s threads.

#include "core/detail/run_callback.hpp"

#include <oip/client_options.hpp>
#include <oip/grpc/grpc_service.grpc.pb.h>
#include <oip/infer.hpp>
#include <oip/limits.hpp>
#include <oip/shared_memory.hpp>
#include <oip/status.hpp>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include <grpcpp/grpcpp.h>

namespace oip::grpc::detail {

using Service = inference::GRPCInferenceService;

// A gRPC status as oip's, its code kept (`status::received_code`).
[[nodiscard]] status status_of(const ::grpc::Status& s);
// A model version as the protocol writes it: empty for the server's choice.
[[nodiscard]] std::string version_text(std::optional<std::uint64_t> version);

class client_state {
 public:
  client_state(std::string target, client_options options);

  // A context with the client's metadata, deadline and compression; the headers' error, if they
  // cannot be sent, for every call.
  [[nodiscard]] status prepare(::grpc::ClientContext& context) const;

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

// The client whose callback runs on this thread, if any (a thread of grpc++'s).
inline thread_local const client_state* calling_back_for = nullptr;

// Marks the thread for the scope: one of `owner`'s callbacks runs, or is destroyed (what it holds
// may be the client's last reference).
class callback_mark {
 public:
  explicit callback_mark(const client_state& owner) noexcept
      : outer_{std::exchange(calling_back_for, &owner)} {}
  callback_mark(const callback_mark&) = delete;
  callback_mark& operator=(const callback_mark&) = delete;
  ~callback_mark() { calling_back_for = outer_; }

 private:
  const client_state* outer_;
};

// Runs one of the caller's callbacks of `owner`'s calls.
template <class Callback, class... Args>
void call_back(const client_state& owner, Callback& callback, Args&&... args) noexcept {
  const callback_mark mark{owner};
  run_callback("oip::grpc::client", callback, std::forward<Args>(args)...);
}

// A reply decoded for the caller's callback, which is called whatever happens: an exception here,
// on grpc++'s thread, would end the call without it.
[[nodiscard]] result<inference_response> decoded(inference::ModelInferResponse& reply,
                                                 const limits& bounds,
                                                 const shared_memory_output_source* placed);

// The outputs of `request` that go to regions registered through this client, if any.
[[nodiscard]] result<std::shared_ptr<shared_memory_outputs>> placed_outputs(
    client_state& state, const inference_request& request);

}  // namespace oip::grpc::detail
