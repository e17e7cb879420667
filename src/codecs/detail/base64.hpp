#pragma once
// Base64 as Triton's HTTP clients send a `file:` load parameter's content. The sizes are counted
// in std::size_t: Triton's own decoder counted them in a 32-bit int, and content past 2 GiB
// overflowed it (CVE-2024-53880).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace oip::detail {

// The bytes that `encoded` characters of padded base64 decode to at most (padding takes up to two
// off), or nullopt when `encoded` is not a whole number of 4-character groups.
[[nodiscard]] constexpr std::optional<std::size_t> base64_decoded_size(
    std::size_t encoded) noexcept {
  if (encoded % 4 != 0) return std::nullopt;
  return encoded / 4 * 3;  // never overflows: a quarter of the size, times three
}

// Standard base64 with its padding, as Python's base64.b64encode writes it; nullopt otherwise.
[[nodiscard]] inline std::optional<std::string> from_base64(std::string_view text) {
  const auto value_of = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  const std::optional<std::size_t> most = base64_decoded_size(text.size());
  if (!most) return std::nullopt;
  std::string out;
  out.reserve(*most);
  for (std::size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    const int padding = last ? (text[i + 3] == '=') + (text[i + 2] == '=') : 0;
    std::uint32_t bits = 0;
    for (int j = 0; j < 4 - padding; ++j) {
      const int v = value_of(text[i + static_cast<std::size_t>(j)]);
      if (v < 0) return std::nullopt;
      bits = bits << 6U | static_cast<std::uint32_t>(v);
    }
    bits <<= 6U * static_cast<unsigned>(padding);
    out.push_back(static_cast<char>(bits >> 16U));
    if (padding < 2) out.push_back(static_cast<char>(bits >> 8U & 0xFFU));
    if (padding < 1) out.push_back(static_cast<char>(bits & 0xFFU));
  }
  return out;
}

}  // namespace oip::detail
