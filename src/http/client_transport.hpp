#pragma once
// The HTTP client's transport: two ways of making a call, each with its pool of kept-alive
// connections. A synchronous call runs on the caller's thread with blocking I/O (no hand-over to
// another thread and back); an asynchronous one is an `exchange` on the client's I/O thread.

#include "http/connection_pool.hpp"
#include "http/reply_parser.hpp"

#include <oip/client_options.hpp>
#include <oip/http/client.hpp>
#include <oip/http_client_protocol.hpp>
#include <oip/shared_memory.hpp>
#include <oip/status.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>

namespace oip::http::detail {

class exchange;

// A call the transport can frame as it is: its method a token, its target visible ASCII, its
// headers valid (below). The client announces the body's length itself, and writes the Host
// header unless the call has one.
[[nodiscard]] status check_call(const http_call& call);
// Each name a token, no control byte in a value but the tab, and neither `Content-Length` nor
// `Transfer-Encoding`: a call cannot smuggle a second request into the first.
[[nodiscard]] status check_headers(const std::vector<http_header>& headers);

// "host:port" or "[v6]:port".
struct host_and_port {
  std::string host;
  std::string port;
};

class client_state {
 public:
  client_state(std::string host_port, client_options options);
  client_state(const client_state&) = delete;
  client_state& operator=(const client_state&) = delete;
  ~client_state();

  // Ends the calls in flight (their callbacks run) and the I/O thread.
  void stop();

  // A call on the caller's thread.
  result<http_reply> call_here(const http_call& call);
  // A call on the I/O thread: `done` runs there.
  void start(http_call call, client::reply_callback done);
  // A call that failed before it began: `done` still runs on the I/O thread, as it would have.
  template <class Callback>
  void post_error(status error, Callback done) {
    boost::asio::post(io_, [error = std::move(error), done = std::move(done)]() mutable {
      done(std::move(error));
    });
  }

  // Whether the caller is the I/O thread, which runs the asynchronous calls' callbacks.
  [[nodiscard]] bool on_io_thread() const noexcept {
    return std::this_thread::get_id() == thread_.get_id();
  }
  [[nodiscard]] const client_options& options() const noexcept { return options_; }
  [[nodiscard]] const http_client_protocol& protocol() const noexcept { return protocol_; }
  [[nodiscard]] shared_memory_registry& regions() noexcept { return regions_; }
  // Whether a region was ever registered through this client: until then no request's outputs
  // are looked up among them.
  [[nodiscard]] bool has_regions() const noexcept { return any_region_.load(); }
  void note_region() noexcept { any_region_.store(true); }

 private:
  using time_point = std::chrono::steady_clock::time_point;

  [[nodiscard]] const std::string& host_port() const noexcept { return host_port_; }
  // The server's addresses as last looked up, kept until a connect to them fails.
  [[nodiscard]] std::optional<boost::asio::ip::tcp::resolver::results_type> known_endpoints();
  void remember_endpoints(const boost::asio::ip::tcp::resolver::results_type& found);
  void forget_endpoints();
  // The known addresses, or a lookup that this thread waits for until `deadline`
  // (errc::deadline_exceeded past it).
  [[nodiscard]] result<boost::asio::ip::tcp::resolver::results_type> resolve_until(
      time_point deadline);
  // The error status of a failed read or write.
  [[nodiscard]] status transport_error(std::string_view doing, boost::system::error_code ec,
                                       bool timed_out) const;
  [[nodiscard]] status no_connection_free() const;

  // The asynchronous calls' (I/O thread).
  void run_io();
  void acquire(const std::shared_ptr<exchange>& call);
  void serve_waiters();
  void close_all();

  // The synchronous calls'.
  status connect_here(socket_type& socket, time_point deadline);
  status write_here(socket_type& socket, const std::vector<boost::asio::const_buffer>& buffers,
                    time_point deadline);
  status read_here(connection& conn, reply_parser& parser, time_point deadline);
  status wait_for_socket(socket_type& socket, short events, time_point deadline);

  client_options options_;
  status headers_check_;  // of the headers every call carries (`options_.headers`)
  http_client_protocol protocol_;
  std::string host_port_;
  host_and_port address_;
  shared_memory_registry regions_;
  std::atomic<bool> any_region_{false};

  using lookup_answer =
      std::pair<boost::system::error_code, boost::asio::ip::tcp::resolver::results_type>;
  std::mutex endpoints_mutex_;
  std::optional<boost::asio::ip::tcp::resolver::results_type> endpoints_;
  // The synchronous calls' lookup under way, if any: the calls that need one wait for the same,
  // so that a name server that does not answer holds one thread, not one per call.
  std::shared_future<lookup_answer> lookup_;
  std::uint64_t lookups_ = 0;  // a count of lookups started and of addresses forgotten

  boost::asio::io_context io_{1};
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  std::thread thread_;
  std::atomic<bool> stopped_{false};
  connection_pool async_pool_;
  std::deque<std::shared_ptr<exchange>> waiting_;  // I/O thread
  std::set<exchange*> active_;                     // I/O thread

  // The connections of synchronous calls belong to a context that never runs: one that the I/O
  // thread's reactor watched would wake that thread at each reply, for nothing.
  boost::asio::io_context blocking_io_{1};
  connection_pool blocking_pool_;

  friend class exchange;
};

}  // namespace oip::http::detail
