#pragma once
// Internal: numbers as text, each in the shortest form that reads back to the same value of its
// own type. Shared by the JSON encoder and classification labels.

#include "detail/decimal.hpp"

#include <oip/float16.hpp>

#include <charconv>
#include <cmath>
#include <cstring>
#include <string_view>
#include <type_traits>

namespace oip::detail {

constexpr std::size_t max_number_chars = 32;  // "-2.2250738585072014e-308" is 24

template <class T>
char* write_integer(char* at, T value) {
  return std::to_chars(at, at + max_number_chars, value).ptr;
}

inline char* write_non_finite(char* at, bool negative, bool nan, bool as_null) {
  const std::string_view token = as_null    ? "null"
                                 : nan      ? "NaN"
                                 : negative ? "-Infinity"
                                            : "Infinity";
  std::memcpy(at, token.data(), token.size());
  return at + token.size();
}

template <class T>
char* write_floating(char* at, T value, bool non_finite_as_null) {
  if (!std::isfinite(value)) {
    return write_non_finite(at, std::signbit(value), std::isnan(value), non_finite_as_null);
  }
  return std::to_chars(at, at + max_number_chars, value).ptr;  // shortest round trip
}

// The shortest decimal that the decoder reads back to the same 16-bit value.
template <class Half>
char* write_half(char* at, Half value, bool non_finite_as_null) {
  const float f = to_float(value);
  if (!std::isfinite(f))
    return write_non_finite(at, std::signbit(f), std::isnan(f), non_finite_as_null);
  for (int precision = 1; precision <= 5; ++precision) {
    char* end =
        std::to_chars(at, at + max_number_chars, f, std::chars_format::general, precision).ptr;
    double parsed = 0;
    std::from_chars(at, end, parsed);
    Half back{};
    if constexpr (std::is_same_v<Half, half>) {
      back = detail::correct_half_tie(detail::double_to_half(parsed), parsed,
                                      {at, static_cast<std::size_t>(end - at)});
    } else {
      back = detail::correct_half_tie(detail::double_to_bfloat16(parsed), parsed,
                                      {at, static_cast<std::size_t>(end - at)});
    }
    if (back.bits == value.bits) return end;
  }
  return std::to_chars(at, at + max_number_chars, f).ptr;  // unreachable: 5 digits always do
}

}  // namespace oip::detail
