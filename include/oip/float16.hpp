#pragma once
/// \file
/// The two 16-bit floating-point formats of the protocol, FP16 (`oip::half`) and BF16
/// (`oip::bfloat16`), and their exact conversions to and from FP32.
///
/// Every conversion rounds to nearest, ties to even; subnormals are converted exactly (never
/// flushed); infinities stay infinities; a NaN stays a NaN with its sign, becomes quiet, and keeps
/// the top bits of its payload that fit. The bulk functions pick the widest vector path the CPU
/// offers at run time (AVX-512, F16C/AVX2, or portable C++); all paths give identical bits.

#include <oip/export.hpp>
#include <oip/status.hpp>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>

namespace oip {

/// An IEEE 754 binary16 value, stored as its bits.
struct half {
  std::uint16_t bits = 0;

  [[nodiscard]] static constexpr half from_bits(std::uint16_t b) noexcept { return half{b}; }
  friend constexpr bool operator==(half, half) noexcept = default;
};

/// A bfloat16 value (the upper 16 bits of an FP32), stored as its bits.
struct bfloat16 {
  std::uint16_t bits = 0;

  [[nodiscard]] static constexpr bfloat16 from_bits(std::uint16_t b) noexcept {
    return bfloat16{b};
  }
  friend constexpr bool operator==(bfloat16, bfloat16) noexcept = default;
};

static_assert(sizeof(half) == 2 && sizeof(bfloat16) == 2);

// The scalar conversions are constexpr and inline: they are the portable path and the reference.

/// FP32 to FP16, round to nearest even.
[[nodiscard]] constexpr half to_half(float value) noexcept {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(value);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000U);
  const std::uint32_t magnitude = x & 0x7FFF'FFFFU;
  if (magnitude > 0x7F80'0000U) {  // NaN: quiet, keep the top payload bits
    return half{static_cast<std::uint16_t>(sign | 0x7E00U | ((magnitude >> 13) & 0x03FFU))};
  }
  if (magnitude >= 0x477F'F000U) {  // 65520 and above round to infinity
    return half{static_cast<std::uint16_t>(sign | 0x7C00U)};
  }
  if (magnitude >= 0x3880'0000U) {  // normal half: rebias the exponent and round the mantissa
    const std::uint32_t odd = (magnitude >> 13) & 1U;
    const std::uint32_t rounded = magnitude + 0x0FFFU + odd - (112U << 23);
    return half{static_cast<std::uint16_t>(sign | (rounded >> 13))};
  }
  const std::uint32_t exponent = magnitude >> 23;
  if (exponent < 102) return half{sign};  // below 2^-25: rounds to zero
  // Subnormal half: the value is mantissa * 2^-24; shift the 24-bit significand into place.
  const std::uint32_t significand = (magnitude & 0x007F'FFFFU) | 0x0080'0000U;
  const std::uint32_t shift = 126 - exponent;  // 14..24
  const std::uint32_t truncated = significand >> shift;
  const std::uint32_t remainder = significand & ((1U << shift) - 1U);
  const std::uint32_t halfway = 1U << (shift - 1U);
  const std::uint32_t round_up =
      (remainder > halfway || (remainder == halfway && (truncated & 1U) != 0U)) ? 1U : 0U;
  return half{static_cast<std::uint16_t>(sign | (truncated + round_up))};
}

/// FP16 to FP32, exact (a NaN becomes quiet).
[[nodiscard]] constexpr float to_float(half value) noexcept {
  const std::uint32_t h = value.bits;
  const std::uint32_t sign = (h & 0x8000U) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1FU;
  const std::uint32_t mantissa = h & 0x03FFU;
  if (exponent == 0x1FU) {
    const std::uint32_t quiet = mantissa != 0 ? 0x0040'0000U : 0U;
    return std::bit_cast<float>(sign | 0x7F80'0000U | quiet | (mantissa << 13));
  }
  if (exponent != 0)
    return std::bit_cast<float>(sign | ((exponent + 112U) << 23) | (mantissa << 13));
  if (mantissa == 0) return std::bit_cast<float>(sign);
  // Subnormal half: normalise. The top set bit p (0..9) gives the FP32 exponent p - 24 + 127.
  const auto top = static_cast<std::uint32_t>(std::bit_width(mantissa) - 1);
  const std::uint32_t fraction = (mantissa << (23U - top)) & 0x007F'FFFFU;
  return std::bit_cast<float>(sign | ((top + 103U) << 23) | fraction);
}

/// FP32 to BF16, round to nearest even.
[[nodiscard]] constexpr bfloat16 to_bfloat16(float value) noexcept {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(value);
  if ((x & 0x7FFF'FFFFU) > 0x7F80'0000U) {
    return bfloat16{static_cast<std::uint16_t>((x >> 16) | 0x0040U)};
  }
  return bfloat16{static_cast<std::uint16_t>((x + 0x7FFFU + ((x >> 16) & 1U)) >> 16)};
}

/// BF16 to FP32, exact (a NaN becomes quiet).
[[nodiscard]] constexpr float to_float(bfloat16 value) noexcept {
  std::uint32_t b = value.bits;
  if ((b & 0x7FFFU) > 0x7F80U) b |= 0x0040U;
  return std::bit_cast<float>(b << 16);
}

/// Bulk conversions over arrays of equal length, vectorised where the CPU allows. The pointers need
/// no alignment. A length mismatch is an `errc::invalid_argument` and converts nothing.
///
/// Example:
/// \code
///   std::vector<float> out(in.size());
///   if (auto s = oip::convert(std::span<const oip::half>(in), std::span<float>(out)); !s.ok()) ...
/// \endcode
OIP_EXPORT status convert(std::span<const half> in, std::span<float> out) noexcept;
OIP_EXPORT status convert(std::span<const float> in, std::span<half> out) noexcept;
OIP_EXPORT status convert(std::span<const bfloat16> in, std::span<float> out) noexcept;
OIP_EXPORT status convert(std::span<const float> in, std::span<bfloat16> out) noexcept;

namespace detail {
/// The vector paths, exposed so that tests can compare each one the CPU runs with the portable one.
enum class simd_path : std::uint8_t { portable, avx2_f16c, avx512 };

/// The widest path this CPU supports (checked once), capped by the environment variable
/// `OIP_SIMD` (`portable`, `avx2` or `avx512`) when it is set.
[[nodiscard]] OIP_EXPORT simd_path best_simd_path() noexcept;
[[nodiscard]] OIP_EXPORT bool simd_path_supported(simd_path path) noexcept;

// Byte-level kernels: `in` and `out` hold `count` elements each, at any alignment. The caller must
// pass a supported path.
OIP_EXPORT void half_to_float(simd_path path, const void* in, void* out,
                              std::size_t count) noexcept;
OIP_EXPORT void float_to_half(simd_path path, const void* in, void* out,
                              std::size_t count) noexcept;
OIP_EXPORT void bfloat16_to_float(simd_path path, const void* in, void* out,
                                  std::size_t count) noexcept;
OIP_EXPORT void float_to_bfloat16(simd_path path, const void* in, void* out,
                                  std::size_t count) noexcept;
}  // namespace detail

}  // namespace oip
