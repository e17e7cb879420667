#include "codecs/detail/decimal.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace oip::detail {

namespace {

// The significant digits of a JSON number and the power of ten of the last one:
// value = digits * 10^exponent. Leading zeros are dropped; past `max_digits` digits the rest is
// folded into `sticky` (some dropped digit was non-zero).
struct decimal {
  std::string digits;
  long long exponent = 0;
  bool sticky = false;
};

constexpr std::size_t max_digits = 800;

decimal parse_decimal(std::string_view token) {
  decimal out;
  std::size_t i = 0;
  if (i < token.size() && token[i] == '-') ++i;
  long long fraction_digits = 0;
  bool in_fraction = false;
  for (; i < token.size(); ++i) {
    const char c = token[i];
    if (c == '.') {
      in_fraction = true;
      continue;
    }
    if (c == 'e' || c == 'E') break;
    if (c < '0' || c > '9') break;
    if (in_fraction) ++fraction_digits;
    if (out.digits.empty() && c == '0') continue;
    if (out.digits.size() < max_digits) {
      out.digits.push_back(c);
    } else {
      out.sticky = out.sticky || c != '0';
      --fraction_digits;  // the digit is dropped: the kept ones move up one power of ten
    }
  }
  long long exp = 0;
  if (i < token.size() && (token[i] == 'e' || token[i] == 'E')) {
    ++i;
    bool negative = false;
    if (i < token.size() && (token[i] == '+' || token[i] == '-')) negative = token[i++] == '-';
    for (; i < token.size() && token[i] >= '0' && token[i] <= '9'; ++i) {
      exp = std::min<long long>(exp * 10 + (token[i] - '0'), 1'000'000'000);
    }
    if (negative) exp = -exp;
  }
  out.exponent = exp - fraction_digits;
  return out;
}

// Little-endian base-2^32 natural numbers: just what the comparison needs.
using big = std::vector<std::uint32_t>;

void multiply_small(big& n, std::uint32_t factor) {
  std::uint64_t carry = 0;
  for (std::uint32_t& limb : n) {
    const std::uint64_t product = std::uint64_t{limb} * factor + carry;
    limb = static_cast<std::uint32_t>(product);
    carry = product >> 32U;
  }
  if (carry != 0) n.push_back(static_cast<std::uint32_t>(carry));
}

void add_small(big& n, std::uint32_t addend) {
  std::uint64_t carry = addend;
  for (std::uint32_t& limb : n) {
    if (carry == 0) return;
    const std::uint64_t sum = std::uint64_t{limb} + carry;
    limb = static_cast<std::uint32_t>(sum);
    carry = sum >> 32U;
  }
  if (carry != 0) n.push_back(static_cast<std::uint32_t>(carry));
}

void shift_left(big& n, long long bits) {
  for (; bits >= 31; bits -= 31) multiply_small(n, 1U << 31U);
  if (bits > 0) multiply_small(n, 1U << static_cast<unsigned>(bits));
}

void multiply_power_of_five(big& n, long long power) {
  for (; power >= 13; power -= 13) multiply_small(n, 1220703125U);  // 5^13
  for (; power > 0; --power) multiply_small(n, 5);
}

int compare(big a, big b) {
  while (!a.empty() && a.back() == 0) a.pop_back();
  while (!b.empty() && b.back() == 0) b.pop_back();
  if (a.size() != b.size()) return a.size() < b.size() ? -1 : 1;
  for (std::size_t i = a.size(); i-- > 0;) {
    if (a[i] != b[i]) return a[i] < b[i] ? -1 : 1;
  }
  return 0;
}

// Rounds a finite or non-finite double to a 16-bit format with `mantissa_bits` stored bits and
// exponent bias `bias`, to nearest even, in one step.
std::uint16_t round_double(double value, int mantissa_bits, int bias) {
  const std::uint64_t bits = std::bit_cast<std::uint64_t>(value);
  const auto sign = static_cast<std::uint16_t>((bits >> 48U) & 0x8000U);
  const int exponent_bits = 15 - mantissa_bits;
  const auto infinity = static_cast<std::uint16_t>(((1U << exponent_bits) - 1U) << mantissa_bits);
  if (std::isnan(value)) {
    const auto payload =
        static_cast<std::uint16_t>((bits >> (52 - mantissa_bits)) & ((1U << mantissa_bits) - 1U));
    return static_cast<std::uint16_t>(sign | infinity | (1U << (mantissa_bits - 1)) | payload);
  }
  if (std::isinf(value)) return static_cast<std::uint16_t>(sign | infinity);
  const int field = static_cast<int>((bits >> 52U) & 0x7FFU);
  std::uint64_t significand = bits & 0xF'FFFF'FFFF'FFFFULL;
  int exponent = 0;  // value = significand * 2^exponent
  if (field == 0) {
    exponent = -1074;
  } else {
    significand |= 1ULL << 52U;
    exponent = field - 1075;
  }
  if (significand == 0) return sign;
  const int log2 = static_cast<int>(std::bit_width(significand)) - 1 + exponent;
  const int min_normal = 1 - bias;
  const int quantum = std::max(log2, min_normal) - mantissa_bits;  // result = n * 2^quantum
  const int shift = quantum - exponent;
  std::uint64_t n = 0;
  if (shift <= 0) {
    n = significand << static_cast<unsigned>(-shift);  // exact: cannot happen above 2^11 bits
  } else if (shift < 64) {
    n = significand >> static_cast<unsigned>(shift);
    const std::uint64_t rest =
        significand & ((std::uint64_t{1} << static_cast<unsigned>(shift)) - 1U);
    const std::uint64_t halfway = std::uint64_t{1} << static_cast<unsigned>(shift - 1);
    if (rest > halfway || (rest == halfway && (n & 1U) != 0)) ++n;
  }
  const std::uint64_t implicit = std::uint64_t{1} << static_cast<unsigned>(mantissa_bits);
  if (quantum == min_normal - mantissa_bits && n < implicit) {
    return static_cast<std::uint16_t>(sign | n);  // subnormal (or zero)
  }
  int biased = quantum + mantissa_bits + bias;
  if (n == 2 * implicit) {
    n = implicit;
    ++biased;
  }
  if (biased >= (1 << exponent_bits) - 1) return static_cast<std::uint16_t>(sign | infinity);
  return static_cast<std::uint16_t>(sign | (static_cast<unsigned>(biased) << mantissa_bits) |
                                    (n - implicit));
}

// The exact value of a 16-bit pattern, as a double (every one is representable).
double value_of(std::uint16_t bits, int mantissa_bits, int bias) {
  const int field = (bits & 0x7FFF) >> mantissa_bits;
  const int mantissa = bits & ((1 << mantissa_bits) - 1);
  const double magnitude =
      field == 0 ? std::ldexp(mantissa, 1 - bias - mantissa_bits)
                 : std::ldexp(mantissa + (1 << mantissa_bits), field - bias - mantissa_bits);
  return (bits & 0x8000) != 0 ? -magnitude : magnitude;
}

// The two 16-bit neighbours of `value` when it lies exactly halfway between them (`rounded`, its
// rounding to nearest even, is one of them); nothing otherwise.
struct tie {
  std::uint16_t below;
  std::uint16_t above;
};
std::optional<tie> find_tie(std::uint16_t rounded, double value, int mantissa_bits, int bias) {
  if (!std::isfinite(value) || value == 0) return std::nullopt;
  // A point halfway between two 16-bit values has one significant bit more than they have (at
  // most mantissa_bits + 2): a double with any of its lower fraction bits set is none.
  const auto fraction_bits_below = static_cast<unsigned>(52 - (mantissa_bits + 1));
  if ((std::bit_cast<std::uint64_t>(value) & ((std::uint64_t{1} << fraction_bits_below) - 1)) != 0)
    return std::nullopt;
  const std::uint16_t magnitude_bits = rounded & 0x7FFFU;
  const int exponent_bits = 15 - mantissa_bits;
  const std::uint16_t infinity =
      static_cast<std::uint16_t>(((1U << exponent_bits) - 1U) << mantissa_bits);
  // The neighbours of |value| in the format: the rounded result is one of them.
  const double magnitude = std::fabs(value);
  const double rounded_magnitude =
      magnitude_bits == infinity ? INFINITY : value_of(magnitude_bits, mantissa_bits, bias);
  std::uint16_t below = magnitude_bits;
  std::uint16_t above = magnitude_bits;
  if (rounded_magnitude > magnitude) {
    below = static_cast<std::uint16_t>(magnitude_bits - 1);
  } else if (rounded_magnitude < magnitude) {
    above = static_cast<std::uint16_t>(magnitude_bits + 1);
  } else {
    return std::nullopt;  // value is exactly representable: not a tie
  }
  const double low = value_of(below, mantissa_bits, bias);
  // The value of the pattern above the largest finite one is the overflow threshold's partner.
  const double high = above == infinity ? std::ldexp(1.0, (1 << (exponent_bits - 1)))
                                        : value_of(above, mantissa_bits, bias);
  if ((low + high) / 2 != magnitude) return std::nullopt;  // not exactly halfway (exact sum)
  return tie{below, above};
}

std::uint16_t correct_tie(std::uint16_t rounded, double value, std::string_view token,
                          int mantissa_bits, int bias) {
  const std::optional<tie> halfway = find_tie(rounded, value, mantissa_bits, bias);
  if (!halfway) return rounded;
  const int side = compare_decimal_magnitude(token, std::fabs(value));
  if (side == 0) return rounded;  // a true tie: even, as rounded
  const std::uint16_t sign = rounded & 0x8000U;
  return static_cast<std::uint16_t>(sign | (side > 0 ? halfway->above : halfway->below));
}

}  // namespace

bool decimal_magnitude_below_one(std::string_view token) {
  const decimal d = parse_decimal(token);
  if (d.digits.empty()) return true;
  return static_cast<long long>(d.digits.size()) + d.exponent <= 0;
}

int compare_decimal_magnitude(std::string_view token, double value) {
  const decimal d = parse_decimal(token);
  const double magnitude = std::fabs(value);
  if (d.digits.empty()) return magnitude == 0 ? 0 : -1;
  if (magnitude == 0) return 1;
  // Far apart in scale: decided without big numbers (and keeps the exponents below small).
  const long long decimal_log10 = static_cast<long long>(d.digits.size()) - 1 + d.exponent;
  const int value_log10 = static_cast<int>(std::floor(std::log10(magnitude)));
  if (decimal_log10 > value_log10 + 1) return 1;
  if (decimal_log10 < value_log10 - 1) return -1;

  big left{0};
  for (const char c : d.digits) {
    multiply_small(left, 10);
    add_small(left, static_cast<std::uint32_t>(c - '0'));
  }
  int binary_exponent = 0;
  const double fraction = std::frexp(magnitude, &binary_exponent);
  const auto mantissa = static_cast<std::uint64_t>(std::ldexp(fraction, 53));
  binary_exponent -= 53;  // magnitude = mantissa * 2^binary_exponent
  big right{static_cast<std::uint32_t>(mantissa), static_cast<std::uint32_t>(mantissa >> 32U)};
  // digits * 2^e * 5^e  vs  mantissa * 2^binary_exponent
  const long long twos = d.exponent - binary_exponent;
  if (twos >= 0) {
    shift_left(left, twos);
  } else {
    shift_left(right, -twos);
  }
  if (d.exponent >= 0) {
    multiply_power_of_five(left, d.exponent);
  } else {
    multiply_power_of_five(right, -d.exponent);
  }
  const int order = compare(left, right);
  if (order == 0 && d.sticky) return 1;
  return order;
}

half double_to_half(double value) { return half{round_double(value, 10, 15)}; }
bfloat16 double_to_bfloat16(double value) { return bfloat16{round_double(value, 7, 127)}; }

bool is_half_tie(half rounded, double value) {
  return find_tie(rounded.bits, value, 10, 15).has_value();
}
bool is_half_tie(bfloat16 rounded, double value) {
  return find_tie(rounded.bits, value, 7, 127).has_value();
}

half correct_half_tie(half rounded, double value, std::string_view token) {
  return half{correct_tie(rounded.bits, value, token, 10, 15)};
}
bfloat16 correct_half_tie(bfloat16 rounded, double value, std::string_view token) {
  return bfloat16{correct_tie(rounded.bits, value, token, 7, 127)};
}

}  // namespace oip::detail
