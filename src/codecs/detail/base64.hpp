#pragma once
// Base64 as Triton's HTTP clients send a `file:` load parameter's content or a CUDA IPC handle,
// and as OpenAI's embeddings go out. The sizes are counted in std::size_t: Triton's own decoder
// counted them in a 32-bit int, and content past 2 GiB overflowed it (CVE-2024-53880).

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

inline constexpr std::string_view base64_alphabet =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// Appends `size` bytes in standard base64 with its padding.
inline void append_base64(std::string& out, const unsigned char* bytes, std::size_t size) {
  std::size_t i = 0;
  for (; i + 3 <= size; i += 3) {
    const std::uint32_t group = (std::uint32_t{bytes[i]} << 16U) |
                                (std::uint32_t{bytes[i + 1]} << 8U) | std::uint32_t{bytes[i + 2]};
    for (const unsigned shift : {18U, 12U, 6U, 0U}) out += base64_alphabet[(group >> shift) & 63U];
  }
  if (i == size) return;
  std::uint32_t group = std::uint32_t{bytes[i]} << 16U;
  if (i + 1 < size) group |= std::uint32_t{bytes[i + 1]} << 8U;
  out += base64_alphabet[(group >> 18U) & 63U];
  out += base64_alphabet[(group >> 12U) & 63U];
  out += i + 1 < size ? base64_alphabet[(group >> 6U) & 63U] : '=';
  out += '=';
}

// Standard base64 with its padding, as Python's base64.b64encode writes it, or broken into lines
// as libb64 writes it (Triton's C++ clients encode with it: a line break every 72 characters and
// one at the end); nullopt otherwise.
[[nodiscard]] inline std::optional<std::string> from_base64(std::string_view text) {
  if (text.find_first_of("\r\n") != std::string_view::npos) {
    std::string joined;
    joined.reserve(text.size());
    for (const char c : text) {
      if (c != '\r' && c != '\n') joined.push_back(c);
    }
    return from_base64(std::string_view{joined});
  }
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
