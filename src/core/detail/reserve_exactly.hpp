#pragma once
// Internal: a string's capacity grown to what was asked, for buffers whose memory is counted
// against a budget: `std::string::reserve` on a non-empty string may round up to twice its
// capacity (libstdc++ does), which would hold memory the budget never saw.

#include <cstddef>
#include <string>

namespace oip::detail {

inline void reserve_exactly(std::string& s, std::size_t capacity) {
  if (capacity <= s.capacity()) return;
  std::string grown;
  grown.reserve(capacity);  // from empty: what is asked (or the small-string minimum)
  grown.append(s);
  s.swap(grown);
}

}  // namespace oip::detail
