// The HTTP client's transport, two ways of making a call, each with its pool of kept-alive
// connections: a synchronous call runs on the caller's thread with blocking I/O (no hand-over to
// another thread and back); an asynchronous one is an `exchange` on the client's I/O thread.

#include <oip/http/client.hpp>
#include <oip/shared_memory.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>

#include <poll.h>
#include <sys/socket.h>

namespace oip::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using executor_type = asio::io_context::executor_type;
using socket_type = asio::basic_stream_socket<tcp, executor_type>;
using timer_type =
    asio::basic_waitable_timer<std::chrono::steady_clock,
                               asio::wait_traits<std::chrono::steady_clock>, executor_type>;
using reply_parser = bhttp::response_parser<bhttp::string_body>;

namespace {

// The most a reply's header section may take.
constexpr std::uint32_t max_reply_header_bytes = 64U * 1024U;

struct connection {
  explicit connection(asio::io_context& io) : socket{io.get_executor()} {}
  socket_type socket;
  beast::flat_buffer buffer;
};

// "host:port" or "[v6]:port".
struct host_and_port {
  std::string host;
  std::string port;
};

host_and_port split_host_port(const std::string& text) {
  const std::size_t colon = text.rfind(':');
  if (colon == std::string::npos) return {text, "80"};
  std::string host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return {host, text.substr(colon + 1)};
}

status unavailable(std::string message) { return status{errc::unavailable, std::move(message)}; }

// The request line and headers of `call`, and the buffers to write: those, `head`, each `tail`.
void frame_request(const http_call& call, const std::string& host, std::string& head_text,
                   std::vector<asio::const_buffer>& buffers) {
  head_text.clear();
  fmt::format_to(std::back_inserter(head_text), "{} {} HTTP/1.1\r\nHost: {}\r\n", call.method,
                 call.target, host);
  for (const http_header& h : call.headers) {
    fmt::format_to(std::back_inserter(head_text), "{}: {}\r\n", h.name, h.value);
  }
  if (call.method != "GET" || call.body_size() != 0) {
    fmt::format_to(std::back_inserter(head_text), "Content-Length: {}\r\n", call.body_size());
  }
  head_text += "\r\n";
  buffers.clear();
  buffers.emplace_back(head_text.data(), head_text.size());
  if (!call.head.empty()) buffers.emplace_back(call.head.data(), call.head.size());
  for (const buffer& b : call.tail) {
    if (!b.empty()) buffers.emplace_back(b.data(), b.size());
  }
}

void prepare_parser(std::optional<reply_parser>& parser, std::size_t max_body_bytes) {
  parser.emplace();
  parser->header_limit(max_reply_header_bytes);
  parser->body_limit(max_body_bytes);
}

// The reply a parser has read; whether the connection may carry another call.
http_reply reply_of(reply_parser& parser, bool& keep_alive) {
  bhttp::response<bhttp::string_body>& got = parser.get();
  http_reply reply;
  reply.status = static_cast<int>(got.result_int());
  reply.headers.reserve(8);
  for (const auto& field : got) {
    reply.headers.push_back({std::string{field.name_string()}, std::string{field.value()}});
  }
  keep_alive = parser.keep_alive();
  reply.body = buffer::from_string(std::move(got.body()));
  return reply;
}

// Whether a failure on a kept-alive connection, before any reply byte, says that the server had
// closed it while idle: the call may go again on a new connection.
bool closed_while_idle(beast::error_code ec) {
  return ec == bhttp::error::end_of_stream || ec == asio::error::eof ||
         ec == asio::error::connection_reset || ec == asio::error::broken_pipe;
}

}  // namespace

namespace detail {

class exchange;

class client_state : public std::enable_shared_from_this<client_state> {
 public:
  client_state(std::string host_port, client_options options)
      : options_{std::move(options)},
        protocol_{options_},
        host_port_{std::move(host_port)},
        address_{split_host_port(host_port_)},
        work_{asio::make_work_guard(io_)} {
    thread_ = std::thread{[this] { io_.run(); }};
  }

  client_state(const client_state&) = delete;
  client_state& operator=(const client_state&) = delete;

  ~client_state() {
    try {
      stop();
    } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor must not throw; `~client` stopped
    }
  }

  void stop() {
    if (stopped_.exchange(true)) return;
    if (std::this_thread::get_id() == thread_.get_id()) {
      // The I/O thread cannot wait for itself to end.
      std::fputs("oip::http::client: destroyed in one of its own callbacks\n", stderr);
      std::abort();
    }
    {
      const std::lock_guard lock{blocking_mutex_};
      blocking_closing_ = true;
      for (std::unique_ptr<connection>& conn : blocking_idle_) {
        beast::error_code ignored;
        conn->socket.close(ignored);
      }
      blocking_idle_.clear();
    }
    blocking_free_.notify_all();
    asio::post(io_, [this] { close_all(); });
    work_.reset();
    if (thread_.joinable()) thread_.join();
  }

  void start(http_call call, client::reply_callback done);
  // A call that failed before it began: `done` still runs on the I/O thread, as it would have.
  void post_error(status error, client::infer_callback done) {
    asio::post(io_, [error = std::move(error), done = std::move(done)]() mutable {
      done(std::move(error));
    });
  }
  // A call on the caller's thread.
  result<http_reply> call_here(const http_call& call);

  [[nodiscard]] const client_options& options() const noexcept { return options_; }
  [[nodiscard]] const http_client_protocol& protocol() const noexcept { return protocol_; }
  [[nodiscard]] shared_memory_registry& regions() noexcept { return regions_; }
  // Whether a region was ever registered through this client: until then no request's outputs
  // are looked up among them.
  [[nodiscard]] bool has_regions() const noexcept { return any_region_.load(); }
  void note_region() noexcept { any_region_.store(true); }

  // The pool of asynchronous calls (I/O thread). `take` gives an idle connection (`fresh` false)
  // or room for a new one (`fresh` true), or nothing: `waiter` then waits for one.
  struct taken {
    std::unique_ptr<connection> conn;
    bool fresh = false;
  };
  std::optional<taken> take(const std::shared_ptr<exchange>& waiter);
  void give_back(std::unique_ptr<connection> conn, bool reusable);
  void drop_idle();

  bool closing_unlocked();
  // The error status of a failed read or write.
  [[nodiscard]] status transport_error(std::string_view doing, beast::error_code ec,
                                       bool timed_out) const;

  // The I/O thread's own.
  void forget(exchange* done) { active_.erase(done); }
  [[nodiscard]] asio::io_context& io() noexcept { return io_; }
  [[nodiscard]] const std::string& host_port() const noexcept { return host_port_; }
  [[nodiscard]] result<tcp::resolver::results_type> endpoints();

 private:
  void close_all();
  // Hands connections given back to the exchanges waiting for one (I/O thread).
  void serve_waiters();
  status connect_here(socket_type& socket, std::chrono::steady_clock::time_point deadline);
  status write_here(socket_type& socket, const std::vector<asio::const_buffer>& buffers,
                    std::chrono::steady_clock::time_point deadline);
  status read_here(connection& conn, reply_parser& parser,
                   std::chrono::steady_clock::time_point deadline);
  status wait_for_socket(socket_type& socket, short events,
                         std::chrono::steady_clock::time_point deadline);
  // The pool of the calls made on their callers' threads: an idle connection or room for a new
  // one, waiting until the deadline for one.
  result<taken> take_blocking(std::chrono::steady_clock::time_point deadline);
  void give_back_blocking(std::unique_ptr<connection> conn, bool reusable);
  void drop_idle_blocking();

  client_options options_;
  http_client_protocol protocol_;
  std::string host_port_;
  host_and_port address_;
  shared_memory_registry regions_;
  std::atomic<bool> any_region_{false};

  asio::io_context io_{1};
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  std::thread thread_;
  std::atomic<bool> stopped_{false};

  std::mutex pool_mutex_;
  bool closing_ = false;
  std::optional<tcp::resolver::results_type> endpoints_;
  std::vector<std::unique_ptr<connection>> idle_;
  std::size_t open_ = 0;
  std::deque<std::shared_ptr<exchange>> waiting_;

  std::set<exchange*> active_;  // I/O thread

  // The connections of synchronous calls belong to a context that never runs: one that the I/O
  // thread's reactor watched would wake that thread at each reply, for nothing.
  asio::io_context blocking_io_{1};
  std::mutex blocking_mutex_;
  std::condition_variable blocking_free_;
  std::vector<std::unique_ptr<connection>> blocking_idle_;
  std::size_t blocking_open_ = 0;
  bool blocking_closing_ = false;

  friend class exchange;
};

// One asynchronous call: a connection from the pool (or a new one), the request written, the
// reply read, the connection given back. Its deadline covers all of it.
class exchange : public std::enable_shared_from_this<exchange> {
 public:
  exchange(client_state& state, http_call call, client::reply_callback done)
      : state_{state}, call_{std::move(call)}, done_{std::move(done)}, timer_{state.io()} {}

  void begin() {
    state_.active_.insert(this);
    if (state_.options().timeout.count() > 0) {
      timer_.expires_after(state_.options().timeout);
      timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
        if (!ec) self->on_deadline();
      });
    }
    acquire();
  }

  void acquire() {
    const std::shared_ptr<exchange> self = shared_from_this();
    std::optional<client_state::taken> got = state_.take(self);
    if (!got) {
      if (state_.closing_unlocked()) finish(unavailable("the client is closing"));
      return;  // queued: `assign` comes when a connection is free
    }
    assign(std::move(got->conn), got->fresh);
  }

  // From the pool: a kept-alive connection (`fresh` false) or a new one to connect.
  void assign(std::unique_ptr<connection> conn, bool fresh) {
    if (finished_) {
      state_.give_back(std::move(conn), !fresh);
      return;
    }
    conn_ = std::move(conn);
    fresh_ = fresh;
    if (fresh) return connect();
    write();
  }

  [[nodiscard]] bool finished() const noexcept { return finished_; }

  // The client closes: every call in flight ends.
  void abort() {
    beast::error_code ignored;
    if (conn_) conn_->socket.close(ignored);
    timer_.cancel();
    finish(unavailable("the client was closed before the reply came"));
  }

 private:
  void connect() {
    result<tcp::resolver::results_type> found = state_.endpoints();
    if (!found) return fail_connect(found.error().message());
    auto connect_timer = std::make_shared<timer_type>(state_.io());
    connect_timer->expires_after(state_.options().connect_timeout);
    connecting_ = true;
    connect_timer->async_wait([self = shared_from_this()](beast::error_code ec) {
      if (ec || !self->connecting_) return;
      self->connect_timed_out_ = true;
      beast::error_code ignored;
      if (self->conn_) self->conn_->socket.close(ignored);
    });
    asio::async_connect(
        conn_->socket, *found,
        [self = shared_from_this(), connect_timer](beast::error_code ec, const tcp::endpoint&) {
          connect_timer->cancel();
          self->connecting_ = false;
          if (ec) {
            return self->fail_connect(
                self->connect_timed_out_
                    ? fmt::format("cannot connect to {} within {} ms", self->state_.host_port(),
                                  self->state_.options().connect_timeout.count())
                    : fmt::format("cannot connect to {}: {}", self->state_.host_port(),
                                  ec.message()));
          }
          beast::error_code ignored;
          self->conn_->socket.set_option(tcp::no_delay{true}, ignored);
          self->write();
        });
  }

  void fail_connect(std::string message) {
    if (conn_) state_.give_back(std::move(conn_), false);
    if (timed_out_) return finish(state_.transport_error("connecting", {}, true));
    finish(unavailable(std::move(message)));
  }

  void write() {
    if (finished_) return state_.give_back(std::move(conn_), false);
    frame_request(call_, state_.host_port(), head_, buffers_);
    asio::async_write(conn_->socket, buffers_,
                      [self = shared_from_this()](beast::error_code ec, std::size_t) {
                        if (ec) return self->fail_io("sending the request", ec);
                        self->read();
                      });
  }

  void read() {
    prepare_parser(parser_, state_.options().reply_bounds.max_body_bytes);
    bhttp::async_read(
        conn_->socket, conn_->buffer, *parser_,
        [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_read(ec); });
  }

  void on_read(beast::error_code ec) {
    if (ec) return fail_io("reading the reply", ec);
    bool keep = false;
    http_reply reply = reply_of(*parser_, keep);
    parser_.reset();
    // Only a connection that the deadline did not close, with nothing left unread, is kept.
    keep = keep && !timed_out_ && conn_->socket.is_open() && conn_->buffer.size() == 0;
    state_.give_back(std::move(conn_), keep);
    finish(std::move(reply));
  }

  void fail_io(std::string_view doing, beast::error_code ec) {
    const bool nothing_read = !parser_ || !parser_->got_some();
    if (conn_) state_.give_back(std::move(conn_), false);
    if (finished_) return;
    if (!fresh_ && !retried_ && nothing_read && closed_while_idle(ec)) {
      // The server closed its idle connections (an idle timeout, a restart): the others kept
      // are likely closed too, so the call goes again on a new one.
      retried_ = true;
      parser_.reset();
      state_.drop_idle();
      return acquire();
    }
    finish(state_.transport_error(doing, ec, timed_out_));
  }

  void on_deadline() {
    if (finished_) return;
    timed_out_ = true;
    beast::error_code ignored;
    if (conn_) {
      conn_->socket.close(ignored);
      return;  // the pending operation ends with an error, and reports the deadline
    }
    // Still waiting for a connection from the pool.
    finish(status{errc::deadline_exceeded,
                  fmt::format("no connection to {} free within the deadline of {} ms",
                              state_.host_port(), state_.options().timeout.count())});
  }

  void finish(result<http_reply> outcome) {
    if (finished_) return;
    finished_ = true;
    timer_.cancel();
    state_.forget(this);
    client::reply_callback done = std::move(done_);
    call_.tail.clear();
    done(std::move(outcome));
  }

  client_state& state_;
  http_call call_;
  client::reply_callback done_;
  timer_type timer_;
  std::unique_ptr<connection> conn_;
  std::string head_;
  std::vector<asio::const_buffer> buffers_;
  std::optional<reply_parser> parser_;
  bool fresh_ = false;
  bool retried_ = false;
  bool timed_out_ = false;
  bool connect_timed_out_ = false;
  bool connecting_ = false;
  bool finished_ = false;
};

void client_state::start(http_call call, client::reply_callback done) {
  auto call_state = std::make_shared<exchange>(*this, std::move(call), std::move(done));
  asio::post(io_, [call_state] { call_state->begin(); });
}

bool client_state::closing_unlocked() {
  const std::lock_guard lock{pool_mutex_};
  return closing_;
}

std::optional<client_state::taken> client_state::take(const std::shared_ptr<exchange>& waiter) {
  const std::lock_guard lock{pool_mutex_};
  if (closing_) return std::nullopt;
  if (!idle_.empty()) {
    taken out{std::move(idle_.back()), false};
    idle_.pop_back();
    return out;
  }
  if (open_ < std::max<std::size_t>(options_.max_connections, 1)) {
    ++open_;
    return taken{std::make_unique<connection>(io_), true};
  }
  waiting_.push_back(waiter);
  return std::nullopt;
}

void client_state::give_back(std::unique_ptr<connection> conn, bool reusable) {
  if (!conn) return;
  bool wake = false;
  {
    const std::lock_guard lock{pool_mutex_};
    if (!reusable || closing_) {
      beast::error_code ignored;
      conn->socket.close(ignored);
      conn.reset();
      --open_;
    } else {
      idle_.push_back(std::move(conn));
    }
    wake = !waiting_.empty() && !closing_;
  }
  if (wake) asio::post(io_, [this] { serve_waiters(); });
}

void client_state::drop_idle() {
  const std::lock_guard lock{pool_mutex_};
  for (std::unique_ptr<connection>& conn : idle_) {
    beast::error_code ignored;
    conn->socket.close(ignored);
  }
  open_ -= idle_.size();
  idle_.clear();
}

void client_state::serve_waiters() {
  for (;;) {
    std::shared_ptr<exchange> next;
    std::optional<taken> got;
    {
      const std::lock_guard lock{pool_mutex_};
      while (!waiting_.empty() && waiting_.front()->finished()) waiting_.pop_front();
      if (waiting_.empty() || closing_) return;
      if (idle_.empty() && open_ >= std::max<std::size_t>(options_.max_connections, 1)) return;
      next = std::move(waiting_.front());
      waiting_.pop_front();
      if (!idle_.empty()) {
        got = taken{std::move(idle_.back()), false};
        idle_.pop_back();
      } else {
        ++open_;
        got = taken{std::make_unique<connection>(io_), true};
      }
    }
    next->assign(std::move(got->conn), got->fresh);
  }
}

result<tcp::resolver::results_type> client_state::endpoints() {
  {
    const std::lock_guard lock{pool_mutex_};
    if (endpoints_) return *endpoints_;
  }
  tcp::resolver resolver{io_};
  beast::error_code ec;
  tcp::resolver::results_type found = resolver.resolve(address_.host, address_.port, ec);
  if (ec) return unavailable(fmt::format("cannot resolve '{}': {}", host_port_, ec.message()));
  const std::lock_guard lock{pool_mutex_};
  endpoints_ = found;
  return found;
}

status client_state::transport_error(std::string_view doing, beast::error_code ec,
                                     bool timed_out) const {
  if (timed_out) {
    return status{errc::deadline_exceeded,
                  fmt::format("no reply from {} within the deadline of {} ms", host_port_,
                              options_.timeout.count())};
  }
  if (ec == bhttp::error::body_limit) {
    return status{errc::payload_too_large,
                  fmt::format("the reply from {} is larger than the limit of {} bytes", host_port_,
                              options_.reply_bounds.max_body_bytes)};
  }
  if (ec == bhttp::error::header_limit) {
    return status{errc::header_fields_too_large,
                  fmt::format("the reply from {} has more than {} bytes of headers", host_port_,
                              max_reply_header_bytes)};
  }
  if (ec.category() == beast::error_code{bhttp::error::end_of_stream}.category() &&
      ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message) {
    return status{errc::internal,
                  fmt::format("the reply from {} is not valid HTTP: {}", host_port_, ec.message())};
  }
  return unavailable(fmt::format(
      "{} {}: {} ({})",
      doing == "sending the request" ? "cannot send the request to" : "no complete reply from",
      host_port_, ec.message(), doing));
}

// --- a call on the caller's thread ---------------------------------------------------------------

status client_state::wait_for_socket(socket_type& socket, short events,
                                     std::chrono::steady_clock::time_point deadline) {
  pollfd fd{socket.native_handle(), events, 0};
  for (;;) {
    int wait_ms = -1;
    if (deadline != std::chrono::steady_clock::time_point::max()) {
      const auto left =
          std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return status{errc::deadline_exceeded, ""};
      wait_ms = static_cast<int>(std::min<std::int64_t>(left.count(), INT32_MAX));
    }
    const int ready = ::poll(&fd, 1, wait_ms);
    if (ready > 0) return {};
    if (ready == 0) return status{errc::deadline_exceeded, ""};
    if (errno != EINTR) return unavailable("poll failed");
  }
}

status client_state::connect_here(socket_type& socket,
                                  std::chrono::steady_clock::time_point deadline) {
  result<tcp::resolver::results_type> found = endpoints();
  if (!found) return found.error();
  const auto connect_deadline =
      std::min(deadline, std::chrono::steady_clock::now() + options_.connect_timeout);
  beast::error_code ec = asio::error::host_not_found;
  for (const auto& entry : *found) {
    beast::error_code ignored;
    socket.close(ignored);
    socket.open(entry.endpoint().protocol(), ec);
    if (ec) continue;
    socket.non_blocking(true, ec);
    // ::connect itself: asio's synchronous connect waits without a bound.
    ec = {};
    if (::connect(socket.native_handle(), entry.endpoint().data(),
                  static_cast<socklen_t>(entry.endpoint().size())) != 0) {
      ec = beast::error_code{errno, asio::error::get_system_category()};
    }
    if (ec == asio::error::in_progress || ec == asio::error::would_block) {
      if (status waited = wait_for_socket(socket, POLLOUT, connect_deadline); !waited.ok()) {
        if (connect_deadline == deadline) return transport_error("connecting", {}, true);
        return unavailable(fmt::format("cannot connect to {} within {} ms", host_port_,
                                       options_.connect_timeout.count()));
      }
      int error = 0;
      socklen_t length = sizeof error;
      ::getsockopt(socket.native_handle(), SOL_SOCKET, SO_ERROR, &error, &length);
      ec = beast::error_code{error, asio::error::get_system_category()};
    }
    if (!ec) {
      socket.set_option(tcp::no_delay{true}, ignored);
      return {};
    }
  }
  return unavailable(fmt::format("cannot connect to {}: {}", host_port_, ec.message()));
}

status client_state::write_here(socket_type& socket, const std::vector<asio::const_buffer>& buffers,
                                std::chrono::steady_clock::time_point deadline) {
  beast::buffers_suffix<std::vector<asio::const_buffer>> rest{buffers};
  while (beast::buffer_bytes(rest) != 0) {
    beast::error_code ec;
    const std::size_t n = socket.write_some(rest, ec);
    if (ec == asio::error::would_block) {
      if (status waited = wait_for_socket(socket, POLLOUT, deadline); !waited.ok()) return waited;
      continue;
    }
    if (ec) return transport_error("sending the request", ec, false);
    rest.consume(n);
  }
  return {};
}

status client_state::read_here(connection& conn, reply_parser& parser,
                               std::chrono::steady_clock::time_point deadline) {
  bool waited_for_none = conn.buffer.size() == 0;
  for (;;) {
    // What the buffer holds first: a reply may have come whole with the last read.
    while (conn.buffer.size() != 0 && !parser.is_done()) {
      beast::error_code ec;
      const std::size_t used = parser.put(conn.buffer.data(), ec);
      conn.buffer.consume(used);
      if (ec == bhttp::error::need_more) break;
      if (ec) return transport_error("reading the reply", ec, false);
      if (used == 0) break;
    }
    if (parser.is_done()) return {};
    // Right after the request the reply has seldom come yet: wait before reading (a read would
    // mostly find nothing, one system call for naught).
    if (waited_for_none) {
      waited_for_none = false;
      if (status waited = wait_for_socket(conn.socket, POLLIN, deadline); !waited.ok()) {
        return waited;
      }
    }
    beast::error_code ec;
    const std::size_t n = conn.socket.read_some(conn.buffer.prepare(std::size_t{64} * 1024U), ec);
    if (ec == asio::error::would_block) {
      if (status waited = wait_for_socket(conn.socket, POLLIN, deadline); !waited.ok()) {
        return waited;
      }
      continue;
    }
    if (ec == asio::error::eof) {
      // A reply whose length is its connection's end is complete now; any other is cut short.
      if (!parser.got_some()) {
        return transport_error("reading the reply", bhttp::error::end_of_stream, false);
      }
      beast::error_code end;
      parser.put_eof(end);
      if (!end && parser.is_done()) return {};
      return transport_error("reading the reply", bhttp::error::partial_message, false);
    }
    if (ec) return transport_error("reading the reply", ec, false);
    conn.buffer.commit(n);
  }
}

result<client_state::taken> client_state::take_blocking(
    std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock{blocking_mutex_};
  const std::size_t most = std::max<std::size_t>(options_.max_connections, 1);
  const auto free = [&] {
    return blocking_closing_ || !blocking_idle_.empty() || blocking_open_ < most;
  };
  if (deadline == std::chrono::steady_clock::time_point::max()) {
    blocking_free_.wait(lock, free);
  } else if (!blocking_free_.wait_until(lock, deadline, free)) {
    return status{errc::deadline_exceeded,
                  fmt::format("no connection to {} free within the deadline of {} ms", host_port_,
                              options_.timeout.count())};
  }
  if (blocking_closing_) return unavailable("the client is closing");
  if (!blocking_idle_.empty()) {
    taken out{std::move(blocking_idle_.back()), false};
    blocking_idle_.pop_back();
    return out;
  }
  ++blocking_open_;
  return taken{std::make_unique<connection>(blocking_io_), true};
}

void client_state::give_back_blocking(std::unique_ptr<connection> conn, bool reusable) {
  {
    const std::lock_guard lock{blocking_mutex_};
    if (!reusable || blocking_closing_) {
      beast::error_code ignored;
      conn->socket.close(ignored);
      conn.reset();
      --blocking_open_;
    } else {
      blocking_idle_.push_back(std::move(conn));
    }
  }
  blocking_free_.notify_one();
}

void client_state::drop_idle_blocking() {
  {
    const std::lock_guard lock{blocking_mutex_};
    for (std::unique_ptr<connection>& conn : blocking_idle_) {
      beast::error_code ignored;
      conn->socket.close(ignored);
    }
    blocking_open_ -= blocking_idle_.size();
    blocking_idle_.clear();
  }
  blocking_free_.notify_all();
}

result<http_reply> client_state::call_here(const http_call& call) {
  const auto deadline = options_.timeout.count() > 0
                            ? std::chrono::steady_clock::now() + options_.timeout
                            : std::chrono::steady_clock::time_point::max();
  std::string head_text;
  std::vector<asio::const_buffer> buffers;
  frame_request(call, host_port_, head_text, buffers);
  for (int attempt = 0;; ++attempt) {
    result<taken> got = take_blocking(deadline);
    if (!got) return std::move(got).error();
    std::unique_ptr<connection> conn = std::move(got->conn);
    if (got->fresh) {
      if (status connected = connect_here(conn->socket, deadline); !connected.ok()) {
        give_back_blocking(std::move(conn), false);
        return connected;
      }
    }
    std::optional<reply_parser> parser;
    prepare_parser(parser, options_.reply_bounds.max_body_bytes);
    status failed = write_here(conn->socket, buffers, deadline);
    if (failed.ok()) failed = read_here(*conn, *parser, deadline);
    if (failed.ok()) {
      bool keep = false;
      http_reply reply = reply_of(*parser, keep);
      const bool clean = conn->buffer.size() == 0;
      give_back_blocking(std::move(conn), keep && clean);
      return reply;
    }
    give_back_blocking(std::move(conn), false);
    if (failed.code() == errc::deadline_exceeded) {
      return status{errc::deadline_exceeded,
                    fmt::format("no reply from {} within the deadline of {} ms", host_port_,
                                options_.timeout.count())};
    }
    // A kept-alive connection that the server closed while it was idle fails before any reply
    // byte: once more on a new connection.
    const bool retry =
        attempt == 0 && !got->fresh && !parser->got_some() && failed.code() == errc::unavailable;
    if (!retry) return failed;
    // The others kept are likely closed too (an idle timeout, a restart): a new connection.
    drop_idle_blocking();
  }
}

void client_state::close_all() {
  std::deque<std::shared_ptr<exchange>> waiting;
  {
    const std::lock_guard lock{pool_mutex_};
    closing_ = true;
    for (std::unique_ptr<connection>& conn : idle_) {
      beast::error_code ignored;
      conn->socket.close(ignored);
    }
    open_ -= idle_.size();
    idle_.clear();
    waiting = std::move(waiting_);
  }
  for (const std::shared_ptr<exchange>& w : waiting) w->abort();
  const std::set<exchange*> active = active_;
  for (exchange* call : active) call->abort();
}

}  // namespace detail

// --- the client's calls ------------------------------------------------------------------------

client::client(std::string host_port, client_options options)
    : state_{std::make_shared<detail::client_state>(std::move(host_port), std::move(options))} {}

client::~client() {
  try {
    state_->stop();
  } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor must not throw (a failed join)
  }
}

const http_client_protocol& client::protocol() const noexcept { return state_->protocol(); }

result<http_reply> client::send(const http_call& call) { return state_->call_here(call); }

void client::async_send(http_call call, reply_callback done) {
  state_->start(std::move(call), std::move(done));
}

namespace {

// An inference call, and the outputs of its request that go to regions of this client.
struct prepared_infer {
  http_call call;
  std::shared_ptr<shared_memory_outputs> placed;
};

result<prepared_infer> prepare_infer(detail::client_state& state, std::string_view model,
                                     const inference_request& request, const request_format& format,
                                     std::optional<std::uint64_t> version) {
  result<http_call> call = state.protocol().infer(model, request, format, version);
  if (!call) return std::move(call).error();
  prepared_infer out{std::move(*call), nullptr};
  if (state.has_regions() && !request.outputs.empty()) {
    result<shared_memory_outputs> asked = shared_memory_outputs::of(request, state.regions());
    if (!asked) return std::move(asked).error();
    if (!asked->outputs.empty()) {
      out.placed = std::make_shared<shared_memory_outputs>(std::move(*asked));
    }
  }
  return out;
}

}  // namespace

void client::async_infer(std::string_view model, const inference_request& request,
                         infer_callback done, const request_format& format,
                         std::optional<std::uint64_t> version) {
  result<prepared_infer> prepared = prepare_infer(*state_, model, request, format, version);
  if (!prepared) return state_->post_error(std::move(prepared).error(), std::move(done));
  state_->start(std::move(prepared->call), [state = state_, placed = std::move(prepared->placed),
                                            done = std::move(done)](result<http_reply> reply) {
    if (!reply) return done(std::move(reply).error());
    done(state->protocol().read_infer(std::move(*reply), placed.get()));
  });
}

std::future<result<inference_response>> client::async_infer(std::string_view model,
                                                            const inference_request& request,
                                                            const request_format& format,
                                                            std::optional<std::uint64_t> version) {
  auto promise = std::make_shared<std::promise<result<inference_response>>>();
  std::future<result<inference_response>> future = promise->get_future();
  async_infer(
      model, request,
      [promise](result<inference_response> response) { promise->set_value(std::move(response)); },
      format, version);
  return future;
}

result<inference_response> client::infer(std::string_view model, const inference_request& request,
                                         const request_format& format,
                                         std::optional<std::uint64_t> version) {
  result<prepared_infer> prepared = prepare_infer(*state_, model, request, format, version);
  if (!prepared) return std::move(prepared).error();
  result<http_reply> reply = state_->call_here(prepared->call);
  if (!reply) return std::move(reply).error();
  return state_->protocol().read_infer(std::move(*reply), prepared->placed.get());
}

namespace {

// A call whose reply one of the protocol's readers reads.
template <class Read>
auto call_and_read(detail::client_state& state, result<http_call> call, Read&& read)
    -> decltype(read(http_reply{})) {
  if (!call) return std::move(call).error();
  result<http_reply> reply = state.call_here(*call);
  if (!reply) return std::move(reply).error();
  return read(std::move(*reply));
}

}  // namespace

result<server_metadata> client::metadata() {
  return call_and_read(*state_, protocol().server_metadata(), [this](http_reply r) {
    return protocol().read_server_metadata(std::move(r));
  });
}

result<model_metadata> client::metadata(std::string_view model,
                                        std::optional<std::uint64_t> version) {
  return call_and_read(*state_, protocol().model_metadata(model, version), [this](http_reply r) {
    return protocol().read_model_metadata(std::move(r));
  });
}

namespace {
bool health(detail::client_state& state, const http_call& call) {
  result<http_reply> reply = state.call_here(call);
  return reply && http_client_protocol::read_health(*reply);
}
}  // namespace

bool client::live() { return health(*state_, protocol().live()); }

bool client::ready() { return health(*state_, protocol().ready()); }

bool client::ready(std::string_view model, std::optional<std::uint64_t> version) {
  return health(*state_, protocol().model_ready(model, version));
}

result<std::string> client::model_config(std::string_view model,
                                         std::optional<std::uint64_t> version) {
  return call_and_read(*state_, protocol().model_config(model, version),
                       [this](http_reply r) { return protocol().read_text(std::move(r)); });
}

result<std::string> client::statistics(std::string_view model,
                                       std::optional<std::uint64_t> version) {
  return call_and_read(*state_, protocol().statistics(model, version),
                       [this](http_reply r) { return protocol().read_text(std::move(r)); });
}

result<std::vector<model_index_entry>> client::repository_index(bool ready_only) {
  return call_and_read(*state_, protocol().repository_index(ready_only), [this](http_reply r) {
    return protocol().read_repository_index(std::move(r));
  });
}

namespace {
status outcome_of(detail::client_state& state, result<http_call> call) {
  if (!call) return std::move(call).error();
  result<http_reply> reply = state.call_here(*call);
  if (!reply) return std::move(reply).error();
  return state.protocol().read_outcome(std::move(*reply));
}
}  // namespace

status client::load(std::string_view model, const parameters& settings) {
  return outcome_of(*state_, protocol().load(model, settings));
}

status client::unload(std::string_view model) {
  return outcome_of(*state_, protocol().unload(model));
}

result<log_settings> client::log_settings() {
  return call_and_read(*state_, protocol().log_settings(),
                       [this](http_reply r) { return protocol().read_log_settings(std::move(r)); });
}

result<log_settings> client::update_log_settings(const log_settings_update& change) {
  return call_and_read(*state_, protocol().update_log_settings(change),
                       [this](http_reply r) { return protocol().read_log_settings(std::move(r)); });
}

result<trace_settings_change> client::trace_settings(std::string_view model) {
  return call_and_read(*state_, protocol().trace_settings(model), [this](http_reply r) {
    return protocol().read_trace_settings(std::move(r));
  });
}

result<trace_settings_change> client::update_trace_settings(const trace_settings_change& change,
                                                            std::string_view model) {
  return call_and_read(
      *state_, protocol().update_trace_settings(change, model),
      [this](http_reply r) { return protocol().read_trace_settings(std::move(r)); });
}

status client::register_system_shared_memory(const std::string& name, const std::string& key,
                                             std::uint64_t offset, std::uint64_t byte_size) {
  // Mapped here first: a region this process cannot map is refused before the server is asked.
  if (status mapped = state_->regions().register_region(name, key, offset, byte_size);
      !mapped.ok()) {
    return mapped;
  }
  const shared_memory_region region{name, key, offset, byte_size};
  status registered = outcome_of(*state_, protocol().register_shared_memory(region));
  if (!registered.ok()) {
    state_->regions().unregister(name);
    return registered;
  }
  state_->note_region();
  return registered;
}

status client::unregister_system_shared_memory(std::string_view name) {
  status s = outcome_of(*state_, protocol().unregister_shared_memory(name));
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
  return call_and_read(*state_, protocol().shared_memory_status(name), [this](http_reply r) {
    return protocol().read_shared_memory_status(std::move(r));
  });
}

}  // namespace oip::http
