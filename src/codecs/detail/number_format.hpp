#pragma once
// Internal: numbers as text, each in the shortest form that reads back to the same value of its
// own type. Shared by the JSON encoder and classification labels.

#include "codecs/detail/decimal.hpp"

#include <oip/float16.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string_view>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

namespace oip::detail {

constexpr std::size_t max_number_chars = 32;  // "-2.2250738585072014e-308" is 24

// The most characters that writing one element of T takes ("-Infinity" and "false" included): a
// tensor's worst case is reserved at once, and zeroed by std::string, so it is kept tight.
// FP16 and BF16 take at most 11 ("-6.5504e+04"), or a float's 15 if write_half ever fell back.
template <class T>
constexpr std::size_t max_element_chars = std::is_same_v<T, double> ? 24  // see above
                                          : std::is_integral_v<T>
                                              ? std::max(std::numeric_limits<T>::digits10 + 2,
                                                         5)  // "-128", "false"
                                              : 15;  // float: "-1.17549435e-38"; FP16 and BF16

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

// The decimal digits of `value` (at most 20), written to the end of `digits`; returns their count.
// Two at a time, from a table: this runs once per float of every tensor the encoder writes.
inline int write_digits_backwards(std::uint64_t value, char (&digits)[20]) {
  static constexpr char pairs[] =
      "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
      "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
      "8081828384858687888990919293949596979899";
  int at = 20;
  while (value >= 100) {
    const auto pair = static_cast<std::size_t>(value % 100) * 2;
    value /= 100;
    digits[--at] = pairs[pair + 1];
    digits[--at] = pairs[pair];
  }
  if (value >= 10) {
    digits[--at] = pairs[value * 2 + 1];
    digits[--at] = pairs[value * 2];
  } else {
    digits[--at] = static_cast<char>('0' + value);
  }
  return 20 - at;
}

// The text of `std::to_chars(value)` for a finite float or double: the shortest digits that read
// back to `value` (the closest to it when several do), in fixed or scientific notation, whichever
// is shorter, fixed on a tie. fmt's Dragonbox finds the digits several times as fast as
// libstdc++'s to_chars, which was most of the time it took to encode a float tensor.
// tests/json_test.cpp compares the two on every kind of value.
template <class T>
char* write_shortest(char* at, T value) {
  if (value == 0) return std::to_chars(at, at + max_number_chars, value).ptr;  // "0", "-0"
  // Kept for a negative value: no branch on the sign, which scores and activations have at random
  // (a mispredicted branch on every other value cost about a tenth of the encoding time).
  *at = '-';
  at += std::signbit(value) ? 1 : 0;
  const auto decimal = fmt::detail::dragonbox::to_decimal(std::fabs(value));
  char digit_buffer[20];
  const int count = write_digits_backwards(decimal.significand, digit_buffer);
  const char* const digits = digit_buffer + 20 - count;
  const int exponent = decimal.exponent;  // value = digits x 10^exponent
  const int scientific_exponent = exponent + count - 1;
  const int magnitude = scientific_exponent < 0 ? -scientific_exponent : scientific_exponent;
  const int scientific_length = count + (count > 1 ? 1 : 0) + 2 + (magnitude >= 100 ? 3 : 2);
  const int fixed_length = exponent >= 0          ? count + exponent
                           : count + exponent > 0 ? count + 1
                                                  : 2 - exponent;
  // Runs of at most 17 characters: plain loops beat calls to memcpy and memset.
  const auto put = [&at](const char* from, int n) {
    for (int i = 0; i < n; ++i) *at++ = from[i];
  };
  if (fixed_length <= scientific_length) {
    if (exponent > 0) {
      // An integer with trailing zeros in its shortest digits: to_chars writes its exact digits
      // ("43181170688" for 4.318117e10f), which only it knows without more arithmetic.
      return std::to_chars(at, at + max_number_chars, std::fabs(value)).ptr;
    }
    if (exponent == 0) {  // "15"
      put(digits, count);
    } else if (count + exponent > 0) {  // "1.5"
      put(digits, count + exponent);
      *at++ = '.';
      put(digits + count + exponent, -exponent);
    } else {  // "0.015"
      *at++ = '0';
      *at++ = '.';
      for (int zeros = -(count + exponent); zeros > 0; --zeros) *at++ = '0';
      put(digits, count);
    }
    return at;
  }
  *at++ = digits[0];  // "1.5e-07"
  if (count > 1) {
    *at++ = '.';
    put(digits + 1, count - 1);
  }
  *at++ = 'e';
  *at++ = scientific_exponent < 0 ? '-' : '+';
  int rest = magnitude;
  if (rest >= 100) {
    *at++ = static_cast<char>('0' + rest / 100);
    rest %= 100;
  }
  *at++ = static_cast<char>('0' + rest / 10);
  *at++ = static_cast<char>('0' + rest % 10);
  return at;
}

template <class T>
char* write_floating(char* at, T value, bool non_finite_as_null) {
  if (!std::isfinite(value)) {
    return write_non_finite(at, std::signbit(value), std::isnan(value), non_finite_as_null);
  }
  return write_shortest(at, value);
}

// The shortest decimal (1 to 5 significant digits) that the decoder reads back to `value`, a
// finite 16-bit float: each precision formatted and parsed in turn, about 350 ns a value.
template <class Half>
char* search_shortest_half(char* at, Half value) {
  const float f = to_float(value);
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

// The search's text for every non-negative finite value of Half (fewer than 32,768), made once,
// on first use (about 12 ms, 512 KiB): a tensor's values then cost a copy each. A negative value
// is its magnitude's text after a '-', as the search writes it (its rounding is symmetric).
template <class Half>
class shortest_half_texts {
 public:
  static const shortest_half_texts& get() {
    static const shortest_half_texts texts;
    return texts;
  }
  char* write(char* at, std::uint16_t magnitude_bits) const {
    const entry& e = entries_[magnitude_bits];
    std::memcpy(at, e.text, e.size);
    return at + e.size;
  }

 private:
  static constexpr std::uint16_t sign_bit = 0x8000;
  struct entry {
    char text[15];
    std::uint8_t size;
  };
  shortest_half_texts() : entries_(sign_bit) {
    for (std::uint16_t bits = 0; bits < sign_bit; ++bits) {
      const Half value{bits};
      if (!std::isfinite(to_float(value))) continue;
      char text[max_number_chars];
      const char* end = search_shortest_half(text, value);
      entry& e = entries_[bits];
      e.size = static_cast<std::uint8_t>(std::min<std::ptrdiff_t>(end - text, sizeof e.text));
      std::memcpy(e.text, text, e.size);
    }
  }
  std::vector<entry> entries_;
};

// The shortest decimal that the decoder reads back to the same 16-bit value.
template <class Half>
char* write_half(char* at, Half value, bool non_finite_as_null) {
  const float f = to_float(value);
  if (!std::isfinite(f))
    return write_non_finite(at, std::signbit(f), std::isnan(f), non_finite_as_null);
  if (std::signbit(f)) *at++ = '-';
  return shortest_half_texts<Half>::get().write(at, value.bits & 0x7FFFU);
}

}  // namespace oip::detail
