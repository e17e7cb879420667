#include <oip/datatype.hpp>

#include <array>
#include <cstdint>

#include <fmt/format.h>

namespace oip {

namespace {
template <class Field>
result<datatype> find_datatype(std::string_view text, Field field, std::string_view what) {
  for (datatype type : all_datatypes) {
    if (detail::traits(type).*field == text) return type;
  }
  return status{errc::invalid_argument, fmt::format("invalid {}: '{}'", what, text)};
}

// A name of at most 7 characters as one integer, its length in the top byte: the protocol's
// names compare as integers, with no call to memcmp (every JSON input names its datatype).
constexpr std::uint64_t packed_name(std::string_view name) noexcept {
  std::uint64_t packed = std::uint64_t{name.size()} << 56U;
  for (std::size_t i = 0; i < name.size(); ++i) {
    packed |= std::uint64_t{static_cast<unsigned char>(name[i])} << (8U * i);
  }
  return packed;
}

constexpr std::uint64_t packed(datatype type) noexcept {
  return packed_name(detail::traits(type).name);
}

}  // namespace

result<datatype> parse_datatype(std::string_view name) {
  // A switch: the compiler searches the fourteen constants in a few comparisons.
  if (name.size() <= 7) {
    switch (packed_name(name)) {
      case packed(datatype::boolean): return datatype::boolean;
      case packed(datatype::uint8): return datatype::uint8;
      case packed(datatype::uint16): return datatype::uint16;
      case packed(datatype::uint32): return datatype::uint32;
      case packed(datatype::uint64): return datatype::uint64;
      case packed(datatype::int8): return datatype::int8;
      case packed(datatype::int16): return datatype::int16;
      case packed(datatype::int32): return datatype::int32;
      case packed(datatype::int64): return datatype::int64;
      case packed(datatype::fp16): return datatype::fp16;
      case packed(datatype::bf16): return datatype::bf16;
      case packed(datatype::fp32): return datatype::fp32;
      case packed(datatype::fp64): return datatype::fp64;
      case packed(datatype::bytes): return datatype::bytes;
      default: break;
    }
  }
  return find_datatype(name, &detail::datatype_traits::name, "datatype");
}

result<datatype> parse_config_name(std::string_view name) {
  return find_datatype(name, &detail::datatype_traits::config_name, "data type");
}

}  // namespace oip
