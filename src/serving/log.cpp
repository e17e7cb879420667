#include <oip/log.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <utility>

#include <fmt/format.h>

namespace oip {

namespace {

// A line as it goes to stderr: control characters escaped, so that what a client sent (a model
// name, a request id) cannot start a forged line of its own or hide the rest of one.
std::string printable(std::string_view line) {
  std::string out;
  out.reserve(line.size());
  for (const char c : line) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (byte < 0x20U || byte == 0x7FU) {
      out += fmt::format("\\x{:02x}", byte);
    } else {
      out += c;
    }
  }
  return out;
}

// The settings: one bit per level for `log_enabled`, which every request asks; the rest for the
// default sink and for `current_log_settings`. Writers hold `settings_mutex`.
std::atomic<unsigned> enabled_levels{(1U << static_cast<unsigned>(log_level::error)) |
                                     (1U << static_cast<unsigned>(log_level::warning))};
std::atomic<std::uint32_t> verbose_level{0};
std::atomic<log_format> line_format{log_format::standard};
std::mutex settings_mutex;

// Triton's shapes, in UTC: "E1122 21:30:02.123456 oip] message" (glog's) by default,
// "2026-11-22T21:30:02Z E oip] message" in ISO 8601.
class stderr_sink final : public log_sink {
 public:
  void write(log_level level, std::string_view line) noexcept override {
    const auto now = std::chrono::system_clock::now();
    const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
    const auto micros =
        std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() %
        1'000'000;
    std::tm utc{};
    gmtime_r(&seconds, &utc);
    constexpr char letters[] = {'E', 'W', 'I', 'V'};
    const char letter = letters[static_cast<std::size_t>(level)];
    try {
      const std::string text =
          line_format.load(std::memory_order_relaxed) == log_format::iso8601
              ? fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z {} oip] {}\n", utc.tm_year + 1900,
                            utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec,
                            letter, printable(line))
              : fmt::format("{}{:02}{:02} {:02}:{:02}:{:02}.{:06} oip] {}\n", letter,
                            utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec,
                            micros, printable(line));
      std::fwrite(text.data(), 1, text.size(), stderr);  // one write: lines do not interleave
    } catch (...) {  // NOLINT(bugprone-empty-catch): a line that cannot be formatted is dropped
    }
  }
};

std::mutex sink_mutex;

std::shared_ptr<log_sink>& sink_slot() {
  static std::shared_ptr<log_sink> sink = std::make_shared<stderr_sink>();
  return sink;
}

}  // namespace

log_sink::~log_sink() = default;

result<log_level> parse_log_level(std::string_view name) {
  for (const log_level level :
       {log_level::error, log_level::warning, log_level::info, log_level::verbose}) {
    if (name == to_string(level)) return level;
  }
  return status{errc::invalid_argument,
                fmt::format("unknown log level '{}': expected error, warning, info or verbose",
                            name.substr(0, 64))};
}

std::string_view to_string(log_level level) noexcept {
  switch (level) {
    case log_level::error: return "error";
    case log_level::warning: return "warning";
    case log_level::info: return "info";
    case log_level::verbose: return "verbose";
  }
  return "verbose";
}

void set_log_sink(std::shared_ptr<log_sink> sink) {
  if (!sink) sink = std::make_shared<stderr_sink>();
  const std::lock_guard lock{sink_mutex};
  sink_slot() = std::move(sink);
}

namespace {

log_settings settings_now() noexcept {
  const unsigned enabled = enabled_levels.load(std::memory_order_relaxed);
  const auto on = [&](log_level level) {
    return (enabled & (1U << static_cast<unsigned>(level))) != 0;
  };
  return log_settings{on(log_level::error), on(log_level::warning), on(log_level::info),
                      verbose_level.load(std::memory_order_relaxed),
                      line_format.load(std::memory_order_relaxed)};
}

// Changes the settings as one step: two changes at once both hold.
template <class Change>
log_settings change_settings(Change change) noexcept {
  const auto bit = [](bool on, log_level level) {
    return on ? 1U << static_cast<unsigned>(level) : 0U;
  };
  const std::lock_guard lock{settings_mutex};
  log_settings settings = settings_now();
  change(settings);
  enabled_levels.store(
      bit(settings.error, log_level::error) | bit(settings.warning, log_level::warning) |
          bit(settings.info, log_level::info) | bit(settings.verbose_level > 0, log_level::verbose),
      std::memory_order_relaxed);
  verbose_level.store(settings.verbose_level, std::memory_order_relaxed);
  line_format.store(settings.format, std::memory_order_relaxed);
  return settings;
}

}  // namespace

log_settings current_log_settings() noexcept {
  const std::lock_guard lock{settings_mutex};
  return settings_now();
}

void set_log_settings(const log_settings& settings) noexcept {
  change_settings([&](log_settings& now) { now = settings; });
}

result<log_settings> update_log_settings(const log_settings_update& update) {
  if (update.file) {
    return status{errc::not_implemented,
                  "log file location can not be updated through network protocol"};
  }
  return change_settings([&](log_settings& now) {
    now.error = update.error.value_or(now.error);
    now.warning = update.warning.value_or(now.warning);
    now.info = update.info.value_or(now.info);
    now.verbose_level = update.verbose_level.value_or(now.verbose_level);
    now.format = update.format.value_or(now.format);
  });
}

void set_log_level(log_level level) noexcept {
  change_settings([&](log_settings& now) {
    now.error = true;
    now.warning = level >= log_level::warning;
    now.info = level >= log_level::info;
    now.verbose_level = level == log_level::verbose ? 1 : 0;
  });
}

bool log_enabled(log_level level) noexcept {
  return (enabled_levels.load(std::memory_order_relaxed) & (1U << static_cast<unsigned>(level))) !=
         0;
}

void log(log_level level, std::string_view line) noexcept {
  if (!log_enabled(level)) return;
  std::shared_ptr<log_sink> sink;
  {
    const std::lock_guard lock{sink_mutex};
    sink = sink_slot();
  }
  sink->write(level, line);
}

void log_request_failure(const status& why, std::string_view subject,
                         std::string_view request_id) noexcept {
  log_request_failure(why.http_status() >= 500 ? log_level::error : log_level::warning, why,
                      subject, request_id);
}

void log_request_failure(log_level level, const status& why, std::string_view subject,
                         std::string_view request_id) noexcept {
  if (!log_enabled(level)) return;
  try {
    log(level,
        fmt::format("{} request '{}': {} ({})", subject.substr(0, 300), request_id.substr(0, 300),
                    why.message().substr(0, 1000), why.http_status()));
  } catch (...) {  // NOLINT(bugprone-empty-catch): only the line is lost
  }
}

}  // namespace oip
