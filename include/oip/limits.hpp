#pragma once
/// \file
/// `oip::limits`: the bounds a host sets on what a client may send. Every decoder checks them
/// before it allocates.

#include <cstddef>
#include <cstdint>

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
};

}  // namespace oip
