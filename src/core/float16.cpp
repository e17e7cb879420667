#include <oip/float16.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include <fmt/format.h>

#if defined(__x86_64__) || defined(_M_X64)
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12 warns inside its own AVX-512 intrinsics (_mm512_undefined_* at -O2): a false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <cpuid.h>
#include <immintrin.h>
#define OIP_X86 1
#else
#define OIP_X86 0
#endif

namespace oip::detail {

namespace {

// Scalar loops over unaligned bytes: the portable path, and the tail of every vector path.
template <class From, class To, class Convert>
void convert_scalar(const std::byte* in, std::byte* out, std::size_t count, Convert convert) {
  for (std::size_t i = 0; i < count; ++i) {
    From from;
    std::memcpy(&from, in + i * sizeof(From), sizeof(From));
    const To to = convert(from);
    std::memcpy(out + i * sizeof(To), &to, sizeof(To));
  }
}

void half_to_float_portable(const std::byte* in, std::byte* out, std::size_t count) {
  convert_scalar<half, float>(in, out, count, [](half h) { return to_float(h); });
}
void float_to_half_portable(const std::byte* in, std::byte* out, std::size_t count) {
  convert_scalar<float, half>(in, out, count, [](float f) { return to_half(f); });
}
void bfloat16_to_float_portable(const std::byte* in, std::byte* out, std::size_t count) {
  convert_scalar<bfloat16, float>(in, out, count, [](bfloat16 b) { return to_float(b); });
}
void float_to_bfloat16_portable(const std::byte* in, std::byte* out, std::size_t count) {
  convert_scalar<float, bfloat16>(in, out, count, [](float f) { return to_bfloat16(f); });
}

#if OIP_X86
// F16C's VCVTPH2PS/VCVTPS2PH convert subnormals exactly and ignore MXCSR's FTZ/DAZ, so they serve
// FP16. AVX512-BF16's VCVTNEPS2BF16 flushes subnormals to zero, so BF16 is done with integer
// arithmetic (the same rounding as the scalar code, eight or sixteen lanes at a time).

__attribute__((target("avx2,f16c"))) void half_to_float_avx2(const std::byte* in, std::byte* out,
                                                             std::size_t count) {
  std::size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i * 2));
    _mm256_storeu_ps(reinterpret_cast<float*>(out + i * 4), _mm256_cvtph_ps(h));
  }
  half_to_float_portable(in + i * 2, out + i * 4, count - i);
}

// Arrays whose output is larger than this go out with non-temporal stores: they would not stay in
// cache anyway, and streaming saves reading each output line before writing it.
constexpr std::size_t streaming_output_bytes = std::size_t{1} << 21U;

// Whether a narrowing to 16 bits streams its output, and how many elements to convert one by one
// first so that the output is 32-byte aligned.
struct streaming_plan {
  bool streaming = false;
  std::size_t head = 0;
};

streaming_plan plan_streaming(const std::byte* out, std::size_t count) {
  const auto address = reinterpret_cast<std::uintptr_t>(out);
  if (count * 2 < streaming_output_bytes || address % 2 != 0) return {};
  return {true, ((32 - address % 32) % 32) / 2};
}

__attribute__((target("avx2,f16c"))) void float_to_half_avx2(const std::byte* in, std::byte* out,
                                                             std::size_t count) {
  const streaming_plan plan = plan_streaming(out, count);
  float_to_half_portable(in, out, plan.head);
  std::size_t i = plan.head;
  if (plan.streaming) {
    for (; i + 16 <= count; i += 16) {
      const __m256 a = _mm256_loadu_ps(reinterpret_cast<const float*>(in + i * 4));
      const __m256 b = _mm256_loadu_ps(reinterpret_cast<const float*>(in + i * 4 + 32));
      const __m128i ha = _mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      const __m128i hb = _mm256_cvtps_ph(b, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      _mm256_stream_si256(reinterpret_cast<__m256i*>(out + i * 2), _mm256_set_m128i(hb, ha));
    }
    _mm_sfence();
  }
  for (; i + 8 <= count; i += 8) {
    const __m256 f = _mm256_loadu_ps(reinterpret_cast<const float*>(in + i * 4));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i * 2),
                     _mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  float_to_half_portable(in + i * 4, out + i * 2, count - i);
}

__attribute__((target("avx512f"))) void half_to_float_avx512(const std::byte* in, std::byte* out,
                                                             std::size_t count) {
  std::size_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i * 2));
    _mm512_storeu_ps(out + i * 4, _mm512_cvtph_ps(h));
  }
  half_to_float_portable(in + i * 2, out + i * 4, count - i);
}

__attribute__((target("avx2"))) __m256i bfloat16_to_float_lanes(__m128i b16) {
  const __m256i b = _mm256_cvtepu16_epi32(b16);
  const __m256i is_nan =
      _mm256_cmpgt_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x7FFF)), _mm256_set1_epi32(0x7F80));
  const __m256i quieted = _mm256_or_si256(b, _mm256_and_si256(is_nan, _mm256_set1_epi32(0x0040)));
  return _mm256_slli_epi32(quieted, 16);
}

__attribute__((target("avx2"))) void bfloat16_to_float_avx2(const std::byte* in, std::byte* out,
                                                            std::size_t count) {
  std::size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i * 2));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i * 4), bfloat16_to_float_lanes(b));
  }
  bfloat16_to_float_portable(in + i * 2, out + i * 4, count - i);
}

// Eight FP32 bit patterns to eight BF16 values in the low 16 bits of each 32-bit lane.
__attribute__((target("avx2"))) __m256i float_to_bfloat16_lanes(__m256i x) {
  const __m256i magnitude = _mm256_and_si256(x, _mm256_set1_epi32(0x7FFF'FFFF));
  const __m256i is_nan = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7F80'0000));
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
  const __m256i rounded =
      _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7FFF)), odd), 16);
  const __m256i nan = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x0040));
  return _mm256_blendv_epi8(rounded, nan, is_nan);
}

__attribute__((target("avx2"))) void float_to_bfloat16_avx2(const std::byte* in, std::byte* out,
                                                            std::size_t count) {
  const streaming_plan plan = plan_streaming(out, count);
  float_to_bfloat16_portable(in, out, plan.head);
  const bool streaming = plan.streaming;
  std::size_t i = plan.head;
  for (; i + 16 <= count; i += 16) {
    const __m256i lo =
        float_to_bfloat16_lanes(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i * 4)));
    const __m256i hi = float_to_bfloat16_lanes(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i * 4 + 32)));
    // packus works per 128-bit lane: [lo0-3 hi0-3 lo4-7 hi4-7]; restore the order of quadwords.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xD8);
    if (streaming) {
      _mm256_stream_si256(reinterpret_cast<__m256i*>(out + i * 2), packed);
    } else {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i * 2), packed);
    }
  }
  if (streaming) _mm_sfence();
  float_to_bfloat16_portable(in + i * 4, out + i * 2, count - i);
}

__attribute__((target("avx512f,avx512bw"))) void bfloat16_to_float_avx512(const std::byte* in,
                                                                          std::byte* out,
                                                                          std::size_t count) {
  std::size_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m512i b =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i * 2)));
    const __mmask16 is_nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(b, _mm512_set1_epi32(0x7FFF)),
                                                     _mm512_set1_epi32(0x7F80));
    const __m512i quieted = _mm512_mask_or_epi32(b, is_nan, b, _mm512_set1_epi32(0x0040));
    _mm512_storeu_si512(out + i * 4, _mm512_slli_epi32(quieted, 16));
  }
  bfloat16_to_float_portable(in + i * 2, out + i * 4, count - i);
}

__attribute__((target("avx512f,avx512bw"))) void float_to_bfloat16_avx512(const std::byte* in,
                                                                          std::byte* out,
                                                                          std::size_t count) {
  const streaming_plan plan = plan_streaming(out, count);
  float_to_bfloat16_portable(in, out, plan.head);
  const bool streaming = plan.streaming;
  std::size_t i = plan.head;
  for (; i + 16 <= count; i += 16) {
    const __m512i x = _mm512_loadu_si512(in + i * 4);
    const __mmask16 is_nan = _mm512_cmpgt_epu32_mask(
        _mm512_and_si512(x, _mm512_set1_epi32(0x7FFF'FFFF)), _mm512_set1_epi32(0x7F80'0000));
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
    const __m512i rounded = _mm512_srli_epi32(
        _mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7FFF)), odd), 16);
    const __m512i nan = _mm512_or_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(0x0040));
    const __m256i narrowed = _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(is_nan, rounded, nan));
    if (streaming) {
      _mm256_stream_si256(reinterpret_cast<__m256i*>(out + i * 2), narrowed);
    } else {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i * 2), narrowed);
    }
  }
  if (streaming) _mm_sfence();
  float_to_bfloat16_portable(in + i * 4, out + i * 2, count - i);
}

// CPUID and XGETBV directly: clang 14 (used for the fuzzers) knows no "f16c" in
// __builtin_cpu_supports. A feature counts only if the OS also saves the registers it uses.
simd_path detect_simd_path() noexcept {
  unsigned eax = 0;
  unsigned ebx = 0;
  unsigned ecx = 0;
  unsigned edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return simd_path::portable;
  const bool osxsave = (ecx & (1U << 27U)) != 0;
  const bool avx = (ecx & (1U << 28U)) != 0;
  const bool f16c = (ecx & (1U << 29U)) != 0;
  if (!osxsave || !avx) return simd_path::portable;
  unsigned xcr0 = 0;
  unsigned xcr0_high = 0;
  __asm__ volatile("xgetbv" : "=a"(xcr0), "=d"(xcr0_high) : "c"(0));
  const bool ymm_state = (xcr0 & 0x06U) == 0x06U;
  const bool zmm_state = (xcr0 & 0xE6U) == 0xE6U;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return simd_path::portable;
  const bool avx2 = (ebx & (1U << 5U)) != 0;
  const bool avx512f = (ebx & (1U << 16U)) != 0;
  const bool avx512dq = (ebx & (1U << 17U)) != 0;
  const bool avx512bw = (ebx & (1U << 30U)) != 0;
  if (zmm_state && avx512f && avx512dq && avx512bw && avx2 && f16c) return simd_path::avx512;
  if (ymm_state && avx2 && f16c) return simd_path::avx2_f16c;
  return simd_path::portable;
}
#else
simd_path detect_simd_path() noexcept { return simd_path::portable; }
#endif

using kernel = void (*)(const std::byte*, std::byte*, std::size_t);

struct kernel_set {
  kernel portable;
  kernel avx2;
  kernel avx512;
};

void run(const kernel_set& kernels, simd_path path, const void* in, void* out,
         std::size_t count) noexcept {
  const auto* src = static_cast<const std::byte*>(in);
  auto* dst = static_cast<std::byte*>(out);
#if OIP_X86
  switch (path) {
    case simd_path::avx512: kernels.avx512(src, dst, count); return;
    case simd_path::avx2_f16c: kernels.avx2(src, dst, count); return;
    case simd_path::portable: break;
  }
#else
  (void)path;
#endif
  kernels.portable(src, dst, count);
}

#if OIP_X86
constexpr kernel_set half_to_float_kernels{half_to_float_portable, half_to_float_avx2,
                                           half_to_float_avx512};
// The 512-bit VCVTPS2PH measured slower than two 256-bit ones on AMD Zen 4 (docs/performance.md);
// the conversion is memory-bound either way, so the AVX-512 path narrows with F16C.
constexpr kernel_set float_to_half_kernels{float_to_half_portable, float_to_half_avx2,
                                           float_to_half_avx2};
constexpr kernel_set bfloat16_to_float_kernels{bfloat16_to_float_portable, bfloat16_to_float_avx2,
                                               bfloat16_to_float_avx512};
constexpr kernel_set float_to_bfloat16_kernels{float_to_bfloat16_portable, float_to_bfloat16_avx2,
                                               float_to_bfloat16_avx512};
#else
constexpr kernel_set half_to_float_kernels{half_to_float_portable, nullptr, nullptr};
constexpr kernel_set float_to_half_kernels{float_to_half_portable, nullptr, nullptr};
constexpr kernel_set bfloat16_to_float_kernels{bfloat16_to_float_portable, nullptr, nullptr};
constexpr kernel_set float_to_bfloat16_kernels{float_to_bfloat16_portable, nullptr, nullptr};
#endif

}  // namespace

// OIP_SIMD=portable|avx2|avx512 caps the path, so that tests (and anyone comparing) can run the
// narrower kernels on a CPU that has wider ones.
simd_path capped_by_environment(simd_path detected) noexcept {
  const char* cap = std::getenv("OIP_SIMD");  // NOLINT(concurrency-mt-unsafe): read once
  if (cap == nullptr) return detected;
  const std::string_view wanted{cap};
  simd_path limit = simd_path::avx512;
  if (wanted == "portable") limit = simd_path::portable;
  if (wanted == "avx2") limit = simd_path::avx2_f16c;
  return std::min(detected, limit);
}

simd_path best_simd_path() noexcept {
  static const simd_path best = capped_by_environment(detect_simd_path());
  return best;
}

bool simd_path_supported(simd_path path) noexcept {
  return static_cast<int>(path) <= static_cast<int>(best_simd_path());
}

void half_to_float(simd_path path, const void* in, void* out, std::size_t count) noexcept {
  run(half_to_float_kernels, path, in, out, count);
}
void float_to_half(simd_path path, const void* in, void* out, std::size_t count) noexcept {
  run(float_to_half_kernels, path, in, out, count);
}
void bfloat16_to_float(simd_path path, const void* in, void* out, std::size_t count) noexcept {
  run(bfloat16_to_float_kernels, path, in, out, count);
}
void float_to_bfloat16(simd_path path, const void* in, void* out, std::size_t count) noexcept {
  run(float_to_bfloat16_kernels, path, in, out, count);
}

}  // namespace oip::detail

namespace oip {

namespace {
template <class In, class Out>
status convert_with(void (*kernel)(detail::simd_path, const void*, void*, std::size_t),
                    std::span<const In> in, std::span<Out> out) noexcept {
  if (in.size() != out.size()) {
    return status{errc::invalid_argument,
                  fmt::format("conversion needs equal lengths, got {} input and {} output elements",
                              in.size(), out.size())};
  }
  kernel(detail::best_simd_path(), in.data(), out.data(), in.size());
  return {};
}
}  // namespace

status convert(std::span<const half> in, std::span<float> out) noexcept {
  return convert_with(detail::half_to_float, in, out);
}
status convert(std::span<const float> in, std::span<half> out) noexcept {
  return convert_with(detail::float_to_half, in, out);
}
status convert(std::span<const bfloat16> in, std::span<float> out) noexcept {
  return convert_with(detail::bfloat16_to_float, in, out);
}
status convert(std::span<const float> in, std::span<bfloat16> out) noexcept {
  return convert_with(detail::float_to_bfloat16, in, out);
}

}  // namespace oip
