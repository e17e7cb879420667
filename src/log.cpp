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

// Triton's (glog's) shape: E1122 21:30:02.123456 oip] message
class stderr_sink final : public log_sink {
 public:
  void write(log_level level, std::string_view line) noexcept override {
    const auto now = std::chrono::system_clock::now();
    const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
    const auto micros =
        std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() %
        1'000'000;
    std::tm local{};
    localtime_r(&seconds, &local);
    constexpr char letters[] = {'E', 'W', 'I', 'V'};
    try {
      const std::string text =
          fmt::format("{}{:02}{:02} {:02}:{:02}:{:02}.{:06} oip] {}\n",
                      letters[static_cast<std::size_t>(level)], local.tm_mon + 1, local.tm_mday,
                      local.tm_hour, local.tm_min, local.tm_sec, micros, printable(line));
      std::fwrite(text.data(), 1, text.size(), stderr);  // one write: lines do not interleave
    } catch (...) {  // NOLINT(bugprone-empty-catch): a line that cannot be formatted is dropped
    }
  }
};

std::atomic<log_level> threshold{log_level::warning};
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

void set_log_level(log_level level) noexcept { threshold.store(level, std::memory_order_relaxed); }

log_level current_log_level() noexcept { return threshold.load(std::memory_order_relaxed); }

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
  const log_level level = why.http_status() >= 500 ? log_level::error : log_level::warning;
  if (!log_enabled(level)) return;
  try {
    log(level,
        fmt::format("{} request '{}': {} ({})", subject.substr(0, 300), request_id.substr(0, 300),
                    why.message().substr(0, 1000), why.http_status()));
  } catch (...) {  // NOLINT(bugprone-empty-catch): only the line is lost
  }
}

}  // namespace oip
