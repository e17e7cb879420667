#pragma once
// Internal: the 4-byte little-endian length that precedes each BYTES element.

#include <cstddef>
#include <cstdint>

namespace oip::detail {

inline std::uint32_t read_bytes_length(const std::byte* at) {
  std::uint32_t length = 0;
  for (int i = 3; i >= 0; --i) length = (length << 8U) | static_cast<std::uint32_t>(at[i]);
  return length;
}

inline void write_bytes_length(std::byte* at, std::uint32_t length) {
  for (int i = 0; i < 4; ++i) at[i] = static_cast<std::byte>((length >> (8 * i)) & 0xFFU);
}

}  // namespace oip::detail
