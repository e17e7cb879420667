#pragma once

// Where a completion's text meets a client's stop strings. Each string is matched with
// Knuth-Morris-Pratt, so a search takes time linear in the text whatever the strings hold: a
// client cannot make the front end's search quadratic with stops such as "aaa…ab".

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace oip::detail {

class stop_strings {
 public:
  stop_strings() = default;
  /// Empty strings are ignored.
  explicit stop_strings(std::vector<std::string> stops);

  struct found {
    /// Where the first stop string met begins; `std::string_view::npos` when none is met.
    std::size_t cut = std::string_view::npos;
    /// When none is met: the length of the longest end of the text that begins a stop string
    /// (and is shorter than it), which the next text could complete.
    std::size_t open_tail = 0;
  };
  [[nodiscard]] found search(std::string_view text) const;

 private:
  struct pattern {
    std::string text;
    /// fallback[i]: the length of the longest proper prefix of text[0..i] that also ends it.
    std::vector<std::size_t> fallback;
  };
  std::vector<pattern> patterns_;
};

}  // namespace oip::detail
