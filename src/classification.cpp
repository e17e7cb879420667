#include "detail/number_format.hpp"

#include <oip/classification.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string_view>
#include <type_traits>
#include <utility>

#include <fmt/format.h>

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

// The best `k` (value, index) pairs seen so far, best first.
template <class C>
class top_list {
 public:
  explicit top_list(std::size_t k) : k_{k} { items_.reserve(k + 1); }

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

  void offer(C value, std::uint64_t index) {
    if (items_.size() == k_) {
      if (!ranks_above(value, index, items_.back().first, items_.back().second)) return;
      items_.pop_back();
    }
    std::size_t at = items_.size();
    while (at > 0 && ranks_above(value, index, items_[at - 1].first, items_[at - 1].second)) --at;
    items_.insert(items_.begin() + static_cast<std::ptrdiff_t>(at), {value, index});
  }

  // When set, only values strictly above it can enter (indices only grow, so a tie never does).
  [[nodiscard]] bool has_threshold() const noexcept {
    if (items_.size() < k_) return false;
    if constexpr (std::is_floating_point_v<C>) {
      if (std::isnan(items_.back().first)) return false;
    }
    return true;
  }
  [[nodiscard]] C threshold() const noexcept { return items_.back().first; }
  [[nodiscard]] const std::vector<std::pair<C, std::uint64_t>>& items() const noexcept {
    return items_;
  }

 private:
  std::size_t k_;
  std::vector<std::pair<C, std::uint64_t>> items_;
};

constexpr std::size_t block = 64;
constexpr std::size_t sub_block = 16;

// Whether any of the `size` values of type C at `p` is above `threshold`: a fixed trip count and
// an integer reduction, which the compiler turns into a few vector compares.
template <std::size_t size, class C>
bool any_above(const std::byte* p, C threshold) noexcept {
  unsigned above = 0;
  for (std::size_t j = 0; j < size; ++j) {
    C v;
    std::memcpy(&v, p + j * sizeof(C), sizeof(C));
    above |= static_cast<unsigned>(v > threshold);
  }
  return above != 0;
}

// Selects the top k of data[begin, begin + count). Once k values are held, only a value above the
// k-th can enter; most blocks hold none and are skipped after one vector pass.
template <class T>
void select_row(const buffer& data, std::size_t begin, std::size_t count, std::size_t k,
                std::vector<std::uint64_t>& out) {
  using C = compared_t<T>;
  if (k == 0) return;
  top_list<C> top{k};
  const std::byte* base = data.data() + begin * sizeof(T);
  std::size_t i = 0;
  while (i < count) {
    if (!top.has_threshold()) {  // fewer than k held, or NaN as k-th: anything may enter
      top.offer(value_at<T>(data, begin + i), i);
      ++i;
      continue;
    }
    C threshold = top.threshold();
    if constexpr (std::is_same_v<C, T>) {
      // Blocks of 64 are skipped whole; in the rare block with a candidate, sub-blocks of 16.
      if (count - i >= block) {
        if (!any_above<block>(base + i * sizeof(T), threshold)) {
          i += block;
          continue;
        }
        for (std::size_t end = i + block; i < end; i += sub_block) {
          if (!any_above<sub_block>(base + i * sizeof(T), threshold)) continue;
          for (std::size_t j = i; j < i + sub_block; ++j) {
            const C value = value_at<T>(data, begin + j);
            if (value > threshold) {
              top.offer(value, j);
              threshold = top.threshold();
            }
          }
        }
        continue;
      }
    }
    const std::size_t n = std::min(block, count - i);
    for (std::size_t j = 0; j < n; ++j) {
      const C value = value_at<T>(data, begin + i + j);
      if (value > threshold) {
        top.offer(value, i + j);
        threshold = top.threshold();
      }
    }
    i += n;
  }
  for (const auto& item : top.items()) out.push_back(item.second);
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

}  // namespace

result<std::vector<std::uint64_t>> top_classes(const tensor& output, std::size_t n, bool batched) {
  result<row_layout> layout = layout_of(output, n, batched);
  if (!layout) return std::move(layout).error();
  std::vector<std::uint64_t> indices;
  indices.reserve(layout->rows * layout->k);
  visit_numeric(output.type(), [&](auto tag) {
    using T = decltype(tag);
    for (std::size_t row = 0; row < layout->rows; ++row) {
      select_row<T>(output.data(), row * layout->row_size, layout->row_size, layout->k, indices);
    }
  });
  return indices;
}

result<tensor> classify(const tensor& output, std::size_t n, bool batched,
                        std::span<const std::string> labels) {
  result<row_layout> layout = layout_of(output, n, batched);
  if (!layout) return std::move(layout).error();
  result<std::vector<std::uint64_t>> top = top_classes(output, n, batched);
  if (!top) return std::move(top).error();

  std::vector<std::string> entries;
  entries.reserve(top->size());
  visit_numeric(output.type(), [&](auto tag) {
    using T = decltype(tag);
    for (std::size_t i = 0; i < top->size(); ++i) {
      const std::size_t row = layout->k == 0 ? 0 : i / layout->k;
      const std::uint64_t index = (*top)[i];
      char number[detail::max_number_chars];
      const char* end = write_value(number, output.data().load<T>(row * layout->row_size + index));
      std::string entry(number, static_cast<std::size_t>(end - number));
      entry += ':';
      entry += std::to_string(index);
      if (index < labels.size()) {
        entry += ':';
        entry += labels[index];
      }
      entries.push_back(std::move(entry));
    }
  });
  std::vector<std::string_view> views(entries.begin(), entries.end());
  shape_type shape;
  if (batched) shape.push_back(static_cast<std::int64_t>(layout->rows));
  shape.push_back(static_cast<std::int64_t>(layout->k));
  return tensor::from_strings(output.name(), std::move(shape), views);
}

}  // namespace oip
