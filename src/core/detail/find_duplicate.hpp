#pragma once
// Internal: duplicate names in a request (tensors, requested outputs, parameters).

#include <algorithm>
#include <array>
#include <cstddef>
#include <optional>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

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

// The first name that two of `items` share, if any, where `name_of(item)` is an item's name as a
// view into the item (not into a temporary: hence the check on its type). A request's few names are
// gathered on the stack; only many take an allocation.
template <class Items, class NameOf>
[[nodiscard]] std::optional<std::string_view> find_duplicate_name(const Items& items,
                                                                  NameOf name_of) {
  static_assert(
      std::is_same_v<std::invoke_result_t<NameOf, decltype(*std::begin(items))>, std::string_view>,
      "name_of returns a std::string_view into the item");
  const auto count = static_cast<std::size_t>(std::size(items));
  std::array<std::string_view, 16> few;
  std::vector<std::string_view> many;
  if (count > few.size()) many.resize(count);
  const std::span<std::string_view> names =
      count > few.size() ? std::span{many} : std::span{few}.first(count);
  std::size_t i = 0;
  for (const auto& item : items) names[i++] = name_of(item);
  return find_duplicate(names);
}

}  // namespace oip::detail
