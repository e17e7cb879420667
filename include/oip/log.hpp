#pragma once
/// \file
/// oip's log: levels, and a sink that a host replaces to route oip's lines into its own logger.
/// By default lines at `warning` and above go to stderr. A failed request is one line with what
/// it asked for (model and request id, or method and path): at `error` when the server is at
/// fault (a 5xx), at `warning` when the client is (a 4xx; `--log-level error` silences those); a
/// successful one is a line at `verbose` only.

#include <oip/export.hpp>
#include <oip/log_settings.hpp>
#include <oip/status.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace oip {

enum class log_level : std::uint8_t { error, warning, info, verbose };

/// "error", "warning", "info" or "verbose"; anything else is `errc::invalid_argument`.
[[nodiscard]] OIP_EXPORT result<log_level> parse_log_level(std::string_view name);
[[nodiscard]] OIP_EXPORT std::string_view to_string(log_level level) noexcept;

/// Where oip's lines go. `write` may be called from any thread, concurrently.
///
/// Example:
/// \code
///   struct to_spdlog : oip::log_sink {
///     void write(oip::log_level level, std::string_view line) noexcept override {
///       spdlog::log(level == oip::log_level::error ? spdlog::level::err : spdlog::level::info,
///                   line);
///     }
///   };
///   oip::set_log_sink(std::make_shared<to_spdlog>());
/// \endcode
class OIP_EXPORT log_sink {
 public:
  log_sink() = default;
  log_sink(const log_sink&) = delete;
  log_sink& operator=(const log_sink&) = delete;
  virtual ~log_sink();
  virtual void write(log_level level, std::string_view line) noexcept = 0;
};

/// Replaces the sink for the whole process; null restores the default (stderr, with a timestamp).
OIP_EXPORT void set_log_sink(std::shared_ptr<log_sink> sink);

[[nodiscard]] OIP_EXPORT log_settings current_log_settings() noexcept;
OIP_EXPORT void set_log_settings(const log_settings& settings) noexcept;
/// Applies `update` whole, or nothing: 501 when it names a log file. Returns the new settings.
///
/// Example:
/// \code
///   oip::log_settings_update quieter;
///   quieter.warning = false;
///   oip::result<oip::log_settings> now = oip::update_log_settings(quieter);
/// \endcode
[[nodiscard]] OIP_EXPORT result<log_settings> update_log_settings(
    const log_settings_update& update);

/// `level` and every level above it on, the rest off (`verbose` sets `verbose_level` 1).
OIP_EXPORT void set_log_level(log_level level) noexcept;
/// Whether lines at `level` are written (they are dropped before they are formatted otherwise).
[[nodiscard]] OIP_EXPORT bool log_enabled(log_level level) noexcept;
/// Writes `line` to the sink when `level` is enabled.
OIP_EXPORT void log(log_level level, std::string_view line) noexcept;

/// The one line of a failed request: "<subject> request '<id>': <message> (<HTTP status>)" at
/// `error` for a 5xx, `warning` otherwise. `subject` says what was asked ("model 'simple'
/// version 1", "GET /v2/nope").
OIP_EXPORT void log_request_failure(const status& why, std::string_view subject,
                                    std::string_view request_id = {}) noexcept;
/// The same line at `level`: a request its client cancelled is no fault of the server's, whatever
/// its status.
OIP_EXPORT void log_request_failure(log_level level, const status& why, std::string_view subject,
                                    std::string_view request_id = {}) noexcept;

}  // namespace oip
