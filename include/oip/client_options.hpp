#pragma once
/// \file
/// How a network client (`oip::http::client`, `oip::grpc::client`) reaches its server: the same
/// settings for both, so that switching transports changes one line. A setting that one transport
/// has no use for is ignored by it (its comment says which).

#include <oip/http_handler.hpp>
#include <oip/limits.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace oip {

/// A body's compression on the wire: HTTP's Content-Encoding, gRPC's message compression.
enum class wire_compression : std::uint8_t { none, gzip, deflate };

/// TLS for the gRPC client (PEM text, not file names); the HTTP client speaks plain HTTP.
struct tls_settings {
  bool enabled = false;
  /// Empty: the system's roots.
  std::string root_certificates;
  /// A client certificate and its key, for servers that ask for one (mutual TLS).
  std::string private_key;
  std::string certificate_chain;
};

struct client_options {
  /// Every call's deadline, from the moment it is made to its reply (a stream's: to its end); a
  /// call past it ends with `errc::deadline_exceeded` and its connection is closed. Zero: none.
  std::chrono::milliseconds timeout{0};
  /// How long opening a connection may take, the server's name looked up included (HTTP; gRPC
  /// connects within `timeout`). Zero: no bound but `timeout`.
  std::chrono::milliseconds connect_timeout{5000};
  /// Sent with every call: HTTP headers, or gRPC metadata (names in lower case there), for
  /// restricted APIs (`oip/access.hpp`) and for authentication.
  std::vector<http_header> headers;
  /// How request bodies are compressed.
  wire_compression request_compression = wire_compression::none;
  /// Ask the server to compress its replies (HTTP: Accept-Encoding; gRPC: the server's choice
  /// follows the request's).
  wire_compression response_compression = wire_compression::none;
  /// The most a reply may take: its body, its JSON, its elements. A larger reply is an error, not
  /// an allocation.
  limits reply_bounds = {};
  /// HTTP: the most connections kept open to the server for synchronous calls, and as many for
  /// asynchronous ones; calls beyond them wait for one.
  std::size_t max_connections = 16;
  /// HTTP: TCP keepalive. A connection on which nothing has come for this long is probed by the
  /// kernel, a probe every third of it (a second at least); a server that leaves 3 in a row
  /// unanswered is taken for gone, and the call waiting for its reply ends `errc::unavailable`. So
  /// a host that vanishes without a word (powered off, cut off) ends a call with no deadline within
  /// about twice this long, rather than never. (A request still being sent then is ended by the
  /// kernel's retransmission limit instead, about 15 minutes on Linux's defaults.) Zero: no
  /// probes. gRPC probes with keepalive pings: `keepalive_time`.
  std::chrono::seconds tcp_keepalive{30};
  /// gRPC: TLS, and keepalive pings every `keepalive_time` (zero: none) answered within
  /// `keepalive_timeout`, sent while calls are open, and also between them if
  /// `keepalive_without_calls` (a server must permit that: on gRPC's defaults, Triton's included,
  /// it counts such pings as misbehaviour and closes the connection).
  tls_settings tls;
  std::chrono::milliseconds keepalive_time{0};
  std::chrono::milliseconds keepalive_timeout{20000};
  bool keepalive_without_calls = false;
  /// gRPC: Debian's abseil is built as for debugging: its mutexes check the order of every lock
  /// taken for possible deadlocks, which costs a small call about a tenth of its instructions in
  /// grpc++. The client turns that check off for the whole process when it is made, as a release
  /// build of abseil has it, unless this is set.
  bool keep_abseil_deadlock_detection = false;
};

}  // namespace oip
