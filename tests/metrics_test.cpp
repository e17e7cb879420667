// The Prometheus exposition: Triton's names, values equal to the statistics, a cumulative
// histogram, escaped labels, host gauges, and the /metrics route.

#include "served.hpp"
#include "serving_support.hpp"

#include <oip/http_handler.hpp>
#include <oip/metrics.hpp>

#include <sstream>
#include <string>

#include <doctest/doctest.h>

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
  odd.name = "sim\"ple\\\n";  // every character a label value escapes
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
  CHECK(value_of(text, "nv_inference_request_failure" + simple) == 1);
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

  // A model name with a quote, a backslash and a newline is escaped.
  CHECK(value_of(text, R"(nv_inference_request_failure{model="sim\"ple\\\n",version="1"})") == 1);
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
