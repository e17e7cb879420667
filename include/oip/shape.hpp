#pragma once
/// \file
/// `oip::shape_type`: a tensor's dimensions, held in the object itself up to
/// `shape_type::inline_capacity` of them (a request's usual shapes allocate nothing).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <span>
#include <stdexcept>
#include <vector>

namespace oip {

/// Dimensions of a tensor: a vector of `std::int64_t` with the interface of `std::vector` that
/// shapes use, and a contiguous range (a `std::span<const std::int64_t>` views it). -1 appears only
/// in model metadata (a variable dimension), never in a tensor.
///
/// Example:
/// \code
///   oip::shape_type shape{1, 16};
///   shape.insert(shape.begin(), 8);           // {8, 1, 16}
///   std::span<const std::int64_t> dims = shape;
/// \endcode
class shape_type {
 public:
  using value_type = std::int64_t;
  using size_type = std::size_t;
  using difference_type = std::ptrdiff_t;
  using reference = std::int64_t&;
  using const_reference = const std::int64_t&;
  using pointer = std::int64_t*;
  using const_pointer = const std::int64_t*;
  using iterator = std::int64_t*;
  using const_iterator = const std::int64_t*;
  using reverse_iterator = std::reverse_iterator<iterator>;
  using const_reverse_iterator = std::reverse_iterator<const_iterator>;

  /// Dimensions held without an allocation.
  static constexpr size_type inline_capacity = 6;

  shape_type() noexcept = default;
  shape_type(std::initializer_list<std::int64_t> dims) { assign(dims.begin(), dims.end()); }
  /// `count` dimensions of `value`.
  explicit shape_type(size_type count, std::int64_t value = 0) { resize(count, value); }
  template <std::input_iterator It>
  shape_type(It first, It last) {
    assign(first, last);
  }
  shape_type(std::span<const std::int64_t> dims) {  // NOLINT(google-explicit-constructor)
    assign(dims.begin(), dims.end());
  }
  shape_type(const std::vector<std::int64_t>& dims)  // NOLINT(google-explicit-constructor)
      : shape_type(std::span<const std::int64_t>(dims)) {}

  shape_type(const shape_type& other) { assign(other.begin(), other.end()); }
  shape_type(shape_type&& other) noexcept { take(std::move(other)); }
  shape_type& operator=(const shape_type& other) {
    if (this != &other) assign(other.begin(), other.end());
    return *this;
  }
  shape_type& operator=(shape_type&& other) noexcept {
    if (this != &other) take(std::move(other));
    return *this;
  }
  shape_type& operator=(std::initializer_list<std::int64_t> dims) {
    assign(dims.begin(), dims.end());
    return *this;
  }
  ~shape_type() = default;

  [[nodiscard]] size_type size() const noexcept { return size_; }
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  [[nodiscard]] size_type capacity() const noexcept { return heap_ ? capacity_ : inline_capacity; }
  [[nodiscard]] std::int64_t* data() noexcept { return heap_ ? heap_.get() : inline_; }
  [[nodiscard]] const std::int64_t* data() const noexcept { return heap_ ? heap_.get() : inline_; }

  [[nodiscard]] iterator begin() noexcept { return data(); }
  [[nodiscard]] iterator end() noexcept { return data() + size_; }
  [[nodiscard]] const_iterator begin() const noexcept { return data(); }
  [[nodiscard]] const_iterator end() const noexcept { return data() + size_; }
  [[nodiscard]] const_iterator cbegin() const noexcept { return begin(); }
  [[nodiscard]] const_iterator cend() const noexcept { return end(); }
  [[nodiscard]] reverse_iterator rbegin() noexcept { return reverse_iterator(end()); }
  [[nodiscard]] reverse_iterator rend() noexcept { return reverse_iterator(begin()); }
  [[nodiscard]] const_reverse_iterator rbegin() const noexcept {
    return const_reverse_iterator(end());
  }
  [[nodiscard]] const_reverse_iterator rend() const noexcept {
    return const_reverse_iterator(begin());
  }

  [[nodiscard]] std::int64_t& operator[](size_type i) noexcept { return data()[i]; }
  [[nodiscard]] const std::int64_t& operator[](size_type i) const noexcept { return data()[i]; }
  /// `std::out_of_range` when `i` is not below `size()`.
  [[nodiscard]] std::int64_t& at(size_type i) {
    if (i >= size_) throw std::out_of_range("oip::shape_type::at");
    return data()[i];
  }
  [[nodiscard]] const std::int64_t& at(size_type i) const {
    if (i >= size_) throw std::out_of_range("oip::shape_type::at");
    return data()[i];
  }
  [[nodiscard]] std::int64_t& front() noexcept { return data()[0]; }
  [[nodiscard]] const std::int64_t& front() const noexcept { return data()[0]; }
  [[nodiscard]] std::int64_t& back() noexcept { return data()[size_ - 1]; }
  [[nodiscard]] const std::int64_t& back() const noexcept { return data()[size_ - 1]; }

  void reserve(size_type wanted) {
    if (wanted <= capacity()) return;
    auto grown = std::make_unique_for_overwrite<std::int64_t[]>(wanted);
    std::copy(begin(), end(), grown.get());
    heap_ = std::move(grown);
    capacity_ = wanted;
  }
  void clear() noexcept { size_ = 0; }
  void resize(size_type count, std::int64_t value = 0) {
    reserve(count);
    if (count > size_) std::fill(data() + size_, data() + count, value);
    size_ = count;
  }
  void push_back(std::int64_t dim) {
    if (size_ == capacity()) reserve(size_ * 2);
    data()[size_++] = dim;
  }
  void pop_back() noexcept { --size_; }
  iterator insert(const_iterator at, std::int64_t dim) {
    const auto offset = static_cast<size_type>(at - begin());
    push_back(dim);
    std::rotate(begin() + offset, end() - 1, end());
    return begin() + offset;
  }
  template <std::input_iterator It>
  iterator insert(const_iterator at, It first, It last) {
    const auto offset = static_cast<size_type>(at - begin());
    const shape_type added(first, last);  // read first: the range may lie in this shape
    const size_type before = size_;
    reserve(before + added.size());
    std::copy(added.begin(), added.end(), data() + before);
    size_ = before + added.size();
    std::rotate(begin() + offset, begin() + before, end());
    return begin() + offset;
  }
  iterator erase(const_iterator at) noexcept {
    const auto offset = static_cast<size_type>(at - begin());
    std::move(begin() + offset + 1, end(), begin() + offset);
    --size_;
    return begin() + offset;
  }
  template <std::input_iterator It>
  void assign(It first, It last) {
    clear();
    if constexpr (std::forward_iterator<It>)
      reserve(static_cast<size_type>(std::distance(first, last)));
    for (; first != last; ++first) push_back(static_cast<std::int64_t>(*first));
  }

  friend bool operator==(const shape_type& a, const shape_type& b) noexcept {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }

 private:
  void take(shape_type&& other) noexcept {
    heap_ = std::move(other.heap_);
    capacity_ = other.capacity_;
    size_ = other.size_;
    if (!heap_) std::copy(other.inline_, other.inline_ + size_, inline_);
    other.size_ = 0;
  }

  std::unique_ptr<std::int64_t[]> heap_;  // null while the dimensions fit inline
  size_type capacity_ = 0;                // of heap_
  size_type size_ = 0;
  std::int64_t inline_[inline_capacity]{};
};

}  // namespace oip
