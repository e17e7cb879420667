#pragma once
// Internal: protobuf's wire format as the server's own writer (response_bytes) and reader
// (request_bytes) of inference messages use it: the wire types, and the field numbers of what
// requests and responses share (map<string, InferParameter> entries and InferParameter).

#include <cstdint>

namespace oip::grpc::wire {

enum class wire_type : std::uint8_t {
  varint = 0,
  fixed64 = 1,
  length_delimited = 2,
  start_group = 3,
  end_group = 4,
  fixed32 = 5,
};

// A map entry
inline constexpr int entry_key = 1;
inline constexpr int entry_value = 2;
// InferParameter
inline constexpr int parameter_bool = 1;
inline constexpr int parameter_int64 = 2;
inline constexpr int parameter_string = 3;
inline constexpr int parameter_double = 4;
inline constexpr int parameter_uint64 = 5;

}  // namespace oip::grpc::wire
