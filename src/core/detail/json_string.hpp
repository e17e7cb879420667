#pragma once
// Internal: writing JSON strings. Shared by status::to_json and the JSON encoder.

#include "core/detail/utf8.hpp"

#include <string>
#include <string_view>

namespace oip::detail {

/// Appends `text` to `out` as a quoted JSON string. Control characters, '"' and '\\' are escaped;
/// every byte that is not part of a well-formed UTF-8 sequence becomes U+FFFD, so the output is
/// always valid JSON (and valid UTF-8) whatever `text` holds.
void append_json_string(std::string& out, std::string_view text);

}  // namespace oip::detail
