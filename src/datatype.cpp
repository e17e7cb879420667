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

constexpr auto packed_names = [] {
  std::array<std::uint64_t, all_datatypes.size()> names{};
  for (std::size_t i = 0; i < all_datatypes.size(); ++i) {
    names[i] = packed_name(detail::traits(all_datatypes[i]).name);
  }
  return names;
}();

}  // namespace

result<datatype> parse_datatype(std::string_view name) {
  if (name.size() <= 7) {
    const std::uint64_t packed = packed_name(name);
    for (std::size_t i = 0; i < packed_names.size(); ++i) {
      if (packed_names[i] == packed) return all_datatypes[i];
    }
  }
  return find_datatype(name, &detail::datatype_traits::name, "datatype");
}

result<datatype> parse_config_name(std::string_view name) {
  return find_datatype(name, &detail::datatype_traits::config_name, "data type");
}

}  // namespace oip
