#pragma once
/// \file
/// Bytes with shared ownership: `oip::mutable_buffer` (one owner, writable) and `oip::buffer`
/// (shared, read-only, possibly a view into a larger body that it keeps alive).

#include <oip/export.hpp>
#include <oip/status.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

namespace oip {

/// Alignment of every allocation oip makes for tensor or body bytes.
inline constexpr std::size_t buffer_alignment = 64;

namespace detail {
// The unit of buffer storage: its alignment is the buffer's.
struct alignas(buffer_alignment) aligned_block {
  std::byte bytes[buffer_alignment];
};
}  // namespace detail

/// Writable bytes with a single owner, 64-byte aligned, optionally followed by `padding` readable
/// bytes (zeroed) that are not part of the data; a JSON parser that reads ahead needs them.
/// Freeze it into an `oip::buffer` to share it.
///
/// Example:
/// \code
///   oip::result<oip::mutable_buffer> out = oip::mutable_buffer::allocate(n * sizeof(float));
///   if (!out) return out.error();
///   fill(out->data(), n);
///   oip::buffer shared = std::move(*out);
/// \endcode
class OIP_EXPORT mutable_buffer {
 public:
  mutable_buffer() noexcept = default;

  /// `size` zeroed bytes plus `padding` zeroed ones, so that an output a model leaves partly
  /// unwritten never carries what the memory held before (another request's data). Fails with
  /// `errc::unavailable` (503) when the memory cannot be had (hosts bound sizes with
  /// `oip::limits` long before that).
  [[nodiscard]] static result<mutable_buffer> allocate(std::size_t size, std::size_t padding = 0);
  /// As `allocate`, but the `size` bytes are left as they are: for code that writes every one of
  /// them before anything reads them (a decoder filling a tensor, a copy).
  [[nodiscard]] static result<mutable_buffer> allocate_for_overwrite(std::size_t size,
                                                                     std::size_t padding = 0);

  [[nodiscard]] std::byte* data() noexcept { return storage_[0].bytes; }
  [[nodiscard]] const std::byte* data() const noexcept { return storage_[0].bytes; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] std::size_t padding() const noexcept { return padding_; }
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  [[nodiscard]] std::span<std::byte> bytes() noexcept { return {data(), size_}; }

 private:
  friend class buffer;
  // Shared from the start (use count 1 until frozen): the count and the bytes are one allocation.
  std::shared_ptr<detail::aligned_block[]> storage_;
  std::size_t size_ = 0;
  std::size_t padding_ = 0;
};

/// Read-only bytes whose storage is shared: copies and slices are cheap and keep the storage
/// alive. A buffer is either the owner of its bytes or a view into bytes owned by something else
/// (a request body, a host's array), whose owner it holds. Alignment is not assumed: use
/// `load<T>()` for typed reads of bytes at any address.
///
/// Example:
/// \code
///   oip::buffer body = oip::buffer::from_string(std::move(http_body));
///   oip::result<oip::buffer> input = body.slice(header_length, 64);  // no copy
/// \endcode
class OIP_EXPORT buffer {
 public:
  buffer() noexcept = default;

  /// Freezes a mutable buffer; its bytes are not copied.
  buffer(mutable_buffer&& bytes) noexcept;  // NOLINT(google-explicit-constructor)

  /// Takes ownership of a string's bytes without copying them.
  [[nodiscard]] static buffer from_string(std::string bytes);

  /// A copy of `bytes` in a new 64-byte-aligned allocation.
  [[nodiscard]] static result<buffer> copy_of(std::span<const std::byte> bytes);

  /// A view of `bytes`, which `owner` keeps alive; the view holds `owner`.
  [[nodiscard]] static buffer view(std::span<const std::byte> bytes,
                                   std::shared_ptr<const void> owner) noexcept;

  /// A view of bytes that outlive every use of the buffer (static data). Nothing is owned.
  [[nodiscard]] static buffer unowned(std::span<const std::byte> bytes) noexcept;

  /// The bytes [offset, offset + length) as a view sharing this buffer's storage; an
  /// `errc::invalid_argument` if they are not all inside it.
  [[nodiscard]] result<buffer> slice(std::size_t offset, std::size_t length) const;

  [[nodiscard]] const std::byte* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  [[nodiscard]] std::span<const std::byte> bytes() const noexcept { return {data_, size_}; }
  [[nodiscard]] std::string_view as_string_view() const noexcept {
    return {reinterpret_cast<const char*>(data_), size_};
  }

  /// Readable bytes after the end that belong to the same storage (padding or the rest of a body).
  [[nodiscard]] std::size_t padding() const noexcept { return padding_; }

  /// Whether `data()` is a multiple of `alignment`.
  [[nodiscard]] bool is_aligned(std::size_t alignment) const noexcept {
    return reinterpret_cast<std::uintptr_t>(data_) % alignment == 0;
  }

  /// Whether both buffers keep the same storage alive (a slice shares its parent's).
  [[nodiscard]] bool shares_storage_with(const buffer& other) const noexcept {
    return owner_ != nullptr && !owner_.owner_before(other.owner_) &&
           !other.owner_.owner_before(owner_);
  }

  /// The `index`-th element of type T, read with memcpy (any alignment). Unchecked: the caller
  /// keeps `(index + 1) * sizeof(T) <= size()`.
  template <class T>
  [[nodiscard]] T load(std::size_t index) const noexcept {
    static_assert(std::is_trivially_copyable_v<T>);
    T value;
    std::memcpy(&value, data_ + index * sizeof(T), sizeof(T));
    return value;
  }

 private:
  std::shared_ptr<const void> owner_;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  std::size_t padding_ = 0;
};

}  // namespace oip
