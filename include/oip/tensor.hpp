#pragma once
/// \file
/// `oip::tensor`: a named, typed, shaped array whose bytes live in an `oip::buffer`, plus the shape
/// arithmetic and the BYTES element format of the protocol.

#include <oip/buffer.hpp>
#include <oip/datatype.hpp>
#include <oip/export.hpp>
#include <oip/float16.hpp>
#include <oip/parameters.hpp>
#include <oip/shape.hpp>
#include <oip/status.hpp>

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace oip {

/// Product of the dimensions; `errc::invalid_argument` for a negative dimension or a product above
/// 2^64 - 1. An empty shape is a scalar (1 element).
[[nodiscard]] OIP_EXPORT result<std::uint64_t> element_count(std::span<const std::int64_t> shape);

/// Bytes that a tensor of a fixed-size datatype occupies; `errc::invalid_argument` for BYTES (its
/// size depends on the data) or when the size overflows.
[[nodiscard]] OIP_EXPORT result<std::uint64_t> byte_size(datatype type,
                                                         std::span<const std::int64_t> shape);

/// "[1,16]", as Triton writes shapes in its messages.
[[nodiscard]] OIP_EXPORT std::string to_string(std::span<const std::int64_t> shape);

/// Checks that `data` holds exactly `expected_count` BYTES elements (each a 4-byte little-endian
/// length followed by that many bytes) and nothing else. `what` names the tensor in the error.
[[nodiscard]] OIP_EXPORT status validate_bytes_elements(std::span<const std::byte> data,
                                                        std::uint64_t expected_count,
                                                        std::string_view what);

/// The bytes that the first `count` BYTES elements of `data` take (what follows them is not
/// looked at): for BYTES data whose end is not known, such as an output in shared memory. An
/// error, worded as `validate_bytes_elements` words it, when `data` ends before `count` elements.
[[nodiscard]] OIP_EXPORT result<std::size_t> bytes_elements_extent(std::span<const std::byte> data,
                                                                   std::uint64_t count,
                                                                   std::string_view what);

/// Serialises strings into the BYTES element format, in one allocation.
[[nodiscard]] OIP_EXPORT result<buffer> encode_bytes_elements(
    std::span<const std::string_view> elements);

/// The elements of a validated BYTES buffer, as string_views into it.
class bytes_elements {
 public:
  class iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = std::string_view;
    using difference_type = std::ptrdiff_t;
    using pointer = void;
    using reference = std::string_view;

    iterator() noexcept = default;
    explicit iterator(const std::byte* at) noexcept : at_{at} {}

    [[nodiscard]] std::string_view operator*() const noexcept {
      return {reinterpret_cast<const char*>(at_) + 4, length()};
    }
    iterator& operator++() noexcept {
      at_ += 4 + length();
      return *this;
    }
    iterator operator++(int) noexcept {
      iterator before = *this;
      ++*this;
      return before;
    }
    friend bool operator==(const iterator& a, const iterator& b) noexcept { return a.at_ == b.at_; }

   private:
    [[nodiscard]] std::size_t length() const noexcept {
      const auto* p = reinterpret_cast<const unsigned char*>(at_);
      return static_cast<std::size_t>(p[0]) | (static_cast<std::size_t>(p[1]) << 8) |
             (static_cast<std::size_t>(p[2]) << 16) | (static_cast<std::size_t>(p[3]) << 24);
    }
    const std::byte* at_ = nullptr;
  };

  /// `data` must have passed `validate_bytes_elements`.
  explicit bytes_elements(std::span<const std::byte> data) noexcept : data_{data} {}

  [[nodiscard]] iterator begin() const noexcept { return iterator{data_.data()}; }
  [[nodiscard]] iterator end() const noexcept { return iterator{data_.data() + data_.size()}; }

 private:
  std::span<const std::byte> data_;
};

namespace detail {
struct checked_tensor_parts;  // the decoder's way to a tensor whose parts it has checked itself

/// The key to `tensor`'s constructor from checked parts: only the decoder can make one, so that it
/// can build a tensor in place in a vector (`emplace_back` needs a public constructor).
class checked_parts_key {
  friend struct checked_tensor_parts;
  checked_parts_key() = default;
};
}  // namespace detail

/// A named tensor: datatype, shape, parameters and bytes. A tensor is always consistent: its
/// bytes match its shape (fixed-size types) or form exactly `element_count()` BYTES elements.
/// Copies share the bytes.
///
/// The bytes are in host memory, except in a tensor made by `in_device_memory`: an input that a
/// client placed in a CUDA shared-memory region, handed in place to a model that reads device
/// memory (`model_config::device_inputs`), or a host's own. Then `device()` names the GPU, and
/// `data()` spans device memory that only the device may read.
///
/// Example:
/// \code
///   std::vector<std::int32_t> v(16, 1);
///   oip::result<oip::tensor> t = oip::tensor::from_values<std::int32_t>("INPUT0", {1, 16}, v);
///   std::int32_t first = t->at<std::int32_t>(0);
/// \endcode
class OIP_EXPORT tensor {
 public:
  tensor() = default;

  /// The decoder's constructor, from parts it has checked: `count` is the shape's element count
  /// and `data` holds that many elements of `type` (valid BYTES elements for BYTES). Not for other
  /// callers (its key cannot be made elsewhere): use `make`.
  tensor(detail::checked_parts_key /*key*/, std::string_view name, datatype type,
         shape_type&& shape, std::uint64_t count, buffer&& data, oip::parameters&& parameters)
      : name_{name},
        type_{type},
        shape_{std::move(shape)},
        element_count_{count},
        parameters_{std::move(parameters)},
        data_{std::move(data)} {}

  /// A tensor over `data`, which is not copied. Fails with `errc::invalid_argument` when the shape
  /// is invalid or the bytes do not match it.
  [[nodiscard]] static result<tensor> make(std::string name, datatype type, shape_type shape,
                                           buffer data);

  /// A tensor of a fixed-size datatype over `device_bytes`, memory of CUDA device `device` that
  /// the buffer keeps alive. Fails as `make` does, and for BYTES (whose elements the host must
  /// read) or a negative device.
  [[nodiscard]] static result<tensor> in_device_memory(std::string name, datatype type,
                                                       shape_type shape, buffer device_bytes,
                                                       int device);

  /// A BYTES tensor holding `elements`, whose count must match the shape.
  [[nodiscard]] static result<tensor> from_strings(std::string name, shape_type shape,
                                                   std::span<const std::string_view> elements);

  /// A tensor holding a copy of `values`, whose count must match the shape.
  template <class T>
  // NOLINTNEXTLINE(performance-unnecessary-value-param): both are moved into make()
  [[nodiscard]] static result<tensor> from_values(std::string name, shape_type shape,
                                                  std::span<const T> values) {
    static_assert(has_datatype<T>, "T must be one of the protocol's element types");
    result<buffer> bytes = buffer::copy_of(std::as_bytes(values));
    if (!bytes) return std::move(bytes).error();
    return make(std::move(name), datatype_of<T>, std::move(shape), std::move(*bytes));
  }

  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  [[nodiscard]] datatype type() const noexcept { return type_; }
  [[nodiscard]] const shape_type& shape() const noexcept { return shape_; }
  [[nodiscard]] std::uint64_t element_count() const noexcept { return element_count_; }
  /// The bytes: in host memory unless `device()` says otherwise.
  [[nodiscard]] const buffer& data() const noexcept { return data_; }
  /// The CUDA device whose memory holds the bytes, or -1 for host memory.
  [[nodiscard]] int device() const noexcept { return device_; }
  [[nodiscard]] bool in_host_memory() const noexcept { return device_ < 0; }
  [[nodiscard]] const oip::parameters& parameters() const noexcept { return parameters_; }
  [[nodiscard]] oip::parameters& parameters() noexcept { return parameters_; }

  /// Element `index` of a fixed-size tensor whose datatype is T's (checked in debug builds), read
  /// with memcpy whatever the alignment. BOOL reads any non-zero byte as true.
  template <class T>
  [[nodiscard]] T at(std::size_t index) const noexcept {
    assert(has_datatype<T> && datatype_of<T> == type_ && index < element_count_ &&
           in_host_memory());
    if constexpr (std::is_same_v<T, bool>) {
      return data_.load<std::uint8_t>(index) != 0;
    } else {
      return data_.load<T>(index);
    }
  }

  /// The elements of a BYTES tensor (asserted in debug builds).
  [[nodiscard]] bytes_elements strings() const noexcept {
    assert(type_ == datatype::bytes);
    return bytes_elements{data_.bytes()};
  }

 private:
  // What make() builds once it has checked the parts (the default shape is not allocated first).
  tensor(std::string name, datatype type, shape_type shape, std::uint64_t element_count,
         buffer data) noexcept
      : name_{std::move(name)},
        type_{type},
        shape_{std::move(shape)},
        element_count_{element_count},
        data_{std::move(data)} {}

  std::string name_;
  datatype type_ = datatype::fp32;
  std::int32_t device_ = -1;  // beside type_, in what would be padding
  shape_type shape_{0};
  std::uint64_t element_count_ = 0;
  oip::parameters parameters_;
  buffer data_;
};

/// `errc::invalid_argument` naming the first of `tensors` in device memory (`what` says what they
/// are: "input"), for code that reads their bytes on the host, such as a request's encoders.
[[nodiscard]] OIP_EXPORT status require_host_memory(std::span<const tensor> tensors,
                                                    std::string_view what);

}  // namespace oip
