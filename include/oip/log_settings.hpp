#pragma once
/// \file
/// Triton's logging extension's settings, as the protocol carries them (`/v2/logging`, gRPC
/// `LogSettings`); `log.hpp` applies them.

#include <oip/export.hpp>
#include <oip/status.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace oip {

/// The default sink's line prefix, as Triton's `log_format`: `standard` ("default") is glog's
/// `E1122 21:30:02.123456 oip] ...`, `iso8601` ("ISO8601") is `2026-11-22T21:30:02Z E oip] ...`;
/// both in UTC. A host's sink formats its lines itself.
enum class log_format : std::uint8_t { standard, iso8601 };

/// "default" or "ISO8601" (Triton's names); anything else is `errc::invalid_argument`.
[[nodiscard]] OIP_EXPORT result<log_format> parse_log_format(std::string_view name);
[[nodiscard]] OIP_EXPORT std::string_view to_string(log_format format) noexcept;

/// Which lines are written, and how: Triton's logging settings. Each level is on or off by itself;
/// `verbose` lines are written when `verbose_level` is above 0.
struct log_settings {
  bool error = true;
  bool warning = true;
  bool info = false;
  std::uint32_t verbose_level = 0;
  log_format format = log_format::standard;

  friend bool operator==(const log_settings&, const log_settings&) = default;
};

/// A change to some of the settings (Triton's logging extension): what is not set stays.
/// `file` is Triton's `log_file`, which cannot be changed (oip writes to its sink).
struct log_settings_update {
  std::optional<bool> error;
  std::optional<bool> warning;
  std::optional<bool> info;
  std::optional<std::uint32_t> verbose_level;
  std::optional<log_format> format;
  std::optional<std::string> file;
};

}  // namespace oip
