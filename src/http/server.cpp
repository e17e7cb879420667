#include "http/request_parser.hpp"

#include <oip/http/server.hpp>
#include <oip/inference_service.hpp>
#include <oip/memory_budget.hpp>

#include <array>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>

#include <sys/socket.h>

namespace oip::http {

namespace {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
// Each I/O thread runs an io_context of its own and owns its connections: a connection's
// handlers all run on one thread, so they need no strand, and the executor type is concrete, not
// type-erased.
using executor_type = net::io_context::executor_type;
using socket_type = net::basic_stream_socket<tcp, executor_type>;
using acceptor_type = net::basic_socket_acceptor<tcp, executor_type>;
using timer_type =
    net::basic_waitable_timer<std::chrono::steady_clock,
                              net::wait_traits<std::chrono::steady_clock>, executor_type>;

void append_decimal(std::string& out, std::uint64_t value) {
  std::array<char, 20> digits{};
  char* end = std::to_chars(digits.data(), digits.data() + digits.size(), value).ptr;
  out.append(digits.data(), static_cast<std::size_t>(end - digits.data()));
}

std::string_view reason_phrase(int status) noexcept {
  const std::string_view reason = bhttp::obsolete_reason(static_cast<bhttp::status>(status));
  return reason.empty() ? std::string_view{"Unknown"} : reason;
}

// simdjson reads up to 64 bytes past the JSON; a body allocated with this padding is decoded in
// place.
constexpr std::size_t body_padding = 64;
// What a connection's read buffer holds beyond the headers: Beast reads 64 KiB at a time, and a
// chunk's size line and the trailers must fit in it whole, so they are bounded by it.
constexpr std::size_t read_ahead_bytes = std::size_t{128} << 10U;
// How much of a body one read takes at most (the connection's buffer is grown to it).
constexpr std::size_t body_read_bytes = std::size_t{64} << 10U;
// The most one read or write of a body of announced length, or of a reply, moves: Asio's own
// step (its transfer_all's), after which the transfer's deadline moves (`moving_deadline`).
constexpr std::size_t transfer_step_bytes = std::size_t{64} << 10U;
// How long a connection that is closing still reads what its client sends (see `linger`): in all,
// and between two reads.
constexpr std::chrono::seconds linger_time{10};
constexpr std::chrono::seconds linger_pause{2};
// How long accepting waits after a failure (out of descriptors or memory): the connection stays in
// the kernel's backlog meanwhile, and accepting again at once would fail again at once, round after
// round, on a core that also serves sessions.
constexpr std::chrono::milliseconds accept_retry_pause{100};

// An accept that failed for want of descriptors or memory, which the next would meet again.
bool out_of_resources(const beast::error_code& ec) {
  return ec == net::error::no_descriptors || ec == net::error::no_buffer_space ||
         ec == net::error::no_memory || ec == boost::system::errc::too_many_files_open_in_system;
}

}  // namespace

class session;

// One I/O thread's event loop. The hint tells Asio that one thread runs it; other threads still
// post to it (a worker's reply), so it keeps its locks.
struct io_loop {
  net::io_context io{1};
  // Keeps the thread running while a request is with the executor and no socket operation is
  // pending (after stop closed the acceptor, say): its reply still has to be written.
  std::optional<net::executor_work_guard<executor_type>> work;
};

// Owned by the server alone: handlers and sessions point to it without owning it, so that
// destroying the io_contexts (which destroys every pending handler and the sessions they hold)
// frees everything. Members are declared so that the io_contexts go first and the session
// registry outlives them.
struct detail::server_state {
  http_handler& handler;
  server_options options;
  std::uint16_t port = 0;
  std::atomic<bool> stopping{false};
  std::vector<std::thread> threads;

  std::mutex mutex;  // guards sessions
  std::condition_variable drained;
  std::unordered_map<session*, std::weak_ptr<session>> sessions;

  std::vector<std::unique_ptr<io_loop>> loops = make_loops(options.io_threads);
  // On the first loop, which also closes it at stop; connections go to the loops in turn.
  acceptor_type acceptor{loops.front()->io.get_executor()};
  timer_type accept_pause{loops.front()->io.get_executor()};
  std::size_t next_loop = 0;

  server_state(http_handler& h, server_options o) : handler{h}, options{std::move(o)} {}

  // Once a shutdown has begun, each reply closes its connection: a client with a pooled
  // connection (behind a layer-4 balancer such as kube-proxy, the same pod until it reconnects)
  // reconnects, and reaches a replica that stays.
  [[nodiscard]] bool closing_connections() const {
    return stopping.load() || handler.service().shutting_down();
  }

  static std::vector<std::unique_ptr<io_loop>> make_loops(std::size_t count) {
    std::vector<std::unique_ptr<io_loop>> made;
    for (std::size_t i = 0; i < std::max<std::size_t>(count, 1); ++i) {
      made.push_back(std::make_unique<io_loop>());
    }
    return made;
  }

  void accept();
  // Accepts again after a pause: the process is short of descriptors or of memory.
  void accept_after_pause();
  // One connection's accept, on `next`'s I/O thread; may throw std::bad_alloc.
  void accept_one(io_loop& next);
  void on_session_end(session* s) {
    const std::lock_guard lock{mutex};
    sessions.erase(s);
    drained.notify_all();
  }
};

// One connection: read a request, hand it to the handler, write the reply, read the next. A
// pipelined request waits in `buffer_` until the reply before it is written, so replies go out
// in order.
class session : public std::enable_shared_from_this<session> {
 public:
  session(socket_type socket, detail::server_state* server)
      : registration_{server, this},
        socket_{std::move(socket)},
        deadline_timer_{socket_.get_executor()},
        probe_{socket_.get_executor()},
        server_{server},
        buffer_{server->options.max_header_bytes + read_ahead_bytes} {}

  void start() {
    net::post(socket_.get_executor(), [self = shared_from_this()] { self->read_header(); });
  }

  // A connection over `max_connections`: a 503 that says so, written at once (the socket's send
  // buffer, empty on a new connection, takes it without waiting), then the connection closes. It
  // is not in the server's set, so it reads nothing and waits for nothing.
  void refuse_over_limit() {
    const std::string body =
        status{errc::unavailable, fmt::format("the server is at its limit of {} open connections",
                                              options().max_connections)}
            .to_json();
    const std::string reply = fmt::format(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
        "Content-Length: {}\r\nConnection: close\r\n\r\n{}",
        body.size(), body);
    beast::error_code ignored;
    socket_.non_blocking(true, ignored);
    socket_.write_some(net::buffer(reply), ignored);
    close();
  }

  // Called on stop: an idle connection closes now, a busy one after its reply.
  void close_if_idle() {
    net::post(socket_.get_executor(), [self = shared_from_this()] {
      if (!self->busy_) self->close();
    });
  }

  // Called when stop's grace period is over: the running request is cancelled and the connection
  // closed; the session ends once the model returns.
  void abort() {
    net::post(socket_.get_executor(), [self = shared_from_this()] {
      self->current_.cancel();
      self->close();
    });
  }

 private:
  const server_options& options() const noexcept { return server_->options; }
  std::size_t body_limit() const noexcept {
    return server_->handler.options().bounds.max_body_bytes;
  }

  // The connection's time limit (the headers', the body's, the reply's, the idle time's). One
  // timer wait per connection follows it lazily: moving the deadline later touches no timer, and
  // the wait, when it fires early, waits again for what is left. A deadline for every read and
  // write would cost a timer wait and its cancellation per operation.
  void expires_after(std::chrono::steady_clock::duration limit) {
    expires_at(std::chrono::steady_clock::now() + limit);
  }
  void expires_at(std::chrono::steady_clock::time_point at) {
    paused_ = false;
    deadline_ = at;
    if (deadline_ < armed_) arm(deadline_);
  }

  // While the model has the request: no time limit (a stop's grace period bounds it).
  void expires_never() { paused_ = true; }

  // A body's read or a reply's write: `body_timeout` from its start, and a second more for each
  // `body_min_bytes_per_second` moved since (`moved_bytes`). A large tensor over a slow link has
  // the time its size needs; a client that trickles its bytes below the rate is cut off.
  // `already`: bytes of the body that came before (with the headers), which count as moved.
  void begin_transfer(std::size_t already = 0) {
    transfer_began_ = std::chrono::steady_clock::now();
    moved_before_ = already;
    expires_at(transfer_began_ + options().body_timeout);
    if (already != 0) moved_bytes(0);
  }
  void moved_bytes(std::size_t moved_now) {
    const std::size_t moved = moved_before_ + moved_now;
    const std::size_t rate = options().body_min_bytes_per_second;
    if (rate == 0) return;
    // In microseconds: a body of up to 2^64 / 10^6 bytes cannot overflow it.
    const std::uint64_t earned = static_cast<std::uint64_t>(moved) / rate * 1'000'000 +
                                 static_cast<std::uint64_t>(moved) % rate * 1'000'000 / rate;
    const auto until = transfer_began_ + options().body_timeout +
                       std::chrono::microseconds{static_cast<std::int64_t>(
                           std::min<std::uint64_t>(earned, std::uint64_t{1} << 52U))};
    if (until > deadline_) deadline_ = until;  // later only: the lazy timer follows it
  }
  // Asio's completion condition for a body's or reply's transfer: each step moves its deadline.
  // The steps are Asio's own (64 KiB at most each, as its transfer_all). The operation's handler
  // holds the session, so the condition need not.
  auto moving_deadline() {
    return [this](const beast::error_code& ec, std::size_t moved) -> std::size_t {
      if (ec) return 0;
      moved_bytes(moved);
      return transfer_step_bytes;
    };
  }

  void arm(std::chrono::steady_clock::time_point at) {
    armed_ = at;
    deadline_timer_.expires_at(at);
    deadline_timer_.async_wait([weak = weak_from_this()](beast::error_code ec) {
      if (ec) return;  // replaced by a nearer deadline, or the connection ended
      if (auto self = weak.lock()) self->on_deadline_timer();
    });
  }

  void on_deadline_timer() {
    if (closed_) return;
    const auto now = std::chrono::steady_clock::now();
    if (now < armed_) return;  // a wait that a nearer deadline replaced after it had fired
    if (paused_) return arm(now + longest_timeout());
    // A chunked body's bytes are counted by its parser: the time they earned is looked at only
    // when the deadline comes, not at each of its reads.
    if (reading_chunked_ && parser_) moved_bytes(parser_->chunked_body_bytes());
    if (now < deadline_) return arm(deadline_);
    close();  // the operation waiting completes with an error and ends the session
  }

  std::chrono::steady_clock::duration longest_timeout() const noexcept {
    return std::max({options().header_timeout, options().body_timeout, options().idle_timeout});
  }

  void read_header() {
    if (server_->stopping.load()) return close();
    parser_.emplace(static_cast<std::uint32_t>(options().max_header_bytes), body_limit(), held_);
    body_ = {};
    expires_after(requests_ == 0 ? options().header_timeout : options().idle_timeout);
    bhttp::async_read_header(
        socket_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_header(ec); });
  }

  void on_header(beast::error_code ec) {
    if (ec) return on_read_error(ec);
    header_read_ = tracer::clock::now();
    busy_ = true;
    ++requests_;
    const std::size_t fields = parser_->field_count();
    if (fields > options().max_header_count) {
      return fail(status{errc::header_fields_too_large,
                         fmt::format("the request has {} header fields, above the limit of {}",
                                     fields, options().max_header_count)});
    }
    if (status host = check_host(*parser_); !host.ok()) return fail(host);
    if (status framing = check_transfer_encoding(*parser_); !framing.ok()) return fail(framing);
    if (const auto length = parser_->content_length(); length && *length > body_limit()) {
      return fail(status{errc::payload_too_large,
                         fmt::format("the request body is {} bytes, above the limit of {}", *length,
                                     body_limit())});
    }
    // The body's bytes are the server's before they are read: one that does not fit in the
    // memory budget is refused now, without reading it.
    memory_budget& budget = server_->handler.service().memory();
    if (const auto length = parser_->content_length();
        length && *length > budget.capacity() - std::min(budget.capacity(), body_padding)) {
      // Not even alone would it fit: a 413, where a 503 would invite retries that cannot pass.
      return fail(status{errc::payload_too_large,
                         fmt::format("the request body is {} bytes, above the {} bytes that the "
                                     "server holds in flight at most",
                                     *length, budget.capacity())});
    }
    held_ = budget.open();
    if (const auto length = parser_->content_length()) {
      if (status room = held_.grow(static_cast<std::size_t>(*length) + body_padding); !room.ok()) {
        return fail(room);
      }
    }
    // RFC 9110, 10.1.1: an HTTP/1.0 request's expectation is ignored.
    if (parser_->expects_continue() && parser_->version() >= 11) {
      static constexpr std::string_view go_on = "HTTP/1.1 100 Continue\r\n\r\n";
      expires_after(options().body_timeout);
      net::async_write(socket_, net::buffer(go_on.data(), go_on.size()),
                       [self = shared_from_this()](beast::error_code e, std::size_t) {
                         if (e) return self->close();
                         self->read_body();
                       });
      return;
    }
    read_body();
  }

  // RFC 9112, 3.2: an HTTP/1.1 request carries exactly one Host field (HTTP/1.0 predates it), and
  // a server answers 400 to one that does not.
  static status check_host(const detail::request_parser& request) {
    const std::size_t hosts = request.host_fields();
    if (hosts == 1 || (hosts == 0 && request.version() < 11)) return {};
    return status{errc::invalid_argument,
                  hosts == 0 ? "an HTTP/1.1 request must have a Host header field"
                             : "a request must not have more than one Host header field"};
  }

  // "chunked" is the one transfer coding read here. With any other, or with chunked not last, a
  // body's end is unknown (RFC 9112, 6.3): the request is refused and the connection closed, so
  // that the body is never read as the next request.
  static status check_transfer_encoding(const detail::request_parser& request) {
    const std::size_t codings = request.transfer_codings();
    if (codings == 0) return {};
    if (codings != 1 || !request.only_chunked_coding() || !request.chunked()) {
      return status{errc::invalid_argument,
                    fmt::format("unsupported Transfer-Encoding '{}': only chunked is accepted",
                                request.first_transfer_encoding().substr(0, 64))};
    }
    if (request.has_content_length_field()) {
      return status{errc::invalid_argument,
                    "a request may not have both Transfer-Encoding and Content-Length"};
    }
    return {};
  }

  void read_body() {
    if (parser_->is_done()) return dispatch();
    if (const auto length = parser_->content_length()) {
      return read_sized_body(static_cast<std::size_t>(*length));
    }
    // Beast reads as much as the buffer has room for, and no less than 512 bytes: a buffer still
    // at its first size read a 4 MiB body 512 bytes a call (25 ms on loopback).
    if (buffer_.capacity() < body_read_bytes) buffer_.reserve(body_read_bytes);
    begin_transfer();
    reading_chunked_ = true;  // its parser counts its bytes (`on_deadline_timer`)
    bhttp::async_read(
        socket_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_body(ec); });
  }

  // A body of announced length: one allocation, padded for the JSON parser. The bytes that came
  // with the headers are copied from the read buffer; the rest goes from the socket straight into
  // the body, past Beast's read buffer and parser, so that a big tensor is not copied on its way
  // to the model.
  void read_sized_body(std::size_t length) {
    result<mutable_buffer> storage = mutable_buffer::allocate_for_overwrite(length, body_padding);
    if (!storage) return fail(storage.error());
    body_ = std::move(*storage);
    const std::size_t have = std::min(buffer_.size(), length);
    net::buffer_copy(net::buffer(body_.data(), have), buffer_.data());
    buffer_.consume(have);  // what follows the body is the next request's
    if (have == length) return dispatch();
    begin_transfer(have);
    net::async_read(socket_, net::buffer(body_.data() + have, length - have), moving_deadline(),
                    [self = shared_from_this()](beast::error_code ec, std::size_t) {
                      if (ec) return self->close();  // the client went away, or stalled
                      self->dispatch();
                    });
  }

  void on_body(beast::error_code ec) {
    reading_chunked_ = false;
    if (ec) return on_read_error(ec);
    dispatch();
  }

  void dispatch() {
    http_request request;
    request.method = parser_->take_method();
    request.target = parser_->take_target();
    request.headers = parser_->take_fields();
    if (parser_->content_length()) {
      request.body = buffer{std::move(body_)};
    } else if (parser_->chunked()) {
      request.body = buffer::from_string(parser_->take_body());
    }
    keep_alive_ = parser_->keeps_alive() && !server_->closing_connections();
    http_1_0_ = parser_->version() == 10;
    head_only_ = parser_->method() == bhttp::verb::head;

    // Triton's HTTP_RECV_START is the request's first byte; Beast tells when its header is in.
    trace_.read = {trace_stamp{"HTTP_RECV_START", header_read_},
                   trace_stamp{"HTTP_RECV_END", tracer::clock::now()}};
    request.trace = &trace_;

    cancellation cancel;
    current_ = cancel;
    expires_never();
    in_handler_ = true;
    try {
      server_->handler.handle(
          std::move(request),
          [self = shared_from_this()](http_response reply) {
            // A reply made on this connection's thread while the handler is still called (a
            // quick model, or an error) is written once the handler returns: no post, no
            // watch for a disconnect.
            if (self->socket_.get_executor().running_in_this_thread() && self->in_handler_) {
              self->ready_.emplace(std::move(reply));
              return;
            }
            net::post(self->socket_.get_executor(), [self, reply = std::move(reply)]() mutable {
              self->write(std::move(reply));
            });
          },
          cancel);
    } catch (const std::exception&) {
      // The handler answers out of memory itself; this is passing its reply here failing, and
      // whether a reply was posted is unknown: the connection ends, the server goes on.
      in_handler_ = false;
      ready_.reset();
      return close();
    }
    in_handler_ = false;
    if (ready_) {
      http_response reply = std::move(*ready_);
      ready_.reset();
      return write(std::move(reply));
    }
    watch_for_disconnect(cancel, requests_);
  }

  // A client that goes away while its model runs cancels the request. The socket turning
  // readable is only a hint (Asio may complete the wait early; perf_analyzer found that): a peek
  // tells a close or reset (cancel), a pipelined request (data: the client is there), or nothing
  // yet, in which case the watch resumes after a short pause.
  // `watched_` names the request watched, so that a streamed reply starts no second watch.
  void watch_for_disconnect(cancellation cancel, std::size_t request) {
    watched_ = request;
    socket_.async_wait(tcp::socket::wait_read, [self = shared_from_this(), cancel,
                                                request](beast::error_code ec) mutable {
      if (self->watched_ == request) self->watched_ = 0;
      if (ec || !self->busy_ || self->requests_ != request) return;
      char byte = 0;
      const ssize_t peeked =
          ::recv(self->socket_.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
      if (peeked > 0) return;  // more requests: the client is there
      if (peeked < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        self->watched_ = request;
        self->probe_.expires_after(std::chrono::milliseconds{20});
        self->probe_.async_wait([self, cancel, request](beast::error_code e) mutable {
          if (self->watched_ == request) self->watched_ = 0;
          if (!e && self->busy_ && self->requests_ == request) {
            self->watch_for_disconnect(cancel, request);
          }
        });
        return;
      }
      cancel.cancel();  // closed or reset
    });
  }

  // Out of memory while the reply's header is made: the connection ends (its client sees it
  // close, not a reply that never comes), and the server goes on.
  void write(http_response reply) {
    try {
      write_reply(std::move(reply));
    } catch (const std::exception&) {
      close();
    }
  }

  void write_reply(http_response reply) {
    // A streamed reply starts before its request ends, and its trace is handed over (`sampled`
    // set, on the model's thread) only at that end: its sending's start is kept until then.
    if (reply.stream) {
      stream_sent_from_ = tracer::clock::now();
    } else if (trace_.sampled) {
      trace_.sampled->stamp("HTTP_SEND_START");
    }
    reply_ = std::move(reply);
    if (server_->closing_connections()) keep_alive_ = false;  // the last reply on this connection
    header_.clear();  // keeps its capacity for the connection's next reply
    // Plain appends: fmt's formatting into a string cost more than the rest of the head.
    header_.append("HTTP/1.1 ");
    append_decimal(header_, static_cast<std::uint64_t>(reply_.status));
    header_.append(" ").append(reason_phrase(reply_.status)).append("\r\n");
    for (const http_header& h : reply_.headers) {
      header_.append(h.name).append(": ").append(h.value).append("\r\n");
    }
    if (reply_.stream) {
      // An HTTP/1.0 client knows no chunks: its body ends when the connection closes.
      if (http_1_0_) keep_alive_ = false;
      if (!http_1_0_) header_ += "Transfer-Encoding: chunked\r\n";
    } else {
      header_.append("Content-Length: ");
      append_decimal(header_, reply_.body_size());
      header_.append("\r\n");
      held_.add(
          reply_.body_size());  // until written: the next request is refused if it would not fit
    }
    if (!keep_alive_) {
      header_ += "Connection: close\r\n";
    } else if (http_1_0_) {
      header_ += "Connection: keep-alive\r\n";  // HTTP/1.0 closes unless told otherwise
    }
    header_ += "\r\n";
    // Scatter/gather: the status line and headers, the JSON, then each tensor's own bytes.
    buffers_.clear();
    buffers_.emplace_back(header_.data(), header_.size());
    if (!head_only_) {
      buffers_.emplace_back(reply_.head.data(), reply_.head.size());
      for (const buffer& b : reply_.tail) buffers_.emplace_back(b.data(), b.size());
    }
    begin_transfer();
    if (reply_.stream) {
      if (head_only_) reply_.stream->abandon();
      // The header goes out with the body's first part (a write of its own would be a second
      // round through the socket before the client sees the first event).
      std::string first = std::move(reply_.head);
      reply_.head = header_;
      if (first.empty()) return next_part();
      return write_part(std::move(first));
    }
    net::async_write(
        socket_, buffers_, moving_deadline(),
        [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_write(ec); });
  }

  // A streamed body: each part written as one chunk when it comes, then the last chunk. `head`
  // holds what goes before the part (the reply's header, until it is written).
  void write_part(std::string part) {
    if (!part.empty() && !head_only_) {
      reply_.head += http_1_0_ ? part : fmt::format("{:x}\r\n{}\r\n", part.size(), part);
    }
    if (reply_.head.empty()) return next_part();
    const std::size_t request_bytes = held_.bytes();
    held_.add(reply_.head.size());
    begin_transfer();
    net::async_write(socket_, net::buffer(reply_.head), moving_deadline(),
                     [self = shared_from_this(), request_bytes](beast::error_code ec, std::size_t) {
                       self->held_.shrink_to(request_bytes);
                       if (ec) {
                         self->reply_.stream->abandon();
                         return self->on_write(ec);
                       }
                       self->reply_.head.clear();
                       self->next_part();
                     });
  }

  // While the model makes the next part the connection has no time limit, as while a model runs
  // (a stop's grace period bounds it), and a client that goes away cancels the request.
  void next_part() {
    expires_never();
    if (watched_ != requests_) watch_for_disconnect(current_, requests_);
    reply_.stream->next([self = shared_from_this()](std::optional<std::string> part) {
      net::post(self->socket_.get_executor(), [self, part = std::move(part)]() mutable {
        if (part) return self->write_part(std::move(*part));
        // The last chunk (and the header, for a body of no part); the stream is done with.
        if (!self->http_1_0_ && !self->head_only_) self->reply_.head += "0\r\n\r\n";
        if (self->reply_.head.empty()) return self->on_write({});
        self->begin_transfer();
        net::async_write(self->socket_, net::buffer(self->reply_.head), self->moving_deadline(),
                         [self](beast::error_code ec, std::size_t) { self->on_write(ec); });
      });
    });
  }

  void on_write(beast::error_code ec) {
    // A streamed reply's trace comes with its body's end (none when it was abandoned); the
    // session's own is not touched then, since the model's thread sets it when the request ends.
    if (std::shared_ptr<open_trace> sampled =
            reply_.stream ? reply_.stream->take_trace() : std::move(trace_.sampled)) {
      if (reply_.stream) sampled->stamp("HTTP_SEND_START", stream_sent_from_);
      sampled->stamp("HTTP_SEND_END");
    }  // the last holder lets go: the trace is written
    busy_ = false;
    reply_ = {};
    held_.release();
    if (ec) return close();
    if (!keep_alive_) return linger();
    read_header();
  }

  // Ends a connection after its last reply (RFC 9112, 9.6): stops sending, then reads and drops
  // what the client still sends until it closes, for `linger_time` at most. Closed with the
  // client's bytes unread, the socket would reset the connection, and a client still sending a
  // body (Python's requests sends it whole before it reads) would get the reset, not the reply.
  void linger() {
    // What the request held goes now, not when lingering ends seconds later.
    parser_.reset();
    body_ = {};
    beast::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_send, ignored);
    drain(std::chrono::steady_clock::now() + linger_time);
  }

  void drain(std::chrono::steady_clock::time_point until) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= until || server_->stopping.load()) return close();
    expires_after(std::min<std::chrono::steady_clock::duration>(until - now, linger_pause));
    buffer_.clear();
    socket_.async_read_some(buffer_.prepare(buffer_.max_size()),
                            [self = shared_from_this(), until](beast::error_code ec, std::size_t) {
                              if (ec) return self->close();  // the client closed, or went quiet
                              self->drain(until);
                            });
  }

  void on_read_error(beast::error_code ec) {
    if (ec == boost::system::errc::not_enough_memory && parser_) {
      if (status refused = parser_->refusal(); !refused.ok()) return fail(refused);
    }
    if (ec == bhttp::error::header_limit) {
      return fail(status{errc::header_fields_too_large,
                         fmt::format("the request's headers are above the limit of {} bytes",
                                     options().max_header_bytes)});
    }
    if (ec == bhttp::error::buffer_overflow) {
      // Chunk extensions or trailers that do not fit the connection's read buffer.
      return fail(status{errc::header_fields_too_large,
                         fmt::format("the request's chunk framing or trailers are above the limit "
                                     "of {} bytes",
                                     buffer_.max_size())});
    }
    if (ec == bhttp::error::body_limit) {
      return fail(
          status{errc::payload_too_large,
                 fmt::format("the request body is above the limit of {} bytes", body_limit())});
    }
    if (&ec.category() == &bhttp::make_error_code(bhttp::error::bad_target).category() &&
        ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message) {
      // A malformed request line or header: say so, then close (the stream is out of step).
      return fail(
          status{errc::invalid_argument, fmt::format("malformed HTTP request: {}", ec.message())});
    }
    close();  // end of stream, timeout, reset: nobody to answer
  }

  // Replies with an error and closes the connection: what follows on it cannot be trusted.
  void fail(const status& error) {
    busy_ = true;
    keep_alive_ = false;
    // A reply to HEAD carries no body, an error's neither (RFC 9110, 9.3.2).
    head_only_ = parser_ && parser_->method() == bhttp::verb::head;
    // The handler words it for the request's target, once the request line has been read (the
    // parser keeps the target it read even when a later field or the body's length failed).
    std::string_view target;
    if (parser_) target = parser_->target();
    write(server_->handler.error_reply_for(target, error));
  }

  void close() {
    closed_ = true;
    deadline_timer_.cancel();
    beast::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_send, ignored);
    socket_.close(ignored);
  }

  // Tells the server that the session has ended once every other member is gone (members go in
  // reverse order): the socket and the timers belong to an io_context, which the server destroys
  // once no session is left. (Told from the destructor's body, a stop could destroy the
  // io_context while a worker thread, dropping the last reference, was still destroying the
  // socket.)
  struct registration {
    registration(detail::server_state* to, session* of) : server{to}, ended{of} {}
    registration(const registration&) = delete;
    registration& operator=(const registration&) = delete;
    ~registration() { server->on_session_end(ended); }
    detail::server_state* server;
    session* ended;
  };
  registration registration_;
  socket_type socket_;
  timer_type deadline_timer_;
  timer_type probe_;
  cancellation current_;     // the request in flight, for abort() and a streamed reply's watch
  std::size_t watched_ = 0;  // the request whose client's disconnect is watched for, if any
  detail::server_state* server_;
  beast::flat_buffer buffer_;
  std::optional<detail::request_parser> parser_;
  mutable_buffer body_;        // a body of announced length
  memory_budget::lease held_;  // the request's bytes and its reply's, until the reply is written
  http_response reply_;
  std::string header_;
  tracer::clock::time_point header_read_;
  tracer::clock::time_point stream_sent_from_;  // a streamed reply's first write
  transport_trace trace_;                       // the request in flight's part in its trace
  std::chrono::steady_clock::time_point deadline_ = std::chrono::steady_clock::time_point::max();
  std::chrono::steady_clock::time_point armed_ = std::chrono::steady_clock::time_point::max();
  std::chrono::steady_clock::time_point transfer_began_;
  std::size_t moved_before_ = 0;        // of the transfer in progress, before its reads or writes
  std::optional<http_response> ready_;  // a reply that came while the handler was still called
  std::vector<net::const_buffer> buffers_;
  std::size_t requests_ = 0;
  bool paused_ = false;
  bool reading_chunked_ = false;
  bool closed_ = false;
  bool in_handler_ = false;
  bool busy_ = false;
  bool keep_alive_ = true;
  bool head_only_ = false;
  bool http_1_0_ = false;
};

void detail::server_state::accept() {
  io_loop& next = *loops[next_loop];
  next_loop = (next_loop + 1) % loops.size();
  try {
    accept_one(next);
  } catch (const std::bad_alloc&) {
    accept_after_pause();  // no memory to wait for a connection: tried again after a pause
  }
}

void detail::server_state::accept_one(io_loop& next) {
  acceptor.async_accept(next.io, [self = this](beast::error_code ec, socket_type socket) {
    if (ec == net::error::operation_aborted || self->stopping.load()) return;
    if (ec && !out_of_resources(ec)) return self->accept();  // this connection's trouble only
    if (ec) return self->accept_after_pause();
    // Replies leave in one go: with Nagle's algorithm the last segment
    // of a large reply waited for the client's delayed ACK (40 ms).
    beast::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    try {
      // Made outside the lock: a session that ends, even in its
      // constructor, takes the lock to leave the set.
      auto s = std::make_shared<session>(std::move(socket), self);
      bool admitted = false;
      {
        const std::lock_guard lock{self->mutex};
        if (self->sessions.size() < self->options.max_connections) {
          self->sessions.emplace(s.get(), s);
          admitted = true;
        }
      }
      if (admitted) {
        s->start();
      } else {
        s->refuse_over_limit();
      }
    } catch (const std::bad_alloc&) {
      // No memory for this connection, which closes: the next is accepted after a pause, as
      // when descriptors run out. Without this, no accept would wait any more.
      return self->accept_after_pause();
    }
    self->accept();
  });
}

void detail::server_state::accept_after_pause() {
  accept_pause.expires_after(accept_retry_pause);
  accept_pause.async_wait([self = this](beast::error_code waited) {
    if (!waited && !self->stopping.load()) self->accept();
  });
}

server::server(http_handler& handler, server_options options)
    : impl_{std::make_shared<detail::server_state>(handler, std::move(options))} {}

server::~server() {
  try {
    stop();
  } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor must not throw; stop() logs nothing
  }
}

result<std::uint16_t> server::start() {
  beast::error_code ec;
  const net::ip::address address = net::ip::make_address(impl_->options.address, ec);
  if (ec) {
    return status{errc::invalid_argument,
                  fmt::format("invalid address '{}': {}", impl_->options.address, ec.message())};
  }
  const tcp::endpoint endpoint{address, impl_->options.port};
  impl_->acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl_->acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) impl_->acceptor.bind(endpoint, ec);
  if (!ec) impl_->acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    return status{errc::unavailable,
                  fmt::format("cannot listen on {}:{}: {}", impl_->options.address,
                              impl_->options.port, ec.message())};
  }
  impl_->port = impl_->acceptor.local_endpoint().port();
  for (const auto& loop : impl_->loops) loop->work.emplace(loop->io.get_executor());
  impl_->accept();
  for (const auto& loop : impl_->loops) {
    impl_->threads.emplace_back([io = &loop->io] {
      // A handler that throws (out of memory where nothing caught it) ends its own connection at
      // worst; the I/O thread, and the server, go on.
      for (;;) {
        try {
          io->run();
          return;
        } catch (const std::exception&) {  // NOLINT(bugprone-empty-catch): run resumes
        }
      }
    });
  }
  return impl_->port;
}

void server::stop(std::chrono::milliseconds grace) {
  if (impl_->threads.empty()) return;
  impl_->stopping.store(true);
  net::post(impl_->acceptor.get_executor(), [self = impl_.get()] {
    beast::error_code ignored;
    self->acceptor.close(ignored);
    self->accept_pause.cancel();
  });
  std::vector<std::shared_ptr<session>> open;
  {
    std::unique_lock lock{impl_->mutex};
    for (const auto& [raw, weak] : impl_->sessions) {
      if (auto s = weak.lock()) open.push_back(std::move(s));
    }
  }
  for (const auto& s : open) s->close_if_idle();
  open.clear();
  std::unique_lock lock{impl_->mutex};
  if (!impl_->drained.wait_for(lock, grace, [&] { return impl_->sessions.empty(); })) {
    // Past the grace period: cancel what still runs. The I/O threads keep going until every
    // session has ended, so that no reply is ever posted to a stopped io_context.
    for (const auto& [raw, weak] : impl_->sessions) {
      if (auto s = weak.lock()) open.push_back(std::move(s));
    }
    lock.unlock();
    for (const auto& s : open) s->abort();
    open.clear();
    lock.lock();
    impl_->drained.wait(lock, [&] { return impl_->sessions.empty(); });
  }
  lock.unlock();
  for (const auto& loop : impl_->loops) {
    loop->work.reset();
    loop->io.stop();
  }
  for (std::thread& t : impl_->threads) t.join();
  impl_->threads.clear();
}

std::uint16_t server::port() const noexcept { return impl_->port; }

std::size_t server::connections() const noexcept {
  const std::lock_guard lock{impl_->mutex};
  return impl_->sessions.size();
}

}  // namespace oip::http
