// Out of memory on the request path answers that request 503 and the server goes on: a model that
// throws std::bad_alloc, a sink that cannot write a response, a decoder that cannot allocate, and
// a decoupled model's send that meets it. The failures are injected, so this runs in every build,
// the sanitizers' included; tests/allocation_failure_test.cpp fails the allocator itself, and
// tests/integration/memory_limits_test.py runs oip-serve under a small RLIMIT_AS.

#include "served.hpp"
#include "serving_support.hpp"

#include <oip/in_process_client.hpp>
#include <oip/inference_service.hpp>
#include <oip/model.hpp>

#include <atomic>
#include <future>
#include <memory>
#include <new>
#include <span>
#include <string>

#include <doctest/doctest.h>

namespace {

oip::model_config one_int_config(std::string name, bool decoupled = false) {
  oip::model_config c;
  c.name = std::move(name);
  c.decoupled = decoupled;
  c.inputs = {{"IN", oip::datatype::int32, {1}, {}}};
  c.outputs = {{"OUT", oip::datatype::int32, {1}, {}}};
  return c;
}

oip::inference_request one_int_request() {
  oip::inference_request r;
  const std::int32_t one = 1;
  r.inputs.push_back(
      *oip::tensor::from_values<std::int32_t>("IN", {1}, std::span<const std::int32_t>(&one, 1)));
  return r;
}

oip::model_output one_int_output() {
  const std::int32_t one = 1;
  return oip::model_output{
      {*oip::tensor::from_values<std::int32_t>("OUT", {1}, std::span<const std::int32_t>(&one, 1))},
      {}};
}

// A sink whose first response cannot be written, as an encoder out of memory.
struct failing_sink final : oip::reply_sink {
  std::promise<oip::status> ended;
  void on_response(oip::inference_response, oip::response_flag) override { throw std::bad_alloc{}; }
  void on_complete(const oip::status& outcome) override { ended.set_value(outcome); }
};

}  // namespace

TEST_CASE("a model that throws std::bad_alloc fails its request with a 503; the next one runs") {
  std::atomic<bool> fail{true};
  oip::testing::served s{
      {oip::make_model(one_int_config("greedy"),
                       [&](const oip::inference_request&) -> oip::result<oip::model_output> {
                         if (fail.load()) throw std::bad_alloc{};
                         return one_int_output();
                       })}};
  oip::result<oip::inference_response> failed = s.infer("greedy", one_int_request());
  REQUIRE_FALSE(failed);
  CHECK(failed.error().code() == oip::errc::unavailable);
  CHECK(failed.error().http_status() == 503);
  CHECK(failed.error().message().find("out of memory running model 'greedy'") != std::string::npos);
  fail = false;
  CHECK(s.infer("greedy", one_int_request()).ok());
}

TEST_CASE("a response that cannot be written ends its request with a 503") {
  oip::testing::served s{{oip::make_model(
      one_int_config("one"), [](const oip::inference_request&) -> oip::result<oip::model_output> {
        return one_int_output();
      })}};
  auto sink = std::make_shared<failing_sink>();
  std::future<oip::status> ended = sink->ended.get_future();
  s.service.infer({.model = "one", .cancel = {}}, one_int_request(), sink);
  const oip::status outcome = ended.get();
  CHECK(outcome.code() == oip::errc::unavailable);
  CHECK(outcome.message().find("out of memory writing the response") != std::string::npos);
  CHECK(s.infer("one", one_int_request()).ok());
}

TEST_CASE("a decoder out of memory refuses its request with a 503") {
  oip::testing::served s{{oip::make_model(
      one_int_config("one"), [](const oip::inference_request&) -> oip::result<oip::model_output> {
        return one_int_output();
      })}};
  std::promise<oip::result<oip::inference_response>> answered;
  s.service.infer(
      {.model = "one", .cancel = {}},
      [](const oip::model_config&) -> oip::result<oip::inference_request> {
        throw std::bad_alloc{};
      },
      oip::reply_to(
          [&](oip::result<oip::inference_response> r) { answered.set_value(std::move(r)); }));
  oip::result<oip::inference_response> r = answered.get_future().get();
  REQUIRE_FALSE(r);
  CHECK(r.error().code() == oip::errc::unavailable);
  CHECK(r.error().message().find("out of memory decoding the request") != std::string::npos);
}

TEST_CASE(
    "a decoupled model's send that meets out of memory fails with a 503; the stream goes on") {
  std::promise<oip::status> first_send;
  oip::testing::served s{{oip::make_model(
      one_int_config("stream", true),
      [&](oip::inference_call& call) -> oip::result<oip::model_output> {
        first_send.set_value(call.send(one_int_output()));  // the sink throws on this one
        return one_int_output();                            // the last response
      })}};
  struct flaky_sink final : oip::reply_sink {
    int responses = 0;
    std::promise<oip::status> ended;
    void on_response(oip::inference_response, oip::response_flag) override {
      if (++responses == 1) throw std::bad_alloc{};
    }
    void on_complete(const oip::status& outcome) override { ended.set_value(outcome); }
  };
  auto sink = std::make_shared<flaky_sink>();
  std::future<oip::status> ended = sink->ended.get_future();
  s.service.infer({.model = "stream", .cancel = {}}, one_int_request(), sink);
  const oip::status sent = first_send.get_future().get();
  CHECK(sent.code() == oip::errc::unavailable);
  CHECK(sent.message().find("out of memory") != std::string::npos);
  CHECK(ended.get().ok());
  CHECK(sink->responses == 2);
}
