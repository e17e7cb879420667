#include "codecs/detail/number_format.hpp"
#include "core/detail/bytes_format.hpp"
#include "core/detail/x86_intrinsics.hpp"
#include "serving/detail/classification_fp32.hpp"

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

namespace oip {

namespace {

using detail::fp32_step;
using detail::fp32_top;
using detail::load_at;
using detail::select_fp32;
using detail::select_fp32_into;

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

result<std::size_t> top_classes(const tensor& output, std::size_t n, classification_rows rows,
                                std::span<std::uint64_t> out) {
  const bool batched = rows == classification_rows::batch_rows;
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

result<std::vector<std::uint64_t>> top_classes(const tensor& output, std::size_t n,
                                               classification_rows rows) {
  result<row_layout> layout = layout_of(output, n, rows == classification_rows::batch_rows);
  if (!layout) return std::move(layout).error();
  std::vector<std::uint64_t> indices(layout->rows * layout->k);
  result<std::size_t> written = top_classes(output, n, rows, indices);
  if (!written) return std::move(written).error();
  return indices;
}

namespace {

// The classification tensor of output `name`: for each of `rows` rows (a `layout` row, or the
// whole tensor) the `k` classes at `top` (indices in their row, best first), each as a BYTES
// element "<value>:<index>[:<label>]", `value_of(i)` giving the value of the i-th of `top`.
template <class ValueOf>
result<tensor> classification_tensor(std::string name, datatype type, std::size_t rows,
                                     std::size_t k, std::span<const std::uint64_t> top,
                                     classification_rows layout, ValueOf value_of,
                                     std::span<const std::string> labels) {
  // The BYTES elements, each a 4-byte length then "<value>:<index>[:<label>]", written straight
  // into the tensor's bytes.
  std::string elements;
  elements.reserve(top.size() * 32);
  bool too_long = false;
  visit_numeric(type, [&](auto tag) {
    for (std::size_t i = 0; i < top.size(); ++i) {
      const std::uint64_t index = top[i];
      char text[2 * detail::max_number_chars + 1];
      char* end = write_value(text, value_of(tag, i));
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
        fmt::format("a class label of output '{}' is too long for a BYTES element", name)};
  }
  shape_type shape;
  if (layout == classification_rows::batch_rows) shape.push_back(static_cast<std::int64_t>(rows));
  shape.push_back(static_cast<std::int64_t>(k));
  return tensor::make(std::move(name), datatype::bytes, std::move(shape),
                      buffer::from_string(std::move(elements)));
}

}  // namespace

result<tensor> classify(const tensor& output, std::size_t n, classification_rows rows,
                        std::span<const std::string> labels) {
  result<row_layout> layout = layout_of(output, n, rows == classification_rows::batch_rows);
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
  result<std::size_t> written = top_classes(output, n, rows, top);
  if (!written) return std::move(written).error();
  const auto value_of = [&](auto tag, std::size_t i) {
    using T = decltype(tag);
    const std::size_t row = layout->k == 0 ? 0 : i / layout->k;
    return output.data().load<T>(row * layout->row_size + top[i]);
  };
  return classification_tensor(output.name(), output.type(), layout->rows, layout->k, top, rows,
                               value_of, labels);
}

result<tensor> classification_of_ranked(const tensor& best, std::span<const std::uint64_t> indices,
                                        classification_rows rows,
                                        std::span<const std::string> labels) {
  const bool batched = rows == classification_rows::batch_rows;
  if (best.type() == datatype::bytes || best.type() == datatype::boolean) {
    return status{errc::invalid_argument,
                  fmt::format("class result not available for output '{}' due to unsupported "
                              "type '{}'",
                              best.name(), to_string(best.type()))};
  }
  if (best.shape().size() != (batched ? 2U : 1U) || indices.size() != best.element_count()) {
    return status{
        errc::internal,
        fmt::format("the ranked classes of output '{}' are {} values of shape {} and {} "
                    "indices: expected [rows, k] values with an index each ([k] for the "
                    "whole tensor)",
                    best.name(), best.element_count(), to_string(best.shape()), indices.size())};
  }
  const auto row_count = static_cast<std::size_t>(batched ? best.shape()[0] : 1);
  const auto k = static_cast<std::size_t>(best.shape().back());
  const auto value_of = [&](auto tag, std::size_t i) {
    using T = decltype(tag);
    return best.data().load<T>(i);
  };
  return classification_tensor(best.name(), best.type(), row_count, k, indices, rows, value_of,
                               labels);
}

}  // namespace oip
