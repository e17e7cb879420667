#pragma once
/// \file
/// `oip::cancellation`: how a transport tells a running request that its client went away, and
/// how a request's deadline ends it.

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>

namespace oip {

/// Cancellation of one request: the transport sets it when the client goes away; a deadline, when
/// the request has one, cancels it too. Cheap to copy; all copies share the flag.
class cancellation {
 public:
  using clock = std::chrono::steady_clock;

  cancellation() : flag_{std::make_shared<std::atomic<bool>>(false)} {}

  void cancel() noexcept { flag_->store(true, std::memory_order_relaxed); }
  void set_deadline(clock::time_point deadline) noexcept { deadline_ = deadline; }
  [[nodiscard]] std::optional<clock::time_point> deadline() const noexcept { return deadline_; }

  /// True once cancelled or past the deadline.
  [[nodiscard]] bool cancelled() const noexcept {
    return flag_->load(std::memory_order_relaxed) || (deadline_ && clock::now() >= *deadline_);
  }
  /// True once cancelled by the transport (not by the deadline).
  [[nodiscard]] bool client_gone() const noexcept { return flag_->load(std::memory_order_relaxed); }

 private:
  std::shared_ptr<std::atomic<bool>> flag_;
  std::optional<clock::time_point> deadline_;
};

}  // namespace oip
