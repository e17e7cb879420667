// The machine's CPU and memory use, read from /proc (`detail/system_usage.hpp`).

#include "serving/detail/system_usage.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <fstream>
#include <iterator>
#include <string>

namespace oip::detail {

namespace {

// The unsigned integer at the start of `text` after any spaces, and what follows it.
std::optional<std::uint64_t> take_number(std::string_view& text) {
  const std::size_t start = text.find_first_not_of(" \t");
  if (start == std::string_view::npos) return std::nullopt;
  std::uint64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [next, ec] = std::from_chars(text.data() + start, end, value);
  if (ec != std::errc{}) return std::nullopt;
  text.remove_prefix(static_cast<std::size_t>(next - text.data()));
  return value;
}

// A /proc/meminfo field, in bytes ("MemTotal:  16384 kB").
std::optional<std::uint64_t> meminfo_field(std::string_view text, std::string_view name) {
  std::size_t at = 0;
  while (at < text.size()) {
    std::string_view line = text.substr(at, text.find('\n', at) - at);
    at += line.size() + 1;
    if (!line.starts_with(name) || line.substr(name.size(), 1) != ":") continue;
    line.remove_prefix(name.size() + 1);
    const std::optional<std::uint64_t> kib = take_number(line);
    if (!kib || *kib > UINT64_MAX / 1024) return std::nullopt;
    return *kib * 1024;
  }
  return std::nullopt;
}

std::optional<std::string> read_file(const char* path) {
  std::ifstream in{path};
  if (!in) return std::nullopt;
  std::string text{std::istreambuf_iterator<char>{in}, std::istreambuf_iterator<char>{}};
  if (in.bad()) return std::nullopt;
  return text;
}

}  // namespace

std::optional<memory_usage> parse_meminfo(std::string_view text) {
  const std::optional<std::uint64_t> total = meminfo_field(text, "MemTotal");
  const std::optional<std::uint64_t> available = meminfo_field(text, "MemAvailable");
  if (!total || !available) return std::nullopt;
  return memory_usage{*total, *total - std::min(*total, *available)};
}

std::optional<cpu_times> parse_cpu_times(std::string_view text) {
  if (!text.starts_with("cpu ")) return std::nullopt;
  std::string_view line = text.substr(3, text.find('\n') - 3);
  // user nice system idle iowait irq softirq steal
  std::array<std::uint64_t, 8> fields{};
  for (std::uint64_t& field : fields) {
    const std::optional<std::uint64_t> value = take_number(line);
    if (!value) return std::nullopt;
    field = *value;
  }
  const auto [user, nice, system, idle, iowait, irq, softirq, steal] = fields;
  cpu_times times;
  times.busy = user + nice + system + irq + softirq + steal;
  times.total = times.busy + idle + iowait;
  return times;
}

std::optional<memory_usage> read_memory_usage() {
  const std::optional<std::string> text = read_file("/proc/meminfo");
  return text ? parse_meminfo(*text) : std::nullopt;
}

std::optional<cpu_times> read_cpu_times() {
  const std::optional<std::string> text = read_file("/proc/stat");
  return text ? parse_cpu_times(*text) : std::nullopt;
}

std::optional<double> cpu_utilization::read() {
  const std::lock_guard lock{mutex_};
  const clock::time_point now = clock::now();
  if (last_ && now - sampled_ < interval_) return value_;
  const std::optional<cpu_times> sample = read_cpu_times();
  if (!sample) return last_ ? std::optional<double>{value_} : std::nullopt;
  if (last_ && sample->total > last_->total && sample->busy >= last_->busy) {
    const auto busy = static_cast<double>(sample->busy - last_->busy);
    value_ = std::min(1.0, busy / static_cast<double>(sample->total - last_->total));
  }
  last_ = sample;
  sampled_ = now;
  return value_;
}

cpu_utilization& machine_cpu_utilization() {
  static cpu_utilization sampler{std::chrono::seconds{2}};
  return sampler;
}

}  // namespace oip::detail
