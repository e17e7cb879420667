#include "core/detail/json_string.hpp"

#include "core/detail/utf8.hpp"

#include <array>
#include <cstdint>

namespace oip::detail {

namespace {

// Bytes that a JSON string holds as they are: printable ASCII other than '"' and '\\'.
constexpr std::array<bool, 256> plain_bytes = [] {
  std::array<bool, 256> table{};
  for (unsigned c = 0x20; c < 0x80; ++c) table[c] = c != '"' && c != '\\';
  return table;
}();

}  // namespace

void append_json_string(std::string& out, std::string_view text) {
  static constexpr char hex[] = "0123456789abcdef";
  out.reserve(out.size() + text.size() + 2);
  out.push_back('"');
  std::size_t i = 0;
  while (i < text.size()) {
    // Runs of plain bytes (nearly every name and id) are appended at once.
    std::size_t run = i;
    while (run < text.size() && plain_bytes[static_cast<unsigned char>(text[run])]) ++run;
    out.append(text.data() + i, run - i);
    i = run;
    if (i == text.size()) break;
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x80U) {
      const std::size_t length = utf8_sequence_length(text.substr(i));
      if (length == 0) {
        out.append("\xEF\xBF\xBD");  // U+FFFD for each byte that starts no valid sequence
        ++i;
      } else {
        out.append(text.substr(i, length));
        i += length;
      }
      continue;
    }
    switch (c) {
      case '"': out.append("\\\""); break;
      case '\\': out.append("\\\\"); break;
      case '\b': out.append("\\b"); break;
      case '\f': out.append("\\f"); break;
      case '\n': out.append("\\n"); break;
      case '\r': out.append("\\r"); break;
      case '\t': out.append("\\t"); break;
      default:
        out.append("\\u00");
        out.push_back(hex[c >> 4U]);
        out.push_back(hex[c & 0xFU]);
    }
    ++i;
  }
  out.push_back('"');
}

}  // namespace oip::detail
