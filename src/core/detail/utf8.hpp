#pragma once
// Internal: well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing above
// U+10FFFF). Inline, so that the components check text as the core library does.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace oip::detail {

/// Length of the well-formed UTF-8 sequence at the start of `s` (not empty), or 0 if it is not one.
[[nodiscard]] inline std::size_t utf8_sequence_length(std::string_view s) noexcept {
  const auto byte = [&](std::size_t i) { return static_cast<std::uint8_t>(s[i]); };
  const auto continuation = [&](std::size_t i) {
    return i < s.size() && (byte(i) & 0xC0U) == 0x80U;
  };
  const std::uint8_t lead = byte(0);
  if (lead < 0x80U) return 1;
  if (lead >= 0xC2U && lead <= 0xDFU) return continuation(1) ? 2 : 0;
  if (lead >= 0xE0U && lead <= 0xEFU) {
    if (!continuation(1) || !continuation(2)) return 0;
    if (lead == 0xE0U && byte(1) < 0xA0U) return 0;   // overlong
    if (lead == 0xEDU && byte(1) >= 0xA0U) return 0;  // surrogate
    return 3;
  }
  if (lead >= 0xF0U && lead <= 0xF4U) {
    if (!continuation(1) || !continuation(2) || !continuation(3)) return 0;
    if (lead == 0xF0U && byte(1) < 0x90U) return 0;   // overlong
    if (lead == 0xF4U && byte(1) >= 0x90U) return 0;  // above U+10FFFF
    return 4;
  }
  return 0;
}

/// Offset of the first byte of `text` that is not part of a well-formed UTF-8 sequence, or npos.
[[nodiscard]] inline std::size_t find_invalid_utf8(std::string_view text) noexcept {
  std::size_t i = 0;
  while (i < text.size()) {
    if (static_cast<unsigned char>(text[i]) < 0x80U) {
      ++i;
      continue;
    }
    const std::size_t length = utf8_sequence_length(text.substr(i));
    if (length == 0) return i;
    i += length;
  }
  return std::string_view::npos;
}

/// `text` with every byte that is not part of a well-formed UTF-8 sequence replaced by U+FFFD: a
/// message that quotes a client's bytes, made fit for a protobuf `string` field (which readers
/// refuse to parse otherwise) or any other text that must be UTF-8.
[[nodiscard]] inline std::string valid_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  std::size_t i = 0;
  while (i < text.size()) {
    const std::size_t length = utf8_sequence_length(text.substr(i));
    if (length == 0) {
      out.append("\xEF\xBF\xBD");
      ++i;
    } else {
      out.append(text.substr(i, length));
      i += length;
    }
  }
  return out;
}

}  // namespace oip::detail
