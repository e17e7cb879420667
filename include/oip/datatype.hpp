#pragma once
/// \file
/// The protocol's tensor datatypes (the spec's table plus BF16): names, element sizes and
/// classification.

#include <oip/export.hpp>
#include <oip/status.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace oip {

struct half;
struct bfloat16;

/// A tensor element type. BYTES elements have no fixed size.
enum class datatype : std::uint8_t {
  boolean,  ///< "BOOL": one byte, 0 or 1
  uint8,
  uint16,
  uint32,
  uint64,
  int8,
  int16,
  int32,
  int64,
  fp16,  ///< IEEE 754 binary16
  bf16,  ///< bfloat16 (the upper half of an FP32)
  fp32,
  fp64,
  bytes,  ///< "BYTES": each element a 4-byte little-endian length and that many bytes
};

/// Every datatype, in the order of the enum.
inline constexpr std::array<datatype, 14> all_datatypes = {
    datatype::boolean, datatype::uint8, datatype::uint16, datatype::uint32, datatype::uint64,
    datatype::int8,    datatype::int16, datatype::int32,  datatype::int64,  datatype::fp16,
    datatype::bf16,    datatype::fp32,  datatype::fp64,   datatype::bytes};

namespace detail {
struct datatype_traits {
  std::string_view name;         // the protocol string, e.g. "FP32"
  std::string_view config_name;  // Triton's model configuration name, e.g. "TYPE_FP32"
  std::size_t size;              // bytes per element, 0 for BYTES
};

inline constexpr datatype_traits datatype_table[] = {
    {"BOOL", "TYPE_BOOL", 1},     {"UINT8", "TYPE_UINT8", 1},   {"UINT16", "TYPE_UINT16", 2},
    {"UINT32", "TYPE_UINT32", 4}, {"UINT64", "TYPE_UINT64", 8}, {"INT8", "TYPE_INT8", 1},
    {"INT16", "TYPE_INT16", 2},   {"INT32", "TYPE_INT32", 4},   {"INT64", "TYPE_INT64", 8},
    {"FP16", "TYPE_FP16", 2},     {"BF16", "TYPE_BF16", 2},     {"FP32", "TYPE_FP32", 4},
    {"FP64", "TYPE_FP64", 8},     {"BYTES", "TYPE_STRING", 0},
};

constexpr const datatype_traits& traits(datatype type) noexcept {
  return datatype_table[static_cast<std::size_t>(type)];
}
}  // namespace detail

/// The protocol string, e.g. "FP32".
[[nodiscard]] constexpr std::string_view to_string(datatype type) noexcept {
  return detail::traits(type).name;
}

/// Triton's model-configuration name, e.g. "TYPE_FP32" ("TYPE_STRING" for BYTES).
[[nodiscard]] constexpr std::string_view config_name(datatype type) noexcept {
  return detail::traits(type).config_name;
}

/// Bytes per element; 0 for BYTES, whose elements vary in size.
[[nodiscard]] constexpr std::size_t element_size(datatype type) noexcept {
  return detail::traits(type).size;
}

[[nodiscard]] constexpr bool is_bytes(datatype type) noexcept { return type == datatype::bytes; }
[[nodiscard]] constexpr bool is_bool(datatype type) noexcept { return type == datatype::boolean; }
[[nodiscard]] constexpr bool is_floating(datatype type) noexcept {
  return type == datatype::fp16 || type == datatype::bf16 || type == datatype::fp32 ||
         type == datatype::fp64;
}
[[nodiscard]] constexpr bool is_signed_integer(datatype type) noexcept {
  return type == datatype::int8 || type == datatype::int16 || type == datatype::int32 ||
         type == datatype::int64;
}
[[nodiscard]] constexpr bool is_unsigned_integer(datatype type) noexcept {
  return type == datatype::uint8 || type == datatype::uint16 || type == datatype::uint32 ||
         type == datatype::uint64;
}
[[nodiscard]] constexpr bool is_integer(datatype type) noexcept {
  return is_signed_integer(type) || is_unsigned_integer(type);
}
/// Integers and floating-point types; BOOL and BYTES are not numeric.
[[nodiscard]] constexpr bool is_numeric(datatype type) noexcept {
  return is_integer(type) || is_floating(type);
}

/// Parses a protocol string ("FP32", case-sensitive as in the spec). Anything else is an
/// `errc::invalid_argument` naming the string; there is no default.
///
/// Example:
/// \code
///   oip::result<oip::datatype> t = oip::parse_datatype("INT32");  // datatype::int32
/// \endcode
[[nodiscard]] OIP_EXPORT result<datatype> parse_datatype(std::string_view name);

/// Parses Triton's configuration name ("TYPE_FP32", "TYPE_STRING").
[[nodiscard]] OIP_EXPORT result<datatype> parse_config_name(std::string_view name);

/// The datatype of a C++ element type: `datatype_of<float>` is `datatype::fp32`.
template <class T>
inline constexpr bool has_datatype = false;
template <class T>
inline constexpr datatype datatype_of = datatype::bytes;

#define OIP_DETAIL_DATATYPE_OF(T, value)        \
  template <>                                   \
  inline constexpr bool has_datatype<T> = true; \
  template <>                                   \
  inline constexpr datatype datatype_of<T> = datatype::value;
OIP_DETAIL_DATATYPE_OF(bool, boolean)
OIP_DETAIL_DATATYPE_OF(std::uint8_t, uint8)
OIP_DETAIL_DATATYPE_OF(std::uint16_t, uint16)
OIP_DETAIL_DATATYPE_OF(std::uint32_t, uint32)
OIP_DETAIL_DATATYPE_OF(std::uint64_t, uint64)
OIP_DETAIL_DATATYPE_OF(std::int8_t, int8)
OIP_DETAIL_DATATYPE_OF(std::int16_t, int16)
OIP_DETAIL_DATATYPE_OF(std::int32_t, int32)
OIP_DETAIL_DATATYPE_OF(std::int64_t, int64)
OIP_DETAIL_DATATYPE_OF(half, fp16)
OIP_DETAIL_DATATYPE_OF(bfloat16, bf16)
OIP_DETAIL_DATATYPE_OF(float, fp32)
OIP_DETAIL_DATATYPE_OF(double, fp64)
#undef OIP_DETAIL_DATATYPE_OF

}  // namespace oip
