#include "core/detail/bytes_format.hpp"

#include <oip/tensor.hpp>

#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace oip {

namespace {
constexpr std::uint64_t max_bytes_element_length = std::numeric_limits<std::uint32_t>::max();

}  // namespace

std::string to_string(std::span<const std::int64_t> shape) {
  return fmt::format("[{}]", fmt::join(shape, ","));
}

result<std::uint64_t> element_count(std::span<const std::int64_t> shape) {
  std::uint64_t count = 1;
  bool overflow = false;
  bool has_zero = false;
  for (const std::int64_t dim : shape) {
    if (dim < 0) {
      return status{
          errc::invalid_argument,
          fmt::format("invalid shape {}: dimension {} is negative", to_string(shape), dim)};
    }
    // Keep scanning after an overflow: a later zero dimension makes the product 0, and a later
    // negative dimension is the better message.
    has_zero = has_zero || dim == 0;
    overflow = __builtin_mul_overflow(count, static_cast<std::uint64_t>(dim), &count) || overflow;
  }
  if (has_zero) return std::uint64_t{0};
  if (overflow) {
    return status{errc::invalid_argument,
                  fmt::format("invalid shape {}: element count overflows", to_string(shape))};
  }
  return count;
}

namespace {
// The byte size of `count` elements of a fixed-size `type`, shaped `shape` (for the message).
result<std::uint64_t> byte_size_of(datatype type, std::span<const std::int64_t> shape,
                                   std::uint64_t count) {
  std::uint64_t bytes = 0;
  if (__builtin_mul_overflow(count, element_size(type), &bytes)) {
    return status{errc::invalid_argument,
                  fmt::format("invalid shape {}: byte size of {} elements of {} overflows",
                              to_string(shape), count, to_string(type))};
  }
  return bytes;
}
}  // namespace

result<std::uint64_t> byte_size(datatype type, std::span<const std::int64_t> shape) {
  if (is_bytes(type)) {
    return status{errc::invalid_argument, "the byte size of a BYTES tensor depends on its data"};
  }
  result<std::uint64_t> count = element_count(shape);
  if (!count) return count;
  return byte_size_of(type, shape, *count);
}

namespace {
// The BYTES elements at the start of `data`, at most `most` of them: how many and the bytes they
// take; an error for an element that does not fit.
struct bytes_walk {
  std::uint64_t count = 0;
  std::size_t size = 0;
};

result<bytes_walk> walk_bytes_elements(std::span<const std::byte> data, std::uint64_t most,
                                       std::string_view what) {
  bytes_walk walked;
  std::size_t& offset = walked.size;
  while (walked.count < most && offset < data.size()) {
    if (data.size() - offset < 4) {
      return status{errc::invalid_argument,
                    fmt::format("malformed BYTES data for {}: element {} has a truncated 4-byte "
                                "length prefix ({} bytes left at offset {})",
                                what, walked.count, data.size() - offset, offset)};
    }
    const std::uint32_t length = detail::read_bytes_length(data.data() + offset);
    offset += 4;
    if (length > data.size() - offset) {
      return status{errc::invalid_argument,
                    fmt::format("malformed BYTES data for {}: element {} has length {} but only {} "
                                "bytes remain",
                                what, walked.count, length, data.size() - offset)};
    }
    offset += length;
    ++walked.count;
  }
  return walked;
}

status wrong_count(std::string_view what, std::uint64_t expected, std::uint64_t got) {
  return status{errc::invalid_argument,
                fmt::format("unexpected number of BYTES elements for {}: expecting {}, got {}",
                            what, expected, got)};
}
}  // namespace

status validate_bytes_elements(std::span<const std::byte> data, std::uint64_t expected_count,
                               std::string_view what) {
  const result<bytes_walk> walked =
      walk_bytes_elements(data, std::numeric_limits<std::uint64_t>::max(), what);
  if (!walked) return walked.error();
  if (walked->count != expected_count) {
    return wrong_count(what, expected_count, walked->count);
  }
  return {};
}

result<std::size_t> bytes_elements_extent(std::span<const std::byte> data, std::uint64_t count,
                                          std::string_view what) {
  const result<bytes_walk> walked = walk_bytes_elements(data, count, what);
  if (!walked) return walked.error();
  if (walked->count != count) {
    return wrong_count(what, count, walked->count);
  }
  return walked->size;
}

result<buffer> encode_bytes_elements(std::span<const std::string_view> elements) {
  std::size_t total = 0;
  for (std::size_t i = 0; i < elements.size(); ++i) {
    if (elements[i].size() > max_bytes_element_length) {
      return status{errc::invalid_argument,
                    fmt::format("BYTES element {} is {} bytes, above the format's limit of {}", i,
                                elements[i].size(), max_bytes_element_length)};
    }
    total += 4 + elements[i].size();
  }
  result<mutable_buffer> out = mutable_buffer::allocate_for_overwrite(total);
  if (!out) return std::move(out).error();
  std::byte* at = out->data();
  for (const std::string_view element : elements) {
    detail::write_bytes_length(at, static_cast<std::uint32_t>(element.size()));
    if (!element.empty()) std::memcpy(at + 4, element.data(), element.size());
    at += 4 + element.size();
  }
  return buffer{std::move(*out)};
}

result<tensor> tensor::make(std::string name, datatype type, shape_type shape, buffer data) {
  result<std::uint64_t> count = oip::element_count(shape);
  if (!count) {
    return status{count.error().code(),
                  fmt::format("tensor '{}': {}", name, count.error().message())};
  }
  if (is_bytes(type)) {
    if (!validate_bytes_elements(data.bytes(), *count, "tensor").ok()) {
      // Again, for a message that names the tensor (formatted only when it is needed).
      return validate_bytes_elements(data.bytes(), *count, fmt::format("tensor '{}'", name));
    }
  } else {
    result<std::uint64_t> expected = byte_size_of(type, shape, *count);
    if (!expected) {
      return status{expected.error().code(),
                    fmt::format("tensor '{}': {}", name, expected.error().message())};
    }
    if (data.size() != *expected) {
      return status{errc::invalid_argument,
                    fmt::format("unexpected total byte size {} for tensor '{}', expecting {}",
                                data.size(), name, *expected)};
    }
  }
  return tensor{std::move(name), type, std::move(shape), *count, std::move(data)};
}

result<tensor> tensor::in_device_memory(std::string name, datatype type, shape_type shape,
                                        buffer device_bytes, int device) {
  if (is_bytes(type)) {
    return status{errc::invalid_argument,
                  fmt::format("tensor '{}': BYTES data cannot stay in device memory", name)};
  }
  if (device < 0) {
    return status{errc::invalid_argument,
                  fmt::format("tensor '{}': no CUDA device {}", name, device)};
  }
  // make() reads no byte of a fixed-size tensor: it checks the size only.
  result<tensor> made = make(std::move(name), type, std::move(shape), std::move(device_bytes));
  if (made) made->device_ = device;
  return made;
}

status require_host_memory(std::span<const tensor> tensors, std::string_view what) {
  for (const tensor& t : tensors) {
    if (!t.in_host_memory()) {
      return status{errc::invalid_argument,
                    fmt::format("{} '{}' is in the memory of CUDA device {}; it must be in host "
                                "memory here",
                                what, t.name(), t.device())};
    }
  }
  return {};
}

result<tensor> tensor::from_strings(std::string name, shape_type shape,
                                    std::span<const std::string_view> elements) {
  result<buffer> bytes = encode_bytes_elements(elements);
  if (!bytes) return std::move(bytes).error();
  return make(std::move(name), datatype::bytes, std::move(shape), std::move(*bytes));
}

}  // namespace oip
