#pragma once
// Internal: the classification extension's hand-written FP32 kernels (AVX2, AVX-512), chosen once
// at run time like the FP16 kernels (float16.cpp), and what they share with the general selection
// in classification.cpp.

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

namespace oip::detail {

// The FP32 kernels compare this many values at a time: shorter rows take the general path.
constexpr std::size_t fp32_step = 64;

template <class C>
[[gnu::always_inline]] inline C load_at(const std::byte* p, std::size_t i) noexcept {
  C v;
  std::memcpy(&v, p + i * sizeof(C), sizeof(C));
  return v;
}

// The smallest float above `threshold` (not NaN), so that one `>=` test serves both rules.
inline float above(float threshold) noexcept {
  if (threshold == std::numeric_limits<float>::infinity()) return threshold;
  if (threshold == 0.0F) return std::numeric_limits<float>::denorm_min();
  const auto bits = std::bit_cast<std::uint32_t>(threshold);
  return std::bit_cast<float>(threshold > 0.0F ? bits + 1U : bits - 1U);
}

// The best k (at most 16) FP32 values offered so far, best first. Offers come in index order and
// are never NaN, so a value enters only above the k-th (a tie keeps the lower index).
struct fp32_top {
  // The arrays are left uninitialised: `size` says how much of them holds values.
  explicit fp32_top(std::size_t wanted) noexcept  // NOLINT(cppcoreguidelines-pro-type-member-init)
      : k{wanted} {}

  std::size_t k;
  std::size_t size = 0;
  float values[16];
  std::uint32_t indices[16];

  void offer(float value, std::uint32_t index) noexcept {
    if (size == k) {
      if (!(value > values[k - 1])) return;
      --size;
    }
    std::size_t at = size;
    for (; at > 0 && value > values[at - 1]; --at) {
      values[at] = values[at - 1];
      indices[at] = indices[at - 1];
    }
    values[at] = value;
    indices[at] = index;
    ++size;
  }
  // Once k values are held, only a value above the k-th can enter.
  [[nodiscard]] float tightened(float bound) const noexcept {
    return size == k ? std::max(bound, above(values[k - 1])) : bound;
  }
};

// The top k (at most 16) of an FP32 row of `count` values into `top`; false when no vector path
// applies, the row holds fewer than k numbers, or its NaNs are more than the AVX-512 kernel's
// block maxima step over: the general path then places the NaNs.
bool select_fp32(const std::byte* p, std::size_t count, std::size_t k, fp32_top& top);

// The indices of the top k of an FP32 row written to out[0, k), or false where select_fp32 is.
bool select_fp32_into(const std::byte* p, std::size_t count, std::size_t k, std::uint64_t* out);

}  // namespace oip::detail
