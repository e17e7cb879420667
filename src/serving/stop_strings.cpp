#include "serving/detail/stop_strings.hpp"

#include <algorithm>
#include <utility>

namespace oip::detail {

stop_strings::stop_strings(std::vector<std::string> stops) {
  for (std::string& s : stops) {
    if (s.empty()) continue;
    pattern p{std::move(s), {}};
    p.fallback.assign(p.text.size(), 0);
    std::size_t k = 0;
    for (std::size_t i = 1; i < p.text.size(); ++i) {
      while (k > 0 && p.text[i] != p.text[k]) k = p.fallback[k - 1];
      if (p.text[i] == p.text[k]) ++k;
      p.fallback[i] = k;
    }
    patterns_.push_back(std::move(p));
  }
}

stop_strings::found stop_strings::search(std::string_view text) const {
  found out;
  for (const pattern& p : patterns_) {
    // `matched`: the length of the longest end of what was read that begins p.text.
    std::size_t matched = 0;
    bool met = false;
    for (std::size_t i = 0; i < text.size(); ++i) {
      while (matched > 0 && text[i] != p.text[matched]) matched = p.fallback[matched - 1];
      if (text[i] == p.text[matched]) ++matched;
      if (matched == p.text.size()) {
        out.cut = std::min(out.cut, i + 1 - matched);
        met = true;
        break;
      }
    }
    if (!met) out.open_tail = std::max(out.open_tail, matched);
  }
  if (out.cut != std::string_view::npos) out.open_tail = 0;
  return out;
}

}  // namespace oip::detail
