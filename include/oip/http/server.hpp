#pragma once
/// \file
/// The `oip::http` component: an HTTP/1.1 server (Boost.Beast) over the endpoint handler.
/// Keep-alive, pipelined requests answered in order, Content-Length and chunked bodies,
/// `Expect: 100-continue`, limits and timeouts, scatter/gather replies. Each I/O thread runs an
/// event loop of its own, which owns its connections. Models run on the handler's executor, or,
/// when they are quick (`oip::server_options::inline_below`), on the I/O thread that read the
/// request. Boost stays out of this header.

#include <oip/export.hpp>
#include <oip/http_handler.hpp>
#include <oip/status.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace oip::http {

namespace detail {
struct server_state;
}

struct server_options {
  std::string address = "0.0.0.0";
  std::uint16_t port = 8000;  ///< 0 picks a free port (see server::port)
  /// Event loops, a thread each; connections are spread over them in turn. One per core the
  /// server may use: more than the cores lowers the tail latency where other work takes the
  /// cores too, at some throughput (docs/performance.md).
  std::size_t io_threads = 2;
  std::size_t max_connections = 1024;
  std::size_t max_header_bytes = std::size_t{16} << 10U;  ///< request line and headers (431 above)
  std::size_t max_header_count = 100;                     ///< 431 above
  std::chrono::milliseconds header_timeout{30'000};       ///< to read a request's headers
  /// To read a body, or to write a reply or one part of a streamed reply (not to wait for the
  /// model's next part): `body_timeout`, and a second more for each `body_min_bytes_per_second`
  /// moved, so that a large tensor over a slow link has the time its size needs, while a client
  /// that trickles its bytes slower than that is cut off (as Apache's `MinRate`). 0: the
  /// `body_timeout` alone, however large the body.
  std::chrono::milliseconds body_timeout{60'000};
  std::size_t body_min_bytes_per_second = std::size_t{64} << 10U;
  std::chrono::milliseconds idle_timeout{60'000};  ///< between requests on a kept-alive connection
};

/// Example:
/// \code
///   oip::http::server http{handler, {.port = 8000}};
///   if (oip::result<std::uint16_t> port = http.start(); !port) return fail(port.error());
///   wait_for_signal();
///   http.stop();  // finishes requests in flight
/// \endcode
class OIP_EXPORT server {
 public:
  explicit server(http_handler& handler, server_options options = {});
  server(const server&) = delete;
  server& operator=(const server&) = delete;
  /// Stops (gracefully) if still running.
  ~server();

  /// Binds, listens and starts the I/O threads; the port listened on.
  [[nodiscard]] result<std::uint16_t> start();
  /// Stops accepting, closes idle connections, lets requests in flight finish (their connections
  /// then close), and joins the I/O threads. After `grace`, requests still in flight are cancelled
  /// (their models see `inference_call::cancelled()`) and their connections closed; stop returns
  /// once their models have returned.
  void stop(std::chrono::milliseconds grace = std::chrono::seconds{30});

  [[nodiscard]] std::uint16_t port() const noexcept;
  /// Connections open now.
  [[nodiscard]] std::size_t connections() const noexcept;

 private:
  std::shared_ptr<detail::server_state> impl_;
};

}  // namespace oip::http
