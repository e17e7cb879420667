#pragma once
/// \file
/// Prometheus metrics of an inference service, in the text exposition format (version 0.0.4), with
/// Triton's metric names where Triton has them. They are read from the same counters as the
/// statistics extension, so the two always agree and nothing is counted twice.

#include <oip/export.hpp>

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace oip {

class inference_service;

/// A gauge that a host or a component adds to the exposition (pool memory in use, for example):
/// one metric name, each series a label set (`pool="cuda_device"`, or empty) and its value. The
/// name must be a valid Prometheus name that no other family uses, and label values must be
/// escaped already (a scrape with a repeated family is refused whole); the help is escaped here.
/// The values are read on the transport's thread at each scrape, so they must be thread-safe.
struct metric_gauge {
  std::string name;
  std::string help;
  std::vector<std::pair<std::string, std::function<double()>>> series;
};

/// The exposition, in Triton's names, help texts and labels: per model and version,
/// `nv_inference_request_success`, `nv_inference_request_failure` (one series per `reason`:
/// REJECTED, CANCELED, BACKEND, OTHER; see `failure_reason`), `nv_inference_count`,
/// `nv_inference_exec_count`, `nv_inference_request_duration_us`,
/// `nv_inference_queue_duration_us`, `nv_inference_compute_{input,infer,output}_duration_us`
/// (counters), `nv_inference_pending_request_count` (a gauge),
/// `oip_inference_request_duration_seconds` (a histogram of successful requests' latency),
/// `oip_sequences_active` (sequence models); the machine's `nv_cpu_utilization` (the CPUs' busy
/// share between the last two samples, taken at scrapes at least 2 s apart: 0 at the first),
/// `nv_cpu_memory_total_bytes` and `nv_cpu_memory_used_bytes` (total less available), read from
/// /proc as Triton reads them; then the `extra` gauges.
///
/// Example:
/// \code
///   std::string text = oip::prometheus_text(service);
///   // nv_inference_request_success{model="simple",version="1"} 12
/// \endcode
[[nodiscard]] OIP_EXPORT std::string prometheus_text(const inference_service& service,
                                                     const std::vector<metric_gauge>& extra = {});

/// The content type of `prometheus_text`.
inline constexpr const char* prometheus_content_type = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace oip
