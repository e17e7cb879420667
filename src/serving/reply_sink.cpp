// The backlog of responses a transport holds: what holds a decoupled model's sends back while a
// client reads slowly.

#include <oip/reply_sink.hpp>

#include <algorithm>
#include <chrono>

namespace oip {

namespace {

// How often a waiting sender looks at its request's cancellation: a cancel by the transport
// also closes the backlog (which wakes it at once), a deadline or a cancel from elsewhere is seen
// within this.
constexpr std::chrono::milliseconds cancellation_poll{20};

}  // namespace

void response_backlog::add() noexcept {
  const std::lock_guard lock{mutex_};
  ++held_;
}

void response_backlog::written() noexcept {
  {
    const std::lock_guard lock{mutex_};
    if (held_ > 0) --held_;
    last_written_ = std::chrono::steady_clock::now();
  }
  room_.notify_all();
}

void response_backlog::close() noexcept {
  {
    const std::lock_guard lock{mutex_};
    closed_ = true;
  }
  room_.notify_all();
}

std::size_t response_backlog::held() const noexcept {
  const std::lock_guard lock{mutex_};
  return held_;
}

status response_backlog::wait_for_room(std::size_t limit, const cancellation& cancel,
                                       std::chrono::milliseconds patience) {
  using clock = std::chrono::steady_clock;
  const clock::time_point started = clock::now();
  // The moment past which the client counts as no longer reading; a century is forever (and
  // keeps the sum from overflowing), less than nothing is nothing.
  const auto give_up = [&] {
    if (patience >= std::chrono::hours{24 * 365 * 100}) return clock::time_point::max();
    return std::max(started, last_written_) + std::max(patience, std::chrono::milliseconds{0});
  };
  std::unique_lock lock{mutex_};
  while (!closed_ && held_ >= limit) {
    if (cancel.cancelled()) break;
    const clock::time_point now = clock::now();
    const clock::time_point stalled = give_up();
    if (now >= stalled) {
      return status{errc::unavailable,
                    "the client read no response for too long (limits::max_unread_wait): the "
                    "response was not sent"};
    }
    clock::time_point until = std::min(now + cancellation_poll, stalled);
    if (const auto deadline = cancel.deadline()) until = std::min(until, *deadline);
    room_.wait_until(lock, until);
  }
  if (closed_) return status{errc::unavailable, "the client went away: the response was not sent"};
  if (cancel.cancelled()) {
    return status{errc::unavailable, "the request was cancelled: the response was not sent"};
  }
  return {};
}

}  // namespace oip
