#include "detail/bytes_format.hpp"
#include "detail/number_format.hpp"

#include <oip/classification.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string_view>
#include <type_traits>
#include <utility>

#include <fmt/format.h>

#if defined(__x86_64__)
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12 warns inside its own AVX-512 intrinsics (_mm512_undefined_* at -O1): a false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>
#endif

namespace oip {

namespace {

// The values compared: 16-bit floats as float, everything else as itself.
template <class T>
using compared_t =
    std::conditional_t<std::is_same_v<T, half> || std::is_same_v<T, bfloat16>, float, T>;

template <class T>
compared_t<T> value_at(const buffer& data, std::size_t index) noexcept {
  if constexpr (std::is_same_v<T, half> || std::is_same_v<T, bfloat16>) {
    return to_float(data.load<T>(index));
  } else {
    return data.load<T>(index);
  }
}

// The best `k` (value, index) pairs seen so far, best first. Up to `inline_capacity` of them live
// in the object itself: the usual top-1 or top-5 allocates nothing.
template <class C>
class top_list {
 public:
  // No default member values: the inline storage is left uninitialised until used.
  struct item {
    C first;
    std::uint64_t second;
  };

  explicit top_list(std::size_t k) : k_{k} {
    if (k_ >= inline_capacity) heap_.resize(k_ + 1);
  }

  // Whether (a, ia) ranks above (b, ib): larger first, NaN last, ties lower index first.
  static bool ranks_above(C a, std::uint64_t ia, C b, std::uint64_t ib) noexcept {
    if constexpr (std::is_floating_point_v<C>) {
      const bool a_nan = std::isnan(a);
      const bool b_nan = std::isnan(b);
      if (a_nan || b_nan) return a_nan == b_nan ? ia < ib : b_nan;
    }
    if (a != b) return a > b;
    return ia < ib;
  }

  void offer(C value, std::uint64_t index) noexcept {
    item* items = data();
    if (size_ == k_) {
      if (!ranks_above(value, index, items[size_ - 1].first, items[size_ - 1].second)) return;
      --size_;
    }
    std::size_t at = size_;
    while (at > 0 && ranks_above(value, index, items[at - 1].first, items[at - 1].second)) {
      items[at] = items[at - 1];
      --at;
    }
    items[at] = item{value, index};
    ++size_;
  }

  // When set, only values strictly above it can enter (indices only grow, so a tie never does).
  [[nodiscard]] bool has_threshold() const noexcept {
    if (size_ < k_) return false;
    if constexpr (std::is_floating_point_v<C>) {
      if (std::isnan(data()[size_ - 1].first)) return false;
    }
    return true;
  }
  [[nodiscard]] C threshold() const noexcept { return data()[size_ - 1].first; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] std::uint64_t index(std::size_t i) const noexcept { return data()[i].second; }

 private:
  static constexpr std::size_t inline_capacity = 17;
  [[nodiscard]] item* data() noexcept { return k_ < inline_capacity ? inline_ : heap_.data(); }
  [[nodiscard]] const item* data() const noexcept {
    return k_ < inline_capacity ? inline_ : heap_.data();
  }
  std::size_t k_;
  std::size_t size_ = 0;
  item inline_[inline_capacity];  // NOLINT(cppcoreguidelines-pro-type-member-init): filled before
                                  // read
  std::vector<item> heap_;
};

// --- vector kernels ------------------------------------------------------------------------------
// Plain loops with fixed trip counts that the compiler vectorises; compiled three times (baseline,
// AVX2, AVX-512) and picked at run time like the FP16 kernels.

constexpr std::size_t block = 64;  // values skipped per test when none can enter
constexpr std::size_t lanes = 16;  // running maxima that give the first bound

template <class C>
C lowest_value() noexcept {
  if constexpr (std::is_floating_point_v<C>) {
    return -std::numeric_limits<C>::infinity();
  } else {
    return std::numeric_limits<C>::lowest();
  }
}

template <class C>
[[gnu::always_inline]] inline C load_at(const std::byte* p, std::size_t i) noexcept {
  C v;
  std::memcpy(&v, p + i * sizeof(C), sizeof(C));
  return v;
}

// The maximum of each of `lanes` interleaved columns over `chunks` rows of `lanes` values. NaN is
// never taken (`v > m` is false for it).
template <class C>
[[gnu::always_inline]] inline void lane_maxima(const std::byte* p, std::size_t chunks,
                                               C* out) noexcept {
  C m[lanes];
  for (std::size_t j = 0; j < lanes; ++j) m[j] = lowest_value<C>();
  for (std::size_t c = 0; c < chunks; ++c) {
    for (std::size_t j = 0; j < lanes; ++j) {
      const C v = load_at<C>(p, c * lanes + j);
      m[j] = v > m[j] ? v : m[j];
    }
  }
  for (std::size_t j = 0; j < lanes; ++j) out[j] = m[j];
}

// The first of `blocks` blocks of `block` values holding a value above `bound` (at or above, when
// `inclusive`), or `blocks`.
template <class C, bool inclusive>
[[gnu::always_inline]] inline std::size_t first_block(const std::byte* p, std::size_t blocks,
                                                      C bound) noexcept {
  for (std::size_t b = 0; b < blocks; ++b) {
    unsigned hit = 0;
    for (std::size_t j = 0; j < block; ++j) {
      const C v = load_at<C>(p, b * block + j);
      hit |= static_cast<unsigned>(inclusive ? v >= bound : v > bound);
    }
    if (hit != 0) return b;
  }
  return blocks;
}

constexpr std::size_t sub_block = 16;

template <class C>
bool any_passes(const std::byte* p, C bound, bool inclusive) noexcept {
  unsigned hit = 0;
  if (inclusive) {
    for (std::size_t j = 0; j < sub_block; ++j)
      hit |= static_cast<unsigned>(load_at<C>(p, j) >= bound);
  } else {
    for (std::size_t j = 0; j < sub_block; ++j)
      hit |= static_cast<unsigned>(load_at<C>(p, j) > bound);
  }
  return hit != 0;
}

template <class C>
struct kernels {
  static void lane_maxima_base(const std::byte* p, std::size_t chunks, C* out) noexcept {
    lane_maxima<C>(p, chunks, out);
  }
  template <bool inclusive>
  static std::size_t first_block_base(const std::byte* p, std::size_t blocks, C bound) noexcept {
    return first_block<C, inclusive>(p, blocks, bound);
  }
#if defined(__x86_64__)
  __attribute__((target("avx2"))) static void lane_maxima_avx2(const std::byte* p,
                                                               std::size_t chunks,
                                                               C* out) noexcept {
    if constexpr (std::is_same_v<C, float>) {
      // GCC keeps a float `v > m ? v : m` scalar (NaN rules); maxps(v, m) returns m for a NaN v,
      // which is the same rule.
      __m256 m0 = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
      __m256 m1 = m0;
      const auto* f = reinterpret_cast<const float*>(p);
      for (std::size_t c = 0; c < chunks; ++c) {
        m0 = _mm256_max_ps(_mm256_loadu_ps(f + c * lanes), m0);
        m1 = _mm256_max_ps(_mm256_loadu_ps(f + c * lanes + 8), m1);
      }
      _mm256_storeu_ps(out, m0);
      _mm256_storeu_ps(out + 8, m1);
    } else {
      lane_maxima<C>(p, chunks, out);
    }
  }
  template <bool inclusive>
  __attribute__((target("avx2"))) static std::size_t first_block_avx2(const std::byte* p,
                                                                      std::size_t blocks,
                                                                      C bound) noexcept {
    return first_block<C, inclusive>(p, blocks, bound);
  }
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) static void lane_maxima_avx512(
      const std::byte* p, std::size_t chunks, C* out) noexcept {
    if constexpr (std::is_same_v<C, float>) {
      __m512 m = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
      const auto* f = reinterpret_cast<const float*>(p);
      for (std::size_t c = 0; c < chunks; ++c) m = _mm512_max_ps(_mm512_loadu_ps(f + c * lanes), m);
      _mm512_storeu_ps(out, m);
    } else {
      lane_maxima<C>(p, chunks, out);
    }
  }
  template <bool inclusive>
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) static std::size_t
  first_block_avx512(const std::byte* p, std::size_t blocks, C bound) noexcept {
    return first_block<C, inclusive>(p, blocks, bound);
  }
#endif

  static void maxima(const std::byte* p, std::size_t chunks, C* out) noexcept {
#if defined(__x86_64__)
    switch (detail::best_simd_path()) {
      case detail::simd_path::avx512: return lane_maxima_avx512(p, chunks, out);
      case detail::simd_path::avx2_f16c: return lane_maxima_avx2(p, chunks, out);
      case detail::simd_path::portable: break;
    }
#endif
    lane_maxima_base(p, chunks, out);
  }

  template <bool inclusive>
  static std::size_t skip(const std::byte* p, std::size_t blocks, C bound) noexcept {
#if defined(__x86_64__)
    switch (detail::best_simd_path()) {
      case detail::simd_path::avx512: return first_block_avx512<inclusive>(p, blocks, bound);
      case detail::simd_path::avx2_f16c: return first_block_avx2<inclusive>(p, blocks, bound);
      case detail::simd_path::portable: break;
    }
#endif
    return first_block_base<inclusive>(p, blocks, bound);
  }
};

// --- FP32, the classifier's usual output: hand-written kernels ---------------------------------
// The same bound as select_bounded below, then one pass that compares 64 values at a time against
// it and offers only the values that pass. Once k values are held, the bound becomes the k-th
// value itself, and later values must exceed it (ties go to the lower index).

// The k-th largest of 16 values (none NaN) is the largest value that at least k of them reach;
// reaching[j] counts the values at or above values[j].
inline float kth_largest_of_16(const float* values, const unsigned* reaching,
                               std::size_t k) noexcept {
  float best = -std::numeric_limits<float>::infinity();
  for (std::size_t j = 0; j < 16; ++j) {
    if (reaching[j] >= k && values[j] > best) best = values[j];
  }
  return best;
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

// Offers p[at + j] for each set bit j of `mask`.
inline void offer_each(const std::byte* p, std::size_t at, std::uint64_t mask,
                       fp32_top& top) noexcept {
  for (; mask != 0; mask &= mask - 1) {
    const std::size_t i = at + static_cast<std::size_t>(std::countr_zero(mask));
    top.offer(load_at<float>(p, i), static_cast<std::uint32_t>(i));
  }
}

// The same, then tightens `bound` once k values are held.
inline void offer_bits(const std::byte* p, std::size_t at, std::uint64_t mask, fp32_top& top,
                       float& bound) noexcept {
  offer_each(p, at, mask, top);
  bound = top.tightened(bound);
}

inline void offer_tail(const std::byte* p, std::size_t from, std::size_t count, fp32_top& top,
                       float& bound) noexcept {
  for (std::size_t i = from; i < count; ++i) {
    if (load_at<float>(p, i) >= bound) offer_bits(p, i, 1, top, bound);
  }
}

constexpr std::size_t fp32_step = 64;
// The bound comes from a prefix that stays in cache; the full pass then reads the row once.
constexpr std::size_t fp32_sampled = std::size_t{1} << 14U;

#if defined(__x86_64__)
__attribute__((target("avx512f"))) inline __mmask16 reaches(const std::byte* p, std::size_t i,
                                                            __m512 bound) noexcept {
  return _mm512_cmp_ps_mask(_mm512_loadu_ps(p + i * 4), bound, _CMP_GE_OQ);
}

// For each lane of m, how many lanes hold a value at or above its own (itself included): one
// comparison of m with each of its fifteen other rotations. (Counting through memory, lane by lane,
// was 10 ns slower: the sixteen counts were stored one by one and read back as one vector.) The
// counts are summed in three chains: the kernel's time follows this latency, which every later
// step waits for.
template <int... rotation>
__attribute__((target("avx512f"))) inline __m512i lanes_reaching(
    __m512 m, std::integer_sequence<int, rotation...> /*unused*/) noexcept {
  const __m512i bits = _mm512_castps_si512(m);
  const __m512i one = _mm512_set1_epi32(1);
  // Each lane reaches itself: m holds no NaN.
  __m512i chains[3] = {one, _mm512_setzero_si512(), _mm512_setzero_si512()};
  ((chains[rotation % 3] = _mm512_mask_add_epi32(
        chains[rotation % 3],
        _mm512_cmp_ps_mask(_mm512_castsi512_ps(_mm512_alignr_epi32(bits, bits, rotation + 1)), m,
                           _CMP_GE_OQ),
        chains[rotation % 3], one)),
   ...);
  return _mm512_add_epi32(_mm512_add_epi32(chains[0], chains[1]), chains[2]);
}

// The largest value in each lane of the 64 values at `at`, or NaN in the lanes of `nan_seen`. The
// pairs are reduced with vrangeps (max), which returns the other operand for a quiet NaN, but a NaN
// for a signalling NaN or two NaNs: such a lane is flagged, and the caller takes the general path.
__attribute__((target("avx512f,avx512dq"))) inline __m512 block_lane_maxima(
    const std::byte* at, __mmask16& nan_seen) noexcept {
  constexpr int max_of_values = 0x05;
  const __m512 low = _mm512_range_ps(_mm512_loadu_ps(at), _mm512_loadu_ps(at + 64), max_of_values);
  const __m512 high =
      _mm512_range_ps(_mm512_loadu_ps(at + 128), _mm512_loadu_ps(at + 192), max_of_values);
  nan_seen |= _mm512_cmp_ps_mask(low, high, _CMP_UNORD_Q);
  return _mm512_max_ps(low, high);
}

// The values of the block at `i` that reach `bound`, as one 64-bit mask. The four 16-bit masks are
// joined in mask registers: moving each to a general register to shift and join took more
// instructions, and the kernel's time follows its instruction count.
__attribute__((target("avx512f,avx512bw"))) inline std::uint64_t block_reaching(
    const std::byte* p, std::size_t i, __m512 bound) noexcept {
  const __mmask32 low = _mm512_kunpackw(reaches(p, i + 16, bound), reaches(p, i, bound));
  const __mmask32 high = _mm512_kunpackw(reaches(p, i + 48, bound), reaches(p, i + 32, bound));
  return _cvtmask64_u64(_mm512_kunpackd(high, low));
}

// The same for the last values of a row, fewer than a block (`n` < 64): each row of the block is
// masked to the values in the row.
__attribute__((target("avx512f,avx512bw"))) inline __mmask16 row_part_reaching(
    const std::byte* p, std::size_t i, std::uint64_t in_row, __m512 bound) noexcept {
  const auto valid = static_cast<__mmask16>(in_row);
  return _mm512_mask_cmp_ps_mask(valid, _mm512_maskz_loadu_ps(valid, p + i * 4), bound, _CMP_GE_OQ);
}
__attribute__((target("avx512f,avx512bw"))) inline std::uint64_t part_reaching(
    const std::byte* p, std::size_t i, std::size_t n, __m512 bound) noexcept {
  const std::uint64_t in_row = (std::uint64_t{1} << n) - 1U;
  const __mmask32 low = _mm512_kunpackw(row_part_reaching(p, i + 16, in_row >> 16U, bound),
                                        row_part_reaching(p, i, in_row, bound));
  const __mmask32 high = _mm512_kunpackw(row_part_reaching(p, i + 48, in_row >> 48U, bound),
                                         row_part_reaching(p, i + 32, in_row >> 32U, bound));
  return _cvtmask64_u64(_mm512_kunpackd(high, low));
}

__attribute__((target("avx512f,avx512dq,avx512bw"))) bool select_fp32_avx512(const std::byte* p,
                                                                             std::size_t count,
                                                                             std::size_t k,
                                                                             fp32_top& top) {
  // Pass 1 over the sampled prefix keeps each block's maxima, its sixteen lanes folded to eight,
  // so that pass 2 tests a block of the prefix with one comparison. The test is a 256-bit VEX
  // comparison and vtestps, with no mask register: 2 ns faster than the 512-bit comparison into
  // a mask and kortest on Zen 4.
  const std::size_t sampled_blocks = std::min(count, fp32_sampled) / fp32_step;
  __m256 block_maxima[fp32_sampled / fp32_step];
  __m512 m = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __mmask16 nan_seen = 0;
  for (std::size_t blk = 0; blk < sampled_blocks; ++blk) {
    const __m512 maxima = block_lane_maxima(p + blk * fp32_step * 4, nan_seen);
    block_maxima[blk] =
        _mm256_max_ps(_mm512_castps512_ps256(maxima), _mm512_extractf32x8_ps(maxima, 1));
    m = _mm512_max_ps(maxima, m);
  }
  if (nan_seen != 0) return false;
  // The bound is the k-th largest lane maximum. Without ties it is the one lane that exactly k
  // lanes reach, taken by a compress and a broadcast; that is 4 ns faster than the reduction that
  // ties need (the largest that at least k lanes reach).
  const __m512i reaching = lanes_reaching(m, std::make_integer_sequence<int, 15>{});
  const __m512i wanted = _mm512_set1_epi32(static_cast<int>(k));
  const __mmask16 kth = _mm512_cmpeq_epi32_mask(reaching, wanted);
  __m512 b;
  if (kth != 0) [[likely]] {
    b = _mm512_broadcastss_ps(_mm512_castps512_ps128(_mm512_maskz_compress_ps(kth, m)));
  } else {
    b = _mm512_set1_ps(_mm512_mask_reduce_max_ps(_mm512_cmpge_epu32_mask(reaching, wanted), m));
  }
  float bound = _mm512_cvtss_f32(b);
  // The prefix's values that reach the bound are offered block by block, the bound left as it is:
  // tightening it after each block's offers made the next block's test wait for them, a chain as
  // long as the prefix. It is tightened after every 64 offers, so that a row of equal values is
  // not offered whole.
  std::size_t offered = 0;
  for (std::size_t at = 0; at < sampled_blocks * fp32_step; at += fp32_step) {
    const __m256 reached =
        _mm256_cmp_ps(block_maxima[at / fp32_step], _mm512_castps512_ps256(b), _CMP_GE_OQ);
    if (_mm256_testz_ps(reached, reached) != 0) continue;
    if (offered > fp32_step) {
      bound = top.tightened(bound);
      b = _mm512_set1_ps(bound);
      offered = 0;
    }
    const std::uint64_t mask = block_reaching(p, at, b);
    offered += static_cast<std::size_t>(std::popcount(mask));
    offer_each(p, at, mask, top);
  }
  std::size_t i = sampled_blocks * fp32_step;
  if (count - i >= fp32_step) {
    // Past the prefix, each block's values are offered as soon as it is tested, and the bound
    // tightened after each.
    bound = top.tightened(bound);
    for (; i + fp32_step <= count; i += fp32_step) {
      b = _mm512_set1_ps(bound);
      const __m512 maxima = block_lane_maxima(p + i * 4, nan_seen);
      if (nan_seen != 0) return false;
      if (_mm512_cmp_ps_mask(maxima, b, _CMP_GE_OQ) != 0) {
        offer_bits(p, i, block_reaching(p, i, b), top, bound);
      }
    }
    b = _mm512_set1_ps(bound);
  }
  // The last values, fewer than a block. In a row that fits the prefix they are tested against
  // the bound as it is: tightening it first made them wait for every offer before.
  if (i < count) offer_each(p, i, part_reaching(p, i, count - i, b), top);
  return top.size == k;
}

__attribute__((target("avx2"))) inline __m256 load8(const std::byte* p, std::size_t i) noexcept {
  return _mm256_loadu_ps(reinterpret_cast<const float*>(p + i * 4));
}

// The largest number of each lane of the values at i, i + 16, i + 32 and i + 48 (-inf where all
// four are NaN): maxps returns its second operand when either is NaN, and that operand is the
// running maximum, which starts at -inf.
__attribute__((target("avx2"))) inline __m256 lane_maxima_of_4(const std::byte* p,
                                                               std::size_t i) noexcept {
  __m256 m = _mm256_max_ps(load8(p, i), _mm256_set1_ps(-std::numeric_limits<float>::infinity()));
  m = _mm256_max_ps(load8(p, i + 16), m);
  m = _mm256_max_ps(load8(p, i + 32), m);
  return _mm256_max_ps(load8(p, i + 48), m);
}

// The values of the 64 at `i` that reach `bound`, as one mask.
__attribute__((target("avx2"))) inline std::uint64_t block_reaching_avx2(const std::byte* p,
                                                                         std::size_t i,
                                                                         __m256 bound) noexcept {
  std::uint64_t mask = 0;
  for (std::size_t j = 0; j < fp32_step; j += 8) {
    const auto bits = static_cast<unsigned>(
        _mm256_movemask_ps(_mm256_cmp_ps(load8(p, i + j), bound, _CMP_GE_OQ)));
    mask |= std::uint64_t{bits} << j;
  }
  return mask;
}

__attribute__((target("avx2"))) bool select_fp32_avx2(const std::byte* p, std::size_t count,
                                                      std::size_t k, fp32_top& top) {
  // Pass 1 over the sampled prefix keeps each block's maxima, folded to eight lanes, so that pass
  // 2 tests a block of the prefix with one comparison instead of eight.
  const std::size_t sampled_blocks = std::min(count, fp32_sampled) / fp32_step;
  __m256 block_maxima[fp32_sampled / fp32_step];
  __m256 low = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  __m256 high = low;
  for (std::size_t blk = 0; blk < sampled_blocks; ++blk) {
    const std::size_t i = blk * fp32_step;
    const __m256 block_low = lane_maxima_of_4(p, i);
    const __m256 block_high = lane_maxima_of_4(p, i + 8);
    block_maxima[blk] = _mm256_max_ps(block_low, block_high);
    low = _mm256_max_ps(block_low, low);
    high = _mm256_max_ps(block_high, high);
  }
  float maxima[16];
  _mm256_storeu_ps(maxima, low);
  _mm256_storeu_ps(maxima + 8, high);
  unsigned reaching[16];
  for (std::size_t j = 0; j < 16; ++j) {
    const __m256 v = _mm256_set1_ps(maxima[j]);
    const auto low_bits =
        static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(low, v, _CMP_GE_OQ)));
    const auto high_bits =
        static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(high, v, _CMP_GE_OQ)));
    reaching[j] = static_cast<unsigned>(std::popcount(low_bits | high_bits << 8U));
  }
  float bound = kth_largest_of_16(maxima, reaching, k);
  for (std::size_t blk = 0; blk < sampled_blocks; ++blk) {
    const __m256 b = _mm256_set1_ps(bound);
    const __m256 reached = _mm256_cmp_ps(block_maxima[blk], b, _CMP_GE_OQ);
    if (_mm256_testz_ps(reached, reached) != 0) continue;
    offer_bits(p, blk * fp32_step, block_reaching_avx2(p, blk * fp32_step, b), top, bound);
  }
  std::size_t i = sampled_blocks * fp32_step;
  for (; i + fp32_step <= count; i += fp32_step) {
    const __m256 b = _mm256_set1_ps(bound);
    const std::uint64_t mask = block_reaching_avx2(p, i, b);
    if (mask != 0) offer_bits(p, i, mask, top, bound);
  }
  offer_tail(p, i, count, top, bound);
  return top.size == k;
}
#endif

using fp32_kernel = bool (*)(const std::byte*, std::size_t, std::size_t, fp32_top&);

bool no_fp32_kernel(const std::byte* /*p*/, std::size_t /*count*/, std::size_t /*k*/,
                    fp32_top& /*top*/) noexcept {
  return false;
}

fp32_kernel best_fp32_kernel() noexcept {
#if defined(__x86_64__)
  switch (detail::best_simd_path()) {
    case detail::simd_path::avx512: return select_fp32_avx512;
    case detail::simd_path::avx2_f16c: return select_fp32_avx2;
    case detail::simd_path::portable: break;
  }
#endif
  return no_fp32_kernel;
}

// False when no vector path applies, the row holds fewer than k numbers, or its NaNs are more than
// the AVX-512 kernel's block maxima step over: the general path then places the NaNs. The kernel
// is chosen once: asking best_simd_path() on each call cost 1 ns of a 70 ns call.
bool select_fp32(const std::byte* p, std::size_t count, std::size_t k, fp32_top& top) {
  if (k > 16 || count < fp32_step || count > std::numeric_limits<std::uint32_t>::max())
    return false;
  static const fp32_kernel kernel = best_fp32_kernel();
  return kernel(p, count, k, top);
}

// The indices of the top k of an FP32 row written to out[0, k), or false where select_fp32 is.
bool select_fp32_into(const std::byte* p, std::size_t count, std::size_t k, std::uint64_t* out) {
  fp32_top top{k};
  if (!select_fp32(p, count, k, top)) return false;
  for (std::size_t i = 0; i < k; ++i) out[i] = top.indices[i];
  return true;
}

// Fast selection over values compared as stored (every type but FP16/BF16), for k <= lanes.
// The k-th largest of the lane maxima is a lower bound of the k-th largest value (those k maxima
// are k values of the row), so one vector pass finds it and a second offers only the values at or
// above it. False when the row holds fewer than k numbers (NaN must fill the rest): the caller
// then takes the general path.
template <class C>
bool select_bounded(const std::byte* base, std::size_t count, top_list<C>& top, std::size_t k) {
  // The bound comes from a prefix that stays in cache; the full pass then reads the row once.
  const std::size_t sampled = std::min(count, std::size_t{1} << 14U);
  C maxima[lanes];
  kernels<C>::maxima(base, sampled / lanes, maxima);
  std::nth_element(maxima, maxima + (k - 1), maxima + lanes, std::greater<>{});
  C bound = maxima[k - 1];
  bool inclusive = true;
  const auto passes = [&](C v) { return inclusive ? v >= bound : v > bound; };
  const auto take = [&](C v, std::size_t i) {
    top.offer(v, i);
    if (inclusive && top.has_threshold()) {
      bound = top.threshold();
      inclusive = false;
    }
  };
  std::size_t i = 0;
  while (count - i >= block) {
    const std::size_t blocks = (count - i) / block;
    const std::size_t found =
        inclusive ? kernels<C>::template skip<true>(base + i * sizeof(C), blocks, bound)
                  : kernels<C>::template skip<false>(base + i * sizeof(C), blocks, bound);
    i += found * block;
    if (found == blocks) break;
    // A block with a candidate: its quarters are tested the same way before any value is.
    for (const std::size_t end = i + block; i < end; i += sub_block) {
      if (!any_passes<C>(base + i * sizeof(C), bound, inclusive)) continue;
      for (std::size_t j = i; j < i + sub_block; ++j) {
        const C v = load_at<C>(base, j);
        if (passes(v)) take(v, j);
      }
    }
  }
  for (; i < count; ++i) {
    const C v = load_at<C>(base, i);
    if (passes(v)) take(v, i);
  }
  return top.size() == k;
}

// FP16 and BF16 rows: each chunk converted to FP32 (exactly, so order and ties are unchanged) and
// run through the FP32 kernel, the chunks' best k merged. Comparing value by value, converting
// each, was about 30 times slower than FP32. False where the FP32 kernel declines a chunk (the
// general path then takes the whole row).
template <class T>
bool select_16_bit_row(const std::byte* p, std::size_t count, std::size_t k,
                       top_list<float>& best) {
  constexpr std::size_t chunk = 2048;
  float converted[chunk + fp32_step];  // NOLINT(cppcoreguidelines-pro-type-member-init)
  const detail::simd_path path = detail::best_simd_path();
  for (std::size_t at = 0; at < count;) {
    std::size_t n = std::min(chunk, count - at);
    if (count - at - n < fp32_step) n = count - at;  // a short remainder joins this chunk
    if constexpr (std::is_same_v<T, half>) {
      detail::half_to_float(path, p + at * sizeof(T), converted, n);
    } else {
      detail::bfloat16_to_float(path, p + at * sizeof(T), converted, n);
    }
    fp32_top top{k};
    if (!select_fp32(reinterpret_cast<const std::byte*>(converted), n, k, top)) return false;
    for (std::size_t i = 0; i < top.size; ++i) best.offer(top.values[i], at + top.indices[i]);
    at += n;
  }
  return true;
}

// Writes the indices (relative to begin) of the top k of data[begin, begin + count) to out[0, k).
template <class T>
void select_row(const buffer& data, std::size_t begin, std::size_t count, std::size_t k,
                std::uint64_t* out) {
  using C = compared_t<T>;
  if (k == 0) return;
  const auto emit = [&](const top_list<C>& top) {
    for (std::size_t i = 0; i < top.size(); ++i) out[i] = top.index(i);
  };
  if constexpr (std::is_same_v<T, float>) {
    if (select_fp32_into(data.data() + begin * sizeof(float), count, k, out)) return;
  }
  if constexpr (std::is_same_v<T, half> || std::is_same_v<T, bfloat16>) {
    if (k <= 16 && count >= fp32_step) {
      top_list<float> top{k};
      if (select_16_bit_row<T>(data.data() + begin * sizeof(T), count, k, top)) return emit(top);
    }
  }
  if constexpr (std::is_same_v<C, T>) {
    if (k <= lanes && count >= lanes) {
      top_list<C> top{k};
      if (select_bounded<C>(data.data() + begin * sizeof(T), count, top, k)) return emit(top);
    }
  }
  // The general path: any type, any k, NaN anywhere.
  top_list<C> top{k};
  for (std::size_t i = 0; i < count; ++i) top.offer(value_at<T>(data, begin + i), i);
  emit(top);
}

struct row_layout {
  std::size_t rows = 1;
  std::size_t row_size = 0;
  std::size_t k = 0;
};

result<row_layout> layout_of(const tensor& output, std::size_t n, bool batched) {
  if (output.type() == datatype::bytes || output.type() == datatype::boolean) {
    return status{errc::invalid_argument,
                  fmt::format("class result not available for output '{}' due to unsupported "
                              "type '{}'",
                              output.name(), to_string(output.type()))};
  }
  row_layout layout;
  const auto count = static_cast<std::size_t>(output.element_count());
  if (batched) {
    if (output.shape().empty()) {
      return status{
          errc::invalid_argument,
          fmt::format("output '{}' has no batch dimension to classify by", output.name())};
    }
    layout.rows = static_cast<std::size_t>(output.shape()[0]);
  }
  layout.row_size = layout.rows == 0 ? 0 : count / layout.rows;
  layout.k = std::min(n, layout.row_size);
  return layout;
}

template <class Visit>
auto visit_numeric(datatype type, Visit&& visit) {
  switch (type) {
    case datatype::uint8: return visit(std::uint8_t{});
    case datatype::uint16: return visit(std::uint16_t{});
    case datatype::uint32: return visit(std::uint32_t{});
    case datatype::uint64: return visit(std::uint64_t{});
    case datatype::int8: return visit(std::int8_t{});
    case datatype::int16: return visit(std::int16_t{});
    case datatype::int32: return visit(std::int32_t{});
    case datatype::int64: return visit(std::int64_t{});
    case datatype::fp16: return visit(half{});
    case datatype::bf16: return visit(bfloat16{});
    case datatype::fp32: return visit(float{});
    case datatype::fp64: return visit(double{});
    case datatype::boolean:
    case datatype::bytes: break;
  }
  return visit(float{});  // unreachable: layout_of refused BOOL and BYTES
}

template <class T>
char* write_value(char* at, T value) {
  if constexpr (std::is_same_v<T, half> || std::is_same_v<T, bfloat16>) {
    return detail::write_half(at, value, false);
  } else if constexpr (std::is_floating_point_v<T>) {
    return detail::write_floating(at, value, false);
  } else {
    return detail::write_integer(at, value);
  }
}

// Every case: the row layout, the type visit, then each row. Kept out of top_classes so that the
// FP32 fast path does not pay for its registers.
[[gnu::noinline]] result<std::size_t> top_classes_by_row(const tensor& output, std::size_t n,
                                                         bool batched,
                                                         std::span<std::uint64_t> out) {
  result<row_layout> layout = layout_of(output, n, batched);
  if (!layout) return std::move(layout).error();
  const std::size_t total = layout->rows * layout->k;
  if (out.size() < total) {
    return status{errc::invalid_argument,
                  fmt::format("{} indices do not fit the top classes of output '{}': {} are needed",
                              out.size(), output.name(), total)};
  }
  visit_numeric(output.type(), [&](auto tag) {
    using T = decltype(tag);
    for (std::size_t row = 0; row < layout->rows; ++row) {
      select_row<T>(output.data(), row * layout->row_size, layout->row_size, layout->k,
                    out.data() + row * layout->k);
    }
  });
  return total;
}

}  // namespace

result<std::size_t> top_classes(const tensor& output, std::size_t n, bool batched,
                                std::span<std::uint64_t> out) {
  // A classifier's usual output, one FP32 row, goes straight to the vector kernel: the general
  // path's layers (the row layout, the type visit, row by row, and the registers they need saved)
  // took about a tenth of a 1,000-value call.
  if (output.type() == datatype::fp32 &&
      (!batched || (!output.shape().empty() && output.shape()[0] == 1))) {
    const auto count = static_cast<std::size_t>(output.element_count());
    const std::size_t k = std::min(n, count);
    if (k > 0 && out.size() >= k && select_fp32_into(output.data().data(), count, k, out.data())) {
      return k;
    }
  }
  return top_classes_by_row(output, n, batched, out);
}

result<std::vector<std::uint64_t>> top_classes(const tensor& output, std::size_t n, bool batched) {
  result<row_layout> layout = layout_of(output, n, batched);
  if (!layout) return std::move(layout).error();
  std::vector<std::uint64_t> indices(layout->rows * layout->k);
  result<std::size_t> written = top_classes(output, n, batched, indices);
  if (!written) return std::move(written).error();
  return indices;
}

result<tensor> classify(const tensor& output, std::size_t n, bool batched,
                        std::span<const std::string> labels) {
  result<row_layout> layout = layout_of(output, n, batched);
  if (!layout) return std::move(layout).error();
  // Most requests ask for a few classes of one row: their indices stay on the stack.
  const std::size_t total = layout->rows * layout->k;
  std::array<std::uint64_t, 64> few;  // NOLINT(cppcoreguidelines-pro-type-member-init)
  std::vector<std::uint64_t> many;
  std::span<std::uint64_t> top{few.data(), std::min(total, few.size())};
  if (total > few.size()) {
    many.resize(total);
    top = many;
  }
  result<std::size_t> written = top_classes(output, n, batched, top);
  if (!written) return std::move(written).error();

  // The BYTES elements, each a 4-byte length then "<value>:<index>[:<label>]", written straight
  // into the tensor's bytes.
  std::string elements;
  elements.reserve(top.size() * 32);
  bool too_long = false;
  visit_numeric(output.type(), [&](auto tag) {
    using T = decltype(tag);
    for (std::size_t i = 0; i < top.size(); ++i) {
      const std::size_t row = layout->k == 0 ? 0 : i / layout->k;
      const std::uint64_t index = top[i];
      char text[2 * detail::max_number_chars + 1];
      char* end = write_value(text, output.data().load<T>(row * layout->row_size + index));
      *end++ = ':';
      end = detail::write_integer(end, index);
      const bool labelled = index < labels.size();
      const std::string_view label = labelled ? std::string_view{labels[index]} : "";
      const auto text_size = static_cast<std::size_t>(end - text);
      const std::size_t size = text_size + (labelled ? 1 + label.size() : 0);
      if (size > std::numeric_limits<std::uint32_t>::max()) {
        too_long = true;  // a BYTES element's length has 32 bits
        return;
      }
      std::byte prefix[4];
      detail::write_bytes_length(prefix, static_cast<std::uint32_t>(size));
      elements.append(reinterpret_cast<const char*>(prefix), 4);
      elements.append(text, text_size);
      if (labelled) {
        elements += ':';
        elements += label;
      }
    }
  });
  if (too_long) {
    return status{
        errc::internal,
        fmt::format("a class label of output '{}' is too long for a BYTES element", output.name())};
  }
  shape_type shape;
  if (batched) shape.push_back(static_cast<std::int64_t>(layout->rows));
  shape.push_back(static_cast<std::int64_t>(layout->k));
  return tensor::make(output.name(), datatype::bytes, std::move(shape),
                      buffer::from_string(std::move(elements)));
}

}  // namespace oip
