#pragma once
/// \file
/// `oip::limits`: the bounds a host sets on what a client may send, and on the JSON the server
/// writes for it. Every decoder checks them before it allocates.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>

namespace oip {

/// Bounds on one request. The defaults are safe for a public endpoint; a host raises them for
/// large tensors.
///
/// Example:
/// \code
///   oip::limits l;
///   l.max_body_bytes = std::size_t{1} << 30;  // accept 1 GiB bodies
///   auto request = oip::decode_request(body, header_length, l);
/// \endcode
struct limits {
  /// Largest request body (JSON header plus binary tensor data): 413 above it. Also the largest
  /// gRPC message, unless the gRPC server sets its own (`grpc::server_options::max_message_bytes`).
  std::size_t max_body_bytes = std::size_t{256} << 20U;
  /// Largest JSON part of a body: 413 above it. Decoding JSON holds up to about 32 times its size
  /// at peak (docs/architecture.md, "Memory bounds"); binary tensor data costs nothing extra.
  std::size_t max_json_bytes = std::size_t{64} << 20U;
  /// Most elements in one tensor: 413 above it.
  std::uint64_t max_elements = std::uint64_t{1} << 31U;
  /// Deepest nesting of JSON arrays and objects: 400 above it.
  std::size_t max_json_depth = 100;
  /// Longest string `sequence_id` (sequence extension): 400 above it.
  std::size_t max_string_id_length = 128;
  /// Responses of a decoupled model that a transport may hold unwritten for a slow reader (on a
  /// gRPC stream, all of its requests' together): the model's next `send` waits while there are
  /// this many, so memory does not grow with a reader that does not keep up.
  std::size_t max_unsent_responses = 64;
  /// How long such a send waits while the client reads none of the responses held for it: past
  /// it the send fails with 503, and the model ends the request, so that a client that stops
  /// reading does not keep a model's thread for good. 0 fails a send that finds no room at once.
  std::chrono::milliseconds max_unread_wait{30'000};
  /// The bytes the whole server may hold for requests and replies in flight, over every
  /// connection and transport together (`memory_budget`): a request that would pass it is
  /// answered 503 before its body is read. 0 (the default) means half of the machine's physical
  /// memory (`physical_memory_bytes`), and never less than `max_body_bytes`.
  std::size_t max_inflight_bytes = 0;
  /// Shared-memory regions that clients may hold registered at once (where the host offers the
  /// extension), and their bytes mapped together: a registration past either is refused (400)
  /// until others are unregistered. 0 bytes (the default) means the machine's physical memory.
  /// Each region keeps its object's descriptor open, so the count stays well below the usual
  /// RLIMIT_NOFILE of 1,024.
  std::size_t max_shared_memory_regions = 128;
  std::uint64_t max_shared_memory_bytes = 0;

  /// The bound on a reply's JSON text (the tensors not sent as binary data), which the server
  /// makes from the request: past it, a 400 that asks for binary data. 0 (the default) means
  /// `json_response_factor` times the request's bytes on the wire, and at least
  /// `json_response_floor_bytes`, so that a few kilobytes of gzip cannot have the server write
  /// gigabytes of text; any other value is the bound. Binary replies are not bounded: their bytes
  /// are the model's outputs, sent without a copy.
  std::size_t max_response_bytes = 0;
  static constexpr std::size_t json_response_factor = 64;
  static constexpr std::size_t json_response_floor_bytes = std::size_t{1} << 20U;

  /// The bound on the JSON text of the reply to a request of `wire_bytes`.
  [[nodiscard]] constexpr std::size_t json_response_bound(std::size_t wire_bytes) const noexcept {
    if (max_response_bytes != 0) return max_response_bytes;
    const std::size_t most = std::numeric_limits<std::size_t>::max();
    const std::size_t scaled =
        wire_bytes > most / json_response_factor ? most : wire_bytes * json_response_factor;
    return std::max(json_response_floor_bytes, scaled);
  }
};

}  // namespace oip
