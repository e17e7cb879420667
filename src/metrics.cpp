#include <oip/inference_service.hpp>
#include <oip/metrics.hpp>
#include <oip/repository.hpp>

#include <cstdint>
#include <string_view>

#include <fmt/format.h>

namespace oip {

namespace {

// A label value with Prometheus's three escapes.
std::string label_value(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string model_labels(const statistics_snapshot& s) {
  return fmt::format(R"(model="{}",version="{}")", label_value(s.name), s.version);
}

void family(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
  fmt::format_to(std::back_inserter(out), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

template <class Value>
void counter(std::string& out, const std::vector<statistics_snapshot>& models,
             std::string_view name, std::string_view help, Value value) {
  family(out, name, "counter", help);
  for (const statistics_snapshot& s : models) {
    fmt::format_to(std::back_inserter(out), "{}{{{}}} {}\n", name, model_labels(s), value(s));
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
  counter(out, models, "nv_inference_request_failure",
          "Number of failed inference requests, all batch sizes",
          [](const snapshot& s) { return s.fail.count; });
  counter(out, models, "nv_inference_count", "Number of inferences performed",
          [](const snapshot& s) { return s.inference_count; });
  counter(out, models, "nv_inference_exec_count", "Number of model executions performed",
          [](const snapshot& s) { return s.execution_count; });
  counter(out, models, "nv_inference_request_duration_us",
          "Cumulative inference request duration in microseconds",
          [](const snapshot& s) { return s.success.ns / 1000; });
  counter(out, models, "nv_inference_queue_duration_us",
          "Cumulative inference queuing duration in microseconds",
          [](const snapshot& s) { return s.queue.ns / 1000; });
  counter(out, models, "nv_inference_compute_input_duration_us",
          "Cumulative compute input duration in microseconds",
          [](const snapshot& s) { return s.compute_input.ns / 1000; });
  counter(out, models, "nv_inference_compute_infer_duration_us",
          "Cumulative compute inference duration in microseconds",
          [](const snapshot& s) { return s.compute_infer.ns / 1000; });
  counter(out, models, "nv_inference_compute_output_duration_us",
          "Cumulative inference compute output duration in microseconds",
          [](const snapshot& s) { return s.compute_output.ns / 1000; });

  constexpr std::string_view histogram = "oip_inference_request_duration_seconds";
  family(out, histogram, "histogram",
         "Latency of successful inference requests, from arrival to reply, in seconds");
  for (const snapshot& s : models) {
    const std::string labels = model_labels(s);
    std::uint64_t cumulative = 0;
    for (std::size_t i = 0; i < s.latency_buckets.size(); ++i) {
      cumulative += s.latency_buckets[i];
      const std::string bound =
          i < model_statistics::latency_bounds_us.size()
              ? fmt::format("{}", static_cast<double>(model_statistics::latency_bounds_us[i]) / 1e6)
              : std::string{"+Inf"};
      fmt::format_to(std::back_inserter(out), "{}_bucket{{{},le=\"{}\"}} {}\n", histogram, labels,
                     bound, cumulative);
    }
    fmt::format_to(std::back_inserter(out), "{}_sum{{{}}} {}\n{}_count{{{}}} {}\n", histogram,
                   labels, static_cast<double>(s.success.ns) / 1e9, histogram, labels,
                   s.success.count);
  }

  family(out, "oip_sequences_active", "gauge", "Sequences holding state, per sequence model");
  for (const snapshot& s : models) {
    if (!s.active_sequences) continue;
    fmt::format_to(std::back_inserter(out), "oip_sequences_active{{{}}} {}\n", model_labels(s),
                   *s.active_sequences);
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
