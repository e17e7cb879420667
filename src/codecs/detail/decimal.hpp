#pragma once
// Internal: exact decimal arithmetic for the few places where a double is not enough, and the
// direct double -> FP16/BF16 rounding that JSON decoding of 16-bit floats needs.

#include <oip/float16.hpp>

#include <string_view>

namespace oip::detail {

/// Whether the JSON number `token` (grammar already checked, non-zero digits present) has a
/// magnitude below 1: tells underflow from overflow when std::from_chars reports out of range.
bool decimal_magnitude_below_one(std::string_view token);

/// -1, 0 or 1 as the JSON number `token` is below, equal to or above `value` (finite) in
/// magnitude. Exact, whatever the number of digits.
int compare_decimal_magnitude(std::string_view token, double value);

/// A double rounded once, to nearest even, to FP16 / BF16 (no double rounding through float).
half double_to_half(double value);
bfloat16 double_to_bfloat16(double value);

/// Whether `value` lies exactly halfway between two 16-bit neighbours, one of them `rounded` (its
/// rounding): only then does correct_half_tie need the decimal's text.
bool is_half_tie(half rounded, double value);
bool is_half_tie(bfloat16 rounded, double value);

/// `rounded` came from rounding `value` (the correctly rounded double of the decimal `token`). If
/// `value` lies exactly halfway between two 16-bit neighbours, the decimal may lie just above or
/// below it: the result is then decided by the decimal itself. Otherwise `rounded` is returned.
half correct_half_tie(half rounded, double value, std::string_view token);
bfloat16 correct_half_tie(bfloat16 rounded, double value, std::string_view token);

}  // namespace oip::detail
