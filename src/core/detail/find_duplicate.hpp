#pragma once
// Internal: duplicate names in a request (tensors, requested outputs, parameters).

#include <algorithm>
#include <cstddef>
#include <optional>
#include <span>
#include <string_view>

namespace oip::detail {

// A name that occurs twice in `names`, if any (reorders `names`). A few names are compared
// pairwise; more are sorted, so that a request of very many names costs n log n, not n^2.
[[nodiscard]] inline std::optional<std::string_view> find_duplicate(
    std::span<std::string_view> names) {
  if (names.size() < 2) return std::nullopt;
  if (names.size() <= 16) {  // a few names: comparing pairs beats sorting
    for (std::size_t i = 1; i < names.size(); ++i) {
      for (std::size_t j = 0; j < i; ++j) {
        if (names[i] == names[j]) return names[i];
      }
    }
    return std::nullopt;
  }
  std::sort(names.begin(), names.end());
  const auto twin = std::adjacent_find(names.begin(), names.end());
  if (twin == names.end()) return std::nullopt;
  return *twin;
}

}  // namespace oip::detail
