#pragma once
// The request and response fuzzers' check that a decoder's direct reader of the usual form and
// its general reader agree: an unknown first key sends any document to the general reader.

#include <oip/buffer.hpp>
#include <oip/status.hpp>

#include <cstddef>
#include <optional>
#include <string>

namespace oip::fuzz {

// `decoded` is `decode(body, header_length)` of the fuzzer's document; `decode` decodes the same
// document with the extra key, and `encoded` compares two results through their encoding (NaN
// parameters and bytes included). Traps where the two readers disagree.
template <class Decoded, class Decode, class Encoded>
void compare_readers(const std::string& body_text, std::optional<std::size_t> header_length,
                     const result<Decoded>& decoded, Decode&& decode, Encoded&& encoded) {
  const std::size_t json_size = header_length.value_or(body_text.size());
  if (json_size == 0 || body_text.front() != '{') return;
  const std::size_t next = body_text.find_first_not_of(" \t\r\n", 1);
  if (next >= json_size) return;
  const std::string prefix =
      body_text[next] == '}' ? R"({"oip-general":0)" : R"({"oip-general":0,)";
  const std::string general_text = prefix + body_text.substr(1);
  std::optional<std::size_t> general_length;
  if (header_length) general_length = *header_length + prefix.size() - 1;
  const result<Decoded> general = decode(buffer::from_string(general_text), general_length);
  // A document that has the key already, in any spelling, now has it twice.
  if (!general.ok() &&
      general.error().message().find("duplicate key 'oip-general'") != std::string::npos) {
    return;
  }
  if (decoded.ok() != general.ok()) __builtin_trap();
  if (!decoded.ok()) {
    // A document just under a size limit can pass it without the extra key only.
    if (decoded.error().code() != general.error().code() &&
        general.error().code() != errc::payload_too_large) {
      __builtin_trap();
    }
    return;
  }
  if (encoded(*decoded) != encoded(*general)) __builtin_trap();
}

}  // namespace oip::fuzz
