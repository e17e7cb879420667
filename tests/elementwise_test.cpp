// The per-element arithmetic that the CPU reference models run and the CUDA kernels run too.

#include <oip/elementwise.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include <doctest/doctest.h>

namespace {

using oip::elementwise::add;
using oip::elementwise::subtract;

template <class T>
void check_wrapping() {
  constexpr T low = std::numeric_limits<T>::lowest();
  constexpr T high = std::numeric_limits<T>::max();
  CHECK(add<T>{}(high, T{1}) == low);
  CHECK(subtract<T>{}(low, T{1}) == high);
  CHECK(add<T>{}(T{2}, T{3}) == T{5});
  CHECK(subtract<T>{}(T{7}, T{3}) == T{4});
  // 2 × max wraps to -2 (signed) or max - 1 (unsigned).
  CHECK(add<T>{}(high, high) ==
        (std::is_signed_v<T> ? static_cast<T>(-2) : static_cast<T>(high - 1)));
}

}  // namespace

TEST_CASE("integers wrap in two's complement, as Triton's simple model does") {
  check_wrapping<std::uint8_t>();
  check_wrapping<std::uint16_t>();
  check_wrapping<std::uint32_t>();
  check_wrapping<std::uint64_t>();
  check_wrapping<std::int8_t>();
  check_wrapping<std::int16_t>();
  check_wrapping<std::int32_t>();
  check_wrapping<std::int64_t>();
  CHECK(add<std::int8_t>{}(std::int8_t{127}, std::int8_t{1}) == std::int8_t{-128});
  CHECK(subtract<std::uint8_t>{}(std::uint8_t{0}, std::uint8_t{1}) == std::uint8_t{255});
  CHECK(subtract<std::int64_t>{}(std::numeric_limits<std::int64_t>::min(), std::int64_t{1}) ==
        std::numeric_limits<std::int64_t>::max());
}

TEST_CASE("FP32 and FP64 follow IEEE 754") {
  CHECK(add<float>{}(0.1F, 0.2F) == 0.1F + 0.2F);
  CHECK(add<double>{}(0.1, 0.2) == 0.30000000000000004);
  CHECK(std::isinf(
      add<float>{}(std::numeric_limits<float>::max(), std::numeric_limits<float>::max())));
  CHECK(std::isnan(subtract<double>{}(std::numeric_limits<double>::infinity(),
                                      std::numeric_limits<double>::infinity())));
  CHECK(std::signbit(add<float>{}(-0.0F, -0.0F)));
}

TEST_CASE("FP16 computes in FP32 and rounds once to nearest even") {
  const auto h = [](float v) { return oip::to_half(v); };
  CHECK(add<oip::half>{}(h(1.0F), h(2.0F)) == h(3.0F));
  // 1 + 2^-11 lies halfway between 1 and the next half (1 + 2^-10): ties to even gives 1.
  CHECK(add<oip::half>{}(h(1.0F), h(0x1p-11F)) == h(1.0F));
  // 1 + 3 × 2^-11 lies halfway between 1 + 2^-10 and 1 + 2^-9: ties to even gives 1 + 2^-9.
  CHECK(add<oip::half>{}(h(1.0F), h(0x1.8p-10F)) == h(1.0F + 0x1p-9F));
  // 65504 is FP16's largest finite value; the sum overflows to infinity.
  CHECK(add<oip::half>{}(h(65504.0F), h(65504.0F)).bits == 0x7C00U);
  CHECK(subtract<oip::half>{}(h(1.0F), h(1.0F)).bits == 0x0000U);
}

TEST_CASE("BF16 computes in FP32 and rounds once to nearest even") {
  const auto b = [](float v) { return oip::to_bfloat16(v); };
  CHECK(add<oip::bfloat16>{}(b(1.0F), b(1.0F)) == b(2.0F));
  // BF16 keeps 8 significant bits: 256 + 1 is halfway between 256 and 258, ties to even: 256.
  CHECK(add<oip::bfloat16>{}(b(256.0F), b(1.0F)) == b(256.0F));
  CHECK(add<oip::bfloat16>{}(b(256.0F), b(3.0F)) == b(260.0F));
  CHECK(subtract<oip::bfloat16>{}(b(0.5F), b(2.0F)) == b(-1.5F));
}

TEST_CASE("a NaN result is the canonical quiet NaN, whatever the operands' payloads") {
  const float payload = std::bit_cast<float>(0xFFC01234U);  // negative, with a payload
  CHECK(std::bit_cast<std::uint32_t>(add<float>{}(payload, 1.0F)) == 0x7FC00000U);
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(std::bit_cast<std::uint32_t>(subtract<float>{}(inf, inf)) == 0x7FC00000U);
  const double nan_payload = std::bit_cast<double>(0x7FF0000000000001ULL);  // signalling
  CHECK(std::bit_cast<std::uint64_t>(add<double>{}(nan_payload, 0.0)) == 0x7FF8000000000000ULL);
  CHECK(add<oip::half>{}(oip::half::from_bits(0xFE01U), oip::to_half(1.0F)).bits == 0x7E00U);
  CHECK(subtract<oip::bfloat16>{}(oip::bfloat16::from_bits(0xFFC1U), oip::to_bfloat16(1.0F)).bits ==
        0x7FC0U);
}

TEST_CASE("add_sub writes both of simple's outputs, and is usable in constant expressions") {
  constexpr auto both = [] {
    std::int32_t sum = 0;
    std::int32_t difference = 0;
    oip::elementwise::add_sub(std::int32_t{5}, std::int32_t{7}, sum, difference);
    return sum * 100 + difference;
  }();
  static_assert(both == 1200 - 2);
  CHECK(both == 1198);
}
