// The Prometheus exposition: Triton's names, values equal to the statistics, a cumulative
// histogram, escaped labels, host gauges, and the /metrics route.

#include "served.hpp"
#include "serving/detail/system_usage.hpp"
#include "serving_support.hpp"

#include <oip/http_handler.hpp>
#include <oip/metrics.hpp>

#include <atomic>
#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include <doctest/doctest.h>
#include <fmt/format.h>

namespace {

// The value of the series `name{labels}`, or -1 when it is missing.
double value_of(const std::string& text, const std::string& series) {
  const std::size_t at = text.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + series.size() + 2));
}

// A bucket bound as the exposition writes it: seconds, shortest form.
std::string fmt_bound(std::uint64_t microseconds) {
  std::ostringstream out;
  out << static_cast<double>(microseconds) / 1e6;
  return out.str();
}

}  // namespace

TEST_CASE("the exposition holds Triton's counters, equal to the statistics") {
  oip::model_config odd = oip::testing::simple_config();
  odd.name = "sim\"ple";  // a quote, which a label value escapes (names hold no \ or newline)
  oip::testing::served s{
      {oip::testing::make_simple(), oip::make_model(odd, [](const oip::inference_request&) {
         return oip::result<oip::model_output>{oip::status{oip::errc::internal, "broken"}};
       })}};
  oip::inference_request good;
  std::vector<std::int32_t> values(16, 3);
  good.inputs.push_back(*oip::tensor::from_values<std::int32_t>("INPUT0", {1, 16}, values));
  good.inputs.push_back(*oip::tensor::from_values<std::int32_t>("INPUT1", {1, 16}, values));
  REQUIRE(s.infer("simple", good));
  REQUIRE(s.infer("simple", good));
  oip::inference_request bad = good;
  bad.inputs.pop_back();
  REQUIRE_FALSE(s.infer("simple", bad));
  REQUIRE_FALSE(s.infer(odd.name, good));

  const std::string text = "\n" + oip::prometheus_text(s.service);
  const std::string simple = R"({model="simple",version="1"})";
  CHECK(value_of(text, "nv_inference_request_success" + simple) == 2);
  const std::string simple_other = R"({model="simple",reason="OTHER",version="1"})";
  CHECK(value_of(text, "nv_inference_request_failure" + simple_other) == 1);
  CHECK(value_of(text,
                 R"(nv_inference_request_failure{model="simple",reason="BACKEND",version="1"})") ==
        0);
  CHECK(value_of(text, "nv_inference_pending_request_count" + simple) == 0);
  CHECK(value_of(text, "nv_inference_count" + simple) == 2);
  CHECK(value_of(text, "nv_inference_exec_count" + simple) == 2);
  const oip::statistics_snapshot stats = s.service.statistics("simple", {})->at(0);
  CHECK(value_of(text, "nv_inference_request_duration_us" + simple) ==
        static_cast<double>(stats.success.ns / 1000));
  CHECK(value_of(text, "nv_inference_compute_infer_duration_us" + simple) ==
        static_cast<double>(stats.compute_infer.ns / 1000));
  CHECK(text.find("# TYPE nv_inference_request_success counter\n") != std::string::npos);
  CHECK(text.find("# HELP nv_inference_queue_duration_us ") != std::string::npos);

  // The histogram is cumulative and ends with +Inf = count = successes.
  const std::string histogram = "oip_inference_request_duration_seconds";
  CHECK(text.find("# TYPE " + histogram + " histogram\n") != std::string::npos);
  double previous = 0;
  for (const std::uint64_t bound : oip::model_statistics::latency_bounds_us) {
    const double v = value_of(text, histogram + "_bucket{model=\"simple\",version=\"1\",le=\"" +
                                        fmt_bound(bound) + "\"}");
    CHECK(v >= previous);
    previous = v;
  }
  CHECK(value_of(text, histogram + R"(_bucket{model="simple",version="1",le="+Inf"})") == 2);
  CHECK(value_of(text, histogram + "_count" + simple) == 2);

  // A model name with a quote is escaped.
  CHECK(value_of(
            text,
            R"(nv_inference_request_failure{model="sim\"ple",reason="BACKEND",version="1"})") == 1);
}

TEST_CASE("host gauges and the /metrics route; the protocol routes can be left out") {
  oip::testing::served s{{oip::testing::make_simple()}};
  REQUIRE(s.infer("simple", oip::testing::simple_request(2)));
  oip::http_handler metrics{
      s.service,
      {.protocol = false,
       .metrics = true,
       .gauges = {{"oip_pool_memory_in_use_bytes",
                   "Bytes in use",
                   {{R"(pool="test")", [] { return 4096.0; }}, {"", [] { return 1.5; }}}}}}};
  const oip::http_response r = metrics.handle({"GET", "/metrics", {}, {}});
  CHECK(r.status == 200);
  CHECK(r.header("Content-Type") == oip::prometheus_content_type);
  const std::string text = "\n" + r.body();
  CHECK(value_of(text, R"(oip_pool_memory_in_use_bytes{pool="test"})") == 4096);
  CHECK(value_of(text, "oip_pool_memory_in_use_bytes") == 1.5);
  CHECK(value_of(text, R"(nv_inference_count{model="simple",version="1"})") == 2);
  CHECK(metrics.handle({"GET", "/v2/health/live", {}, {}}).status == 404);
  CHECK(metrics.handle({"POST", "/metrics", {}, {}}).status == 405);

  oip::http_handler protocol{s.service};  // the default: protocol routes, no metrics
  CHECK(protocol.handle({"GET", "/metrics", {}, {}}).status == 404);
  CHECK(protocol.handle({"GET", "/v2/health/live", {}, {}}).status == 200);
}

TEST_CASE("failures are counted by Triton's reasons; queued requests are pending") {
  oip::model_repository repository;
  auto waiter = std::make_shared<oip::testing::waiter>();
  REQUIRE(repository.add(waiter).ok());
  oip::executor workers{{1, 2}};
  oip::inference_service service{repository, workers};
  oip::http_handler handler{service};
  const auto request = [](std::string_view parameters) {
    const std::string body = fmt::format(
        R"({{"parameters":{{{}}},"inputs":[{{"name":"IN","shape":[1],"datatype":"INT32","data":[1]}}]}})",
        parameters);
    return oip::http_request{"POST", "/v2/models/waiter/infer", {}, oip::buffer::from_string(body)};
  };
  const auto series = [&](std::string_view name, std::string_view reason = {}) {
    const std::string labels =
        reason.empty() ? R"({model="waiter",version="1"})"
                       : fmt::format(R"({{model="waiter",reason="{}",version="1"}})", reason);
    return value_of("\n" + oip::prometheus_text(service), std::string{name} + labels);
  };

  oip::cancellation first_cancel;
  std::atomic<int> first_status{0};
  handler.handle(
      request(""), [&](oip::http_response r) { first_status = r.status; }, first_cancel);
  while (waiter->started.load() == 0) std::this_thread::yield();  // running: no longer pending
  CHECK(series("nv_inference_pending_request_count") == 0);
  oip::cancellation second_cancel;
  std::atomic<int> second_status{0};
  handler.handle(
      request(""), [&](oip::http_response r) { second_status = r.status; }, second_cancel);
  // A timeout (1 us) that passes while the request waits for the worker: REJECTED when it runs.
  std::atomic<int> third_status{0};
  handler.handle(request(R"("timeout":1)"), [&](oip::http_response r) { third_status = r.status; });
  CHECK(series("nv_inference_pending_request_count") == 2);
  CHECK(handler.handle(request("")).status == 503);  // the executor's queue is full: REJECTED

  second_cancel.cancel();  // cancelled while queued: CANCELED
  first_cancel.cancel();   // the model stops once it sees the client gone: CANCELED
  while (first_status.load() == 0 || second_status.load() == 0 || third_status.load() == 0) {
    std::this_thread::yield();
  }
  CHECK(third_status.load() == 503);
  CHECK(handler.handle(request(R"("timeout":"soon")")).status == 400);  // OTHER

  CHECK(series("nv_inference_request_failure", "REJECTED") == 2);
  CHECK(series("nv_inference_request_failure", "CANCELED") == 2);
  CHECK(series("nv_inference_request_failure", "BACKEND") == 0);
  CHECK(series("nv_inference_request_failure", "OTHER") == 1);
  CHECK(series("nv_inference_pending_request_count") == 0);
  CHECK(service.statistics("waiter", {})->at(0).fail.count == 5);
}

TEST_CASE("the machine's CPU and memory, as Triton's CPU metrics read them from /proc") {
  const std::optional<oip::detail::memory_usage> memory = oip::detail::parse_meminfo(
      "MemTotalish:     1 kB\nMemTotal:       16384 kB\nMemFree:  100 kB\n"
      "MemAvailable:    4096 kB\n");
  REQUIRE(memory);
  CHECK(memory->total_bytes == 16384 * 1024);
  CHECK(memory->used_bytes == (16384 - 4096) * 1024);
  CHECK_FALSE(oip::detail::parse_meminfo("MemTotal: 16384 kB\n"));
  CHECK_FALSE(oip::detail::parse_meminfo("MemTotal: kB\nMemAvailable: 1 kB\n"));

  // user nice system idle iowait irq softirq steal guest guest_nice
  const std::optional<oip::detail::cpu_times> times =
      oip::detail::parse_cpu_times("cpu  100 20 30 400 50 6 7 8 9 10\ncpu0 1 2 3 4 5 6 7 8 9 10\n");
  REQUIRE(times);
  CHECK(times->busy == (100 + 20 + 30 + 6 + 7 + 8));
  CHECK(times->total == (100 + 20 + 30 + 6 + 7 + 8 + 400 + 50));
  CHECK_FALSE(oip::detail::parse_cpu_times("cpu  100 20 30 400\n"));
  CHECK_FALSE(oip::detail::parse_cpu_times("cpu0 1 2 3 4 5 6 7 8\n"));

  // A core kept busy shows in the share between two samples.
  oip::detail::cpu_utilization sampler{std::chrono::seconds{1}};
  CHECK(sampler.read() == 0.0);  // one sample: no interval yet
  std::atomic<bool> spin{true};
  std::thread busy{[&] {
    while (spin.load(std::memory_order_relaxed)) {
    }
  }};
  std::this_thread::sleep_for(std::chrono::milliseconds{1100});
  const std::optional<double> share = sampler.read();
  const std::optional<double> again = sampler.read();  // within the interval: the same reading
  spin = false;
  busy.join();
  REQUIRE(share);
  CHECK(*share > 0);
  CHECK(*share <= 1);
  CHECK(again == share);

  // The exposition: the machine's memory as /proc/meminfo gives it.
  oip::testing::served s{{oip::testing::make_simple()}};
  const std::string text = "\n" + oip::prometheus_text(s.service);
  std::ifstream meminfo{"/proc/meminfo"};
  std::string field;
  std::uint64_t kib = 0;
  while (meminfo >> field && field != "MemTotal:") meminfo.ignore(256, '\n');
  REQUIRE(static_cast<bool>(meminfo >> kib));
  CHECK(value_of(text, "nv_cpu_memory_total_bytes") == static_cast<double>(kib * 1024));
  const double used = value_of(text, "nv_cpu_memory_used_bytes");
  CHECK(used > 0);
  CHECK(used <= static_cast<double>(kib * 1024));
  const double utilization = value_of(text, "nv_cpu_utilization");
  CHECK(utilization >= 0);
  CHECK(utilization <= 1);
  CHECK(text.find("# TYPE nv_cpu_utilization gauge\n") != std::string::npos);
}
