// The classification extension's FP32 kernels: the same bound as the general selection
// (classification.cpp), then one pass that compares 64 values at a time against it and offers
// only the values that pass. Compiled with each instruction set's target attribute and chosen
// once at run time.

#include "serving/detail/classification_fp32.hpp"

#include "core/detail/x86_intrinsics.hpp"

#include <oip/float16.hpp>

namespace oip::detail {

namespace {

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

}  // namespace

// The kernel is chosen once, not asked of best_simd_path() on each call.
bool select_fp32(const std::byte* p, std::size_t count, std::size_t k, fp32_top& top) {
  if (k > 16 || count < fp32_step || count > std::numeric_limits<std::uint32_t>::max())
    return false;
  static const fp32_kernel kernel = best_fp32_kernel();
  return kernel(p, count, k, top);
}

bool select_fp32_into(const std::byte* p, std::size_t count, std::size_t k, std::uint64_t* out) {
  fp32_top top{k};
  if (!select_fp32(p, count, k, top)) return false;
  for (std::size_t i = 0; i < k; ++i) out[i] = top.indices[i];
  return true;
}

}  // namespace oip::detail
