// Restricted APIs (Triton's --http-restricted-api): parsing in Triton's words, and the HTTP
// handler refusing a restricted route without its header, before anything else.

#include "serving_support.hpp"

#include <oip/access.hpp>
#include <oip/http_handler.hpp>
#include <oip/json.hpp>
#include <oip/log.hpp>

#include <string>
#include <vector>

#include <doctest/doctest.h>

namespace {

std::string error_of(const oip::result<oip::api_restriction>& r) {
  REQUIRE_FALSE(r);
  CHECK(r.error().http_status() == 400);
  return r.error().message();
}

}  // namespace

TEST_CASE("a restriction reads as Triton's <categories>:<header>=<value>") {
  const oip::result<oip::api_restriction> r =
      oip::parse_api_restriction("model-repository,shared-memory:admin-key=a=b:c");
  REQUIRE(r);
  CHECK(r->categories == std::vector<oip::api_category>{oip::api_category::model_repository,
                                                        oip::api_category::shared_memory});
  CHECK(r->header == "admin-key");
  CHECK(r->value == "a=b:c");
  for (const oip::api_category c :
       {oip::api_category::health, oip::api_category::metadata, oip::api_category::inference,
        oip::api_category::shared_memory, oip::api_category::model_config,
        oip::api_category::model_repository, oip::api_category::statistics,
        oip::api_category::trace, oip::api_category::logging}) {
    const oip::result<oip::api_restriction> one =
        oip::parse_api_restriction(std::string{oip::to_string(c)} + ":k=v");
    REQUIRE(one);
    CHECK(one->categories == std::vector<oip::api_category>{c});
  }

  for (const char* bad : {"health", "health:key", ":k=v", "health:=v", "health:k=", ""}) {
    CHECK(error_of(oip::parse_api_restriction(bad)) ==
          std::string{"--http-restricted-api option format is '<config name>:<setting>=<value>'. "
                      "Got "} +
              bad);
  }
  CHECK(error_of(oip::parse_api_restriction("model-reposit:k=v")) ==
        "unknown restricted api 'model-reposit'");
  CHECK(error_of(oip::parse_api_restriction("health,:k=v")) == "unknown restricted api ''");
  CHECK(error_of(oip::parse_api_restriction("Health:k=v", "grpc-restricted-protocol")) ==
        "unknown restricted protocol 'Health'");
}

TEST_CASE("a category is restricted by one group at most") {
  oip::api_restrictions restrictions;
  CHECK(restrictions.empty());
  REQUIRE(restrictions.add(*oip::parse_api_restriction("model-repository,health:k1=v1")).ok());
  const oip::status twice = restrictions.add(*oip::parse_api_restriction("metadata,health:k2=v2"));
  CHECK(twice.http_status() == 400);
  CHECK(twice.message() ==
        "restricted api 'health' can not be specified in multiple config groups");
  CHECK(restrictions.of(oip::api_category::metadata) == nullptr);  // nothing of it was added
  CHECK(restrictions.add(*oip::parse_api_restriction("trace,trace:k=v"), "protocol").message() ==
        "restricted protocol 'trace' can not be specified in multiple config groups");
  REQUIRE(restrictions.of(oip::api_category::health) != nullptr);
  CHECK(restrictions.of(oip::api_category::health)->header == "k1");
  CHECK(restrictions.of(oip::api_category::inference) == nullptr);
}

TEST_CASE("HTTP: a restricted route needs its header, checked before the method and the body") {
  oip::server_options options;
  REQUIRE(options.restricted_http_api
              .add(*oip::parse_api_restriction("model-repository,shared-memory,logging:admin-key="
                                               "secret"))
              .ok());
  REQUIRE(
      options.restricted_http_api.add(*oip::parse_api_restriction("inference,health:k=v")).ok());
  oip::model_repository models;
  REQUIRE(models.add(oip::testing::make_simple()).ok());
  oip::executor workers{{2, 64}};
  oip::http_handler handler{models, workers, options};
  const auto send = [&](std::string method, std::string target,
                        std::vector<oip::http_header> headers = {}, std::string body = {}) {
    return handler.handle(
        {std::move(method), std::move(target), std::move(headers), oip::buffer::from_string(body)});
  };
  const auto check_refused = [](const oip::http_response& r, const std::string& header) {
    CHECK(r.status == 403);
    CHECK(oip::decode_error(r.body(), r.status).message() ==
          "This API is restricted, expecting header '" + header + "'");
  };
  const oip::http_response first = send("POST", "/v2/repository/index");
  check_refused(first, "admin-key");
  CHECK(oip::decode_error(first.body(), first.status).code() == oip::errc::forbidden);
  check_refused(send("GET", "/v2/repository/index"), "admin-key");  // 403 before 405
  check_refused(send("POST", "/v2/repository/index", {{"admin-key", "wrong"}}), "admin-key");
  check_refused(send("POST", "/v2/systemsharedmemory/unregister"), "admin-key");
  check_refused(send("GET", "/v2/cudasharedmemory/status"), "admin-key");
  check_refused(send("POST", "/v2/logging", {}, R"({"log_info":true})"), "admin-key");
  check_refused(send("GET", "/v2/health/ready"), "k");
  check_refused(send("GET", "/v2/models/simple/ready"), "k");  // model readiness is health
  check_refused(send("POST", "/v2/models/simple/infer", {}, "not even JSON"), "k");
  CHECK_FALSE(oip::log_enabled(oip::log_level::info));  // the refused change did not happen

  // The header's name in any case; its value exactly.
  CHECK(send("POST", "/v2/repository/index", {{"Admin-Key", "secret"}}).status == 200);
  CHECK(send("GET", "/v2/cudasharedmemory/status", {{"admin-key", "secret"}}).status == 200);
  CHECK(send("GET", "/v2/health/ready", {{"k", "v"}}).status == 200);
  CHECK(send("GET", "/v2/health/ready", {{"k", "V"}}).status == 403);
  // What no group names stays open.
  CHECK(send("GET", "/v2").status == 200);
  CHECK(send("GET", "/v2/models/simple").status == 200);
  CHECK(send("GET", "/v2/models/simple/config").status == 200);
  CHECK(send("GET", "/v2/models/stats").status == 200);
  CHECK(send("GET", "/v2/trace/setting").status == 200);
  CHECK(send("GET", "/v2/nowhere").status == 404);
}

TEST_CASE("HTTP: each route belongs to Triton's category for it, and only to that one") {
  struct route {
    const char* method;
    const char* target;
    oip::api_category category;
  };
  const std::vector<route> routes = {
      {"GET", "/v2", oip::api_category::metadata},
      {"GET", "/v2/health/live", oip::api_category::health},
      {"GET", "/v2/health/ready", oip::api_category::health},
      {"GET", "/v2/models/simple", oip::api_category::metadata},
      {"GET", "/v2/models/simple/versions/1", oip::api_category::metadata},
      {"GET", "/v2/models/simple/ready", oip::api_category::health},
      {"GET", "/v2/models/simple/versions/x/ready", oip::api_category::health},
      {"POST", "/v2/models/simple/infer", oip::api_category::inference},
      {"GET", "/v2/models/simple/config", oip::api_category::model_config},
      {"GET", "/v2/models/simple/stats", oip::api_category::statistics},
      {"GET", "/v2/models/stats", oip::api_category::statistics},
      {"GET", "/v2/trace/setting", oip::api_category::trace},
      {"GET", "/v2/models/simple/trace/setting", oip::api_category::trace},
      {"GET", "/v2/logging", oip::api_category::logging},
      {"GET", "/v2/systemsharedmemory/status", oip::api_category::shared_memory},
      {"POST", "/v2/cudasharedmemory/region/r/register", oip::api_category::shared_memory},
      {"POST", "/v2/repository/index", oip::api_category::model_repository},
      {"POST", "/v2/repository/models/simple/unload", oip::api_category::model_repository},
      // Every other form of each route, so that none escapes its category.
      {"HEAD", "/v2", oip::api_category::metadata},
      {"POST", "/v2/models/simple/versions/1/infer", oip::api_category::inference},
      {"POST", "/v2/models/simple/generate", oip::api_category::inference},
      {"POST", "/v2/models/simple/generate_stream", oip::api_category::inference},
      {"POST", "/v2/models/simple/versions/1/generate", oip::api_category::inference},
      {"GET", "/v2/models/simple/versions/1/config", oip::api_category::model_config},
      {"GET", "/v2/models/simple/versions/1/stats", oip::api_category::statistics},
      {"POST", "/v2/trace/setting", oip::api_category::trace},
      {"POST", "/v2/models/simple/trace/setting", oip::api_category::trace},
      {"POST", "/v2/logging", oip::api_category::logging},
      {"GET", "/v2/systemsharedmemory/region/r/status", oip::api_category::shared_memory},
      {"POST", "/v2/systemsharedmemory/region/r/register", oip::api_category::shared_memory},
      {"POST", "/v2/systemsharedmemory/region/r/unregister", oip::api_category::shared_memory},
      {"POST", "/v2/systemsharedmemory/unregister", oip::api_category::shared_memory},
      {"GET", "/v2/cudasharedmemory/status", oip::api_category::shared_memory},
      {"GET", "/v2/cudasharedmemory/region/r/status", oip::api_category::shared_memory},
      {"POST", "/v2/cudasharedmemory/region/r/unregister", oip::api_category::shared_memory},
      {"POST", "/v2/cudasharedmemory/unregister", oip::api_category::shared_memory},
      {"POST", "/v2/repository/r/index", oip::api_category::model_repository},
      {"POST", "/v2/repository/models/simple/load", oip::api_category::model_repository},
      {"POST", "/v2/repository/r/models/simple/load", oip::api_category::model_repository},
      {"POST", "/v2/repository/r/models/simple/unload", oip::api_category::model_repository},
  };
  for (std::size_t c = 0; c < oip::api_category_count; ++c) {
    const auto restricted = static_cast<oip::api_category>(c);
    CAPTURE(oip::to_string(restricted));
    oip::server_options options;
    REQUIRE(options.restricted_http_api.add({{restricted}, "key", "value"}).ok());
    oip::model_repository models;
    REQUIRE(models.add(oip::testing::make_simple()).ok());
    oip::executor workers{{2, 64}};
    oip::http_handler handler{models, workers, options};
    for (const route& r : routes) {
      CAPTURE(r.target);
      const oip::http_response answer =
          handler.handle({r.method, r.target, {}, oip::buffer::from_string("")});
      CHECK((answer.status == 403) == (r.category == restricted));
      const oip::http_response with_key =
          handler.handle({r.method, r.target, {{"key", "value"}}, oip::buffer::from_string("")});
      CHECK(with_key.status != 403);
    }
    CHECK(handler.handle({"GET", "/metrics", {}, {}}).status != 403);  // no category
  }
}
