#pragma once
/// \file
/// Triton's trace extension's settings, as the protocol carries them (`/v2[/models/<m>]/trace/
/// setting`, gRPC `TraceSetting`); `trace.hpp` takes the traces.

#include <oip/export.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace oip {

/// What a traced request records, as Triton's levels: its timestamps, its tensors (the inputs as
/// they were queued and the model's outputs), both (`timestamps | tensors`), or nothing (`off`).
enum class trace_level : std::uint8_t { off = 0, timestamps = 1, tensors = 2 };

[[nodiscard]] constexpr trace_level operator|(trace_level a, trace_level b) noexcept {
  return static_cast<trace_level>(static_cast<std::uint8_t>(a) | static_cast<std::uint8_t>(b));
}
/// Whether `level` records `part` (`timestamps` or `tensors`).
[[nodiscard]] constexpr bool includes(trace_level level, trace_level part) noexcept {
  return (static_cast<std::uint8_t>(level) & static_cast<std::uint8_t>(part)) != 0;
}

struct trace_settings {
  trace_level level = trace_level::off;
  std::uint32_t rate = 1000;  ///< one request in `rate` is traced
  std::int32_t count = -1;    ///< traces left to take; -1 for no limit
  /// Every `log_frequency` traces are written to a file of their own, `<file>.<n>` (n from 0); with
  /// 0, every trace goes to `file` itself, one JSON array completed when the server stops.
  std::uint32_t log_frequency = 0;
  /// Set by the host only. The server creates it, and each numbered file, readable by its own
  /// user alone; it never writes through a symbolic link or over a file that exists (an earlier
  /// run's included: remove it first), whose traces are dropped with an error line.
  std::string file;
  /// Host only: the numbered files this server keeps; each new one past it removes the oldest
  /// that the server created (0: no bound).
  std::uint32_t max_files = 100;

  friend bool operator==(const trace_settings&, const trace_settings&) = default;
};

/// A change to some trace settings, as a client sends it: each setting by name (`trace_level`,
/// `trace_rate`, `trace_count`, `log_frequency`, `trace_file`) with its values as text, or no
/// values to clear it (a model's setting then follows the global one again; a global one goes back
/// to the host's). Names oip does not know are ignored, as in Triton.
struct trace_settings_change {
  std::vector<std::pair<std::string, std::optional<std::vector<std::string>>>> settings;
};

/// `trace_level` as Triton lists it: `OFF`, or `TIMESTAMPS` and `TENSORS` for what it records.
[[nodiscard]] OIP_EXPORT std::vector<std::string_view> level_names(trace_level level);

}  // namespace oip
