#include <oip/buffer.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <new>

#include <fmt/format.h>

namespace oip {

namespace {

// An allocator over malloc that aligns by hand: one malloc costs far less than an aligned
// operator new (memalign). The malloc'd address is kept just before the aligned one.
template <class T>
struct aligned_malloc_allocator {
  using value_type = T;
  static constexpr std::size_t alignment = std::max(alignof(T), alignof(std::max_align_t));

  aligned_malloc_allocator() = default;
  template <class U>
  explicit aligned_malloc_allocator(const aligned_malloc_allocator<U>&) noexcept {}

  T* allocate(std::size_t n) {
    if (n > (SIZE_MAX - alignment - sizeof(void*)) / sizeof(T)) throw std::bad_alloc{};
    std::size_t space = n * sizeof(T) + alignment + sizeof(void*);
    void* base = std::malloc(space);
    if (base == nullptr) throw std::bad_alloc{};
    void* aligned = static_cast<std::byte*>(base) + sizeof(void*);
    space -= sizeof(void*);
    std::align(alignment, n * sizeof(T), aligned, space);  // cannot fail: `alignment` spare bytes
    std::memcpy(static_cast<std::byte*>(aligned) - sizeof(void*), &base, sizeof(void*));
    return static_cast<T*>(aligned);
  }
  void deallocate(T* p, std::size_t) noexcept {
    void* base = nullptr;
    std::memcpy(&base, reinterpret_cast<std::byte*>(p) - sizeof(void*), sizeof(void*));
    std::free(base);
  }
  template <class U>
  bool operator==(const aligned_malloc_allocator<U>&) const noexcept {
    return true;
  }
};

}  // namespace

result<mutable_buffer> mutable_buffer::allocate_for_overwrite(std::size_t size,
                                                              std::size_t padding) {
  if (size + padding < size) {
    return status{errc::internal, fmt::format("cannot allocate {} + {} bytes", size, padding)};
  }
  // Never an empty allocation, so that data() of an empty buffer is still a valid pointer.
  const std::size_t total = std::max<std::size_t>(size + padding, 1);
  const std::size_t blocks = total / buffer_alignment + (total % buffer_alignment != 0 ? 1 : 0);
  mutable_buffer out;
  try {
    // Out of memory is the one exception here; it becomes a result at once.
    out.storage_ = std::allocate_shared_for_overwrite<detail::aligned_block[]>(
        aligned_malloc_allocator<detail::aligned_block>{}, blocks);
  } catch (const std::bad_alloc&) {
    return status{errc::unavailable, fmt::format("out of memory allocating {} bytes", total)};
  }
  std::memset(out.data() + size, 0, blocks * buffer_alignment - size);
  out.size_ = size;
  out.padding_ = padding;
  return out;
}

result<mutable_buffer> mutable_buffer::allocate(std::size_t size, std::size_t padding) {
  result<mutable_buffer> out = allocate_for_overwrite(size, padding);
  if (out) std::memset(out->data(), 0, size);
  return out;
}

buffer::buffer(mutable_buffer&& bytes) noexcept
    : owner_{std::move(bytes.storage_)}, size_{bytes.size_}, padding_{bytes.padding_} {
  data_ = static_cast<const std::byte*>(owner_.get());
  bytes.size_ = 0;
  bytes.padding_ = 0;
}

buffer buffer::from_string(std::string bytes) {
  auto owner = std::make_shared<const std::string>(std::move(bytes));
  const std::span<const std::byte> view = std::as_bytes(std::span{owner->data(), owner->size()});
  buffer out = buffer::view(view, std::move(owner));
  out.padding_ = 1;  // std::string's terminating NUL
  return out;
}

result<buffer> buffer::copy_of(std::span<const std::byte> bytes) {
  result<mutable_buffer> copy = mutable_buffer::allocate(bytes.size());
  if (!copy) return std::move(copy).error();
  if (!bytes.empty()) std::memcpy(copy->data(), bytes.data(), bytes.size());
  return buffer{std::move(*copy)};
}

buffer buffer::view(std::span<const std::byte> bytes, std::shared_ptr<const void> owner) noexcept {
  buffer out;
  out.owner_ = std::move(owner);
  out.data_ = bytes.data();
  out.size_ = bytes.size();
  return out;
}

buffer buffer::unowned(std::span<const std::byte> bytes) noexcept { return view(bytes, nullptr); }

result<buffer> buffer::slice(std::size_t offset, std::size_t length) const {
  if (offset > size_ || length > size_ - offset) {
    return status{errc::invalid_argument,
                  fmt::format("slice of {} bytes at offset {} is outside a buffer of {} bytes",
                              length, offset, size_)};
  }
  buffer out = *this;
  out.data_ = data_ + offset;
  out.size_ = length;
  out.padding_ = size_ - offset - length + padding_;
  return out;
}

}  // namespace oip
