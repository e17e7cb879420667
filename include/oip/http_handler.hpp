#pragma once
/// \file
/// The transport-agnostic endpoint handler: every REST route of the protocol (and the Triton
/// extensions that its clients call) over a request given as method, target, headers and body.
/// A host's HTTP stack, or oip's own Beast adapter, feeds it and writes back what it returns.

#include <oip/buffer.hpp>
#include <oip/executor.hpp>
#include <oip/export.hpp>
#include <oip/inference_service.hpp>
#include <oip/limits.hpp>
#include <oip/memory_budget.hpp>
#include <oip/metrics.hpp>
#include <oip/model.hpp>
#include <oip/openai.hpp>
#include <oip/reply_sink.hpp>
#include <oip/repository.hpp>
#include <oip/trace.hpp>

#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace oip {

struct http_header {
  std::string name;
  std::string value;
  friend bool operator==(const http_header&, const http_header&) = default;
};

/// The value of header `name` (case-insensitive), if present.
[[nodiscard]] OIP_EXPORT std::optional<std::string_view> find_header(
    const std::vector<http_header>& headers, std::string_view name) noexcept;

struct http_request {
  std::string method;  ///< "GET", "POST", ...
  std::string target;  ///< path and optional query ("/v2/models/m/infer?x=1"); the query is ignored
  std::vector<http_header> headers;
  buffer body;
  /// Optional: how the transport takes part in the request's trace (`HTTP_RECV_START`/`_END` in
  /// `read`); it must stay valid until the completion has been called. See `transport_trace`.
  transport_trace* trace = nullptr;

  [[nodiscard]] std::optional<std::string_view> header(std::string_view name) const noexcept {
    return find_header(headers, name);
  }
};

/// The rest of a reply's body, made while the reply is written: `generate_stream`'s server-sent
/// events, one part per response of the model. The handler adds parts as they are made and ends
/// the body; the transport takes one part at a time and writes it at once (HTTP/1.1's chunked
/// coding), so a client sees each event as the model sends it. Thread-safe.
class OIP_EXPORT http_body_stream {
 public:
  using part_ready = std::function<void(std::optional<std::string>)>;

  /// The transport's side: asks for the next part, which also says that the one before is
  /// written. `ready` is called once, from any thread (on this one, before `next` returns, when a
  /// part is waiting), with the part, or with none at the body's end.
  void next(part_ready ready);
  /// The transport's side: its client went away, and no part is wanted any more; the model's
  /// sends stop waiting for room and fail.
  void abandon() noexcept;

  /// The handler's side: one more part, counted in the backlog until it is written.
  void push(std::string part);
  /// The handler's side: the parts waiting for the transport count against `waiting`'s budget
  /// until the transport takes them (it counts the part it writes itself).
  void count_against(memory_budget::lease waiting);
  /// The handler's side: the body is complete once the parts pushed are written. `sampled`: the
  /// request's trace, if it was sampled, for the transport to stamp its sending on: a streamed
  /// reply starts before its request ends, and the trace is handed over only at that end.
  void end(std::shared_ptr<open_trace> sampled = nullptr);
  /// The transport's side, once the body has ended: the trace that `end` handed over, if any.
  [[nodiscard]] std::shared_ptr<open_trace> take_trace();
  /// The parts pushed and not yet written.
  [[nodiscard]] response_backlog& backlog() noexcept { return backlog_; }

  /// The parts to the end, concatenated (for a host that waits for the whole reply): call once,
  /// from a thread that may wait.
  [[nodiscard]] std::string read_all();

 private:
  std::mutex mutex_;
  std::deque<std::string> parts_;
  part_ready waiting_;
  bool ended_ = false;
  bool abandoned_ = false;
  bool part_out_ = false;  // a part is with the transport, not yet written
  std::shared_ptr<open_trace> sampled_;
  response_backlog backlog_;
  memory_budget::lease waiting_bytes_;  // the parts in `parts_`
};

/// A reply: `head` (the JSON, or a whole compressed body) followed by `tail`, tensor buffers
/// shared with the model's outputs, so that a transport can write them without a copy; or, for a
/// streamed reply, `head` followed by the parts of `stream`.
struct http_response {
  int status = 200;
  std::vector<http_header> headers;
  std::string head;
  std::vector<buffer> tail;
  /// Set for a reply whose body is written as it is made (no `tail` then, and no length known).
  std::shared_ptr<http_body_stream> stream;

  [[nodiscard]] std::optional<std::string_view> header(std::string_view name) const noexcept {
    return find_header(headers, name);
  }
  [[nodiscard]] std::size_t body_size() const noexcept {
    std::size_t total = head.size();
    for (const buffer& b : tail) total += b.size();
    return total;
  }
  /// The body in one string (tests and simple transports); a streamed body's parts are not in it
  /// (`http_handler::handle` without a completion reads them into `head`).
  [[nodiscard]] std::string body() const {
    std::string out;
    out.reserve(body_size());
    out += head;
    for (const buffer& b : tail) out += b.as_string_view();
    return out;
  }
};

/// Which routes a handler answers: the protocol's (`/v2/...`), `GET /metrics` (Prometheus), or
/// both. A server usually puts metrics on a port of their own (Triton: 8002).
struct http_routes {
  bool protocol = true;
  bool metrics = false;
  /// Gauges added to the metrics (pool memory in use, for example).
  std::vector<metric_gauge> gauges;
  /// The OpenAI-compatible front end under `/v1` (`oip/openai.hpp`): off when absent.
  std::optional<openai_options> openai{};
};

/// Serves the protocol's REST routes from a model repository, running models on an executor.
/// Thread-safe: call `handle` from any number of transport threads.
///
/// Example:
/// \code
///   oip::model_repository models;
///   oip::executor workers;
///   oip::http_handler handler{models, workers};
///   handler.handle(std::move(request), [&](oip::http_response r) { write(connection, r); });
/// \endcode
class OIP_EXPORT http_handler {
 public:
  using completion = std::function<void(http_response)>;

  /// A handler with a service of its own.
  http_handler(model_repository& repository, executor& workers, server_options options = {});
  /// A handler over a service that other transports share (oip::grpc, for instance), so that
  /// every transport sees the same sequences.
  explicit http_handler(inference_service& service, http_routes routes = {});
  http_handler(const http_handler&) = delete;
  http_handler& operator=(const http_handler&) = delete;
  ~http_handler();

  /// Handles one request. `done` is called exactly once: at once for most routes, from an
  /// executor thread for inference (at once, on this thread, for a model with
  /// `inline_execution` that finishes its call there). `cancel` lets the transport tell a
  /// running model that the client went away.
  void handle(http_request request, completion done, cancellation cancel = {});

  /// Handles one request and waits for the reply (tests, and hosts that block anyway).
  [[nodiscard]] http_response handle(http_request request);

  /// The reply to an error that a transport finds before it hands a request over (a body over
  /// the limit, headers too large, malformed HTTP), for the request's target where it is known:
  /// OpenAI's error object under `/v1` when the front end is on, the protocol's otherwise.
  [[nodiscard]] http_response error_reply_for(std::string_view target, const status& error) const;

  [[nodiscard]] const server_options& options() const noexcept;
  /// The service it serves (its own, or the one it was given).
  [[nodiscard]] inference_service& service() const noexcept;

 private:
  struct state;
  std::shared_ptr<state> state_;
};

}  // namespace oip
