#pragma once
// Kept-alive connections to one server, at most a set number open at once. The HTTP client has
// two: one for calls made on their callers' threads, who wait here for a connection, and one for
// calls on its I/O thread, which queue themselves and are served when a connection comes back.

#include <oip/status.hpp>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>

namespace oip::http::detail {

using socket_type =
    boost::asio::basic_stream_socket<boost::asio::ip::tcp, boost::asio::io_context::executor_type>;

// The most a reply's header section may take.
inline constexpr std::uint32_t max_reply_header_bytes = 64U * 1024U;
// The most one read asks the socket for.
inline constexpr std::size_t read_size = std::size_t{64} * 1024U;

struct connection {
  explicit connection(boost::asio::io_context& io) : socket{io.get_executor()} {}
  socket_type socket;
  // What was read and not yet parsed: a reply's header section and one read past it at most. A
  // body goes on into its reply as it comes; chunk framing or trailers that do not fit are
  // refused (Beast bounds neither), where a server sending them without end would otherwise grow
  // it until memory ran out.
  boost::beast::flat_buffer buffer{max_reply_header_bytes + read_size};
};

class connection_pool {
 public:
  // New connections' sockets belong to `io`. `on_free` runs, outside the pool's lock, after a
  // connection was given back or closed while a caller may be waiting for one.
  connection_pool(boost::asio::io_context& io, std::size_t most, std::function<void()> on_free);

  // A kept-alive connection on which nothing has come since its last reply (`fresh` false), or a
  // new unconnected one (`fresh` true). Kept connections that have bytes waiting, or have ended,
  // are closed on the way.
  struct taken {
    std::unique_ptr<connection> conn;
    bool fresh = false;
  };

  // One now, or nothing when all are busy or the pool is closed.
  [[nodiscard]] std::optional<taken> try_take();
  // Waits until `deadline` for one: errc::deadline_exceeded past it, errc::unavailable once the
  // pool is closed.
  [[nodiscard]] result<taken> take_until(std::chrono::steady_clock::time_point deadline);
  // Kept for another call when `reusable`, closed otherwise.
  void give_back(std::unique_ptr<connection> conn, bool reusable);
  // The server closed its idle connections (an idle timeout, a restart): those kept are likely
  // closed too.
  void drop_idle();
  // Closes the idle connections; those in use close when given back, and no more are handed out.
  void close();
  [[nodiscard]] bool closed();

 private:
  // With the lock held.
  std::optional<taken> take_locked();
  void close_idle_locked();

  boost::asio::io_context& io_;
  std::size_t most_;
  std::function<void()> on_free_;
  std::mutex mutex_;
  std::condition_variable freed_;
  std::vector<std::unique_ptr<connection>> idle_;
  std::size_t open_ = 0;
  bool closed_ = false;
};

// A connection taken from a pool for one call, given back closed unless the call gave it back
// first: a call that ends early, by an exception too, never keeps one of the pool's places.
class borrowed_connection {
 public:
  borrowed_connection(connection_pool& pool, std::unique_ptr<connection> conn) noexcept
      : pool_{pool}, conn_{std::move(conn)} {}
  borrowed_connection(const borrowed_connection&) = delete;
  borrowed_connection& operator=(const borrowed_connection&) = delete;
  ~borrowed_connection() {
    if (conn_) pool_.give_back(std::move(conn_), false);
  }

  [[nodiscard]] connection& operator*() const noexcept { return *conn_; }
  [[nodiscard]] connection* operator->() const noexcept { return conn_.get(); }

  void give_back(bool reusable) { pool_.give_back(std::move(conn_), reusable); }

 private:
  connection_pool& pool_;
  std::unique_ptr<connection> conn_;
};

}  // namespace oip::http::detail
