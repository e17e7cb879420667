#pragma once
// Internal: ASCII case-insensitive comparison, for HTTP header names and content codings.

#include <algorithm>
#include <string_view>

namespace oip::detail {

// Header names are ASCII tokens: no locale to consult (std::tolower is a call into libc per byte,
// for every header of every request and reply).
[[nodiscard]] constexpr char ascii_lower(char c) noexcept {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c + ('a' - 'A')) : c;
}

[[nodiscard]] inline bool equals_ignoring_case(std::string_view a, std::string_view b) noexcept {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return ascii_lower(x) == ascii_lower(y);
         });
}

}  // namespace oip::detail
