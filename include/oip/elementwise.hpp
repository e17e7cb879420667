#pragma once
/// \file
/// The per-element arithmetic of the reference models, written once for the CPU and the GPU: the
/// CPU models call these functors in loops, the CUDA kernels of `oip::cuda` call the same ones per
/// thread (compiled by nvcc they are `__host__ __device__`), so the CPU tests check the code the
/// GPU runs.
///
/// Integers wrap (two's complement), as Triton's `simple` example does; FP32 and FP64 follow IEEE
/// 754; FP16 and BF16 compute in FP32 and round back to nearest even, once. A NaN result is the
/// canonical quiet NaN (positive, no payload): x86 keeps an operand's payload where a GPU does not,
/// and both paths must give the same bits.

#include <oip/float16.hpp>

#include <cstdint>
#include <limits>
#include <type_traits>

#if defined(__CUDACC__)
#define OIP_HOST_DEVICE __host__ __device__
#else
#define OIP_HOST_DEVICE
#endif

namespace oip::elementwise {

namespace detail {

template <class T>
inline constexpr bool is_16_bit_float = std::is_same_v<T, half> || std::is_same_v<T, bfloat16>;

OIP_HOST_DEVICE constexpr half round_to(half /*tag*/, float value) noexcept {
  return to_half(value);
}
OIP_HOST_DEVICE constexpr bfloat16 round_to(bfloat16 /*tag*/, float value) noexcept {
  return to_bfloat16(value);
}

template <class F>
OIP_HOST_DEVICE constexpr F canonical(F value) noexcept {
  // NOLINTNEXTLINE(misc-redundant-expression): true only for NaN
  return value != value ? std::numeric_limits<F>::quiet_NaN() : value;
}

// a + b or a - b in T's own arithmetic.
template <class T, bool subtract>
OIP_HOST_DEVICE constexpr T combine(T a, T b) noexcept {
  if constexpr (is_16_bit_float<T>) {
    const float x = to_float(a);
    const float y = to_float(b);
    return round_to(T{}, canonical(subtract ? x - y : x + y));
  } else if constexpr (std::is_floating_point_v<T>) {
    return canonical(subtract ? a - b : a + b);
  } else {
    // Unsigned arithmetic wraps by definition, and C++20 converts back modulo 2^N.
    using wide = std::conditional_t<(sizeof(T) > sizeof(unsigned)), std::uint64_t, unsigned>;
    const auto x = static_cast<wide>(static_cast<std::make_unsigned_t<T>>(a));
    const auto y = static_cast<wide>(static_cast<std::make_unsigned_t<T>>(b));
    return static_cast<T>(static_cast<std::make_unsigned_t<T>>(subtract ? x - y : x + y));
  }
}

}  // namespace detail

/// a + b: `simple`'s OUTPUT0, and the sequence accumulator's step.
template <class T>
struct add {
  OIP_HOST_DEVICE constexpr T operator()(T a, T b) const noexcept {
    return detail::combine<T, false>(a, b);
  }
};

/// a - b: `simple`'s OUTPUT1.
template <class T>
struct subtract {
  OIP_HOST_DEVICE constexpr T operator()(T a, T b) const noexcept {
    return detail::combine<T, true>(a, b);
  }
};

/// The `simple` models' outputs for one element: OUTPUT0 = a + b and OUTPUT1 = a - b.
template <class T>
OIP_HOST_DEVICE constexpr void add_sub(T a, T b, T& sum, T& difference) noexcept {
  sum = add<T>{}(a, b);
  difference = subtract<T>{}(a, b);
}

}  // namespace oip::elementwise
