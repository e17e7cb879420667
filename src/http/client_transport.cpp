// The HTTP client's transport (`client_transport.hpp`).

#include "http/client_transport.hpp"

#include "core/detail/run_callback.hpp"
#include "serving/detail/ascii.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <memory>
#include <system_error>
#include <thread>
#include <utility>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

namespace oip::http::detail {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using executor_type = asio::io_context::executor_type;
using timer_type =
    asio::basic_waitable_timer<std::chrono::steady_clock,
                               asio::wait_traits<std::chrono::steady_clock>, executor_type>;

namespace {

// A connection just opened: requests go out as written (no Nagle delay behind the last reply's
// acknowledgement), and the kernel probes a silent server (`client_options::tcp_keepalive`).
// Options the kernel refuses are left at its defaults: the call can go on without them.
void set_up_connection(socket_type& socket, const client_options& options) {
  beast::error_code ignored;
  socket.set_option(tcp::no_delay{true}, ignored);
  constexpr std::chrono::seconds::rep kernel_most = 32767;  // Linux's bound on both settings
  const auto idle = static_cast<int>(
      std::min<std::chrono::seconds::rep>(options.tcp_keepalive.count(), kernel_most));
  if (idle <= 0) return;
  constexpr int probes = 3;
  const int interval = std::max(1, idle / probes);
  const int fd = socket.native_handle();
  const int on = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof probes);
}

// How long a call whose request could not be written whole waits for the rest of a reply that
// the server sent before it closed: the reply came before the close, so it is there already.
constexpr std::chrono::milliseconds early_reply_wait{100};

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

// RFC 9110's token: a method, a header's name. Anything else there (a space, a control byte, a
// byte that a lenient peer would trim) could make one header read as another, or split the line.
bool is_token(std::string_view text) {
  constexpr std::string_view marks = "!#$%&'*+-.^_`|~";
  return !text.empty() && std::all_of(text.begin(), text.end(), [&](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           marks.find(c) != std::string_view::npos;
  });
}

// A request target: visible ASCII (a space or a control byte would end or split the line).
bool is_target(std::string_view text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
    const auto byte = static_cast<unsigned char>(c);
    return byte > 0x20 && byte < 0x7F;
  });
}

// A header's value: no control byte but the tab (a line break would begin a header of its own).
bool is_field_value(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char c) {
    const auto byte = static_cast<unsigned char>(c);
    return c == '\t' || (byte >= 0x20 && byte != 0x7F);
  });
}

}  // namespace

status check_headers(const std::vector<http_header>& headers) {
  for (const http_header& h : headers) {
    if (!is_token(h.name) || !is_field_value(h.value)) {
      return status{errc::invalid_argument,
                    fmt::format("the header '{}' is not a valid HTTP header", h.name)};
    }
    if (oip::detail::equals_ignoring_case(h.name, "Content-Length") ||
        oip::detail::equals_ignoring_case(h.name, "Transfer-Encoding")) {
      return status{
          errc::invalid_argument,
          fmt::format("a call may not set '{}': the client frames the body itself", h.name)};
    }
  }
  return {};
}

status check_call(const http_call& call) {
  if (!is_token(call.method) || !is_target(call.target)) {
    return status{errc::invalid_argument,
                  "an HTTP call needs a method and a target without spaces or control bytes"};
  }
  return check_headers(call.headers);
}

namespace {

bool names_host(const http_call& call) {
  return std::any_of(call.headers.begin(), call.headers.end(), [](const http_header& h) {
    return oip::detail::equals_ignoring_case(h.name, "Host");
  });
}

// The request line and headers of `call`, and the buffers to write: those, `head`, each `tail`.
void frame_request(const http_call& call, const std::string& host, std::string& head_text,
                   std::vector<asio::const_buffer>& buffers) {
  std::array<char, 24> length{};
  std::size_t length_size = 0;
  const bool sized = call.method != "GET" || call.body_size() != 0;
  if (sized) {
    length_size = static_cast<std::size_t>(
        std::to_chars(length.data(), length.data() + length.size(), call.body_size()).ptr -
        length.data());
  }
  std::size_t size = call.method.size() + call.target.size() + host.size() + length_size + 48;
  for (const http_header& h : call.headers) size += h.name.size() + h.value.size() + 4;
  head_text.clear();
  head_text.reserve(size);
  head_text.append(call.method).append(" ").append(call.target).append(" HTTP/1.1\r\n");
  if (!names_host(call)) head_text.append("Host: ").append(host).append("\r\n");
  for (const http_header& h : call.headers) {
    head_text.append(h.name).append(": ").append(h.value).append("\r\n");
  }
  if (sized) head_text.append("Content-Length: ").append(length.data(), length_size).append("\r\n");
  head_text += "\r\n";
  buffers.clear();
  buffers.reserve(2 + call.tail.size());
  buffers.emplace_back(head_text.data(), head_text.size());
  if (!call.head.empty()) buffers.emplace_back(call.head.data(), call.head.size());
  for (const buffer& b : call.tail) {
    if (!b.empty()) buffers.emplace_back(b.data(), b.size());
  }
}

void prepare_parser(std::optional<reply_parser>& parser, const http_call& call,
                    std::size_t max_body_bytes) {
  parser.emplace(max_reply_header_bytes, max_body_bytes);
  // A reply to HEAD announces the length of a body it does not carry.
  if (call.method == "HEAD") parser->skip(true);
}

// The reply a parser has read; whether the connection may carry another call (not after 101
// Switching Protocols: what follows is no longer HTTP/1.1).
http_reply reply_of(reply_parser& parser, bool& keep_alive) {
  http_reply reply = parser.take();
  keep_alive = parser.keep_alive() && reply.status != 101;
  return reply;
}

// The most interim replies (`100 Continue`, `103 Early Hints`) skipped before a final one: a
// server that sends them without end is an error, even where the call has no deadline.
constexpr int max_interim_replies = 16;

status too_many_interim_replies(const std::string& host_port) {
  return status{errc::unavailable,
                fmt::format("the reply from {} is more than {} interim (1xx) replies", host_port,
                            max_interim_replies)};
}

// Whether a failure on a kept-alive connection, before any reply byte, says that the server had
// closed it while idle.
bool closed_while_idle(beast::error_code ec) {
  return ec == bhttp::error::end_of_stream || ec == asio::error::eof ||
         ec == asio::error::connection_reset || ec == asio::error::broken_pipe;
}

// Whether a call that failed before any reply byte may go again on a new connection. The server
// may have run it (it read the request, then failed or closed), so only a method that means the
// same run twice goes again (RFC 9110, 9.2.2): an inference, a load or a registration is never
// sent twice. The pool's check before each reuse has already set aside connections that the
// server closed while they were idle, so what is left is a close that crossed the request.
bool may_repeat(std::string_view method) {
  return method == "GET" || method == "HEAD" || method == "PUT" || method == "DELETE" ||
         method == "OPTIONS";
}

}  // namespace

// One asynchronous call: a connection from the pool (or a new one), the request written, the
// reply read, the connection given back. Its deadline covers all of it.
class exchange : public std::enable_shared_from_this<exchange> {
 public:
  exchange(client_state& state, http_call call, client::reply_callback done)
      : state_{state}, call_{std::move(call)}, done_{std::move(done)}, timer_{state.io_} {}
  exchange(const exchange&) = delete;
  exchange& operator=(const exchange&) = delete;

  // Ends normally by `finish`. An exchange that an exception ended early (a failed allocation)
  // still gives its connection back and reports, so that neither a pool's place nor the caller
  // waits forever.
  ~exchange() {
    if (!began_) return;  // never posted: the caller had the error
    state_.active_.erase(this);
    try {
      if (conn_) state_.async_pool_.give_back(std::move(conn_), false);
      if (!finished_ && done_) {
        finished_ = true;
        done_(status{errc::unavailable, "the call ended on an error of the client"});
      }
    } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor must not throw
    }
  }

  void begin() {
    began_ = true;
    state_.active_.insert(this);
    if (state_.options().timeout.count() > 0) {
      timer_.expires_after(state_.options().timeout);
      timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
        if (!ec) self->on_deadline();
      });
    }
    acquire();
  }

  void acquire() { state_.acquire(shared_from_this()); }

  // From the pool: a kept-alive connection (`fresh` false) or a new one to connect.
  void assign(std::unique_ptr<connection> conn, bool fresh) {
    if (finished_) {
      state_.async_pool_.give_back(std::move(conn), !fresh);
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
    stop_connecting();
    timer_.cancel();
    finish(unavailable("the client was closed before the reply came"));
  }

 private:
  // Resolves the server's name (once per client, until a connect fails) and connects, all within
  // the connect timeout. Asio looks names up on a thread of its own: the I/O thread goes on with
  // the other calls meanwhile.
  void connect() {
    connecting_ = true;
    if (state_.options().connect_timeout.count() > 0) {
      connect_timer_.emplace(state_.io_);
      connect_timer_->expires_after(state_.options().connect_timeout);
      connect_timer_->async_wait([self = shared_from_this()](beast::error_code ec) {
        if (ec || !self->connecting_) return;
        self->connect_timed_out_ = true;
        if (self->resolving_) {
          return self->fail_connect(self->connect_failure({}));  // a lookup is not interrupted
        }
        self->stop_connecting();
      });
    }
    if (std::optional<tcp::resolver::results_type> known = state_.known_endpoints()) {
      return connect_to(*known);
    }
    resolving_ = true;
    resolver_.emplace(state_.io_);
    resolver_->async_resolve(
        state_.address_.host, state_.address_.port,
        [self = shared_from_this()](beast::error_code ec,
                                    const tcp::resolver::results_type& found) {
          // A lookup that the deadline or the connect timeout ended already (cancelling the
          // resolver does not stop a lookup under way): the call has had its answer.
          if (!self->resolving_) return;
          self->resolving_ = false;
          if (ec) {
            return self->fail_connect(self->connect_failure(
                fmt::format("cannot resolve '{}': {}", self->state_.host_port(), ec.message())));
          }
          self->state_.remember_endpoints(found);
          self->connect_to(found);
        });
  }

  void connect_to(const tcp::resolver::results_type& found) {
    asio::async_connect(
        conn_->socket, found,
        [self = shared_from_this()](beast::error_code ec, const tcp::endpoint&) {
          if (ec) {
            // The name may point elsewhere now (a restarted pod): looked up again next time.
            self->state_.forget_endpoints();
            return self->fail_connect(self->connect_failure(
                fmt::format("cannot connect to {}: {}", self->state_.host_port(), ec.message())));
          }
          self->connecting_ = false;
          if (self->connect_timer_) self->connect_timer_->cancel();
          set_up_connection(self->conn_->socket, self->state_.options());
          self->write();
        });
  }

  [[nodiscard]] std::string connect_failure(std::string message) const {
    if (!connect_timed_out_) return message;
    return fmt::format("cannot connect to {} within {} ms", state_.host_port(),
                       state_.options().connect_timeout.count());
  }

  // Ends a lookup or a connect in progress: its handler runs with an error.
  void stop_connecting() {
    if (resolver_) resolver_->cancel();
    beast::error_code ignored;
    if (conn_) conn_->socket.close(ignored);
  }

  void fail_connect(std::string message) {
    connecting_ = false;
    resolving_ = false;
    if (connect_timer_) connect_timer_->cancel();
    if (conn_) state_.async_pool_.give_back(std::move(conn_), false);
    if (timed_out_) return finish(state_.transport_error("connecting", {}, true));
    finish(unavailable(std::move(message)));
  }

  void write() {
    if (finished_) return state_.async_pool_.give_back(std::move(conn_), false);
    frame_request(call_, state_.host_port(), head_, buffers_);
    asio::async_write(conn_->socket, buffers_,
                      [self = shared_from_this()](beast::error_code ec, std::size_t) {
                        if (ec && (self->timed_out_ || !self->conn_->socket.is_open())) {
                          return self->fail_io("sending the request", ec);
                        }
                        // A server may answer before it has read the whole request and close
                        // (a 413): its reply, where it comes whole, is the call's outcome.
                        self->write_failed_ = ec;
                        self->read();
                      });
  }

  void read() {
    prepare_parser(parser_, call_, state_.options().reply_bounds.max_body_bytes);
    bhttp::async_read(
        conn_->socket, conn_->buffer, *parser_,
        [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_read(ec); });
  }

  void on_read(beast::error_code ec) {
    if (ec && write_failed_) return fail_io("sending the request", write_failed_);
    if (ec) return fail_io("reading the reply", ec);
    if (parser_->interim()) {
      if (++interim_replies_ > max_interim_replies) {
        state_.async_pool_.give_back(std::move(conn_), false);
        return finish(too_many_interim_replies(state_.host_port()));
      }
      return read();  // the final reply follows on the same connection
    }
    bool keep = false;
    http_reply reply = reply_of(*parser_, keep);
    parser_.reset();
    // Only a connection that the deadline did not close, with nothing left unread, is kept.
    keep = keep && !write_failed_ && !timed_out_ && conn_->socket.is_open() &&
           conn_->buffer.size() == 0;
    state_.async_pool_.give_back(std::move(conn_), keep);
    finish(std::move(reply));
  }

  void fail_io(std::string_view doing, beast::error_code ec) {
    const bool nothing_read = interim_replies_ == 0 && (!parser_ || !parser_->got_some());
    if (conn_) state_.async_pool_.give_back(std::move(conn_), false);
    if (finished_) return;
    if (!fresh_ && !retried_ && !timed_out_ && nothing_read && closed_while_idle(ec) &&
        may_repeat(call_.method)) {
      // The server closed its idle connections (an idle timeout, a restart): the others kept
      // are likely closed too, so the call goes again on a new one.
      retried_ = true;
      write_failed_ = {};
      parser_.reset();
      state_.async_pool_.drop_idle();
      return acquire();
    }
    finish(state_.transport_error(doing, ec, timed_out_));
  }

  void on_deadline() {
    if (finished_) return;
    timed_out_ = true;
    if (resolving_) return fail_connect({});  // a lookup is not interrupted: the call ends now
    if (conn_) {
      stop_connecting();
      return;  // the pending operation ends with an error, and reports the deadline
    }
    // Still waiting for a connection from the pool.
    finish(state_.no_connection_free());
  }

  void finish(result<http_reply> outcome) {
    if (finished_) return;
    finished_ = true;
    timer_.cancel();
    state_.active_.erase(this);
    client::reply_callback done = std::move(done_);
    call_.tail.clear();
    oip::run_callback("oip::http::client", done, std::move(outcome));
  }

  client_state& state_;
  http_call call_;
  client::reply_callback done_;
  timer_type timer_;
  std::unique_ptr<connection> conn_;
  std::string head_;
  std::vector<asio::const_buffer> buffers_;
  std::optional<reply_parser> parser_;
  std::optional<tcp::resolver> resolver_;
  std::optional<timer_type> connect_timer_;
  int interim_replies_ = 0;
  bool began_ = false;
  bool fresh_ = false;
  bool retried_ = false;
  bool timed_out_ = false;
  beast::error_code write_failed_;  // the request's write failed: a reply may still have come
  bool connect_timed_out_ = false;
  bool connecting_ = false;
  bool resolving_ = false;
  bool finished_ = false;
};

client_state::client_state(std::string host_port, client_options options)
    : options_{std::move(options)},
      headers_check_{check_headers(options_.headers)},
      protocol_{options_},
      host_port_{std::move(host_port)},
      address_{split_host_port(host_port_)},
      work_{asio::make_work_guard(io_)},
      async_pool_{io_, options_.max_connections,
                  [this] {
                    if (!waiting_.empty()) asio::post(io_, [this] { serve_waiters(); });
                  }},
      blocking_pool_{blocking_io_, options_.max_connections, {}} {
  thread_ = std::thread{[this] { run_io(); }};
}

void client_state::run_io() {
  for (;;) {
    try {
      io_.run();
      return;
    } catch (const std::exception& e) {
      // An allocation that failed: the call it was part of has ended (`~exchange`), and the
      // others go on.
      std::fprintf(stderr, "oip::http::client: a call ended on an exception: %s\n", e.what());
    } catch (...) {
      std::fputs("oip::http::client: a call ended on an exception\n", stderr);
    }
  }
}

client_state::~client_state() {
  try {
    stop();
  } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor must not throw; `~client` stopped
  }
}

void client_state::stop() {
  if (stopped_.exchange(true)) return;
  if (std::this_thread::get_id() == thread_.get_id()) {
    // The I/O thread cannot wait for itself to end (`~client` leaves that to a thread of its own
    // when it can start one).
    std::fputs("oip::http::client: ended in one of its own callbacks, with no thread to end it\n",
               stderr);
    std::abort();
  }
  blocking_pool_.close();
  asio::post(io_, [this] { close_all(); });
  work_.reset();
  if (thread_.joinable()) thread_.join();
}

void client_state::start(http_call call, client::reply_callback done) {
  if (!headers_check_.ok()) return post_error(headers_check_, std::move(done));
  auto call_state = std::make_shared<exchange>(*this, std::move(call), std::move(done));
  // The I/O thread holds the only reference: the exchange ends there, never on this thread.
  asio::post(io_, [call_state = std::move(call_state)] { call_state->begin(); });
}

void client_state::acquire(const std::shared_ptr<exchange>& call) {
  if (async_pool_.closed()) return call->abort();
  // Calls that wait already go first: a connection given back is theirs, in their order, even
  // where this call comes before the `serve_waiters` that the connection's return posted.
  waiting_.push_back(call);
  serve_waiters();
}

void client_state::serve_waiters() {
  while (!waiting_.empty()) {
    if (waiting_.front()->finished()) {
      waiting_.pop_front();
      continue;
    }
    std::optional<connection_pool::taken> got = async_pool_.try_take();
    if (!got) return;
    const std::shared_ptr<exchange> next = std::move(waiting_.front());
    waiting_.pop_front();
    next->assign(std::move(got->conn), got->fresh);
  }
}

void client_state::close_all() {
  async_pool_.close();
  const std::deque<std::shared_ptr<exchange>> waiting = std::move(waiting_);
  waiting_.clear();
  for (const std::shared_ptr<exchange>& w : waiting) w->abort();
  const std::set<exchange*> active = active_;
  for (exchange* call : active) call->abort();
}

std::optional<tcp::resolver::results_type> client_state::known_endpoints() {
  const std::lock_guard lock{endpoints_mutex_};
  return endpoints_;
}

void client_state::remember_endpoints(const tcp::resolver::results_type& found) {
  const std::lock_guard lock{endpoints_mutex_};
  endpoints_ = found;
}

void client_state::forget_endpoints() {
  const std::lock_guard lock{endpoints_mutex_};
  endpoints_.reset();
  // A lookup still under way stays: its answer is new, and the calls waiting share it.
  if (lookup_.valid() && lookup_.wait_for(std::chrono::seconds{0}) == std::future_status::ready) {
    lookup_ = {};
  }
  ++lookups_;
}

result<tcp::resolver::results_type> client_state::resolve_until(time_point deadline) {
  std::shared_future<lookup_answer> lookup;
  std::uint64_t asked_as = 0;
  {
    const std::lock_guard lock{endpoints_mutex_};
    if (endpoints_) return *endpoints_;
    // A lookup that failed is asked again; one whose addresses were forgotten (a connect to them
    // failed) is gone. One that answered after its callers stopped waiting is used.
    if (!lookup_.valid() ||
        (lookup_.wait_for(std::chrono::seconds{0}) == std::future_status::ready &&
         lookup_.get().first)) {
      // The lookup runs on a thread of its own, which holds nothing of the client's (it may
      // outlive it), and this thread waits for its answer no longer than `deadline`:
      // getaddrinfo cannot be interrupted, and the I/O thread may be this one (a call made in a
      // callback) or busy.
      auto answer = std::make_shared<std::promise<lookup_answer>>();
      std::shared_future<lookup_answer> asked = answer->get_future().share();
      try {
        std::thread{[answer, host = address_.host, port = address_.port] {
          asio::io_context own{1};
          tcp::resolver resolver{own};
          beast::error_code ec;
          tcp::resolver::results_type found = resolver.resolve(host, port, ec);
          answer->set_value({ec, std::move(found)});
        }}.detach();
      } catch (const std::system_error& e) {
        return unavailable(fmt::format("cannot resolve '{}': {}", host_port_, e.what()));
      }
      lookup_ = std::move(asked);
      ++lookups_;
    }
    lookup = lookup_;
    asked_as = lookups_;
  }
  if (deadline == time_point::max()) {
    lookup.wait();
  } else if (lookup.wait_until(deadline) != std::future_status::ready) {
    return status{errc::deadline_exceeded, ""};
  }
  const auto& [ec, found] = lookup.get();
  if (ec) return unavailable(fmt::format("cannot resolve '{}': {}", host_port_, ec.message()));
  const std::lock_guard lock{endpoints_mutex_};
  // Not if they were forgotten meanwhile: a connect to them failed.
  if (lookups_ == asked_as) endpoints_ = found;
  return found;
}

status client_state::no_connection_free() const {
  return status{errc::deadline_exceeded,
                fmt::format("no connection to {} free within the deadline of {} ms", host_port_,
                            options_.timeout.count())};
}

status client_state::transport_error(std::string_view doing, boost::system::error_code ec,
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
  if (ec == boost::system::errc::not_enough_memory) {
    return status{errc::unavailable,
                  fmt::format("no memory for the reply from {} on this client", host_port_)};
  }
  if (ec == bhttp::error::header_limit) {
    return status{errc::header_fields_too_large,
                  fmt::format("the reply from {} has more than {} bytes of headers", host_port_,
                              max_reply_header_bytes)};
  }
  if (ec == bhttp::error::buffer_overflow) {
    return status{errc::header_fields_too_large,
                  fmt::format("the reply from {} has chunk framing or trailers above the limit "
                              "of {} bytes",
                              host_port_, max_reply_header_bytes + read_size)};
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
  // The lookup and the connect, within the connect timeout (none when it is 0).
  const auto connect_deadline =
      options_.connect_timeout.count() > 0
          ? std::min(deadline, std::chrono::steady_clock::now() + options_.connect_timeout)
          : deadline;
  const auto out_of_time = [&] {
    if (connect_deadline == deadline) return transport_error("connecting", {}, true);
    return unavailable(fmt::format("cannot connect to {} within {} ms", host_port_,
                                   options_.connect_timeout.count()));
  };
  result<tcp::resolver::results_type> found = resolve_until(connect_deadline);
  if (!found) {
    if (found.error().code() == errc::deadline_exceeded) return out_of_time();
    return found.error();
  }
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
        forget_endpoints();
        return out_of_time();
      }
      int error = 0;
      socklen_t length = sizeof error;
      ::getsockopt(socket.native_handle(), SOL_SOCKET, SO_ERROR, &error, &length);
      ec = beast::error_code{error, asio::error::get_system_category()};
    }
    if (!ec) {
      set_up_connection(socket, options_);
      // With no deadline to keep, a read may block in the kernel: one system call where a poll
      // and a read would be two.
      if (options_.timeout.count() == 0) socket.non_blocking(false, ignored);
      return {};
    }
  }
  // The name may point elsewhere now (a restarted pod): looked up again next time.
  forget_endpoints();
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
  bool waited_for_none = conn.buffer.size() == 0 && conn.socket.non_blocking();
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
    const std::size_t room = std::min(read_size, conn.buffer.max_size() - conn.buffer.size());
    if (room == 0)
      return transport_error("reading the reply", bhttp::error::buffer_overflow, false);
    const std::size_t n = conn.socket.read_some(conn.buffer.prepare(room), ec);
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

result<http_reply> client_state::call_here(const http_call& call) {
  const auto deadline = options_.timeout.count() > 0
                            ? std::chrono::steady_clock::now() + options_.timeout
                            : std::chrono::steady_clock::time_point::max();
  if (!headers_check_.ok()) return headers_check_;
  std::string head_text;
  std::vector<asio::const_buffer> buffers;
  frame_request(call, host_port_, head_text, buffers);
  for (int attempt = 0;; ++attempt) {
    result<connection_pool::taken> got = blocking_pool_.take_until(deadline);
    if (!got) {
      if (got.error().code() == errc::deadline_exceeded) return no_connection_free();
      return std::move(got).error();
    }
    borrowed_connection conn{blocking_pool_, std::move(got->conn)};
    if (got->fresh) {
      if (status connected = connect_here(conn->socket, deadline); !connected.ok()) {
        return connected;
      }
    }
    std::optional<reply_parser> parser;
    prepare_parser(parser, call, options_.reply_bounds.max_body_bytes);
    const status written = write_here(conn->socket, buffers, deadline);
    status failed = written;
    // A server may answer before it has read the whole request (a 413 for a body too large) and
    // close, so that the write fails: what it answered by then is read, waiting a moment at most
    // (a write that failed on a connection still open, as by a signal, would wait otherwise),
    // and a whole reply is the call's outcome, as curl reads it.
    time_point read_until = deadline;
    if (!written.ok() && written.code() != errc::deadline_exceeded) {
      failed = {};
      read_until = std::min(deadline, std::chrono::steady_clock::now() + early_reply_wait);
      beast::error_code ignored;
      conn->socket.non_blocking(true, ignored);
    }
    int interim_replies = 0;
    while (failed.ok()) {
      failed = read_here(*conn, *parser, read_until);
      if (!failed.ok() || !parser->interim()) break;
      // The final reply follows on the same connection.
      if (++interim_replies > max_interim_replies) {
        failed = too_many_interim_replies(host_port_);
        break;
      }
      prepare_parser(parser, call, options_.reply_bounds.max_body_bytes);
    }
    if (failed.ok()) {
      bool keep = false;
      http_reply reply = reply_of(*parser, keep);
      conn.give_back(written.ok() && keep && conn->buffer.size() == 0);
      return reply;
    }
    if (!written.ok()) failed = written;  // no whole reply came: the write's failure
    conn.give_back(false);
    if (failed.code() == errc::deadline_exceeded) {
      return status{errc::deadline_exceeded,
                    fmt::format("no reply from {} within the deadline of {} ms", host_port_,
                                options_.timeout.count())};
    }
    // A kept-alive connection that the server closed as the request went fails before any reply
    // byte: once more on a new connection, where the method allows it.
    const bool retry = attempt == 0 && !got->fresh && interim_replies == 0 && !parser->got_some() &&
                       failed.code() == errc::unavailable && may_repeat(call.method);
    if (!retry) return failed;
    // The others kept are likely closed too (an idle timeout, a restart): a new connection.
    blocking_pool_.drop_idle();
  }
}

}  // namespace oip::http::detail
