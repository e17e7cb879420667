// A model's faults stay with its own request: an exception or an error is a 500 with the model's
// message, and the service goes on serving.

#include "served.hpp"
#include "serving_support.hpp"

#include <oip/model.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
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

// `simple` under another configuration, noting the thread that runs each request.
class noting_threads : public oip::model {
 public:
  explicit noting_threads(oip::model_config config) : config_{std::move(config)} {}
  [[nodiscard]] const oip::model_config& config() const noexcept override { return config_; }
  void execute(oip::inference_call call) override {
    {
      const std::lock_guard lock{mutex_};
      threads_.push_back(std::this_thread::get_id());
    }
    std::this_thread::sleep_for(delay_.load());
    simple_->execute(std::move(call));
  }
  /// How long each call takes from now on, beyond `simple`'s own microseconds.
  void take(std::chrono::microseconds delay) { delay_.store(delay); }
  [[nodiscard]] std::vector<std::thread::id> threads() const {
    const std::lock_guard lock{mutex_};
    return threads_;
  }

 private:
  oip::model_config config_;
  std::shared_ptr<oip::model> simple_ = oip::testing::make_simple();
  mutable std::mutex mutex_;
  std::vector<std::thread::id> threads_;
  std::atomic<std::chrono::microseconds> delay_{std::chrono::microseconds{0}};
};

oip::model_config simple_named(std::string name, bool inline_execution) {
  oip::model_config c = oip::testing::simple_config();
  c.name = std::move(name);
  c.inline_execution = inline_execution;
  return c;
}

}  // namespace

TEST_CASE("a model with inline_execution runs on the thread that sends its request") {
  auto on_caller = std::make_shared<noting_threads>(simple_named("on_caller", true));
  auto on_worker = std::make_shared<noting_threads>(simple_named("on_worker", false));
  // Batches and sequences are the executor's to order: the flag does not apply to them.
  oip::model_config batched_config = simple_named("batched", true);
  batched_config.dynamic_batching = true;
  auto batched = std::make_shared<noting_threads>(batched_config);
  oip::model_config stateful_config = simple_named("stateful", true);
  stateful_config.sequence_batching = true;
  auto stateful = std::make_shared<noting_threads>(stateful_config);
  // No model runs inline for being quick: the flag alone decides here.
  oip::server_options flag_only;
  flag_only.inline_below = std::chrono::microseconds{0};
  oip::testing::served s{{on_caller, on_worker, batched, stateful}, flag_only};
  REQUIRE(s.failures.empty());

  constexpr int rounds = 3;
  for (int round = 0; round < rounds; ++round) {
    // Answered before `send` returns: nothing waited for a worker.
    std::future<oip::result<oip::inference_response>> reply =
        s.send("on_caller", oip::testing::simple_request());
    REQUIRE(reply.wait_for(std::chrono::seconds{0}) == std::future_status::ready);
    oip::result<oip::inference_response> answered = reply.get();
    REQUIRE(answered);
    CHECK(answered->outputs.at(0).at<std::int32_t>(0) == 2);  // 1 + 1

    REQUIRE(s.infer("on_worker", oip::testing::simple_request()));
    REQUIRE(s.infer("batched", oip::testing::simple_request()));
    oip::inference_request step = oip::testing::simple_request();
    step.parameters.set("sequence_id", std::int64_t{7});
    if (round == 0) step.parameters.set("sequence_start", true);
    REQUIRE(s.infer("stateful", std::move(step)));
  }
  const std::thread::id here = std::this_thread::get_id();
  CHECK(on_caller->threads() == std::vector<std::thread::id>(rounds, here));
  for (const auto& model : {on_worker, batched, stateful}) {
    const std::vector<std::thread::id> threads = model->threads();
    CHECK(threads.size() == rounds);
    CHECK(std::count(threads.begin(), threads.end(), here) == 0);
  }
  // Counted as any other request.
  const std::vector<oip::statistics_snapshot> stats = *s.service.statistics("on_caller", {});
  CHECK(stats[0].success.count == rounds);
  CHECK(stats[0].queue.count == rounds);
  CHECK(stats[0].pending_requests == 0);
}

TEST_CASE("a model whose calls are quick runs on the receiving thread, and leaves it when slow") {
  auto quick = std::make_shared<noting_threads>(simple_named("quick", false));
  auto slow = std::make_shared<noting_threads>(simple_named("slow", false));
  slow->take(std::chrono::milliseconds{20});
  // A bound that sanitizer builds' `simple` stays well under, and 20 ms well above.
  oip::server_options options;
  options.inline_below = std::chrono::milliseconds{2};
  oip::testing::served s{{quick, slow}, options};
  REQUIRE(s.failures.empty());
  const std::thread::id here = std::this_thread::get_id();
  const auto ran_here = [&](noting_threads& m) { return m.threads().back() == here; };

  // The first call is measured on a worker; from then on the quick model runs here, answered
  // before `send` returns.
  REQUIRE(s.infer("quick", oip::testing::simple_request()));
  CHECK_FALSE(ran_here(*quick));
  // A loaded machine can stretch that first measurement (the worker preempted mid-call): the
  // average falls below the bound within a few calls.
  for (int round = 0; round < 40 && !ran_here(*quick); ++round) {
    REQUIRE(s.infer("quick", oip::testing::simple_request()));
  }
  for (int round = 0; round < 3; ++round) {
    std::future<oip::result<oip::inference_response>> reply =
        s.send("quick", oip::testing::simple_request());
    REQUIRE(reply.wait_for(std::chrono::seconds{0}) == std::future_status::ready);
    REQUIRE(reply.get());
    CHECK(ran_here(*quick));
    REQUIRE(s.infer("slow", oip::testing::simple_request()));
    CHECK_FALSE(ran_here(*slow));
  }
  // Turned slow: its next call still runs here (its past was quick), the ones after it do not.
  quick->take(std::chrono::milliseconds{20});
  REQUIRE(s.infer("quick", oip::testing::simple_request()));
  CHECK(ran_here(*quick));
  REQUIRE(s.infer("quick", oip::testing::simple_request()));
  CHECK_FALSE(ran_here(*quick));
  // Quick again: measured on the workers, it comes back once its average has fallen.
  quick->take(std::chrono::microseconds{0});
  for (int round = 0; round < 40 && !ran_here(*quick); ++round) {
    REQUIRE(s.infer("quick", oip::testing::simple_request()));
  }
  CHECK(ran_here(*quick));
  const std::optional<std::uint64_t> recent =
      s.models.find("quick", {})->statistics().recent_execute_call_ns();
  REQUIRE(recent);
  CHECK(*recent < std::uint64_t{2'000'000});
}

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
  std::optional<oip::result<std::optional<oip::model_output>>> outcome;
  oip::detail::execute_guarded(
      *steps, oip::inference_call{oip::testing::simple_request(1), 1, cancel,
                                  [&](oip::result<std::optional<oip::model_output>> r) {
                                    outcome = std::move(r);
                                  }});
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
                 oip::testing::simple_request(1),
                 1,
                 {},
                 [&](oip::result<std::optional<oip::model_output>> r) { outcome = std::move(r); }});
  REQUIRE(outcome.has_value());
  REQUIRE(*outcome);
  REQUIRE(**outcome);
  CHECK((**outcome)->outputs.at(0).name() == "INPUT0");
}
