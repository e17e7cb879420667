#include <oip/status.hpp>

#include <string>

#include <doctest/doctest.h>

using oip::errc;

TEST_CASE("every error code maps to one HTTP status and one gRPC code") {
  CHECK(oip::http_status(errc::ok) == 200);
  CHECK(oip::http_status(errc::invalid_argument) == 400);
  CHECK(oip::http_status(errc::not_found) == 404);
  CHECK(oip::http_status(errc::method_not_allowed) == 405);
  CHECK(oip::http_status(errc::length_required) == 411);
  CHECK(oip::http_status(errc::payload_too_large) == 413);
  CHECK(oip::http_status(errc::uri_too_long) == 414);
  CHECK(oip::http_status(errc::unsupported_media_type) == 415);
  CHECK(oip::http_status(errc::header_fields_too_large) == 431);
  CHECK(oip::http_status(errc::internal) == 500);
  CHECK(oip::http_status(errc::not_implemented) == 501);
  CHECK(oip::http_status(errc::unavailable) == 503);

  CHECK(oip::grpc_status(errc::invalid_argument) == oip::grpc_code::invalid_argument);
  CHECK(oip::grpc_status(errc::not_found) == oip::grpc_code::not_found);
  CHECK(oip::grpc_status(errc::payload_too_large) == oip::grpc_code::resource_exhausted);
  CHECK(oip::grpc_status(errc::internal) == oip::grpc_code::internal);
  CHECK(oip::grpc_status(errc::not_implemented) == oip::grpc_code::unimplemented);
  CHECK(oip::grpc_status(errc::unavailable) == oip::grpc_code::unavailable);
  CHECK(static_cast<int>(oip::grpc_code::unavailable) == 14);  // grpc::StatusCode numbering
  CHECK(oip::http_status(errc::forbidden) == 403);
  CHECK(oip::grpc_status(errc::forbidden) == oip::grpc_code::permission_denied);
  CHECK(oip::http_status(errc::failed_precondition) == 400);
  CHECK(oip::grpc_status(errc::failed_precondition) == oip::grpc_code::failed_precondition);

  // The table is indexed by the enum: every row must sit at its own code's index.
  for (std::size_t i = 0; i < std::size(oip::detail::errc_table); ++i) {
    CHECK(static_cast<std::size_t>(oip::detail::errc_table[i].code) == i);
  }
  // Client mistakes are 4xx, always.
  for (errc c :
       {errc::invalid_argument, errc::not_found, errc::method_not_allowed, errc::length_required,
        errc::payload_too_large, errc::uri_too_long, errc::unsupported_media_type,
        errc::header_fields_too_large, errc::forbidden, errc::failed_precondition}) {
    CHECK(oip::http_status(c) / 100 == 4);
  }
  CHECK(oip::to_string(errc::payload_too_large) == "payload_too_large");
}

TEST_CASE("status carries code and message and renders the protocol's error object") {
  const oip::status ok;
  CHECK(ok.ok());
  CHECK(ok.http_status() == 200);

  const oip::status s{errc::not_found, "Request for unknown model: 'x' is not found"};
  CHECK_FALSE(s.ok());
  CHECK(s.code() == errc::not_found);
  CHECK(s.http_status() == 404);
  CHECK(s.grpc_status() == oip::grpc_code::not_found);
  CHECK(s.to_json() == R"({"error":"Request for unknown model: 'x' is not found"})");
}

TEST_CASE("error JSON escapes control characters, quotes and invalid UTF-8") {
  const std::string message = std::string("a\"b\\c\n\t") + '\x01' + std::string(1, '\0') + "é" +
                              "\xff" + "\xc3" + "\xe2\x82\xac" + "\xed\xa0\x80" +
                              "\xf0\x9f\x98\x80";
  const oip::status s{errc::invalid_argument, message};
  CHECK(s.to_json() ==
        "{\"error\":\"a\\\"b\\\\c\\n\\t\\u0001\\u0000é\xEF\xBF\xBD\xEF\xBF\xBD\xe2\x82\xac"
        "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xf0\x9f\x98\x80\"}");
}

TEST_CASE("result holds a value or an error") {
  oip::result<int> good = 42;
  REQUIRE(good.ok());
  CHECK(static_cast<bool>(good));
  CHECK(*good == 42);
  CHECK(good.to_status().ok());

  oip::result<int> bad{errc::payload_too_large, "too big"};
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().code() == errc::payload_too_large);
  CHECK(bad.error().message() == "too big");
  CHECK(bad.to_status().http_status() == 413);

  oip::result<std::string> moved = std::string(100, 'x');
  std::string taken = std::move(moved).value();
  CHECK(taken.size() == 100);
}

TEST_CASE("a result built from an ok status is an internal error, never an empty value") {
  oip::result<int> r = oip::status{};
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code() == errc::internal);
}
