#pragma once

/// oip::grpc: the gRPC service `inference.GRPCInferenceService` (the Open Inference Protocol's RPCs
/// plus Triton's ModelStreamInfer, ModelConfig, ModelStatistics and repository RPCs), so that
/// Triton's gRPC clients and perf_analyzer work unchanged. It serves an `inference_service`,
/// which an HTTP handler may share (a sequence can then go on over either transport).

#include <oip/access.hpp>
#include <oip/inference_service.hpp>
#include <oip/status.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace grpc {
class ServerBuilder;
class ServerCredentials;
}  // namespace grpc

namespace oip::grpc {

struct server_options {
  std::string address = "0.0.0.0";
  std::uint16_t port = 8001;  ///< 0 picks a free port (see `start`)
  /// Largest message a client may send; unset, the service's `limits::max_body_bytes` (256 MiB by
  /// default, the HTTP body's bound), at most INT_MAX (grpc++'s own bound). Above it, a call fails
  /// with RESOURCE_EXHAUSTED before its message is read. Replies may be up to INT_MAX bytes.
  std::optional<int> max_message_bytes{};
  /// The RPCs that need a metadata entry (Triton's `--grpc-restricted-protocol`); none by default.
  /// Keys are matched as given, in lower case (Triton's option prefixes them with
  /// `triton-grpc-protocol-`; oip-serve does the same). A refused call is PERMISSION_DENIED.
  /// Independent of the HTTP set (`server_options::restricted_http_api`), as in Triton.
  api_restrictions restricted_protocol{};
  /// Whether another process may listen on the same port (SO_REUSEPORT, Triton's
  /// `--reuse-grpc-port`). Off by default, as in Triton: a second server on a port in use fails to
  /// start instead of sharing the connections.
  bool reuse_port = false;
  /// The listening port's credentials (grpc++'s `SslServerCredentials` for TLS, as Triton's
  /// `--grpc-use-ssl`); insecure when null.
  std::shared_ptr<::grpc::ServerCredentials> credentials{};
  /// Called on the builder after oip's own settings and before the server starts: channel
  /// arguments such as keepalive (`GRPC_ARG_KEEPALIVE_TIME_MS`, ...), compression, thread pools.
  std::function<void(::grpc::ServerBuilder&)> configure{};

  // What one client can hold of the server. The messages themselves count against the service's
  // memory budget (`limits::max_inflight_bytes`) while their requests run; these bound what grpc
  // holds below that. The number of connections is bounded by the process's RLIMIT_NOFILE alone.

  /// The memory grpc may use for its connections and calls (its `ResourceQuota`); 0, the
  /// default, means the service's memory budget. Past it, grpc refuses new calls and reads.
  std::size_t memory_quota_bytes = 0;
  /// Most calls in flight on one connection (GRPC_ARG_MAX_CONCURRENT_STREAMS): a client that
  /// opens more waits for one to end.
  int max_concurrent_streams = 1024;
  /// A connection with no call for this long is closed (GRPC_ARG_MAX_CONNECTION_IDLE_MS);
  /// zero or less keeps it.
  std::chrono::milliseconds max_connection_idle = std::chrono::minutes{30};
  /// A connection older than this is asked to go away once its calls end
  /// (GRPC_ARG_MAX_CONNECTION_AGE_MS, with `max_connection_age_grace` for them to end); zero or
  /// less, the default, lets connections live as long as their clients keep them, as Triton does.
  std::chrono::milliseconds max_connection_age{0};
  std::chrono::milliseconds max_connection_age_grace = std::chrono::minutes{1};
  /// Debian's abseil is built as for debugging: its mutexes check the order of every lock taken
  /// for possible deadlocks, which costs a small call about a tenth of its instructions in
  /// grpc++. `start` turns that check off for the whole process, as a release build of abseil
  /// has it, unless this is set.
  bool keep_abseil_deadlock_detection = false;
};

/// Example:
/// \code
///   oip::inference_service service{models, workers};
///   oip::grpc::server grpc{service, {.port = 8001}};
///   oip::result<std::uint16_t> port = grpc.start();
///   ...
///   grpc.stop();
/// \endcode
class server {
 public:
  explicit server(inference_service& service, server_options options = {});
  server(const server&) = delete;
  server& operator=(const server&) = delete;
  /// Stops the server if it still runs.
  ~server();

  /// Starts listening; the port it listens on, or an error if it could not bind.
  [[nodiscard]] result<std::uint16_t> start();

  /// Stops taking RPCs, lets running ones finish for up to `grace`, cancels the rest, and waits
  /// for their models.
  void stop(std::chrono::milliseconds grace = std::chrono::seconds{5});

  /// The port listened on once started (0 before), as `http::server::port`.
  [[nodiscard]] std::uint16_t port() const noexcept;

 private:
  struct state;
  std::unique_ptr<state> state_;
};

}  // namespace oip::grpc
