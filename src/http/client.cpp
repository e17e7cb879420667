// The HTTP client's transport: one I/O thread, a pool of kept-alive connections, and one exchange
// object per call (acquire a connection, write, read, release), all on that thread.

#include <oip/http/client.hpp>
#include <oip/shared_memory.hpp>

#include <atomic>
#include <chrono>
#include <deque>
#include <mutex>
#include <set>
#include <thread>
#include <utility>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>

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

  ~client_state() { stop(); }

  void stop() {
    if (stopped_.exchange(true)) return;
    asio::post(io_, [this] { close_all(); });
    work_.reset();
    if (thread_.joinable()) thread_.join();
  }

  void start(http_call call, client::reply_callback done);

  [[nodiscard]] const client_options& options() const noexcept { return options_; }
  [[nodiscard]] const http_client_protocol& protocol() const noexcept { return protocol_; }
  [[nodiscard]] shared_memory_registry& regions() noexcept { return regions_; }
  // Whether a region was ever registered through this client: until then no request's outputs
  // are looked up among them.
  [[nodiscard]] bool has_regions() const noexcept { return any_region_.load(); }
  void note_region() noexcept { any_region_.store(true); }

  // The pool, on the I/O thread only.
  void acquire(const std::shared_ptr<exchange>& waiter);
  void release(std::unique_ptr<connection> conn, bool reusable);
  void forget(exchange* done) { active_.erase(done); }

  [[nodiscard]] asio::io_context& io() noexcept { return io_; }
  [[nodiscard]] const host_and_port& address() const noexcept { return address_; }
  [[nodiscard]] const std::string& host_port() const noexcept { return host_port_; }
  [[nodiscard]] bool closing() const noexcept { return closing_; }
  [[nodiscard]] std::optional<tcp::resolver::results_type>& endpoints() noexcept {
    return endpoints_;
  }

 private:
  void close_all();

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

  // I/O thread only.
  bool closing_ = false;
  std::optional<tcp::resolver::results_type> endpoints_;
  std::vector<std::unique_ptr<connection>> idle_;
  std::size_t open_ = 0;
  std::deque<std::shared_ptr<exchange>> waiting_;
  std::set<exchange*> active_;

  friend class exchange;
};

// One call: a connection from the pool (or a new one), the request written, the reply read, the
// connection given back. Its deadline covers all of it.
class exchange : public std::enable_shared_from_this<exchange> {
 public:
  exchange(client_state& state, http_call call, client::reply_callback done)
      : state_{state}, call_{std::move(call)}, done_{std::move(done)}, timer_{state.io()} {}

  void begin() {
    state_.active_.insert(this);
    if (state_.closing()) return finish(unavailable("the client is closing"));
    if (state_.options().timeout.count() > 0) {
      timer_.expires_after(state_.options().timeout);
      timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
        if (!ec) self->on_deadline();
      });
    }
    state_.acquire(shared_from_this());
  }

  // From the pool: a kept-alive connection (`fresh` false) or a new one to connect.
  void assign(std::unique_ptr<connection> conn, bool fresh) {
    if (finished_) {
      state_.release(std::move(conn), !fresh);
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
    if (state_.endpoints()) return connect_to(*state_.endpoints());
    auto resolver = std::make_shared<tcp::resolver>(state_.io());
    resolver->async_resolve(
        state_.address().host, state_.address().port,
        [self = shared_from_this(), resolver](beast::error_code ec,
                                              const tcp::resolver::results_type& found) {
          if (ec) {
            return self->fail_connect(
                fmt::format("cannot resolve '{}': {}", self->state_.host_port(), ec.message()));
          }
          self->state_.endpoints() = found;
          self->connect_to(found);
        });
  }

  void connect_to(const tcp::resolver::results_type& endpoints) {
    auto connect_timer = std::make_shared<timer_type>(state_.io());
    connect_timer->expires_after(state_.options().connect_timeout);
    connect_timer->async_wait([self = shared_from_this()](beast::error_code ec) {
      if (ec) return;
      self->connect_timed_out_ = true;
      beast::error_code ignored;
      if (self->conn_) self->conn_->socket.close(ignored);
    });
    asio::async_connect(
        conn_->socket, endpoints,
        [self = shared_from_this(), connect_timer](beast::error_code ec, const tcp::endpoint&) {
          connect_timer->cancel();
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
    if (conn_) {
      state_.release(std::move(conn_), false);
    }
    finish(unavailable(std::move(message)));
  }

  void write() {
    if (finished_) return state_.release(std::move(conn_), false);
    head_.clear();
    fmt::format_to(std::back_inserter(head_), "{} {} HTTP/1.1\r\nHost: {}\r\n", call_.method,
                   call_.target, state_.host_port());
    for (const http_header& h : call_.headers) {
      fmt::format_to(std::back_inserter(head_), "{}: {}\r\n", h.name, h.value);
    }
    if (call_.method != "GET" || call_.body_size() != 0) {
      fmt::format_to(std::back_inserter(head_), "Content-Length: {}\r\n", call_.body_size());
    }
    head_ += "\r\n";
    buffers_.clear();
    buffers_.emplace_back(head_.data(), head_.size());
    if (!call_.head.empty()) buffers_.emplace_back(call_.head.data(), call_.head.size());
    for (const buffer& b : call_.tail) {
      if (!b.empty()) buffers_.emplace_back(b.data(), b.size());
    }
    asio::async_write(conn_->socket, buffers_,
                      [self = shared_from_this()](beast::error_code ec, std::size_t) {
                        if (ec) return self->fail_io("sending the request", ec);
                        self->read();
                      });
  }

  void read() {
    parser_.emplace();
    parser_->header_limit(max_reply_header_bytes);
    parser_->body_limit(state_.options().reply_bounds.max_body_bytes);
    bhttp::async_read(
        conn_->socket, conn_->buffer, *parser_,
        [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_read(ec); });
  }

  void on_read(beast::error_code ec) {
    if (ec) return fail_io("reading the reply", ec);
    bhttp::response<bhttp::string_body>& got = parser_->get();
    http_reply reply;
    reply.status = static_cast<int>(got.result_int());
    for (const auto& field : got) {
      reply.headers.push_back({std::string{field.name_string()}, std::string{field.value()}});
    }
    const bool keep = got.keep_alive();
    reply.body = buffer::from_string(std::move(got.body()));
    parser_.reset();
    state_.release(std::move(conn_), keep);
    finish(std::move(reply));
  }

  void fail_io(std::string_view doing, beast::error_code ec) {
    const bool nothing_read = !parser_ || !parser_->got_some();
    if (conn_) state_.release(std::move(conn_), false);
    if (finished_) return;
    // A kept-alive connection that the server closed while it was idle fails at once, before any
    // reply: the call goes again on a new connection, once.
    if (!fresh_ && !retried_ && nothing_read &&
        (ec == bhttp::error::end_of_stream || ec == asio::error::eof ||
         ec == asio::error::connection_reset || ec == asio::error::broken_pipe)) {
      retried_ = true;
      parser_.reset();
      return state_.acquire(shared_from_this());
    }
    if (timed_out_) {
      return finish(status{errc::deadline_exceeded,
                           fmt::format("no reply from {} within the deadline of {} ms",
                                       state_.host_port(), state_.options().timeout.count())});
    }
    if (ec == bhttp::error::body_limit) {
      return finish(
          status{errc::payload_too_large,
                 fmt::format("the reply from {} is larger than the limit of {} bytes",
                             state_.host_port(), state_.options().reply_bounds.max_body_bytes)});
    }
    if (ec == bhttp::error::header_limit) {
      return finish(status{errc::header_fields_too_large,
                           fmt::format("the reply from {} has more than {} bytes of headers",
                                       state_.host_port(), max_reply_header_bytes)});
    }
    if (ec.category() == beast::error_code{bhttp::error::end_of_stream}.category() &&
        ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message) {
      return finish(status{errc::internal, fmt::format("the reply from {} is not valid HTTP: {}",
                                                       state_.host_port(), ec.message())});
    }
    finish(unavailable(fmt::format(
        "{} {}: {} ({})",
        doing == "sending the request" ? "cannot send the request to" : "no complete reply from",
        state_.host_port(), ec.message(), doing)));
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
  std::optional<bhttp::response_parser<bhttp::string_body>> parser_;
  bool fresh_ = false;
  bool retried_ = false;
  bool timed_out_ = false;
  bool connect_timed_out_ = false;
  bool finished_ = false;
};

void client_state::start(http_call call, client::reply_callback done) {
  auto call_state = std::make_shared<exchange>(*this, std::move(call), std::move(done));
  asio::post(io_, [call_state] { call_state->begin(); });
}

void client_state::acquire(const std::shared_ptr<exchange>& waiter) {
  if (!idle_.empty()) {
    std::unique_ptr<connection> conn = std::move(idle_.back());
    idle_.pop_back();
    return waiter->assign(std::move(conn), false);
  }
  if (open_ < std::max<std::size_t>(options_.max_connections, 1)) {
    ++open_;
    return waiter->assign(std::make_unique<connection>(io_), true);
  }
  waiting_.push_back(waiter);
}

void client_state::release(std::unique_ptr<connection> conn, bool reusable) {
  if (!conn) return;
  if (!reusable || closing_) {
    beast::error_code ignored;
    conn->socket.close(ignored);
    conn.reset();
    --open_;
  } else {
    idle_.push_back(std::move(conn));
  }
  // Calls waiting for a connection take the one given back, or the room of the one closed.
  while (!waiting_.empty() && !closing_) {
    std::shared_ptr<exchange> next = std::move(waiting_.front());
    waiting_.pop_front();
    if (next->finished()) continue;
    acquire(next);
    break;
  }
}

void client_state::close_all() {
  closing_ = true;
  for (std::unique_ptr<connection>& conn : idle_) {
    beast::error_code ignored;
    conn->socket.close(ignored);
  }
  open_ -= idle_.size();
  idle_.clear();
  std::deque<std::shared_ptr<exchange>> waiting = std::move(waiting_);
  for (const std::shared_ptr<exchange>& w : waiting) w->abort();
  const std::set<exchange*> active = active_;
  for (exchange* call : active) call->abort();
}

}  // namespace detail

// --- the client's calls ------------------------------------------------------------------------

namespace {

// Waits on the caller's thread for a call made on the I/O thread.
result<http_reply> wait_for(detail::client_state& state, http_call call) {
  std::promise<result<http_reply>> promise;
  std::future<result<http_reply>> future = promise.get_future();
  state.start(std::move(call),
              [&promise](result<http_reply> reply) { promise.set_value(std::move(reply)); });
  return future.get();
}

}  // namespace

client::client(std::string host_port, client_options options)
    : state_{std::make_shared<detail::client_state>(std::move(host_port), std::move(options))} {}

client::~client() { state_->stop(); }

const http_client_protocol& client::protocol() const noexcept { return state_->protocol(); }

result<http_reply> client::send(http_call call) { return wait_for(*state_, std::move(call)); }

void client::async_send(http_call call, reply_callback done) {
  state_->start(std::move(call), std::move(done));
}

void client::async_infer(std::string_view model, const inference_request& request,
                         infer_callback done, const request_format& format,
                         std::optional<std::uint64_t> version) {
  result<http_call> call = state_->protocol().infer(model, request, format, version);
  if (!call) return done(std::move(call).error());
  std::shared_ptr<shared_memory_outputs> placed;
  if (state_->has_regions() && !request.outputs.empty()) {
    result<shared_memory_outputs> asked = shared_memory_outputs::of(request, state_->regions());
    if (!asked) return done(std::move(asked).error());
    if (!asked->outputs.empty())
      placed = std::make_shared<shared_memory_outputs>(std::move(*asked));
  }
  state_->start(std::move(*call),
                [state = state_, placed, done = std::move(done)](result<http_reply> reply) {
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
  return async_infer(model, request, format, version).get();
}

namespace {

// A call whose reply one of the protocol's readers reads.
template <class Read>
auto call_and_read(detail::client_state& state, result<http_call> call, Read&& read)
    -> decltype(read(http_reply{})) {
  if (!call) return std::move(call).error();
  result<http_reply> reply = wait_for(state, std::move(*call));
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
bool health(detail::client_state& state, http_call call) {
  result<http_reply> reply = wait_for(state, std::move(call));
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
  result<http_reply> reply = wait_for(state, std::move(*call));
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

status client::register_system_shared_memory(std::string name, std::string key,
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
