#pragma once
// Internal: a tensor's values as JSON tokens. Shared by the JSON encoder (a tensor's `data`) and
// the tracer (a traced tensor's values).

#include <oip/parameters.hpp>
#include <oip/status.hpp>
#include <oip/tensor.hpp>

#include <cstddef>
#include <limits>
#include <string>
#include <string_view>

namespace oip::detail {

struct json_value_format {
  bool non_finite_as_null = false;    // NaN and infinities as `null` instead of their tokens
  bool booleans_as_digits = false;    // BOOL as 1 and 0 (Triton's traces) instead of true/false
  bool replace_invalid_utf8 = false;  // U+FFFD for bytes that are not UTF-8, instead of a 400
  // Stop once `text` is longer than this (a block of numbers, or one string's escapes, past it at
  // most), with `errc::payload_too_large`, whose message the caller replaces with one that names
  // the reply.
  std::size_t max_text_bytes = std::numeric_limits<std::size_t>::max();
};

/// Appends the values of `t`, comma-separated, with no brackets: numbers in the shortest form
/// that reads back to the same value of their type, BYTES elements as JSON strings. A BYTES
/// element that is not valid UTF-8 is a 400 naming the `role` ("output") and the tensor, unless
/// the format replaces it.
[[nodiscard]] status append_json_values(std::string& text, const tensor& t, std::string_view role,
                                        json_value_format format);

/// Appends a parameter's value as the encoder writes it (a double always with a fraction or an
/// exponent, so that it reads back as a double).
void append_json_parameter(std::string& text, const parameter_value& value);

}  // namespace oip::detail
