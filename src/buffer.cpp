#include <oip/buffer.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <new>

#include <fmt/format.h>

namespace oip {

void detail::aligned_delete::operator()(std::byte* /*bytes*/) const noexcept { std::free(base); }

result<mutable_buffer> mutable_buffer::allocate(std::size_t size, std::size_t padding) {
  // Never a zero-byte allocation, so that data() of an empty buffer is still a valid pointer.
  const std::size_t total = std::max<std::size_t>(size + padding, 1);
  if (size + padding < size || total > SIZE_MAX - buffer_alignment) {
    return status{errc::internal, fmt::format("cannot allocate {} + {} bytes", size, padding)};
  }
  // malloc and align by hand: one malloc costs far less than an aligned operator new (memalign).
  void* base = std::malloc(total + buffer_alignment - 1);
  if (base == nullptr) {
    return status{errc::internal, fmt::format("out of memory allocating {} bytes", total)};
  }
  const auto address = reinterpret_cast<std::uintptr_t>(base);
  auto* bytes =
      reinterpret_cast<std::byte*>((address + buffer_alignment - 1) & ~(buffer_alignment - 1));
  mutable_buffer out;
  out.storage_ = std::unique_ptr<std::byte[], detail::aligned_delete>(bytes, {base});
  std::memset(bytes + size, 0, total - size);
  out.size_ = size;
  out.padding_ = padding;
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
