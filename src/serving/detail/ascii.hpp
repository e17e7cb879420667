#pragma once
// Internal: ASCII case-insensitive comparison, for HTTP header names and content codings.

#include <algorithm>
#include <cctype>
#include <string_view>

namespace oip::detail {

[[nodiscard]] inline bool equals_ignoring_case(std::string_view a, std::string_view b) noexcept {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

}  // namespace oip::detail
