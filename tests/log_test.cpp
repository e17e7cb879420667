// oip's log: levels, a host's sink, and one line per failed request with its model and id.

#include "served.hpp"
#include "serving_support.hpp"

#include <oip/http_handler.hpp>
#include <oip/log.hpp>

#include <algorithm>
#include <cstdio>
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
    oip::set_log_level(oip::log_level::warning);
  }
  std::shared_ptr<captured> sink = std::make_shared<captured>();
};

}  // namespace

TEST_CASE("levels parse and print; the default threshold is warning") {
  CHECK(oip::current_log_level() == oip::log_level::warning);
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

TEST_CASE("the default sink escapes control characters: a client cannot forge a line") {
  // stderr is sent to a file for the length of the test.
  std::FILE* file = std::tmpfile();
  REQUIRE(file != nullptr);
  std::fflush(stderr);
  const int saved = ::dup(STDERR_FILENO);
  REQUIRE(saved >= 0);
  REQUIRE(::dup2(::fileno(file), STDERR_FILENO) >= 0);
  oip::set_log_sink(nullptr);
  oip::log(oip::log_level::error, "unknown model 'x\nE1124 00:00:00.000000 oip] FAKE\r\x01\x7f'");
  std::fflush(stderr);
  ::dup2(saved, STDERR_FILENO);
  ::close(saved);
  std::rewind(file);
  std::string written(4096, '\0');
  written.resize(std::fread(written.data(), 1, written.size(), file));
  std::fclose(file);
  CHECK(std::count(written.begin(), written.end(), '\n') == 1);
  CHECK(
      written.ends_with("oip] unknown model 'x\\nE1124 00:00:00.000000 oip] FAKE\\r\\x01\\x7f'\n"));
}
