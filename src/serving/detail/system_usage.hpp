#pragma once
// Internal: the machine's CPU and memory use as Triton's CPU metrics report them
// (`nv_cpu_utilization`, `nv_cpu_memory_total_bytes`, `nv_cpu_memory_used_bytes`), read from
// /proc (tests/metrics_test.cpp).

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string_view>

namespace oip::detail {

struct memory_usage {
  std::uint64_t total_bytes = 0;
  std::uint64_t used_bytes = 0;
};

// From /proc/meminfo's text: MemTotal, and MemTotal less MemAvailable; none without both.
[[nodiscard]] std::optional<memory_usage> parse_meminfo(std::string_view text);

// The CPUs' time since boot, in the kernel's ticks.
struct cpu_times {
  std::uint64_t busy = 0;
  std::uint64_t total = 0;
};

// From /proc/stat's text, its first line (all CPUs): user, nice, system, irq, softirq and steal
// are busy, idle and iowait are not (guest time is counted in user and nice already); none
// where the line is not there whole.
[[nodiscard]] std::optional<cpu_times> parse_cpu_times(std::string_view text);

[[nodiscard]] std::optional<memory_usage> read_memory_usage();
[[nodiscard]] std::optional<cpu_times> read_cpu_times();

// The share of the CPUs' time spent busy, over an interval of at least `interval`: a reading
// takes a new sample once the last is that old, and gives the share between the last two (0
// until there are two; none while /proc/stat has never been read). Readers between samples see
// the same value, however often they come. Thread-safe.
class cpu_utilization {
 public:
  using clock = std::chrono::steady_clock;
  explicit cpu_utilization(clock::duration interval) : interval_{interval} {}

  [[nodiscard]] std::optional<double> read();

 private:
  const clock::duration interval_;
  std::mutex mutex_;
  std::optional<cpu_times> last_;
  clock::time_point sampled_;
  double value_ = 0;
};

// The process's sampler, at Triton's default metrics interval (2 s).
[[nodiscard]] cpu_utilization& machine_cpu_utilization();

}  // namespace oip::detail
