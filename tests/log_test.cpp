// oip's log: levels, a host's sink, and one line per failed request with its model and id.

#include "served.hpp"
#include "serving_support.hpp"
#include "wait.hpp"

#include <oip/http_handler.hpp>
#include <oip/json.hpp>
#include <oip/log.hpp>

#include <algorithm>
#include <cstdio>
#include <future>
#include <mutex>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <unistd.h>

namespace {

struct captured : oip::log_sink {
  void write(oip::log_level level, std::string_view line) noexcept override {
    const std::lock_guard lock{mutex};
    lines.emplace_back(level, std::string{line});
  }
  std::mutex mutex;
  std::vector<std::pair<oip::log_level, std::string>> lines;
};

// Installs a capturing sink at `level` for one test, and restores the defaults after it.
struct capture_scope {
  explicit capture_scope(oip::log_level level) {
    oip::set_log_sink(sink);
    oip::set_log_level(level);
  }
  ~capture_scope() {
    oip::set_log_sink(nullptr);
    oip::set_log_settings({});
  }
  std::shared_ptr<captured> sink = std::make_shared<captured>();
};

}  // namespace

TEST_CASE("levels parse and print; by default warnings and errors are written") {
  CHECK(oip::current_log_settings() == oip::log_settings{true, true, false, 0, {}});
  CHECK(*oip::parse_log_level("verbose") == oip::log_level::verbose);
  CHECK(*oip::parse_log_level("error") == oip::log_level::error);
  CHECK(oip::to_string(oip::log_level::info) == "info");
  const oip::result<oip::log_level> bad = oip::parse_log_level("loud");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message().find("expected error, warning, info or verbose") !=
        std::string::npos);
  CHECK(oip::log_enabled(oip::log_level::error));
  CHECK_FALSE(oip::log_enabled(oip::log_level::info));
}

TEST_CASE("a client's mistake is one warning line with the request id; none at level error") {
  {
    capture_scope scope{oip::log_level::error};
    oip::testing::served s{{oip::testing::make_simple()}};
    REQUIRE_FALSE(s.infer("simple", oip::testing::simple_request(1, "r-1", false)));
    CHECK(scope.sink->lines.empty());
  }
  capture_scope scope{oip::log_level::warning};
  oip::testing::served s{{oip::testing::make_simple()}};
  REQUIRE_FALSE(s.infer("simple", oip::testing::simple_request(1, "r-2", false)));
  REQUIRE(
      s.infer("simple", oip::testing::simple_request(1, "r-3")));  // success: no line below verbose
  REQUIRE(scope.sink->lines.size() == 1);
  CHECK(scope.sink->lines[0].first == oip::log_level::warning);
  CHECK(scope.sink->lines[0].second.find("model 'simple' version 1 request 'r-2': expected 2 "
                                         "inputs but got 1 inputs") != std::string::npos);
  CHECK(scope.sink->lines[0].second.find("(400)") != std::string::npos);
}

TEST_CASE("errors before a model is known are logged too: unknown model, no route") {
  capture_scope scope{oip::log_level::warning};
  oip::testing::served s{{oip::testing::make_simple()}};
  oip::http_handler handler{s.service};
  CHECK(handler.handle({"GET", "/v2/nowhere", {}, {}}).status == 404);
  CHECK(handler
            .handle({"POST",
                     "/v2/models/nope/infer",
                     {},
                     oip::buffer::from_string(R"({"id":"x","inputs":[]})")})
            .status == 404);
  REQUIRE(scope.sink->lines.size() == 2);
  CHECK(scope.sink->lines[0].second ==
        "GET /v2/nowhere request '': no route for GET /v2/nowhere (404)");
  CHECK(scope.sink->lines[1].second.starts_with(
      "model 'nope' request '': Request for unknown model: 'nope' is not found (404)"));
}

TEST_CASE("a model's failure is an error line; a success is a verbose line") {
  capture_scope scope{oip::log_level::verbose};
  oip::model_config config = oip::testing::simple_config();
  config.name = "broken";
  oip::testing::served s{{oip::make_model(config,
                                          [](const oip::inference_request&) {
                                            return oip::result<oip::model_output>{oip::status{
                                                oip::errc::internal, "the engine fell over"}};
                                          }),
                          oip::testing::make_simple()}};
  REQUIRE_FALSE(s.infer("broken", oip::testing::simple_request(1, "r-4")));
  REQUIRE(s.infer("simple", oip::testing::simple_request(1, "r-5")));
  REQUIRE(scope.sink->lines.size() == 2);
  CHECK(scope.sink->lines[0].first == oip::log_level::error);
  CHECK(scope.sink->lines[0].second ==
        "model 'broken' version 1 request 'r-4': the engine fell over (500)");
  CHECK(scope.sink->lines[1].first == oip::log_level::verbose);
  CHECK(scope.sink->lines[1].second.starts_with("model 'simple' version 1 request 'r-5': ok in "));
}

TEST_CASE("a request its client cancelled is a warning, not an error, whatever its status") {
  capture_scope scope{oip::log_level::warning};
  auto waiter = std::make_shared<oip::testing::waiter>();
  oip::testing::served s{{waiter}};
  oip::cancellation cancel;
  std::promise<oip::result<oip::inference_response>> answered;
  oip::inference_request r;
  r.id = "gone";
  r.inputs.push_back(*oip::tensor::from_values<std::int32_t>("IN", {1}, std::vector{1}));
  s.service.infer({.model = "waiter", .cancel = cancel}, std::move(r),
                  oip::reply_to([&answered](oip::result<oip::inference_response> response) {
                    answered.set_value(std::move(response));
                  }));
  REQUIRE(oip::testing::wait_until([&] { return waiter->started.load() == 1; }));
  cancel.cancel();
  const oip::result<oip::inference_response> outcome = answered.get_future().get();
  REQUIRE_FALSE(outcome.ok());
  CHECK(outcome.error().http_status() >= 500);
  REQUIRE(scope.sink->lines.size() == 1);
  CHECK(scope.sink->lines[0].first == oip::log_level::warning);
  CHECK(scope.sink->lines[0].second.starts_with("model 'waiter' version 1 request 'gone': "));
}

// What the default sink writes to stderr for `line` at `level`.
std::string default_sink_line(oip::log_level level, std::string_view line) {
  std::FILE* file = std::tmpfile();
  REQUIRE(file != nullptr);
  std::fflush(stderr);
  const int saved = ::dup(STDERR_FILENO);
  REQUIRE(saved >= 0);
  REQUIRE(::dup2(::fileno(file), STDERR_FILENO) >= 0);
  oip::set_log_sink(nullptr);
  oip::log(level, line);
  std::fflush(stderr);
  ::dup2(saved, STDERR_FILENO);
  ::close(saved);
  std::rewind(file);
  std::string written(4096, '\0');
  written.resize(std::fread(written.data(), 1, written.size(), file));
  std::fclose(file);
  return written;
}

TEST_CASE("the default sink escapes control characters: a client cannot forge a line") {
  const std::string written = default_sink_line(
      oip::log_level::error, "unknown model 'x\nE1124 00:00:00.000000 oip] FAKE\r\x01\x7f'");
  CHECK(std::count(written.begin(), written.end(), '\n') == 1);
  CHECK(
      written.ends_with("oip] unknown model 'x\\nE1124 00:00:00.000000 oip] FAKE\\r\\x01\\x7f'\n"));
}

TEST_CASE("levels are on or off one by one; the default sink writes glog's or ISO 8601's prefix") {
  struct restore {
    ~restore() { oip::set_log_settings({}); }
  } restore_defaults;
  oip::set_log_settings({false, true, true, 0, oip::log_format::standard});
  CHECK_FALSE(oip::log_enabled(oip::log_level::error));
  CHECK(oip::log_enabled(oip::log_level::warning));
  CHECK(oip::log_enabled(oip::log_level::info));
  CHECK_FALSE(oip::log_enabled(oip::log_level::verbose));
  CHECK(default_sink_line(oip::log_level::error, "dropped").empty());

  const std::string standard = default_sink_line(oip::log_level::info, "hello");
  // I1125 02:50:31.123456 oip] hello
  REQUIRE(standard.size() == std::string_view{"I1125 02:50:31.123456 oip] hello\n"}.size());
  CHECK(standard.starts_with("I"));
  CHECK(standard[5] == ' ');
  CHECK(standard[14] == '.');
  CHECK(standard.ends_with(" oip] hello\n"));

  oip::set_log_level(oip::log_level::verbose);
  CHECK(oip::current_log_settings() == oip::log_settings{true, true, true, 1, {}});
  oip::set_log_settings({true, true, true, 3, oip::log_format::iso8601});
  const std::string iso = default_sink_line(oip::log_level::verbose, "hello");
  // 2026-11-25T02:50:31Z V oip] hello
  REQUIRE(iso.size() == std::string_view{"2026-11-25T02:50:31Z V oip] hello\n"}.size());
  CHECK(iso[4] == '-');
  CHECK(iso[10] == 'T');
  CHECK(iso.substr(19, 3) == "Z V");
  CHECK(iso.ends_with(" oip] hello\n"));

  oip::set_log_level(oip::log_level::error);
  CHECK(oip::current_log_settings() ==
        oip::log_settings{true, false, false, 0, oip::log_format::iso8601});
}

TEST_CASE("an update changes what it names, all of it or nothing") {
  struct restore {
    ~restore() { oip::set_log_settings({}); }
  } restore_defaults;
  oip::log_settings_update update;
  update.info = true;
  update.verbose_level = 2;
  const oip::result<oip::log_settings> now = oip::update_log_settings(update);
  REQUIRE(now);
  CHECK(*now == oip::log_settings{true, true, true, 2, {}});
  CHECK(oip::current_log_settings() == *now);

  update.error = false;
  update.file = "/tmp/elsewhere.log";
  const oip::result<oip::log_settings> refused = oip::update_log_settings(update);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().http_status() == 501);
  CHECK(refused.error().message() ==
        "log file location can not be updated through network protocol");
  CHECK(oip::current_log_settings() == *now);

  CHECK(*oip::parse_log_format("ISO8601") == oip::log_format::iso8601);
  CHECK(oip::to_string(oip::log_format::standard) == "default");
  CHECK(oip::parse_log_format("iso8601").error().message() ==
        "invalid argument for log_format, got: iso8601");
}

TEST_CASE("the logging settings' JSON, both directions") {
  const oip::log_settings settings{true, false, true, 7, oip::log_format::iso8601};
  const std::string text = oip::encode(settings);
  CHECK(text == R"({"log_file":"","log_info":true,"log_warning":false,"log_error":true,)"
                R"("log_verbose_level":7,"log_format":"ISO8601"})");
  CHECK(*oip::decode_log_settings(text) == settings);
  CHECK(oip::decode_log_settings(R"({"log_info":true})").error().http_status() == 400);

  oip::log_settings_update update;
  CHECK(oip::encode(update) == "{}");
  update.warning = false;
  update.verbose_level = 4294967295U;
  update.format = oip::log_format::standard;
  update.file = "a\"b";
  const std::string body = oip::encode(update);
  CHECK(body == R"({"log_file":"a\"b","log_warning":false,"log_verbose_level":4294967295,)"
                R"("log_format":"default"})");
  const oip::result<oip::log_settings_update> read = oip::decode_log_settings_update(body);
  REQUIRE(read);
  CHECK(read->warning == false);
  CHECK_FALSE(read->info.has_value());
  CHECK(read->verbose_level == 4294967295U);
  CHECK(read->format == oip::log_format::standard);
  CHECK(read->file == "a\"b");

  // null leaves a setting as it is; unknown keys are read and ignored.
  const oip::result<oip::log_settings_update> nulls = oip::decode_log_settings_update(
      R"({"log_info":null,"log_file":null,"log_verbose_level":null,"other":[1,{"x":2}]})");
  REQUIRE(nulls);
  CHECK_FALSE(nulls->info.has_value());
  CHECK_FALSE(nulls->file.has_value());
  CHECK_FALSE(nulls->verbose_level.has_value());
}

TEST_CASE("bad logging settings are a 400 that names the field") {
  const auto message = [](std::string_view body) {
    const oip::result<oip::log_settings_update> r = oip::decode_log_settings_update(body);
    REQUIRE_FALSE(r);
    CHECK(r.error().http_status() == 400);
    return r.error().message();
  };
  CHECK(message(R"({"log_info":1})") ==
        "unable to parse 'log_info' in the logging settings JSON: expected a boolean");
  CHECK(message(R"({"log_error":"false"})") ==
        "unable to parse 'log_error' in the logging settings JSON: expected a boolean");
  CHECK(message(R"({"log_verbose_level":-1})") ==
        "unable to parse 'log_verbose_level' in the logging settings JSON: expected an integer "
        "from 0 to 4294967295");
  CHECK(message(R"({"log_verbose_level":4294967296})").find("from 0 to 4294967295") !=
        std::string::npos);
  CHECK(message(R"({"log_verbose_level":1.0})").find("from 0 to 4294967295") != std::string::npos);
  CHECK(message(R"({"log_verbose_level":"1"})").find("from 0 to 4294967295") != std::string::npos);
  CHECK(message(R"({"log_format":"json"})") == "invalid argument for log_format, got: json");
  CHECK(message(R"({"log_format":1})").find("expected a string") != std::string::npos);
  CHECK(message(R"({"log_file":false})").find("'log_file'") != std::string::npos);
  CHECK(message(R"({"log_info":False})").find("failed to parse the logging settings JSON") !=
        std::string::npos);
  CHECK(message("[]").find("object") != std::string::npos);
  CHECK(message("").find("no JSON found") != std::string::npos);
  CHECK(message(R"({"log_info":true,"log_info":false})").find("duplicate") != std::string::npos);
}

TEST_CASE("GET and POST /v2/logging, in Triton's shapes; the metadata lists the extension") {
  struct restore {
    ~restore() { oip::set_log_settings({}); }
  } restore_defaults;
  oip::testing::served s{{oip::testing::make_simple()}};
  oip::http_handler handler{s.service};
  const oip::http_response got = handler.handle({"GET", "/v2/logging", {}, {}});
  CHECK(got.status == 200);
  CHECK(got.header("Content-Type") == "application/json");
  CHECK(got.body() == R"({"log_file":"","log_info":false,"log_warning":true,"log_error":true,)"
                      R"("log_verbose_level":0,"log_format":"default"})");

  const oip::http_response changed = handler.handle(
      {"POST",
       "/v2/logging",
       {},
       oip::buffer::from_string(R"({"log_info":true,"log_verbose_level":1,"log_file":null})")});
  CHECK(changed.status == 200);
  CHECK(*oip::decode_log_settings(changed.body()) == oip::log_settings{true, true, true, 1, {}});
  CHECK(oip::log_enabled(oip::log_level::verbose));

  const oip::http_response file = handler.handle(
      {"POST", "/v2/logging", {}, oip::buffer::from_string(R"({"log_file":"/tmp/x.log"})")});
  CHECK(file.status == 501);
  CHECK(oip::decode_error(file.body(), file.status).message() ==
        "log file location can not be updated through network protocol");

  const oip::http_response bad =
      handler.handle({"POST",
                      "/v2/logging",
                      {},
                      oip::buffer::from_string(R"({"log_warning":false,"log_format":"xml"})")});
  CHECK(bad.status == 400);
  CHECK(oip::decode_error(bad.body(), bad.status).message() ==
        "invalid argument for log_format, got: xml");
  CHECK(oip::log_enabled(oip::log_level::warning));  // nothing of a refused update is applied

  const oip::http_response put = handler.handle({"PUT", "/v2/logging", {}, {}});
  CHECK(put.status == 405);
  CHECK(put.header("Allow") == "GET, HEAD, POST");
  CHECK(handler.handle({"GET", "/v2/logging/x", {}, {}}).status == 404);

  const oip::http_response meta = handler.handle({"GET", "/v2", {}, {}});
  const oip::result<oip::server_metadata> decoded = oip::decode_server_metadata(meta.body());
  REQUIRE(decoded);
  CHECK(std::find(decoded->extensions.begin(), decoded->extensions.end(), "logging") !=
        decoded->extensions.end());
}
