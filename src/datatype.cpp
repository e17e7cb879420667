#include <oip/datatype.hpp>

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
}  // namespace

result<datatype> parse_datatype(std::string_view name) {
  return find_datatype(name, &detail::datatype_traits::name, "datatype");
}

result<datatype> parse_config_name(std::string_view name) {
  return find_datatype(name, &detail::datatype_traits::config_name, "data type");
}

}  // namespace oip
