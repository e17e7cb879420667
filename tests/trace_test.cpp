// Triton's trace extension: settings (global and per model) with Triton's wording for bad ones,
// sampling by rate and count, the trace file in Triton's JSON shape, and the HTTP routes.

#include "served.hpp"
#include "serving_support.hpp"
#include "trace_support.hpp"

#include <oip/http_handler.hpp>
#include <oip/json.hpp>
#include <oip/trace.hpp>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include <simdjson.h>
#include <unistd.h>

namespace {

using oip::testing::temporary_trace_file;
using change = oip::trace_settings_change;

change set(std::string name, std::vector<std::string> values) {
  return change{{{std::move(name), std::move(values)}}};
}

change clear(std::string name) { return change{{{std::move(name), std::nullopt}}}; }

oip::trace_settings tracing_all(std::string file) {
  oip::trace_settings s;
  s.level = oip::trace_level::timestamps;
  s.rate = 1;
  s.file = std::move(file);
  return s;
}

std::string error_of(const oip::result<oip::trace_settings>& r) {
  REQUIRE_FALSE(r);
  return r.error().message();
}

// The traced requests of a trace file: (id, model, request id) and each id's timestamp names.
struct parsed_trace {
  std::vector<std::string> models;
  std::vector<std::string> request_ids;
  std::vector<std::vector<std::string>> names;  // per trace, in file order
  std::vector<std::vector<std::uint64_t>> ns;
  // TENSORS entries: "<activity> <name> <data> <shape> <dtype>", in file order
  std::vector<std::string> tensors;
};

parsed_trace parse_trace(const std::string& text) {
  simdjson::dom::parser parser;
  simdjson::dom::array entries;
  REQUIRE(parser.parse(text).get_array().get(entries) == simdjson::SUCCESS);
  parsed_trace out;
  for (simdjson::dom::element entry : entries) {
    std::uint64_t id = 0;
    REQUIRE(entry["id"].get_uint64().get(id) == simdjson::SUCCESS);
    REQUIRE(id >= 1);
    std::string_view activity;
    if (entry["activity"].get_string().get(activity) == simdjson::SUCCESS) {
      std::string tensor{activity};
      for (const char* field : {"name", "data", "shape", "dtype"}) {
        std::string_view value;
        REQUIRE(entry["tensor"][field].get_string().get(value) == simdjson::SUCCESS);
        tensor += ' ';
        tensor += value;
      }
      out.tensors.push_back(std::move(tensor));
      continue;
    }
    std::string_view model;
    if (entry["model_name"].get_string().get(model) == simdjson::SUCCESS) {
      out.models.emplace_back(model);
      std::string_view request_id;
      out.request_ids.emplace_back(
          entry["request_id"].get_string().get(request_id) == simdjson::SUCCESS ? request_id : "");
      out.names.emplace_back();
      out.ns.emplace_back();
      continue;
    }
    REQUIRE_FALSE(out.names.empty());
    simdjson::dom::array timestamps;
    REQUIRE(entry["timestamps"].get_array().get(timestamps) == simdjson::SUCCESS);
    for (simdjson::dom::element t : timestamps) {
      std::string_view name;
      std::uint64_t ns = 0;
      REQUIRE(t["name"].get_string().get(name) == simdjson::SUCCESS);
      REQUIRE(t["ns"].get_uint64().get(ns) == simdjson::SUCCESS);
      out.names.back().emplace_back(name);
      out.ns.back().push_back(ns);
    }
  }
  return out;
}

}  // namespace

TEST_CASE("the defaults are Triton's: off, one in 1,000, no count limit") {
  oip::tracer traces;
  const oip::trace_settings s = traces.settings();
  CHECK(s == oip::trace_settings{oip::trace_level::off, 1000, -1, 0, ""});
  CHECK(oip::encode(s) == R"({"trace_level":["OFF"],"trace_rate":"1000","trace_count":"-1",)"
                          R"("log_frequency":"0","trace_file":"","trace_mode":"triton"})");
  CHECK_FALSE(traces.sample("simple"));
}

TEST_CASE("one request in `rate` is traced, `count` of them at most") {
  temporary_trace_file file;
  oip::trace_settings host;
  host.file = file.path;
  oip::tracer traces{host};
  REQUIRE(traces.update(std::nullopt, change{{{"trace_level", {{"TIMESTAMPS"}}},
                                              {"trace_rate", {{"3"}}},
                                              {"trace_count", {{"2"}}}}}));
  std::vector<int> traced;
  for (int i = 1; i <= 12; ++i) {
    if (traces.sample("simple")) traced.push_back(i);
  }
  CHECK(traced == std::vector<int>{3, 6});
  CHECK(traces.settings().count == 0);
  // A new count starts the sampling over.
  REQUIRE(traces.update(std::nullopt, set("trace_count", {"-1"})));
  traced.clear();
  for (int i = 1; i <= 7; ++i) {
    if (traces.sample("simple")) traced.push_back(i);
  }
  CHECK(traced == std::vector<int>{3, 6});
}

TEST_CASE("bad settings are refused in Triton's words, and change nothing") {
  temporary_trace_file file;
  oip::trace_settings host;
  host.file = file.path;
  oip::tracer traces{host};
  const auto refused = [&](const change& c) {
    const oip::result<oip::trace_settings> r = traces.update(std::nullopt, c);
    REQUIRE_FALSE(r);
    CHECK(traces.settings() == host);
    return r.error();
  };
  CHECK(refused(set("trace_rate", {"ten"})).message() == "Unable to parse 'trace_rate', got: ten");
  CHECK(refused(set("trace_rate", {"12abc"})).message() ==
        "Unable to parse 'trace_rate', got: 12abc");
  CHECK(refused(set("trace_rate", {"-5"})).message() ==
        "Unable to parse 'trace_rate', value is out of range [ 0, 4294967295 ], got: -5");
  CHECK(refused(set("log_frequency", {"4294967296"})).message() ==
        "Unable to parse 'log_frequency', value is out of range [ 0, 4294967295 ], got: "
        "4294967296");
  CHECK(refused(set("trace_count", {"-2"})).message() ==
        "Unable to parse 'trace_count'. Expecting value >= -1, got: -2");
  CHECK(refused(set("trace_count", {"2147483648"})).message() ==
        "Unable to parse 'trace_count', value is out of range [ -1, 2147483647 ], got: "
        "2147483648");
  CHECK(refused(set("trace_count", {"99999999999999999999"})).message().find("out of range") !=
        std::string::npos);
  CHECK(refused(set("trace_rate", {"1", "2"})).message() == "expect only 1 value for 'trace_rate'");
  CHECK(refused(set("trace_rate", {""})).message() == "Unable to parse 'trace_rate', got: ");
  CHECK(refused(set("trace_level", {"OFF", "TIMESTAMPS"})).message() ==
        "Expect only one trace level 'OFF' is specified");
  CHECK(refused(set("trace_level", {"LOUD"})).message() ==
        "unknown trace level 'LOUD': expected OFF, TIMESTAMPS or TENSORS");
  CHECK(refused(set("trace_level", {})).http_status() == 400);
  CHECK(refused(set("trace_level", {"TENSORS", "OFF"})).message() ==
        "Expect only one trace level 'OFF' is specified");
  const oip::status file_change = refused(set("trace_file", {"/etc/passwd"}));
  CHECK(file_change.http_status() == 501);
  CHECK(file_change.message() == "trace file location can not be updated through network protocol");
  CHECK(refused(clear("trace_file")).http_status() == 501);
  CHECK(refused(set("trace_mode", {"opentelemetry"})).http_status() == 501);
  CHECK(refused(change{{{"trace_level", {{"TIMESTAMPS"}}}, {"trace_rate", {{"0"}}}}}).message() ==
        "Attempting to set invalid trace setting :sample rate must be non-zero");
  // A change that fails on its last setting leaves the first ones undone too.
  CHECK(refused(change{{{"trace_rate", {{"5"}}}, {"trace_count", {{"x"}}}}}).http_status() == 400);

  // Without a file from the host, nothing can be traced.
  oip::tracer no_file;
  CHECK(error_of(no_file.update(std::nullopt, set("trace_level", {"TIMESTAMPS"}))) ==
        "Attempting to set invalid trace setting :trace file name is not given");
  // Unknown names are ignored, as in Triton; rate 0 is fine while tracing is off.
  CHECK(no_file.update(std::nullopt, change{{{"colour", {{"blue"}}}, {"trace_rate", {{"0"}}}}})
            ->rate == 0);
}

TEST_CASE("no change leaves a model tracing at a rate of 0, in either order") {
  temporary_trace_file file;
  oip::trace_settings host;
  host.file = file.path;
  {
    oip::tracer traces{host};
    REQUIRE(traces.update("simple", set("trace_level", {"TIMESTAMPS"})));
    CHECK(error_of(traces.update(std::nullopt, set("trace_rate", {"0"}))) ==
          "Attempting to set invalid trace setting :sample rate must be non-zero");
    CHECK(traces.settings("simple").rate == 1000);
  }
  {
    oip::tracer traces{host};
    REQUIRE(traces.update("simple", set("trace_rate", {"0"})));
    CHECK(error_of(traces.update(std::nullopt, set("trace_level", {"TIMESTAMPS"}))) ==
          "Attempting to set invalid trace setting :sample rate must be non-zero");
    CHECK_FALSE(traces.sample("simple"));
  }
  // A host's own rate of 0 traces nothing (and divides nothing by it).
  host.level = oip::trace_level::timestamps;
  host.rate = 0;
  oip::tracer traces{host};
  CHECK_FALSE(traces.sample("simple"));
}

TEST_CASE("sampling, writing and changes from many threads at once") {
  temporary_trace_file file;
  std::atomic<int> sampled{0};
  {
    oip::tracer traces{tracing_all(file.path)};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        const std::string model = t % 2 == 0 ? "even" : "odd";
        for (int i = 0; i < 200; ++i) {
          if (const std::optional<oip::tracer::sampled> chosen = traces.sample(model)) {
            ++sampled;
            traces.write({chosen->id, model, 1, std::to_string(i), {}});
          }
          if (i % 50 == 0) {
            REQUIRE(traces.update(model, set("trace_rate", {std::to_string(1 + i % 3)})));
            CHECK(traces.settings(model).file == file.path);
          }
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
  }
  CHECK(sampled.load() > 0);
  CHECK(parse_trace(file.read(file.path)).models.size() ==
        static_cast<std::size_t>(sampled.load()));
}

TEST_CASE("a model's own settings; cleared, they follow the global ones again") {
  temporary_trace_file file;
  oip::trace_settings host;
  host.file = file.path;
  host.rate = 50;
  oip::tracer traces{host};
  const oip::result<oip::trace_settings> own =
      traces.update("simple", change{{{"trace_level", {{"TIMESTAMPS"}}}, {"trace_rate", {{"1"}}}}});
  REQUIRE(own);
  CHECK(own->level == oip::trace_level::timestamps);
  CHECK(own->rate == 1);
  CHECK(traces.settings().level == oip::trace_level::off);
  CHECK(traces.sample("simple"));
  CHECK_FALSE(traces.sample("other"));

  // What the model did not set follows later global changes.
  REQUIRE(traces.update(std::nullopt, set("log_frequency", {"5"})));
  CHECK(traces.settings("simple").log_frequency == 5);
  CHECK(traces.settings("simple").rate == 1);

  REQUIRE(traces.update("simple", clear("trace_rate")));
  CHECK(traces.settings("simple").rate == 50);
  REQUIRE(traces.update("simple", clear("trace_level")));
  CHECK(traces.settings("simple") == traces.settings());
  CHECK_FALSE(traces.sample("simple"));

  // A cleared global setting goes back to the host's.
  REQUIRE(traces.update(std::nullopt, set("trace_rate", {"7"})));
  CHECK(traces.update(std::nullopt, clear("trace_rate"))->rate == 50);
}

TEST_CASE("the trace file: Triton's objects in one JSON array, escaped, completed at the end") {
  temporary_trace_file file;
  const auto at = [](std::int64_t ns) {
    return oip::tracer::clock::time_point{std::chrono::nanoseconds{ns}};
  };
  {
    oip::tracer traces{tracing_all(file.path)};
    const std::optional<oip::tracer::sampled> first = traces.sample("simple");
    const std::optional<oip::tracer::sampled> second = traces.sample("simple");
    REQUIRE(first);
    REQUIRE(second);
    CHECK(second->id == first->id + 1);
    CHECK(first->level == oip::trace_level::timestamps);
    traces.write(
        {first->id, "simple", 1, "r\"1", {{"REQUEST_START", at(10)}, {"REQUEST_END", at(25)}}});
    traces.write({second->id, "simple", 2, "", {{"REQUEST_START", at(30)}}});
  }
  CHECK(file.read(file.path) ==
        R"([{"id":1,"model_name":"simple","model_version":1,"request_id":"r\"1"},)"
        R"({"id":1,"timestamps":[{"name":"REQUEST_START","ns":10}]},)"
        R"({"id":1,"timestamps":[{"name":"REQUEST_END","ns":25}]},)"
        R"({"id":2,"model_name":"simple","model_version":2},)"
        R"({"id":2,"timestamps":[{"name":"REQUEST_START","ns":30}]}])"
        "\n");
}

TEST_CASE("TENSORS: each tensor's values as one text, as Triton writes them; levels combine") {
  temporary_trace_file file;
  oip::trace_settings host;
  host.file = file.path;
  host.rate = 1;
  const auto values = [](std::string name, oip::shape_type shape, auto... v) {
    using T = std::common_type_t<decltype(v)...>;
    const std::vector<T> data{v...};
    return *oip::tensor::from_values<T>(std::move(name), std::move(shape),
                                        std::span<const T>(data));
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  {
    oip::tracer traces{host};
    const oip::result<oip::trace_settings> both =
        traces.update(std::nullopt, set("trace_level", {"TIMESTAMPS", "TENSORS"}));
    REQUIRE(both);
    CHECK(both->level == (oip::trace_level::timestamps | oip::trace_level::tensors));
    CHECK(oip::level_names(both->level) == std::vector<std::string_view>{"TIMESTAMPS", "TENSORS"});
    CHECK(oip::encode(*both).find(R"("trace_level":["TIMESTAMPS","TENSORS"])") !=
          std::string::npos);

    REQUIRE(traces.update(std::nullopt, set("trace_level", {"TENSORS"})));
    const std::optional<oip::tracer::sampled> chosen = traces.sample("m");
    REQUIRE(chosen);
    CHECK(chosen->level == oip::trace_level::tensors);
    oip::tracer::record traced{chosen->id, "m", 1, "r", {{"REQUEST_START", {}}}, chosen->level};
    const std::vector<std::string_view> texts{"a\"b", "\xff"};
    const oip::tensor booleans = *oip::tensor::make(
        "B", oip::datatype::boolean, {3},
        values("bytes", {3}, std::uint8_t{1}, std::uint8_t{0}, std::uint8_t{1}).data());
    const std::vector<std::pair<std::string_view, oip::tensor>> taken{
        {"TENSOR_QUEUE_INPUT", values("I", {2, 2}, 1, -2, 3, 4)},
        {"TENSOR_QUEUE_INPUT", booleans},
        {"TENSOR_QUEUE_INPUT", values("U8", {2}, std::uint8_t{0}, std::uint8_t{255})},
        {"TENSOR_QUEUE_INPUT", *oip::tensor::from_strings("S", {2}, texts)},
        {"TENSOR_BACKEND_OUTPUT", values("F", {1, 3}, 1.5F, nan, -inf)},
        {"TENSOR_BACKEND_OUTPUT", values("scalar", {}, std::int64_t{-7})}};
    for (const auto& [activity, t] : taken) {
      if (!traced.tensors.empty()) traced.tensors += ',';
      traced.tensors += oip::tracer::tensor_entry(traced.id, activity, t);
    }
    traces.write(traced);  // TENSORS alone: no model entry and no timestamps, as in Triton

    traced.level = oip::trace_level::timestamps;  // and TIMESTAMPS alone: no tensors
    traces.write(traced);
  }
  CHECK(file.read(file.path) ==
        R"([{"id":1,"activity":"TENSOR_QUEUE_INPUT","tensor":{"name":"I","data":"1,-2,3,4",)"
        R"("shape":"2,2","dtype":"INT32"}},)"
        R"({"id":1,"activity":"TENSOR_QUEUE_INPUT","tensor":{"name":"B","data":"1,0,1",)"
        R"("shape":"3","dtype":"BOOL"}},)"
        R"({"id":1,"activity":"TENSOR_QUEUE_INPUT","tensor":{"name":"U8","data":"0,255",)"
        R"("shape":"2","dtype":"UINT8"}},)"
        R"({"id":1,"activity":"TENSOR_QUEUE_INPUT","tensor":{"name":"S",)"
        R"("data":"\"a\\\"b\",\")"
        "\xef\xbf\xbd"
        R"(\"",)"
        R"("shape":"2","dtype":"BYTES"}},)"
        R"({"id":1,"activity":"TENSOR_BACKEND_OUTPUT","tensor":{"name":"F",)"
        R"("data":"1.5,NaN,-Infinity","shape":"1,3","dtype":"FP32"}},)"
        R"({"id":1,"activity":"TENSOR_BACKEND_OUTPUT","tensor":{"name":"scalar","data":"-7",)"
        R"("shape":"","dtype":"INT64"}},)"
        R"({"id":1,"model_name":"m","model_version":1,"request_id":"r"},)"
        R"({"id":1,"timestamps":[{"name":"REQUEST_START","ns":0}]}])"
        "\n");
}

TEST_CASE("log_frequency: every N traces in a file of their own, the rest at the end") {
  temporary_trace_file file;
  oip::trace_settings host = tracing_all(file.path);
  host.log_frequency = 2;
  {
    oip::tracer traces{host};
    for (int i = 0; i < 3; ++i) {
      const std::optional<oip::tracer::sampled> chosen = traces.sample("m");
      REQUIRE(chosen);
      traces.write({chosen->id, "m", 1, std::to_string(i), {}});
      if (i == 1)
        CHECK(parse_trace(file.read(file.path + ".0")).request_ids ==
              std::vector<std::string>{"0", "1"});
    }
  }  // the last file, with fewer traces, is completed when the tracer goes
  CHECK(parse_trace(file.read(file.path + ".1")).request_ids == std::vector<std::string>{"2"});
  CHECK_FALSE(std::filesystem::exists(file.path));
}

namespace {

void write_traces(const oip::trace_settings& host, int count) {
  oip::tracer traces{host};
  for (int i = 0; i < count; ++i) {
    const std::optional<oip::tracer::sampled> chosen = traces.sample("m");
    REQUIRE(chosen);
    traces.write({chosen->id, "m", 1, std::to_string(i), {}});
  }
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out{path};
  out << text;
}

}  // namespace

TEST_CASE("trace files: never through a symbolic link, never over a file that exists") {
  temporary_trace_file file;
  const std::string victim = file.path + ".victim";
  write_text(victim, "precious");
  std::filesystem::create_symlink(victim, file.path);
  write_traces(tracing_all(file.path), 2);
  CHECK(file.read(victim) == "precious");
  CHECK(std::filesystem::is_symlink(file.path));
  std::filesystem::remove(file.path);

  write_text(file.path, "not the server's");
  write_traces(tracing_all(file.path), 2);
  CHECK(file.read(file.path) == "not the server's");
  std::filesystem::remove(victim);
}

TEST_CASE("numbered trace files: past those that exist, and only the newest `max_files` kept") {
  temporary_trace_file file;
  write_text(file.path + ".0", "an earlier run's");
  oip::trace_settings host = tracing_all(file.path);
  host.log_frequency = 1;
  host.max_files = 2;
  write_traces(host, 5);  // to .1 ... .5: .1, .2 and .3 are removed as .4 and .5 come
  CHECK(file.read(file.path + ".0") == "an earlier run's");
  for (int gone = 1; gone <= 3; ++gone) {
    CHECK_FALSE(std::filesystem::exists(file.path + "." + std::to_string(gone)));
  }
  CHECK(parse_trace(file.read(file.path + ".4")).request_ids == std::vector<std::string>{"3"});
  CHECK(parse_trace(file.read(file.path + ".5")).request_ids == std::vector<std::string>{"4"});
  CHECK((std::filesystem::status(file.path + ".5").permissions() &
         std::filesystem::perms::others_read) == std::filesystem::perms::none);
}

TEST_CASE("HTTP: /v2/trace/setting and /v2/models/<m>/trace/setting; traced requests' timestamps") {
  temporary_trace_file file;
  {
    oip::server_options options;
    options.trace.file = file.path;
    oip::model_repository models;
    REQUIRE(models.add(oip::testing::make_simple()).ok());
    oip::executor workers{{2, 64}};
    oip::http_handler handler{models, workers, options};
    const auto send = [&](std::string method, std::string target, std::string body = {}) {
      return handler.handle(
          {std::move(method), std::move(target), {}, oip::buffer::from_string(body)});
    };
    const oip::http_response global = send("GET", "/v2/trace/setting");
    CHECK(global.status == 200);
    CHECK(global.body() ==
          R"({"trace_level":["OFF"],"trace_rate":"1000","trace_count":"-1","log_frequency":"0",)"
          R"("trace_file":")" +
              file.path + R"(","trace_mode":"triton"})");

    const oip::http_response own =
        send("POST", "/v2/models/simple/trace/setting",
             R"({"trace_level":["TIMESTAMPS"],"trace_rate":"1","trace_count":null})");
    CHECK(own.status == 200);
    CHECK(own.body().find(R"("trace_level":["TIMESTAMPS"],"trace_rate":"1")") != std::string::npos);
    CHECK(send("GET", "/v2/trace/setting").body() == global.body());
    CHECK(send("GET", "/v2/models/simple/trace/setting").body() == own.body());

    const oip::http_response unknown = send("GET", "/v2/models/nope/trace/setting");
    CHECK(unknown.status == 400);
    CHECK(oip::decode_error(unknown.body(), 400).message() == "Request for unknown model : nope");
    CHECK(send("POST", "/v2/models/nope/trace/setting", "{}").status == 400);
    const oip::http_response wrong_type = send("POST", "/v2/trace/setting", R"({"trace_rate":5})");
    CHECK(wrong_type.status == 400);
    CHECK(oip::decode_error(wrong_type.body(), 400).message() ==
          "unable to parse 'trace_rate' in the trace settings JSON: expected a string");
    CHECK(send("POST", "/v2/trace/setting", R"({"trace_level":"TIMESTAMPS"})").status == 400);
    CHECK(send("POST", "/v2/trace/setting", R"({"trace_file":"/tmp/x"})").status == 501);
    CHECK(send("DELETE", "/v2/trace/setting").status == 405);
    CHECK(send("GET", "/v2/models/simple/versions/1/trace/setting").status == 404);

    for (const char* id : {"a", "b"}) {
      const std::string ones = "[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]";
      const oip::http_response r = send(
          "POST", "/v2/models/simple/infer",
          std::string{R"({"id":")"} + id +
              R"(","inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"INT32","data":)" + ones +
              R"(},{"name":"INPUT1","shape":[1,16],"datatype":"INT32","data":)" + ones + "}]}");
      REQUIRE(r.status == 200);
    }
  }  // the handler, its service and its tracer stop: the file is complete
  parsed_trace traced = parse_trace(file.read(file.path));
  CHECK(traced.models == std::vector<std::string>{"simple", "simple"});
  // Each trace is written after its reply: the two may come in either order.
  std::sort(traced.request_ids.begin(), traced.request_ids.end());
  CHECK(traced.request_ids == std::vector<std::string>{"a", "b"});
  for (std::size_t i = 0; i < traced.names.size(); ++i) {
    CHECK(traced.names[i] == std::vector<std::string>{"REQUEST_START", "QUEUE_START",
                                                      "COMPUTE_START", "COMPUTE_END",
                                                      "REQUEST_END"});
    CHECK(std::is_sorted(traced.ns[i].begin(), traced.ns[i].end()));
  }
}

TEST_CASE("TENSORS through the handler: the inputs as queued, the model's outputs") {
  temporary_trace_file file;
  const auto join = [](auto first, auto step) {
    std::string text;
    for (int i = 0; i < 16; ++i) text += (i == 0 ? "" : ",") + std::to_string(first + i * step);
    return text;
  };
  {
    oip::server_options options;
    options.trace = tracing_all(file.path);
    options.trace.level = oip::trace_level::timestamps | oip::trace_level::tensors;
    oip::model_repository models;
    REQUIRE(models.add(oip::testing::make_simple()).ok());
    oip::executor workers{{2, 64}};
    oip::http_handler handler{models, workers, options};
    CHECK(handler.handle({"GET", "/v2/trace/setting", {}, oip::buffer::from_string("")})
              .body()
              .find(R"("trace_level":["TIMESTAMPS","TENSORS"])") != std::string::npos);
    const oip::http_response r = handler.handle(
        {"POST",
         "/v2/models/simple/infer",
         {},
         oip::buffer::from_string(
             R"({"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"INT32","data":[)" +
             join(0, 1) + R"(]},{"name":"INPUT1","shape":[1,16],"datatype":"INT32","data":[)" +
             join(1, 0) + "]}]}")});
    REQUIRE(r.status == 200);
  }
  const parsed_trace traced = parse_trace(file.read(file.path));
  CHECK(traced.models == std::vector<std::string>{"simple"});
  CHECK(traced.tensors ==
        std::vector<std::string>{"TENSOR_QUEUE_INPUT INPUT0 " + join(0, 1) + " 1,16 INT32",
                                 "TENSOR_QUEUE_INPUT INPUT1 " + join(1, 0) + " 1,16 INT32",
                                 "TENSOR_BACKEND_OUTPUT OUTPUT0 " + join(1, 1) + " 1,16 INT32",
                                 "TENSOR_BACKEND_OUTPUT OUTPUT1 " + join(-1, 1) + " 1,16 INT32"});
}

TEST_CASE("TENSORS: a tensor's values are taken with it, not when the trace is written") {
  // Binary inputs are views of the request's bytes (as inputs in shared memory are views of the
  // client's region): changed after the reply, they must not change the trace.
  temporary_trace_file file;
  oip::inference_request request;
  std::vector<std::int32_t> a(16, 7);
  request.inputs.push_back(*oip::tensor::from_values<std::int32_t>("INPUT0", {1, 16}, a));
  request.inputs.push_back(*oip::tensor::from_values<std::int32_t>("INPUT1", {1, 16}, a));
  const oip::result<oip::encoded_body> encoded = oip::encode_request(request, {true});
  REQUIRE(encoded);
  std::string body = encoded->json;
  for (const oip::buffer& b : encoded->binary) body += b.as_string_view();
  body.reserve(body.size() + 64);  // simdjson reads past the end
  const auto bytes = [&] {
    return oip::buffer::unowned(std::as_bytes(std::span<const char>(body.data(), body.size())));
  };
  // What makes this test bite: the decoded inputs are views of those bytes.
  const oip::result<oip::inference_request> decoded =
      oip::decode_request(bytes(), encoded->header_length());
  REQUIRE(decoded);
  REQUIRE(reinterpret_cast<const char*>(decoded->inputs[0].data().data()) ==
          body.data() + encoded->header_length());
  {
    oip::server_options options;
    options.trace = tracing_all(file.path);
    options.trace.level = oip::trace_level::tensors;
    oip::model_repository models;
    REQUIRE(models.add(oip::testing::make_simple()).ok());
    oip::executor workers{{2, 64}};
    oip::http_handler handler{models, workers, options};
    oip::transport_trace trace;
    oip::http_request http{
        "POST",
        "/v2/models/simple/infer",
        {{"Inference-Header-Content-Length", std::to_string(encoded->header_length())}},
        bytes()};
    http.trace = &trace;
    std::promise<oip::http_response> replied;
    handler.handle(std::move(http), [&](oip::http_response r) { replied.set_value(std::move(r)); });
    REQUIRE(replied.get_future().get().status == 200);
    REQUIRE(trace.sampled);
    std::fill(body.begin() + static_cast<std::ptrdiff_t>(encoded->header_length()), body.end(),
              '\0');
    trace.sampled.reset();  // the trace is written now
  }
  const parsed_trace traced = parse_trace(file.read(file.path));
  REQUIRE(traced.tensors.size() == 4);
  CHECK(traced.tensors[0] ==
        "TENSOR_QUEUE_INPUT INPUT0 7,7,7,7,7,7,7,7,7,7,7,7,7,7,7,7 1,16 INT32");
  CHECK(traced.tensors[1] ==
        "TENSOR_QUEUE_INPUT INPUT1 7,7,7,7,7,7,7,7,7,7,7,7,7,7,7,7 1,16 INT32");
}

TEST_CASE("a transport's timestamps join the trace, which is written when it lets go of it") {
  temporary_trace_file file;
  const std::string ones = "[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]";
  const std::string body =
      R"({"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"INT32","data":)" + ones +
      R"(},{"name":"INPUT1","shape":[1,16],"datatype":"INT32","data":)" + ones + "}]}";
  {
    oip::server_options options;
    options.trace = tracing_all(file.path);
    options.trace.rate = 2;  // the first request is not sampled, the second is
    oip::model_repository models;
    REQUIRE(models.add(oip::testing::make_simple()).ok());
    oip::executor workers{{2, 64}};
    oip::http_handler handler{models, workers, options};
    const auto start = oip::tracer::clock::now();
    for (const bool sampled : {false, true}) {
      oip::transport_trace trace;
      trace.read = {oip::trace_stamp{"HTTP_RECV_START", start},
                    oip::trace_stamp{"HTTP_RECV_END", oip::tracer::clock::now()}};
      oip::http_request request{
          "POST", "/v2/models/simple/infer", {}, oip::buffer::from_string(body)};
      request.trace = &trace;
      std::promise<oip::http_response> replied;
      handler.handle(std::move(request),
                     [&](oip::http_response r) { replied.set_value(std::move(r)); });
      REQUIRE(replied.get_future().get().status == 200);
      REQUIRE(static_cast<bool>(trace.sampled) == sampled);
      if (!sampled) continue;
      trace.sampled->stamp("HTTP_SEND_START");
      trace.sampled->stamp("HTTP_SEND_END");
      CHECK(file.read(file.path).empty());  // held until the transport lets go of it
      trace.sampled.reset();
      CHECK_FALSE(file.read(file.path).empty());
    }
  }
  const parsed_trace traced = parse_trace(file.read(file.path));
  REQUIRE(traced.names.size() == 1);
  CHECK(traced.names[0] ==
        std::vector<std::string>{"HTTP_RECV_START", "HTTP_RECV_END", "REQUEST_START", "QUEUE_START",
                                 "COMPUTE_START", "COMPUTE_END", "REQUEST_END",
                                 "INFER_RESPONSE_COMPLETE", "HTTP_SEND_START", "HTTP_SEND_END"});
  CHECK(std::is_sorted(traced.ns[0].begin(), traced.ns[0].end()));
}
