// Triton's names for the log formats, as the logging extension carries them.

#include <oip/log_settings.hpp>

#include <fmt/format.h>

namespace oip {

result<log_format> parse_log_format(std::string_view name) {
  if (name == "default") return log_format::standard;
  if (name == "ISO8601") return log_format::iso8601;
  return status{errc::invalid_argument,
                fmt::format("invalid argument for log_format, got: {}", name.substr(0, 64))};
}

std::string_view to_string(log_format format) noexcept {
  return format == log_format::iso8601 ? "ISO8601" : "default";
}

}  // namespace oip
