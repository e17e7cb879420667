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
#include <oip/metrics.hpp>
#include <oip/model.hpp>
#include <oip/repository.hpp>
#include <oip/trace.hpp>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
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

/// A reply: `head` (the JSON, or a whole compressed body) followed by `tail`, tensor buffers
/// shared with the model's outputs, so that a transport can write them without a copy.
struct http_response {
  int status = 200;
  std::vector<http_header> headers;
  std::string head;
  std::vector<buffer> tail;

  [[nodiscard]] std::optional<std::string_view> header(std::string_view name) const noexcept {
    return find_header(headers, name);
  }
  [[nodiscard]] std::size_t body_size() const noexcept {
    std::size_t total = head.size();
    for (const buffer& b : tail) total += b.size();
    return total;
  }
  /// The body in one string (tests and simple transports).
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

  [[nodiscard]] const server_options& options() const noexcept;

 private:
  struct state;
  std::shared_ptr<state> state_;
};

}  // namespace oip
