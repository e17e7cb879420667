#include "serving/detail/system_usage.hpp"

#include <oip/inference_service.hpp>
#include <oip/metrics.hpp>
#include <oip/repository.hpp>

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include <fmt/format.h>

namespace oip {

namespace {

// Prometheus's escapes: a backslash and a newline, and in a label value a double quote too.
std::string escaped(std::string_view text, bool label) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"' && label) {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

std::string label_value(std::string_view text) { return escaped(text, true); }

std::string model_labels(const statistics_snapshot& s) {
  return fmt::format(R"(model="{}",version="{}")", label_value(s.name), s.version);
}

void family(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
  fmt::format_to(std::back_inserter(out), "# HELP {} {}\n# TYPE {} {}\n", name,
                 escaped(help, false), name, type);
}

template <class Value>
void counter(std::string& out, const std::vector<statistics_snapshot>& models,
             std::string_view name, std::string_view help, Value value) {
  family(out, name, "counter", help);
  for (const statistics_snapshot& s : models) {
    fmt::format_to(std::back_inserter(out), "{}{{{}}} {}\n", name, model_labels(s), value(s));
  }
}

// A histogram's counts per bucket, and the sum (in nanoseconds, shown divided by `ns_per_unit`)
// and count of what they count.
struct histogram_reading {
  std::span<const std::uint64_t> buckets;  // one per bound, then the overflow
  model_statistics::duration total;
  double ns_per_unit;
};

// A histogram per model: its buckets' upper bounds are `bounds` divided by `bound_per_unit`.
template <std::size_t N, class Reading>
void histogram(std::string& out, const std::vector<statistics_snapshot>& models,
               std::string_view name, std::string_view help,
               const std::array<std::uint64_t, N>& bounds, double bound_per_unit, Reading read) {
  family(out, name, "histogram", help);
  for (const statistics_snapshot& s : models) {
    const std::string labels = model_labels(s);
    const histogram_reading reading = read(s);
    std::uint64_t cumulative = 0;
    for (std::size_t i = 0; i < reading.buckets.size(); ++i) {
      cumulative += reading.buckets[i];
      const std::string bound =
          i < bounds.size() ? fmt::format("{}", static_cast<double>(bounds[i]) / bound_per_unit)
                            : std::string{"+Inf"};
      fmt::format_to(std::back_inserter(out), "{}_bucket{{{},le=\"{}\"}} {}\n", name, labels, bound,
                     cumulative);
    }
    fmt::format_to(std::back_inserter(out), "{}_sum{{{}}} {}\n{}_count{{{}}} {}\n", name, labels,
                   static_cast<double>(reading.total.ns) / reading.ns_per_unit, name, labels,
                   reading.total.count);
  }
}

}  // namespace

std::string prometheus_text(const inference_service& service,
                            const std::vector<metric_gauge>& extra) {
  result<std::vector<statistics_snapshot>> all = service.statistics(std::nullopt, std::nullopt);
  const std::vector<statistics_snapshot> models =
      all ? std::move(*all) : std::vector<statistics_snapshot>{};
  std::string out;
  using snapshot = statistics_snapshot;
  counter(out, models, "nv_inference_request_success",
          "Number of successful inference requests, all batch sizes",
          [](const snapshot& s) { return s.success.count; });
  // One series per reason, as Triton's (labels in its order: sorted by name).
  family(out, "nv_inference_request_failure", "counter",
         "Number of failed inference requests, all batch sizes");
  constexpr std::array<std::string_view, failure_reason_count> reasons{"REJECTED", "CANCELED",
                                                                       "BACKEND", "OTHER"};
  static_assert(static_cast<std::size_t>(failure_reason::rejected) == 0 &&
                static_cast<std::size_t>(failure_reason::canceled) == 1 &&
                static_cast<std::size_t>(failure_reason::backend) == 2 &&
                static_cast<std::size_t>(failure_reason::other) == 3 && failure_reason_count == 4);
  for (const snapshot& s : models) {
    for (std::size_t r = 0; r < reasons.size(); ++r) {
      fmt::format_to(
          std::back_inserter(out),
          "nv_inference_request_failure{{model=\"{}\",reason=\"{}\",version=\"{}\"}} {}\n",
          label_value(s.name), reasons[r], s.version, s.failures[r]);
    }
  }
  counter(out, models, "nv_inference_count",
          "Number of inferences performed (does not include cached requests)",
          [](const snapshot& s) { return s.inference_count; });
  counter(out, models, "nv_inference_exec_count",
          "Number of model executions performed (does not include cached requests)",
          [](const snapshot& s) { return s.execution_count; });
  counter(out, models, "nv_inference_request_duration_us",
          "Cumulative inference request duration in microseconds (includes cached requests)",
          [](const snapshot& s) { return s.success.ns / 1000; });
  counter(out, models, "nv_inference_queue_duration_us",
          "Cumulative inference queuing duration in microseconds (includes cached requests)",
          [](const snapshot& s) { return s.queue.ns / 1000; });
  counter(out, models, "nv_inference_compute_input_duration_us",
          "Cumulative compute input duration in microseconds (does not include cached requests)",
          [](const snapshot& s) { return s.compute_input.ns / 1000; });
  counter(out, models, "nv_inference_compute_infer_duration_us",
          "Cumulative compute inference duration in microseconds (does not include cached "
          "requests)",
          [](const snapshot& s) { return s.compute_infer.ns / 1000; });
  counter(out, models, "nv_inference_compute_output_duration_us",
          "Cumulative inference compute output duration in microseconds (does not include cached "
          "requests)",
          [](const snapshot& s) { return s.compute_output.ns / 1000; });
  if (service.options().response_cache_bytes > 0) {  // Triton's, with its cache on
    counter(out, models, "nv_cache_num_hits_per_model", "Number of cache hits per model",
            [](const snapshot& s) { return s.cache_hit.count; });
    counter(out, models, "nv_cache_num_misses_per_model", "Number of cache misses per model",
            [](const snapshot& s) { return s.cache_miss.count; });
    counter(out, models, "nv_cache_hit_duration_per_model",
            "Total cache hit duration per model, in microseconds",
            [](const snapshot& s) { return s.cache_hit.ns / 1000; });
    counter(out, models, "nv_cache_miss_duration_per_model",
            "Total cache miss (insert+lookup) duration per model, in microseconds",
            [](const snapshot& s) { return s.cache_miss.ns / 1000; });
  }
  family(out, "nv_inference_pending_request_count", "gauge",
         "Instantaneous number of pending requests awaiting execution per-model.");
  for (const snapshot& s : models) {
    fmt::format_to(std::back_inserter(out), "nv_inference_pending_request_count{{{}}} {}\n",
                   model_labels(s), s.pending_requests);
  }

  histogram(out, models, "oip_inference_request_duration_seconds",
            "Latency of successful inference requests, from arrival to reply, in seconds",
            model_statistics::latency_bounds_us, 1e6, [](const snapshot& s) {
              return histogram_reading{s.latency_buckets, s.success, 1e9};
            });
  histogram(out, models, "nv_inference_first_response_histogram_ms",
            "Duration from request to first response in milliseconds",
            model_statistics::first_response_bounds_ms, 1, [](const snapshot& s) {
              return histogram_reading{s.first_response_buckets, s.first_response, 1e6};
            });

  family(out, "oip_sequences_active", "gauge", "Sequences holding state, per sequence model");
  for (const snapshot& s : models) {
    if (!s.active_sequences) continue;
    fmt::format_to(std::back_inserter(out), "oip_sequences_active{{{}}} {}\n", model_labels(s),
                   *s.active_sequences);
  }

  // The machine's, as Triton reports them (its `--allow-cpu-metrics`, on by default); left out
  // where /proc does not say.
  if (const std::optional<double> utilization = detail::machine_cpu_utilization().read()) {
    family(out, "nv_cpu_utilization", "gauge", "CPU utilization rate [0.0 - 1.0]");
    fmt::format_to(std::back_inserter(out), "nv_cpu_utilization {}\n", *utilization);
  }
  if (const std::optional<detail::memory_usage> memory = detail::read_memory_usage()) {
    family(out, "nv_cpu_memory_total_bytes", "gauge", "CPU total memory (RAM), in bytes");
    fmt::format_to(std::back_inserter(out), "nv_cpu_memory_total_bytes {}\n", memory->total_bytes);
    family(out, "nv_cpu_memory_used_bytes", "gauge", "CPU used memory (RAM), in bytes");
    fmt::format_to(std::back_inserter(out), "nv_cpu_memory_used_bytes {}\n", memory->used_bytes);
  }

  for (const metric_gauge& gauge : extra) {
    family(out, gauge.name, "gauge", gauge.help);
    for (const auto& [labels, value] : gauge.series) {
      fmt::format_to(std::back_inserter(out), "{}{}{}{} {}\n", gauge.name,
                     labels.empty() ? "" : "{", labels, labels.empty() ? "" : "}", value());
    }
  }
  return out;
}

}  // namespace oip
