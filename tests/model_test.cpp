// A model's faults stay with its own request: an exception or an error is a 500 with the model's
// message, and the service goes on serving.

#include "served.hpp"
#include "serving_support.hpp"

#include <oip/model.hpp>

#include <atomic>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

namespace {

// Throws what `fault` says, or keeps the call and throws (finishing it from another thread).
class faulty : public oip::model {
 public:
  enum class fault { std_exception, other_exception, keeps_call_then_throws };
  faulty(std::string name, fault f, bool batching = false) : fault_{f} {
    config_ = oip::testing::simple_config();
    config_.name = std::move(name);
    config_.dynamic_batching = batching;
  }
  [[nodiscard]] const oip::model_config& config() const noexcept override { return config_; }
  void execute(oip::inference_call call) override {
    switch (fault_) {
      case fault::std_exception: throw std::runtime_error("out of engine memory");
      case fault::other_exception: throw 42;  // NOLINT(hicpp-exception-baseclass): the point
      case fault::keeps_call_then_throws:
        std::thread{[kept = std::move(call)]() mutable {
          kept.finish(oip::status{oip::errc::internal, "finished by the model's thread"});
        }}.detach();
        throw std::logic_error("thrown after handing the call on");
    }
  }

 private:
  oip::model_config config_;
  fault fault_;
};

}  // namespace

TEST_CASE("a model that throws answers 500 with its message; the others keep serving") {
  oip::testing::served s{
      {std::make_shared<faulty>("throws", faulty::fault::std_exception),
       std::make_shared<faulty>("throws_int", faulty::fault::other_exception),
       std::make_shared<faulty>("hands_on", faulty::fault::keeps_call_then_throws),
       oip::testing::make_simple()}};
  for (int round = 0; round < 3; ++round) {
    oip::result<oip::inference_response> thrown = s.infer("throws", oip::testing::simple_request());
    REQUIRE_FALSE(thrown);
    CHECK(thrown.error().http_status() == 500);
    CHECK(thrown.error().message() == "model 'throws' failed: out of engine memory");

    oip::result<oip::inference_response> odd =
        s.infer("throws_int", oip::testing::simple_request());
    REQUIRE_FALSE(odd);
    CHECK(odd.error().message() == "model 'throws_int' failed: it threw an exception");

    // The call had left the model's stack: the model's own thread answers it.
    oip::result<oip::inference_response> handed =
        s.infer("hands_on", oip::testing::simple_request());
    REQUIRE_FALSE(handed);
    CHECK(handed.error().message() == "finished by the model's thread");

    REQUIRE(s.infer("simple", oip::testing::simple_request()));
  }
  const std::vector<oip::statistics_snapshot> stats = *s.service.statistics("throws", {});
  CHECK(stats[0].fail.count == 3);
  CHECK(stats[0].success.count == 0);
}

TEST_CASE("a batching model that throws fails its whole batch, and only that batch") {
  oip::testing::served s{{std::make_shared<faulty>("throws", faulty::fault::std_exception, true)}};
  std::vector<std::future<oip::result<oip::inference_response>>> replies;
  for (int i = 0; i < 16; ++i)
    replies.push_back(s.send("throws", oip::testing::simple_request(1 + i % 3)));
  for (auto& reply : replies) {
    oip::result<oip::inference_response> r = reply.get();
    REQUIRE_FALSE(r);
    CHECK(r.error().message() == "model 'throws' failed: out of engine memory");
  }
}

TEST_CASE("a model that returns an error passes its message through as it is") {
  oip::model_config config = oip::testing::simple_config();
  config.name = "refuses";
  oip::testing::served s{{oip::make_model(config, [](const oip::inference_request&) {
    return oip::result<oip::model_output>{
        oip::status{oip::errc::invalid_argument, "INPUT0 must be positive"}};
  })}};
  oip::result<oip::inference_response> r = s.infer("refuses", oip::testing::simple_request());
  REQUIRE_FALSE(r);
  CHECK(r.error().http_status() == 400);
  CHECK(r.error().message() == "INPUT0 must be positive");
}

TEST_CASE("a function model may take the request, or the call with its cancellation") {
  oip::model_config config = oip::testing::simple_config();
  config.name = "steps";
  std::atomic<int> steps_run{0};
  oip::cancellation cancel;
  // Runs until cancelled: the call is what lets it see that.
  auto steps = oip::make_model(config, [&](oip::inference_call& call) {
    while (!call.cancelled()) {
      if (++steps_run == 3) cancel.cancel();  // the client goes away during the third step
    }
    return oip::result<oip::model_output>{oip::status{oip::errc::unavailable, "stopped early"}};
  });
  std::optional<oip::result<oip::model_output>> outcome;
  oip::detail::execute_guarded(
      *steps,
      oip::inference_call{oip::testing::simple_request(1), 1, cancel,
                          [&](oip::result<oip::model_output> r) { outcome = std::move(r); }});
  REQUIRE(outcome.has_value());
  CHECK(outcome->error().message() == "stopped early");
  CHECK(steps_run.load() == 3);

  // A generic lambda is a function of the request.
  auto echo = oip::make_model(config, [](const auto& request) {
    return oip::result<oip::model_output>{oip::model_output{{request.inputs[0]}, {}}};
  });
  outcome.reset();
  oip::detail::execute_guarded(
      *echo, oip::inference_call{
                 oip::testing::simple_request(1), 1, {}, [&](oip::result<oip::model_output> r) {
                   outcome = std::move(r);
                 }});
  REQUIRE(outcome.has_value());
  REQUIRE(*outcome);
  CHECK((*outcome)->outputs.at(0).name() == "INPUT0");
}
