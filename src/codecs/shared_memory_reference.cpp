// A tensor's `shared_memory_*` parameters read into a reference: what both request decoders and
// the server's output lookup take out of a tensor's parameters.

#include <oip/infer.hpp>

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <variant>

#include <fmt/format.h>

namespace oip {

namespace {

// A non-negative integer parameter, if present.
result<std::optional<std::uint64_t>> take_size(parameters& params, std::string_view key,
                                               std::string_view role, std::string_view tensor) {
  const parameter_value* value = params.find(key);
  if (value == nullptr) return std::optional<std::uint64_t>{};
  std::optional<std::uint64_t> out;
  if (const auto* as_int = std::get_if<std::int64_t>(value); as_int != nullptr && *as_int >= 0) {
    out = static_cast<std::uint64_t>(*as_int);
  } else if (const auto* as_uint = std::get_if<std::uint64_t>(value)) {
    out = *as_uint;
  } else {
    return status{errc::invalid_argument,
                  fmt::format("invalid value for '{}' of {} '{}': expected a non-negative integer",
                              key, role, tensor)};
  }
  params.erase(key);
  return out;
}

}  // namespace

result<std::optional<shared_memory_reference>> take_shared_memory_reference(
    parameters& params, std::string_view role, std::string_view tensor) {
  namespace names = parameter_names;
  const parameter_value* region = params.find(names::shared_memory_region);
  if (region == nullptr) {
    for (const std::string_view key :
         {names::shared_memory_offset, names::shared_memory_byte_size}) {
      if (params.find(key) != nullptr) {
        return status{errc::invalid_argument,
                      fmt::format("'{}' can not be specified without 'shared_memory_region' "
                                  "parameter for {} '{}'",
                                  key, role, tensor)};
      }
    }
    return std::optional<shared_memory_reference>{};
  }
  const auto* region_name = std::get_if<std::string>(region);
  if (region_name == nullptr) {
    return status{errc::invalid_argument,
                  fmt::format("invalid value for 'shared_memory_region' of {} '{}': expected a "
                              "string",
                              role, tensor)};
  }
  shared_memory_reference out{*region_name, 0, 0};
  result<std::optional<std::uint64_t>> offset =
      take_size(params, names::shared_memory_offset, role, tensor);
  if (!offset) return std::move(offset).error();
  result<std::optional<std::uint64_t>> byte_size =
      take_size(params, names::shared_memory_byte_size, role, tensor);
  if (!byte_size) return std::move(byte_size).error();
  if (!*byte_size) {
    return status{errc::invalid_argument,
                  fmt::format("'shared_memory_byte_size' must be specified along with "
                              "'shared_memory_region' parameter for {} '{}'",
                              role, tensor)};
  }
  out.offset = offset->value_or(0);
  out.byte_size = **byte_size;
  params.erase(names::shared_memory_region);
  return std::optional<shared_memory_reference>{std::move(out)};
}

status put_shared_memory_reference(parameters& params, const shared_memory_reference& place) {
  constexpr auto most = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  if (place.offset > most || place.byte_size > most) {
    return status{errc::invalid_argument,
                  fmt::format("the offset and byte size in region '{}' must be at most {}",
                              place.region, most)};
  }
  params.set(std::string{parameter_names::shared_memory_region}, place.region);
  params.set(std::string{parameter_names::shared_memory_offset},
             static_cast<std::int64_t>(place.offset));
  params.set(std::string{parameter_names::shared_memory_byte_size},
             static_cast<std::int64_t>(place.byte_size));
  return {};
}

}  // namespace oip
