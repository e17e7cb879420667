#include <oip/inference_service.hpp>
#include <oip/metrics.hpp>
#include <oip/repository.hpp>

#include <array>
#include <cstdint>
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
  family(out, "nv_inference_pending_request_count", "gauge",
         "Instantaneous number of pending requests awaiting execution per-model.");
  for (const snapshot& s : models) {
    fmt::format_to(std::back_inserter(out), "nv_inference_pending_request_count{{{}}} {}\n",
                   model_labels(s), s.pending_requests);
  }

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
