#pragma once
/// \file
/// `oip::cancellation`: how a transport tells a running request that its client went away, and
/// how a request's deadline ends it.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>

namespace oip {

/// Cancellation of one request: the transport sets it when the client goes away; a deadline, when
/// the request has one, cancels it too. Cheap to copy; all copies share the flag.
class cancellation {
 public:
  using clock = std::chrono::steady_clock;

  cancellation() : flags_{std::make_shared<std::atomic<std::uint8_t>>(0)} {}

  /// The client went away: the request fails as cancelled.
  void cancel() noexcept { flags_->fetch_or(client_gone_flag, std::memory_order_relaxed); }
  /// The caller has all it wants of a decoupled model's responses (an OpenAI completion met its
  /// stop string): the model is asked to stop as on `cancel()`, its later responses are dropped,
  /// and the request ends as a success rather than a cancelled one. Before the model has run, the
  /// request ends as a cancelled one: there is nothing it could succeed with.
  void finish_early() noexcept { flags_->fetch_or(finished_early_flag, std::memory_order_relaxed); }
  void set_deadline(clock::time_point deadline) noexcept { deadline_ = deadline; }
  [[nodiscard]] std::optional<clock::time_point> deadline() const noexcept { return deadline_; }

  /// True once cancelled, finished early or past the deadline: the model should stop.
  [[nodiscard]] bool cancelled() const noexcept {
    return flags_->load(std::memory_order_relaxed) != 0 ||
           (deadline_ && clock::now() >= *deadline_);
  }
  /// True once cancelled by the transport (not by the deadline, nor finished early).
  [[nodiscard]] bool client_gone() const noexcept {
    return (flags_->load(std::memory_order_relaxed) & client_gone_flag) != 0;
  }
  /// True once finished early, and the client is still there.
  [[nodiscard]] bool finished_early() const noexcept {
    return flags_->load(std::memory_order_relaxed) == finished_early_flag;
  }

 private:
  static constexpr std::uint8_t client_gone_flag = 1;
  static constexpr std::uint8_t finished_early_flag = 2;

  std::shared_ptr<std::atomic<std::uint8_t>> flags_;
  std::optional<clock::time_point> deadline_;
};

}  // namespace oip
