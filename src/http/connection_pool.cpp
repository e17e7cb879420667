#include "http/connection_pool.hpp"

#include <algorithm>
#include <new>
#include <utility>

#include <poll.h>

namespace oip::http::detail {

namespace {

// Whether nothing has come on a kept-alive connection since its last reply. Bytes there, or its
// end, would otherwise be read as the next call's reply: a server that closed the connection
// while it was idle (perhaps after a 408), or one that sent a second reply to one request. The
// check is one poll that does not wait, as libcurl makes before it reuses a connection.
bool quiet(connection& conn) {
  pollfd fd{conn.socket.native_handle(), POLLIN, 0};
  return ::poll(&fd, 1, 0) == 0;
}

}  // namespace

connection_pool::connection_pool(boost::asio::io_context& io, std::size_t most,
                                 std::function<void()> on_free)
    : io_{io}, most_{std::max<std::size_t>(most, 1)}, on_free_{std::move(on_free)} {}

std::optional<connection_pool::taken> connection_pool::take_locked() {
  if (closed_) return std::nullopt;
  while (!idle_.empty()) {
    std::unique_ptr<connection> conn = std::move(idle_.back());
    idle_.pop_back();
    if (quiet(*conn)) return taken{std::move(conn), false};
    boost::system::error_code ignored;
    conn->socket.close(ignored);
    --open_;  // its place goes to the next one kept, or to a new connection
  }
  if (open_ < most_) {
    taken out{std::make_unique<connection>(io_), true};
    ++open_;
    return out;
  }
  return std::nullopt;
}

std::optional<connection_pool::taken> connection_pool::try_take() {
  const std::lock_guard lock{mutex_};
  return take_locked();
}

result<connection_pool::taken> connection_pool::take_until(
    std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock{mutex_};
  const auto free = [this] { return closed_ || !idle_.empty() || open_ < most_; };
  if (deadline == std::chrono::steady_clock::time_point::max()) {
    freed_.wait(lock, free);
  } else if (!freed_.wait_until(lock, deadline, free)) {
    return status{errc::deadline_exceeded, "no connection free within the deadline"};
  }
  std::optional<taken> got = take_locked();
  if (!got) return status{errc::unavailable, "the client is closing"};
  return std::move(*got);
}

void connection_pool::give_back(std::unique_ptr<connection> conn, bool reusable) {
  if (!conn) return;
  {
    const std::lock_guard lock{mutex_};
    bool kept = false;
    if (reusable && !closed_) {
      try {
        idle_.reserve(idle_.size() + 1);  // the push below cannot fail then
        kept = true;
      } catch (const std::bad_alloc&) {  // NOLINT(bugprone-empty-catch): closed below instead
      }
    }
    if (kept) {
      idle_.push_back(std::move(conn));
    } else {
      boost::system::error_code ignored;
      conn->socket.close(ignored);
      conn.reset();
      --open_;
    }
  }
  freed_.notify_one();
  if (on_free_) on_free_();
}

void connection_pool::close_idle_locked() {
  for (std::unique_ptr<connection>& conn : idle_) {
    boost::system::error_code ignored;
    conn->socket.close(ignored);
  }
  open_ -= idle_.size();
  idle_.clear();
}

void connection_pool::drop_idle() {
  {
    const std::lock_guard lock{mutex_};
    close_idle_locked();
  }
  freed_.notify_all();
  if (on_free_) on_free_();
}

void connection_pool::close() {
  {
    const std::lock_guard lock{mutex_};
    closed_ = true;
    close_idle_locked();
  }
  freed_.notify_all();
}

bool connection_pool::closed() {
  const std::lock_guard lock{mutex_};
  return closed_;
}

}  // namespace oip::http::detail
