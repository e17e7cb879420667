#include <oip/float16.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <doctest/doctest.h>

using oip::bfloat16;
using oip::half;
using oip::detail::simd_path;

namespace {

std::uint32_t bits_of(float f) { return std::bit_cast<std::uint32_t>(f); }

// Independent references, written from the formats' definitions rather than from bit tricks.

// The value of a binary16 or bfloat16 bit pattern, by the definition (-1)^s * m * 2^e.
double value_of(std::uint16_t bits, int mantissa_bits, int exponent_bias) {
  const int exponent_field = (bits & 0x7FFF) >> mantissa_bits;
  const int mantissa = bits & ((1 << mantissa_bits) - 1);
  const double sign = (bits & 0x8000) != 0 ? -1.0 : 1.0;
  if (exponent_field == 0) return sign * std::ldexp(mantissa, 1 - exponent_bias - mantissa_bits);
  return sign * std::ldexp(mantissa + (1 << mantissa_bits),
                           exponent_field - exponent_bias - mantissa_bits);
}

// Round a finite float to a 16-bit format with `mantissa_bits` and `exponent_bias`, to nearest
// even, with exact integer arithmetic: the float is M * 2^E (M < 2^24), the target's quantum in
// the float's binade is 2^Q, and the result is round(M * 2^(E - Q)) quanta.
std::uint16_t reference_round(float f, int mantissa_bits, int exponent_bias) {
  const std::uint32_t x = bits_of(f);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000);
  const int max_exponent_field = (1 << (15 - mantissa_bits)) - 1;
  const int exponent_field = static_cast<int>((x >> 23) & 0xFF);
  std::uint64_t m = x & 0x7FFFFF;
  int e = 0;
  if (exponent_field == 0) {
    e = -149;
  } else {
    m |= 0x800000;
    e = exponent_field - 150;
  }
  if (m == 0) return sign;
  // floor(log2 |f|)
  const int log2 = static_cast<int>(std::bit_width(m)) - 1 + e;
  const int min_normal_log2 = 1 - exponent_bias;
  const int q = std::max(log2, min_normal_log2) - mantissa_bits;
  std::uint64_t n = 0;
  const int shift = q - e;
  if (shift <= 0) {
    n = m << -shift;
  } else if (shift >= 63) {
    n = 0;  // far below half a quantum
  } else {
    n = m >> shift;
    const std::uint64_t rest = m & ((std::uint64_t{1} << shift) - 1);
    const std::uint64_t halfway = std::uint64_t{1} << (shift - 1);
    if (rest > halfway || (rest == halfway && (n & 1) != 0)) ++n;
  }
  // n quanta of 2^q. Encode: below the normal range n is the subnormal mantissa.
  if (q == min_normal_log2 - mantissa_bits && n < (std::uint64_t{1} << mantissa_bits)) {
    return static_cast<std::uint16_t>(sign | n);
  }
  int biased = q + mantissa_bits + exponent_bias;
  if (n == (std::uint64_t{2} << mantissa_bits)) {  // rounding carried into the next binade
    n >>= 1;
    ++biased;
  }
  if (biased >= max_exponent_field)
    return static_cast<std::uint16_t>(sign | (max_exponent_field << mantissa_bits));
  return static_cast<std::uint16_t>(sign | (biased << mantissa_bits) |
                                    (n - (std::uint64_t{1} << mantissa_bits)));
}

std::uint16_t reference_half(float f) {
  if (std::isnan(f)) {
    const std::uint32_t x = bits_of(f);
    return static_cast<std::uint16_t>(((x >> 16) & 0x8000) | 0x7E00 | ((x >> 13) & 0x3FF));
  }
  return reference_round(f, 10, 15);
}

std::uint16_t reference_bfloat16(float f) {
  if (std::isnan(f)) return static_cast<std::uint16_t>((bits_of(f) >> 16) | 0x40);
  return reference_round(f, 7, 127);
}

std::vector<simd_path> supported_paths() {
  std::vector<simd_path> paths;
  for (simd_path p : {simd_path::portable, simd_path::avx2_f16c, simd_path::avx512}) {
    if (oip::detail::simd_path_supported(p)) paths.push_back(p);
  }
  return paths;
}

const char* name_of(simd_path p) {
  switch (p) {
    case simd_path::portable: return "portable";
    case simd_path::avx2_f16c: return "avx2_f16c";
    case simd_path::avx512: return "avx512";
  }
  return "?";
}

// Inputs that stress rounding: for every 16-bit pattern of the target format, its value, the
// midpoints to its neighbours and one float ulp either side of each, plus special values and
// random bit patterns.
std::vector<float> rounding_cases(int mantissa_bits, int exponent_bias) {
  std::vector<float> cases;
  for (std::uint32_t b = 0; b < 0x7C00 || (mantissa_bits == 7 && b < 0x7F80); ++b) {
    const double v = value_of(static_cast<std::uint16_t>(b), mantissa_bits, exponent_bias);
    const double next = value_of(static_cast<std::uint16_t>(b + 1), mantissa_bits, exponent_bias);
    const auto mid = static_cast<float>((v + next) / 2);  // exact: one more bit than the format
    for (float f :
         {static_cast<float>(v), mid, std::nextafter(mid, 0.0F), std::nextafter(mid, INFINITY)}) {
      cases.push_back(f);
      cases.push_back(-f);
    }
  }
  for (float f : {0.0F, -0.0F, INFINITY, -INFINITY, NAN, -NAN, 65504.0F, 65519.996F, 65520.0F,
                  65536.0F, 1e-8F, 2.9802322e-08F, 5.9604645e-08F, 1e-45F, 1.1754942e-38F,
                  3.4028235e38F, 1.0F, 0.1F, 0.333333343F}) {
    cases.push_back(f);
  }
  for (std::uint32_t nan : {0x7F800001U, 0x7FBFFFFFU, 0x7FC00000U, 0xFF800001U, 0x7F802000U,
                            0xFFFFFFFFU, 0x7F801FFFU}) {
    cases.push_back(std::bit_cast<float>(nan));
  }
  std::mt19937 rng{20261122};
  for (int i = 0; i < 1'000'000; ++i)
    cases.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(rng())));
  return cases;
}

}  // namespace

TEST_CASE("scalar conversions of well-known values") {
  CHECK(oip::to_half(1.0F).bits == 0x3C00);
  CHECK(oip::to_half(-2.0F).bits == 0xC000);
  CHECK(oip::to_half(0.1F).bits == 0x2E66);
  CHECK(oip::to_half(65504.0F).bits == 0x7BFF);
  CHECK(oip::to_half(65519.996F).bits == 0x7BFF);
  CHECK(oip::to_half(65520.0F).bits == 0x7C00);  // the tie rounds to even: infinity
  CHECK(oip::to_half(std::ldexp(1.0F, -24)).bits == 0x0001);
  CHECK(oip::to_half(std::ldexp(1.0F, -25)).bits == 0x0000);  // tie to even
  CHECK(oip::to_half(std::nextafter(std::ldexp(1.0F, -25), 1.0F)).bits == 0x0001);
  CHECK(oip::to_half(-0.0F).bits == 0x8000);
  CHECK(oip::to_half(INFINITY).bits == 0x7C00);
  CHECK(oip::to_float(half{0x0001}) == std::ldexp(1.0F, -24));
  CHECK(oip::to_float(half{0x03FF}) == std::ldexp(1023.0F, -24));
  CHECK(oip::to_float(half{0x7BFF}) == 65504.0F);

  CHECK(oip::to_bfloat16(1.0F).bits == 0x3F80);
  CHECK(oip::to_bfloat16(std::bit_cast<float>(0x3F808000U)).bits == 0x3F80);  // tie to even
  CHECK(oip::to_bfloat16(std::bit_cast<float>(0x3F818000U)).bits == 0x3F82);  // tie to even
  CHECK(oip::to_bfloat16(std::bit_cast<float>(0x3F808001U)).bits == 0x3F81);
  CHECK(oip::to_bfloat16(std::bit_cast<float>(0x7F7FFFFFU)).bits == 0x7F80);  // FLT_MAX overflows
  CHECK(oip::to_bfloat16(std::bit_cast<float>(0x00000001U)).bits ==
        0x0000);  // subnormal, kept exact
  CHECK(oip::to_bfloat16(std::bit_cast<float>(0x00018000U)).bits == 0x0002);  // subnormal tie
  CHECK(oip::to_float(bfloat16{0x0001}) == std::bit_cast<float>(0x00010000U));

  // NaN: quiet, sign kept, top payload kept.
  CHECK(oip::to_half(std::bit_cast<float>(0xFF800001U)).bits == 0xFE00);
  CHECK(oip::to_half(std::bit_cast<float>(0x7F802000U)).bits == 0x7E01);
  CHECK(bits_of(oip::to_float(half{0x7C01})) == 0x7FC02000U);
  CHECK(bits_of(oip::to_float(half{0xFE00})) == 0xFFC00000U);
  CHECK(oip::to_bfloat16(std::bit_cast<float>(0x7F800001U)).bits == 0x7FC0);
  CHECK(bits_of(oip::to_float(bfloat16{0xFF81})) == 0xFFC10000U);
}

TEST_CASE("FP16 to FP32, exhaustively over all 65536 values, on every path") {
  std::vector<std::uint16_t> all(65536);
  for (std::uint32_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::uint16_t>(i);
  for (simd_path path : supported_paths()) {
    CAPTURE(name_of(path));
    std::vector<float> out(all.size());
    oip::detail::half_to_float(path, all.data(), out.data(), all.size());
    for (std::uint32_t i = 0; i < all.size(); ++i) {
      const std::uint32_t got = bits_of(out[i]);
      if ((i & 0x7C00) == 0x7C00 && (i & 0x3FF) != 0) {  // NaN
        const std::uint32_t expected = ((i & 0x8000U) << 16) | 0x7FC00000U | ((i & 0x3FFU) << 13);
        if (got != expected) FAIL_CHECK("NaN ", i, " gave ", got);
        continue;
      }
      const double expected = (i & 0x7FFF) == 0x7C00
                                  ? ((i & 0x8000) != 0 ? -INFINITY : INFINITY)
                                  : value_of(static_cast<std::uint16_t>(i), 10, 15);
      if (static_cast<double>(out[i]) != expected || std::signbit(out[i]) != ((i & 0x8000) != 0)) {
        FAIL_CHECK("half ", i, " gave ", out[i], " expected ", expected);
      }
      // and back: every non-NaN half survives the round trip
      if (oip::to_half(out[i]).bits != i) FAIL_CHECK("round trip of ", i);
    }
  }
}

TEST_CASE("BF16 to FP32, exhaustively over all 65536 values, on every path") {
  std::vector<std::uint16_t> all(65536);
  for (std::uint32_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::uint16_t>(i);
  for (simd_path path : supported_paths()) {
    CAPTURE(name_of(path));
    std::vector<float> out(all.size());
    oip::detail::bfloat16_to_float(path, all.data(), out.data(), all.size());
    for (std::uint32_t i = 0; i < all.size(); ++i) {
      const bool nan = (i & 0x7F80) == 0x7F80 && (i & 0x7F) != 0;
      const std::uint32_t expected = (nan ? (i | 0x40U) : i) << 16;
      if (bits_of(out[i]) != expected) FAIL_CHECK("bfloat16 ", i, " gave ", bits_of(out[i]));
      if (!nan && static_cast<double>(out[i]) != value_of(static_cast<std::uint16_t>(i), 7, 127) &&
          (i & 0x7FFF) != 0x7F80) {
        FAIL_CHECK("bfloat16 ", i, " has the wrong value");
      }
      if (!nan && oip::to_bfloat16(out[i]).bits != i) FAIL_CHECK("round trip of ", i);
    }
  }
}

// Narrows `cases` on every path the CPU runs and compares each result with `reference`.
void check_narrowing(const std::vector<float>& cases, std::uint16_t (*reference)(float),
                     void (*narrow)(simd_path, const void*, void*, std::size_t) noexcept) {
  std::vector<std::uint16_t> expected(cases.size());
  for (std::size_t i = 0; i < cases.size(); ++i) expected[i] = reference(cases[i]);
  for (simd_path path : supported_paths()) {
    CAPTURE(name_of(path));
    std::vector<std::uint16_t> out(cases.size());
    narrow(path, cases.data(), out.data(), cases.size());
    std::size_t mismatches = 0;
    for (std::size_t i = 0; i < cases.size(); ++i) {
      if (out[i] != expected[i] && ++mismatches <= 5) {
        FAIL_CHECK("float ", bits_of(cases[i]), " gave ", out[i], " expected ", expected[i]);
      }
    }
    CHECK(mismatches == 0);
  }
}

TEST_CASE("FP32 to FP16 matches the exact integer reference on every path") {
  check_narrowing(rounding_cases(10, 15), reference_half, oip::detail::float_to_half);
}

TEST_CASE("FP32 to BF16 matches the exact integer reference on every path") {
  check_narrowing(rounding_cases(7, 127), reference_bfloat16, oip::detail::float_to_bfloat16);
}

TEST_CASE("bulk conversions accept unaligned arrays of any length") {
  // Odd offsets and lengths exercise the scalar tails and unaligned vector loads.
  std::vector<std::byte> src(4 * 100 + 3);
  std::vector<std::byte> dst(4 * 100 + 3);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::byte>(i * 37 + 11);
  for (std::size_t length : {0U, 1U, 7U, 8U, 15U, 16U, 17U, 33U, 99U}) {
    for (simd_path path : supported_paths()) {
      CAPTURE(length);
      CAPTURE(name_of(path));
      oip::detail::float_to_half(path, src.data() + 1, dst.data() + 3, length);
      oip::detail::float_to_bfloat16(path, src.data() + 1, dst.data() + 1, length);
      for (std::size_t i = 0; i < length; ++i) {
        float f;
        std::memcpy(&f, src.data() + 1 + 4 * i, 4);
        std::uint16_t h;
        std::memcpy(&h, dst.data() + 3 + 2 * i, 2);
        CHECK(h != 0xFFFF);  // written
        std::uint16_t b;
        std::memcpy(&b, dst.data() + 1 + 2 * i, 2);
        CHECK(b == reference_bfloat16(f));
      }
      oip::detail::half_to_float(path, src.data() + 1, dst.data() + 3, length);
      for (std::size_t i = 0; i < length; ++i) {
        std::uint16_t h;
        std::memcpy(&h, src.data() + 1 + 2 * i, 2);
        float f;
        std::memcpy(&f, dst.data() + 3 + 4 * i, 4);
        CHECK(bits_of(f) == bits_of(oip::to_float(half{h})));
      }
    }
  }
}

TEST_CASE("public bulk API checks lengths and uses the best path") {
  const std::vector<float> in = {1.0F, -2.5F, 65504.0F, 1e-7F};
  std::vector<half> h(in.size());
  REQUIRE(oip::convert(std::span<const float>(in), std::span<half>(h)).ok());
  std::vector<float> back(in.size());
  REQUIRE(oip::convert(std::span<const half>(h), std::span<float>(back)).ok());
  CHECK(back[0] == 1.0F);
  CHECK(back[1] == -2.5F);
  CHECK(back[2] == 65504.0F);
  CHECK(back[3] == oip::to_float(oip::to_half(1e-7F)));

  std::vector<bfloat16> b(in.size());
  REQUIRE(oip::convert(std::span<const float>(in), std::span<bfloat16>(b)).ok());
  CHECK(b[1].bits == 0xC020);

  std::vector<half> short_out(3);
  const oip::status mismatch = oip::convert(std::span<const float>(in), std::span<half>(short_out));
  CHECK(mismatch.code() == oip::errc::invalid_argument);
  CHECK(mismatch.message() == "conversion needs equal lengths, got 4 input and 3 output elements");
  MESSAGE("best SIMD path on this CPU: ", std::string(name_of(oip::detail::best_simd_path())));
}
