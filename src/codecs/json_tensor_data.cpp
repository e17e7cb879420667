// Tensor data in JSON: the per-element leaf readers of each datatype, the one hot loop of JSON
// decoding, apart from the readers of whole documents that call it once per tensor.

#include "codecs/detail/json_tensor_data.hpp"

#include "codecs/detail/decimal.hpp"
#include "codecs/detail/json_read.hpp"
#include "core/detail/bytes_format.hpp"

#include <oip/buffer.hpp>
#include <oip/datatype.hpp>
#include <oip/float16.hpp>
#include <oip/parameters.hpp>
#include <oip/shape.hpp>
#include <oip/status.hpp>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

#include <fmt/format.h>

#include <simdjson.h>

namespace oip::detail {

namespace {

// Writes decoded leaves into the tensor's typed buffer; counts leaves past the end without
// writing, so that a count mismatch reports the real count.
struct leaf_sink {
  std::byte* out = nullptr;
  std::uint64_t capacity = 0;
  std::uint64_t count = 0;

  template <class T>
  void put(const T& value) {
    if (count < capacity) [[likely]] {
      // A typed store into the aligned buffer: unlike a byte copy, a store of a 16- or 32-bit
      // type or a float cannot alias the sink's own fields, which then stay in registers
      // through the element loop.
      reinterpret_cast<T*>(out)[count] = value;
    }
    ++count;
  }
};

// The leaf readers: `read(element, sink)` stores one value and returns true, or returns false
// and leaves the explanation to `explain_leaf` (off the hot path). Numbers go through simdjson's
// validating, correctly rounded parser; the few tokens it refuses that JSON data may still hold
// (NaN, Infinity, -Infinity) and the rare values whose rounding needs the decimal itself take the
// slow path through the token's text.
template <class T>
struct integer_leaf {
  const document_context* doc;
  bool operator()(od::value& element, leaf_sink& sink) const {
    if constexpr (std::is_signed_v<T>) {
      std::int64_t value = 0;
      if (element.get_int64().get(value) != error_code::SUCCESS) return slow(element, sink);
      if (value < std::numeric_limits<T>::min() || value > std::numeric_limits<T>::max()) {
        return false;
      }
      sink.put(static_cast<T>(value));
    } else {
      std::uint64_t value = 0;
      if (element.get_uint64().get(value) != error_code::SUCCESS) return slow(element, sink);
      if (value > std::numeric_limits<T>::max()) return false;
      sink.put(static_cast<T>(value));
    }
    return true;
  }
  // "-0" is a fine unsigned zero that simdjson refuses.
  bool slow(od::value& element, leaf_sink& sink) const {
    T value;
    bool out_of_range = false;
    if (!parse_integer(token_of(*doc, element), value, out_of_range)) return false;
    sink.put(value);
    return true;
  }
};

// simdjson before 3.6.3 (Debian 12 has 3.0.1) misreads a number whose integer part is 0 and whose
// fraction holds more than 19 digits after its leading zeros: the 64-bit digit accumulator wraps
// unnoticed, and "0.95000000000000000000" reads as 0.0277 (simdjson#2093). Such a token is at
// least 22 characters ("0." and 20 digits); those few go to the exact path through the text.
constexpr bool simdjson_misreads_long_fractions =
    simdjson::SIMDJSON_VERSION_MAJOR < 3 ||
    (simdjson::SIMDJSON_VERSION_MAJOR == 3 &&
     (simdjson::SIMDJSON_VERSION_MINOR < 6 ||
      (simdjson::SIMDJSON_VERSION_MINOR == 6 && simdjson::SIMDJSON_VERSION_REVISION < 3)));

// Whether simdjson's get_double may misread `element` (see above). The raw token runs to the next
// structural character, so it may include whitespace: the test errs towards the exact path.
inline bool may_be_misread(od::value& element) {
  if constexpr (!simdjson_misreads_long_fractions) return false;
  const std::string_view raw = element.raw_json_token();
  if (raw.size() < 22) return false;
  const std::size_t at = raw[0] == '-' ? 1 : 0;
  return raw[at] == '0' && raw[at + 1] == '.';
}

// FP32 from simdjson's double when that is safe: a double that is not exactly halfway between two
// floats rounds to the same float as the decimal does. Halfway doubles, and values outside the
// normal float range, are parsed again from the text, straight to float.
inline bool double_rounds_like_decimal(double d) {
  const auto bits = std::bit_cast<std::uint64_t>(d);
  const auto exponent = static_cast<int>((bits >> 52U) & 0x7FFU) - 1023;
  constexpr std::uint64_t below_float_precision = (std::uint64_t{1} << 29U) - 1U;
  return exponent >= -126 && exponent <= 126 &&
         (bits & below_float_precision) != (std::uint64_t{1} << 28U);
}

struct fp32_leaf {
  const document_context* doc;
  bool operator()(od::value& element, leaf_sink& sink) const {
    double value = 0;
    if (!may_be_misread(element) && element.get_double().get(value) == error_code::SUCCESS &&
        double_rounds_like_decimal(value)) [[likely]] {
      sink.put(static_cast<float>(value));
      return true;
    }
    float exact = 0;
    const std::string_view token = token_of(*doc, element);
    if (token.empty() || !parse_floating(token, exact)) return false;
    sink.put(exact);
    return true;
  }
};

struct fp64_leaf {
  const document_context* doc;
  bool operator()(od::value& element, leaf_sink& sink) const {
    double value = 0;
    if (may_be_misread(element) || element.get_double().get(value) != error_code::SUCCESS)
        [[unlikely]] {
      const std::string_view token = token_of(*doc, element);
      if (token.empty() || !parse_floating(token, value)) return false;
    }
    sink.put(value);
    return true;
  }
};

// FP16/BF16: the decimal is rounded to double, then to 16 bits; a double exactly halfway between
// two 16-bit values may stand for a decimal just above or below it, which settles the tie.
template <class Half>
struct half_leaf {
  const document_context* doc;
  static Half rounded(double value) {
    if constexpr (std::is_same_v<Half, half>) {
      return detail::double_to_half(value);
    } else {
      return detail::double_to_bfloat16(value);
    }
  }
  bool operator()(od::value& element, leaf_sink& sink) const {
    // simdjson's double is the decimal correctly rounded, so rounding it again is exact unless it
    // lies halfway between two 16-bit values: only then is the decimal's own text needed.
    double value = 0;
    if (!may_be_misread(element) && element.get_double().get(value) == error_code::SUCCESS)
        [[likely]] {
      const Half once = rounded(value);
      if (!detail::is_half_tie(once, value)) {
        sink.put(once);
        return true;
      }
    }
    const std::string_view token = token_of(*doc, element);
    if (token.empty() || !parse_floating(token, value)) return false;
    sink.put(detail::correct_half_tie(rounded(value), value, token));
    return true;
  }
};

struct bool_leaf {
  bool operator()(od::value& element, leaf_sink& sink) const {
    bool value = false;
    if (element.get_bool().get(value) != error_code::SUCCESS) return false;
    sink.put(static_cast<std::uint8_t>(value ? 1 : 0));
    return true;
  }
};

template <class T>
std::string range_of() {
  return fmt::format("[{}, {}]", +std::numeric_limits<T>::min(), +std::numeric_limits<T>::max());
}

std::string integer_range(datatype type) {
  switch (type) {
    case datatype::uint8: return range_of<std::uint8_t>();
    case datatype::uint16: return range_of<std::uint16_t>();
    case datatype::uint32: return range_of<std::uint32_t>();
    case datatype::uint64: return range_of<std::uint64_t>();
    case datatype::int8: return range_of<std::int8_t>();
    case datatype::int16: return range_of<std::int16_t>();
    case datatype::int32: return range_of<std::int32_t>();
    default: return range_of<std::int64_t>();
  }
}

// Why a leaf was refused: malformed JSON (reported as such), an integer out of range, or a value
// of the wrong JSON type for the datatype.
[[gnu::cold]] status explain_leaf(const tensor_context& t, od::value& element,
                                  std::string_view token, std::uint64_t index) {
  if (status walked = walk_value(*t.doc, element, 0); !walked.ok()) return walked;
  const std::string shown{token.substr(0, 64)};
  const number_shape number = scan_number(token);
  if (is_integer(t.type) && number.valid && number.integer) {
    return status{
        errc::invalid_argument,
        fmt::format("unable to parse 'data' for {} '{}': element {} is {}, out of range "
                    "for {} {}",
                    t.role, t.name, index, shown, to_string(t.type), integer_range(t.type))};
  }
  std::string expected;
  if (is_signed_integer(t.type)) {
    expected = fmt::format("a signed integer for {}", to_string(t.type));
  } else if (is_unsigned_integer(t.type)) {
    expected = fmt::format("an unsigned integer for {}", to_string(t.type));
  } else if (is_floating(t.type)) {
    expected = fmt::format("a number for {}", to_string(t.type));
  } else if (is_bool(t.type)) {
    expected = "true or false for BOOL";
  } else {
    expected = "a string for BYTES";
  }
  return status{errc::invalid_argument,
                fmt::format("unable to parse 'data' for {} '{}': element {} is {}, expected {}",
                            t.role, t.name, index, shown, expected)};
}

// Walks `data` (nested arrays at any depth, flattened in row-major order, as Triton does) and
// hands each leaf to `read`.
template <class Read>
status read_leaves(const tensor_context& t, od::value value, std::size_t depth, leaf_sink& sink,
                   const Read& read) {
  const document_context& doc = *t.doc;
  if (status s = check_depth(doc, depth, value); !s.ok()) return s;
  od::array array;
  if (error_code e = value.get_array().get(array)) return malformed_at(doc, e, value);
  for (auto element_result : array) {
    if (error_code e = element_result.error()) [[unlikely]]
      return malformed_at(doc, e, value);
    od::value element = element_result.value_unsafe();
    if (read(element, sink)) [[likely]]
      continue;
    // Not a leaf of the datatype: a nested array (natural form), or a mistake.
    od::json_type type;
    if (element.type().get(type) == error_code::SUCCESS && type == od::json_type::array) {
      if (status s = read_leaves(t, element, depth + 1, sink, read); !s.ok()) return s;
      continue;
    }
    {
      const std::string_view token = token_of(doc, element);
      if (token.empty()) return malformed_at(doc, error_code::TAPE_ERROR, element);
      return explain_leaf(t, element, token, sink.count);
    }
  }
  return {};
}

status decode_leaves(const tensor_context& t, od::value data, std::size_t depth, leaf_sink& sink) {
  switch (t.type) {
    case datatype::boolean: return read_leaves(t, data, depth, sink, bool_leaf{});
    case datatype::uint8:
      return read_leaves(t, data, depth, sink, integer_leaf<std::uint8_t>{t.doc});
    case datatype::uint16:
      return read_leaves(t, data, depth, sink, integer_leaf<std::uint16_t>{t.doc});
    case datatype::uint32:
      return read_leaves(t, data, depth, sink, integer_leaf<std::uint32_t>{t.doc});
    case datatype::uint64:
      return read_leaves(t, data, depth, sink, integer_leaf<std::uint64_t>{t.doc});
    case datatype::int8: return read_leaves(t, data, depth, sink, integer_leaf<std::int8_t>{t.doc});
    case datatype::int16:
      return read_leaves(t, data, depth, sink, integer_leaf<std::int16_t>{t.doc});
    case datatype::int32:
      return read_leaves(t, data, depth, sink, integer_leaf<std::int32_t>{t.doc});
    case datatype::int64:
      return read_leaves(t, data, depth, sink, integer_leaf<std::int64_t>{t.doc});
    case datatype::fp16: return read_leaves(t, data, depth, sink, half_leaf<half>{t.doc});
    case datatype::bf16: return read_leaves(t, data, depth, sink, half_leaf<bfloat16>{t.doc});
    case datatype::fp32: return read_leaves(t, data, depth, sink, fp32_leaf{t.doc});
    case datatype::fp64: return read_leaves(t, data, depth, sink, fp64_leaf{t.doc});
    case datatype::bytes: break;
  }
  return status{errc::internal, "BYTES data reached the fixed-size decoder"};
}

status element_count_mismatch(const tensor_context& t, const shape_type& shape,
                              std::uint64_t expected, std::uint64_t actual) {
  return status{errc::invalid_argument,
                fmt::format("unable to parse 'data' for {} '{}': shape {} expects {} elements, "
                            "got {}",
                            t.role, t.name, to_string(shape), expected, actual)};
}

}  // namespace

status decode_data(const tensor_context& t, od::value data, std::size_t depth,
                   const shape_type& shape, std::uint64_t expected, std::size_t json_size,
                   buffer& out) {
  if (t.type == datatype::bytes) {
    // Elements are appended in the BYTES format as they are read; the string becomes the buffer.
    std::string elements;
    leaf_sink counter;  // counts only
    const auto read_string_leaf = [&elements](od::value& element, leaf_sink& sink) {
      std::string_view s;
      if (element.get_string().get(s) != error_code::SUCCESS) return false;
      // A string is shorter than the JSON it came from, which the limits keep far below 4 GiB.
      std::byte prefix[4];
      detail::write_bytes_length(prefix, static_cast<std::uint32_t>(s.size()));
      elements.append(reinterpret_cast<const char*>(prefix), 4);
      elements.append(s);
      ++sink.count;
      return true;
    };
    if (status s = read_leaves(t, data, depth, counter, read_string_leaf); !s.ok()) return s;
    const std::uint64_t count = counter.count;
    if (count != expected) return element_count_mismatch(t, shape, expected, count);
    out = buffer::from_string(std::move(elements));
    return {};
  }
  // Each leaf takes at least one byte of JSON: more elements than JSON bytes cannot match, so
  // count them without allocating.
  const std::uint64_t capacity = expected <= json_size ? expected : 0;
  result<mutable_buffer> storage =
      mutable_buffer::allocate_for_overwrite(capacity * element_size(t.type));
  if (!storage) return std::move(storage).error();
  leaf_sink sink{storage->data(), capacity, 0};
  if (status s = decode_leaves(t, data, depth, sink); !s.ok()) return s;
  if (sink.count != expected) return element_count_mismatch(t, shape, expected, sink.count);
  out = buffer{std::move(*storage)};
  return {};
}

status take_binary_data_size(parameters& params, std::string_view role, std::string_view name,
                             std::optional<std::int64_t>& size) {
  const parameter_value* value = params.find(parameter_names::binary_data_size);
  if (value == nullptr) return {};
  const auto* as_int = std::get_if<std::int64_t>(value);
  if (as_int == nullptr || *as_int < 0) {
    return status{errc::invalid_argument,
                  fmt::format("unable to parse 'binary_data_size' for {} '{}': expected a "
                              "non-negative integer",
                              role, name)};
  }
  size = *as_int;
  params.erase(parameter_names::binary_data_size);
  return {};
}

}  // namespace oip::detail
