#include "wait.hpp"

#include <oip/executor.hpp>
#include <oip/inference_service.hpp>
#include <oip/model.hpp>
#include <oip/repository.hpp>
#include <oip/sequence.hpp>

#include <algorithm>
#include <any>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

using namespace std::chrono_literals;

namespace {

// Records what the manager tells the model.
struct releases {
  std::mutex mutex;
  std::vector<std::pair<std::string, oip::sequence_release>> seen;
  oip::sequence_manager::release_callback callback() {
    return [this](const oip::sequence_id& id, std::any&, oip::sequence_release why) {
      const std::lock_guard lock{mutex};
      seen.emplace_back(id.to_string(), why);
    };
  }
  std::size_t count() {
    const std::lock_guard lock{mutex};
    return seen.size();
  }
};

// A running sum per sequence, finished at once on the caller's thread.
oip::sequence_manager::run_callback add(int value, std::vector<int>* out = nullptr) {
  return [value, out](oip::sequence_turn turn) {
    std::any& state = *turn.step().state;
    if (turn.step().start || !state.has_value()) state = 0;
    int& sum = std::any_cast<int&>(state);
    sum += value;
    if (out != nullptr) out->push_back(sum);
  };
}

}  // namespace

TEST_CASE("reading the sequence parameters") {
  oip::parameters p;
  CHECK(oip::read_sequence_flags(p)->id.empty());
  p.set("sequence_id", std::int64_t{1000});
  p.set("sequence_start", true);
  oip::result<oip::sequence_flags> flags = oip::read_sequence_flags(p);
  REQUIRE(flags);
  CHECK(flags->id == oip::sequence_id{1000});
  CHECK(flags->start);
  CHECK_FALSE(flags->end);

  p.set("sequence_id", std::uint64_t{18446744073709551615ULL});
  CHECK(oip::read_sequence_flags(p)->id.number() == 18446744073709551615ULL);
  p.set("sequence_id", std::string{"c1a7e6f0-uuid"});
  CHECK(oip::read_sequence_flags(p)->id == oip::sequence_id{std::string{"c1a7e6f0-uuid"}});
  CHECK_FALSE(oip::sequence_id{std::string{"42"}} == oip::sequence_id{42});

  p.set("sequence_id", std::string(129, 'x'));
  oip::result<oip::sequence_flags> long_id = oip::read_sequence_flags(p);
  REQUIRE_FALSE(long_id);
  CHECK(long_id.error().http_status() == 400);
  CHECK(long_id.error().message() ==
        "sequence_id of 129 characters is longer than the limit of 128");
  CHECK(oip::read_sequence_flags(p, 200));

  p.set("sequence_id", std::int64_t{-1});
  CHECK(oip::read_sequence_flags(p).error().message() ==
        "unable to parse 'sequence_id': expected an unsigned integer or a string");
  p.set("sequence_id", 1.5);
  CHECK(oip::read_sequence_flags(p).error().http_status() == 400);
  p.set("sequence_id", std::int64_t{7});
  p.set("sequence_end", std::string{"yes"});
  CHECK(oip::read_sequence_flags(p).error().message() ==
        "unable to parse 'sequence_end': expected a boolean");
}

TEST_CASE("the rules, in Triton's words") {
  oip::sequence_manager sequences{"simple_sequence", {}};
  const auto refused = [&](oip::sequence_flags flags, std::uint64_t batch = 1) {
    bool ran = false;
    oip::status s = sequences.submit(
        flags, [&](oip::sequence_turn) { ran = true; }, batch);
    CHECK_FALSE(ran);
    return s;
  };
  oip::status zero = refused({0, true, false});
  CHECK(zero.http_status() == 400);
  CHECK(zero.message() ==
        "inference request to model 'simple_sequence' must specify a non-zero or non-empty "
        "correlation ID");
  CHECK(refused({oip::sequence_id{std::string{}}, true, false}).http_status() == 400);
  oip::status no_start = refused({17, false, false});
  CHECK(no_start.http_status() == 400);
  CHECK(no_start.message() ==
        "inference request for sequence 17 to model 'simple_sequence' must specify the START "
        "flag on the first request of the sequence");
  oip::status batched = refused({17, true, false}, 2);
  CHECK(batched.message() ==
        "inference request to model 'simple_sequence' must specify batch-size 1 due to "
        "requirements of sequence batcher");
  CHECK(sequences.active() == 0);

  // After END the id is unknown again.
  CHECK(sequences.submit({5, true, false}, add(1)).ok());
  CHECK(sequences.submit({5, false, true}, add(1)).ok());
  CHECK(sequences.active() == 0);
  CHECK(refused({5, false, false}).http_status() == 400);
}

TEST_CASE("correlation id types: a model may take only integers or only strings") {
  oip::sequence_config config;
  config.id_type = oip::correlation_id_type::uint64;
  config.correlation_input = "CORRID";
  oip::sequence_manager integers{"simple_dyna_sequence", config};
  oip::status s = integers.submit({oip::sequence_id{std::string{"1002"}}, true, false}, add(1));
  CHECK(s.http_status() == 400);
  CHECK(s.message() ==
        "sequence batching control 'CORRID' data-type is 'BYTES', but model "
        "'simple_dyna_sequence' expects 'UINT64'");
  CHECK(integers.submit({1002, true, true}, add(1)).ok());

  config.id_type = oip::correlation_id_type::string;
  oip::sequence_manager strings{"simple_string_dyna_sequence", config};
  CHECK(strings.submit({7, true, false}, add(1)).message() ==
        "sequence batching control 'CORRID' data-type is 'UINT64', but model "
        "'simple_string_dyna_sequence' expects 'BYTES'");
  CHECK(strings.submit({oip::sequence_id{std::string{"7"}}, true, true}, add(1)).ok());
}

TEST_CASE("state lives from START to END; START on an active id restarts it") {
  releases told;
  oip::sequence_manager sequences{"accumulator", {}, told.callback()};
  std::vector<int> sums;
  CHECK(sequences.submit({1, true, false}, add(10, &sums)).ok());
  CHECK(sequences.submit({oip::sequence_id{std::string{"a"}}, true, false}, add(100, &sums)).ok());
  CHECK(sequences.submit({1, false, false}, add(5, &sums)).ok());
  CHECK(sequences.submit({oip::sequence_id{std::string{"a"}}, false, false}, add(1, &sums)).ok());
  CHECK(sequences.active() == 2);
  CHECK(sequences.submit({1, true, false}, add(3, &sums)).ok());  // restart
  CHECK(sequences.submit({1, false, true}, add(4, &sums)).ok());
  CHECK(sums == std::vector<int>{10, 100, 15, 101, 3, 7});
  CHECK(sequences.active() == 1);
  REQUIRE(told.count() == 2);
  CHECK(told.seen[0] ==
        std::pair<std::string, oip::sequence_release>{"1", oip::sequence_release::restarted});
  CHECK(told.seen[1] ==
        std::pair<std::string, oip::sequence_release>{"1", oip::sequence_release::ended});
}

TEST_CASE("requests of a sequence run one at a time, in arrival order, across threads") {
  // Turns are kept by the test and released from other threads, as asynchronous models do.
  oip::sequence_manager sequences{"ordered", {}};
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<oip::sequence_turn> held;
  std::vector<std::vector<int>> order(4);
  std::atomic<bool> busy[4] = {};
  std::atomic<int> overlaps{0};
  const auto hold = [&](int sequence, int value) {
    return [&, sequence, value](oip::sequence_turn turn) {
      if (busy[sequence].exchange(true)) ++overlaps;
      {
        const std::lock_guard lock{mutex};
        order[static_cast<std::size_t>(sequence)].push_back(value);
        held.push_back(std::move(turn));
      }
      changed.notify_all();
    };
  };
  std::atomic<bool> done{false};
  std::thread releaser([&] {
    std::unique_lock lock{mutex};
    while (!done || !held.empty()) {
      changed.wait_for(lock, 1ms, [&] { return !held.empty(); });
      if (held.empty()) continue;
      oip::sequence_turn turn = std::move(held.front());
      held.pop_front();
      lock.unlock();
      std::this_thread::sleep_for(50us);
      busy[turn.step().id.number() - 1] = false;
      turn.release();
      lock.lock();
    }
  });
  constexpr int steps = 200;
  std::vector<std::thread> clients;
  for (int sequence = 0; sequence < 4; ++sequence) {
    clients.emplace_back([&, sequence] {
      const auto id = static_cast<std::uint64_t>(sequence + 1);
      for (int step = 0; step < steps; ++step) {
        oip::status s = sequences.submit({id, step == 0, step == steps - 1}, hold(sequence, step));
        CHECK(s.ok());
      }
    });
  }
  for (std::thread& t : clients) t.join();
  REQUIRE(oip::testing::wait_until([&] { return sequences.active() == 0; }));
  done = true;
  changed.notify_all();
  releaser.join();
  std::vector<int> expected(steps);
  for (int i = 0; i < steps; ++i) expected[static_cast<std::size_t>(i)] = i;
  for (const std::vector<int>& seen : order) CHECK(seen == expected);
  CHECK(overlaps.load() == 0);  // never two requests of one sequence at once
}

TEST_CASE("the active limit gives a 503; an idle sequence is released and the model told") {
  releases told;
  oip::sequence_config config;
  config.max_active = 2;
  config.max_idle = std::chrono::milliseconds{40};
  oip::sequence_manager sequences{"limited", config, told.callback()};
  CHECK(sequences.submit({1, true, false}, add(1)).ok());
  CHECK(sequences.submit({2, true, false}, add(1)).ok());
  oip::status full = sequences.submit({3, true, false}, add(1));
  CHECK(full.http_status() == 503);
  CHECK(full.grpc_status() == oip::grpc_code::unavailable);
  CHECK(full.message() ==
        "model 'limited' has 2 active sequences, its limit: sequence 3 cannot start until one "
        "ends or times out");
  // The reaper lets both go within a few periods, without any request.
  CHECK(oip::testing::wait_until([&] { return told.count() == 2; }));
  CHECK(told.seen[0].second == oip::sequence_release::timed_out);
  // The model is told before the reaper takes the sequence out of the table.
  CHECK(oip::testing::wait_until([&] { return sequences.active() == 0; }));
  CHECK(sequences.submit({3, true, false}, add(1)).ok());
  // A timed-out sequence needs a new START.
  CHECK(sequences.submit({1, false, false}, add(1)).http_status() == 400);
}

TEST_CASE("waiting requests per sequence are bounded") {
  oip::sequence_config config;
  config.max_waiting_per_sequence = 2;
  oip::sequence_manager sequences{"bounded", config};
  oip::sequence_turn first;
  CHECK(
      sequences.submit({9, true, false}, [&](oip::sequence_turn t) { first = std::move(t); }).ok());
  CHECK(sequences.submit({9, false, false}, add(1)).ok());
  CHECK(sequences.submit({9, false, false}, add(1)).ok());
  CHECK(sequences.submit({9, false, false}, add(1)).http_status() == 503);
  first.release();
  CHECK(sequences.submit({9, false, true}, add(1)).ok());
  CHECK(sequences.active() == 0);
}

TEST_CASE("many sequences come and go without leaking; the rest are released at shutdown") {
  releases told;
  {
    oip::sequence_manager sequences{"churn", {}, told.callback()};
    for (std::uint64_t id = 1; id <= 20000; ++id) {
      REQUIRE(sequences.submit({id, true, false}, add(1)).ok());
      REQUIRE(sequences.submit({id, false, true}, add(1)).ok());
    }
    CHECK(sequences.active() == 0);
    CHECK(told.count() == 20000);
    CHECK(sequences.submit({oip::sequence_id{std::string{"left open"}}, true, false}, add(1)).ok());
  }
  REQUIRE(told.count() == 20001);
  CHECK(told.seen.back().second == oip::sequence_release::shut_down);
}

TEST_CASE("a model whose release throws is logged; its sequences end all the same") {
  std::atomic<int> calls{0};
  const auto throwing = [&](const oip::sequence_id&, std::any&, oip::sequence_release) {
    calls.fetch_add(1);
    throw std::runtime_error{"cannot let go"};
  };
  oip::sequence_config quick;
  quick.max_idle = std::chrono::milliseconds{40};
  {
    oip::sequence_manager sequences{"throwing", quick, throwing};
    // Released at its END (where a step completes), and by the reaper.
    CHECK(sequences.submit({1, true, true}, add(1)).ok());
    CHECK(sequences.submit({2, true, false}, add(1)).ok());
    CHECK(oip::testing::wait_until([&] { return calls.load() == 2; }));
    CHECK(oip::testing::wait_until([&] { return sequences.active() == 0; }));
  }
  {
    oip::sequence_manager sequences{"throwing", {}, throwing};
    // Released at a restart, then at shutdown.
    CHECK(sequences.submit({3, true, false}, add(1)).ok());
    CHECK(sequences.submit({3, true, false}, add(1)).ok());
    CHECK(calls.load() == 3);
    CHECK(sequences.submit({3, false, false}, add(1)).ok());
  }
  CHECK(calls.load() == 4);
}

TEST_CASE("a new START for an ended id waits until the model has let go of the old state") {
  std::atomic<bool> releasing{false};
  std::atomic<bool> overlapped{false};
  oip::sequence_manager sequences{
      "handover", {}, [&](const oip::sequence_id&, std::any&, oip::sequence_release) {
        releasing = true;
        std::this_thread::sleep_for(50ms);
        releasing = false;
      }};
  REQUIRE(sequences.submit({1, true, false}, add(1)).ok());
  std::thread ender([&] { CHECK(sequences.submit({1, false, true}, add(1)).ok()); });
  REQUIRE(oip::testing::wait_until([&] { return releasing.load(); }));
  std::atomic<bool> started{false};
  CHECK(sequences
            .submit({1, true, false},
                    [&](oip::sequence_turn turn) {
                      if (releasing) overlapped = true;
                      started = true;
                      add(7)(std::move(turn));
                    })
            .ok());
  ender.join();
  CHECK(started.load());
  CHECK_FALSE(overlapped.load());
  CHECK(sequences.active() == 1);
}

TEST_CASE("a request cancelled before it runs ends its sequence, as in Triton") {
  releases told;
  oip::sequence_manager manager{"m", {}, told.callback()};
  std::vector<std::string> ran;
  std::vector<oip::sequence_turn> running;  // turns the "model" still holds
  // Runs one request: records it, adds to the state, and holds its turn until told.
  const auto hold = [&](std::string name) {
    return [&, name](oip::sequence_turn turn) {
      if (turn.step().cancelled) {
        CHECK(turn.step().state == nullptr);
        ran.push_back(name + " cancelled");
        return;  // the turn ends here: the next request's comes
      }
      std::any& state = *turn.step().state;
      if (turn.step().start) state = 0;
      ran.push_back(name + " after " + std::to_string(std::any_cast<int&>(state)++));
      running.push_back(std::move(turn));
    };
  };
  // Completes the running requests (their turns pass on, and the next requests may run).
  const auto complete_running = [&] {
    std::vector<oip::sequence_turn> done = std::move(running);
    running.clear();
  };
  const auto cancel = [&](std::string name) {
    return [&, name](oip::sequence_turn turn) {
      ran.push_back(name + " cancels");
      turn.cancel_sequence();
    };
  };

  SUBCASE("the requests behind it fail; a later one must START") {
    REQUIRE(manager.submit({7, true, false}, hold("r1")).ok());
    REQUIRE(manager.submit({7, false, false}, cancel("r2")).ok());
    REQUIRE(manager.submit({7, false, false}, hold("r3")).ok());
    REQUIRE(manager.submit({7, false, true}, hold("r4")).ok());
    complete_running();  // r1 completes; r2 is cancelled, r3 and r4 fail without running
    CHECK(ran ==
          std::vector<std::string>{"r1 after 0", "r2 cancels", "r3 cancelled", "r4 cancelled"});
    REQUIRE(told.count() == 1);
    CHECK(told.seen[0] ==
          std::pair<std::string, oip::sequence_release>{"7", oip::sequence_release::cancelled});
    oip::status refused = manager.submit({7, false, false}, hold("r5"));
    CHECK(refused.code() == oip::errc::invalid_argument);
    CHECK(refused.message().find("must specify the START flag") != std::string::npos);
    CHECK(manager.active() == 0);
    REQUIRE(manager.submit({7, true, false}, hold("r6")).ok());
    CHECK(ran.back() == "r6 after 0");
  }
  SUBCASE("a START queued behind it begins a new sequence") {
    REQUIRE(manager.submit({7, true, false}, hold("r1")).ok());
    REQUIRE(manager.submit({7, false, false}, cancel("r2")).ok());
    REQUIRE(manager.submit({7, false, false}, hold("r3")).ok());
    REQUIRE(manager.submit({7, true, false}, hold("r4")).ok());
    REQUIRE(manager.submit({7, false, false}, hold("r5")).ok());
    complete_running();
    CHECK(ran ==
          std::vector<std::string>{"r1 after 0", "r2 cancels", "r3 cancelled", "r4 after 0"});
    complete_running();
    CHECK(ran.back() == "r5 after 1");
  }
}

TEST_CASE("requests waiting behind their sequences are bounded for the whole model") {
  oip::sequence_config config;
  config.max_waiting = 3;
  oip::sequence_manager manager{"m", config};
  std::vector<oip::sequence_turn> running;
  const auto hold = [&](oip::sequence_turn turn) { running.push_back(std::move(turn)); };
  for (std::uint64_t id = 1; id <= 2; ++id) REQUIRE(manager.submit({id, true, false}, hold).ok());
  REQUIRE(manager.submit({1, false, false}, hold).ok());
  REQUIRE(manager.submit({1, false, false}, hold).ok());
  REQUIRE(manager.submit({2, false, false}, hold).ok());
  const oip::status full = manager.submit({2, false, false}, hold);
  CHECK(full.code() == oip::errc::unavailable);
  CHECK(full.message() == "model 'm' already has 3 requests waiting for their sequences' turns");
  // A sequence's first request waits for none.
  REQUIRE(manager.submit({3, true, false}, hold).ok());
  {
    const oip::sequence_turn first = std::move(running.front());  // sequence 1's turn passes on
    running.erase(running.begin());
  }
  CHECK(manager.submit({2, false, false}, hold).ok());  // one fewer waits
  while (!running.empty()) {  // each turn that ends may start the next request, which holds one
    const oip::sequence_turn last = std::move(running.back());
    running.pop_back();
  }
}

// --- sequences through the inference service ----------------------------------------------------

namespace {

oip::model_config int32_model(std::string name) {
  oip::model_config config;
  config.name = std::move(name);
  config.inputs = {{"INPUT", oip::datatype::int32, {1}, {}}};
  config.outputs = {{"OUTPUT", oip::datatype::int32, {1}, {}}};
  return config;
}

oip::model_output int32_output(std::int32_t value) {
  oip::model_output out;
  out.outputs.push_back(*oip::tensor::from_values<std::int32_t>("OUTPUT", {1}, std::vector{value}));
  return out;
}

// Adds each request's INPUT to its sequence's sum and answers the sum; while `hold` is set, keeps
// each call for the test to finish.
class summing_sequences final : public oip::model {
 public:
  summing_sequences() : config_{int32_model("summing")} {
    config_.sequence_batching = true;
    config_.sequence.max_idle = std::chrono::hours{1};  // the test's pauses never time one out
  }
  [[nodiscard]] const oip::model_config& config() const noexcept override { return config_; }
  void execute(oip::inference_call call) override {
    std::any& state = *call.sequence()->state;
    if (call.sequence()->start || !state.has_value()) state = std::int32_t{0};
    auto& sum = std::any_cast<std::int32_t&>(state);
    sum += call.request().inputs.at(0).at<std::int32_t>(0);
    if (hold) {
      const std::lock_guard lock{mutex};
      held.emplace_back(std::move(call), sum);
      return;
    }
    call.finish(int32_output(sum));
  }

  std::atomic<bool> hold{false};
  std::mutex mutex;
  std::vector<std::pair<oip::inference_call, std::int32_t>> held;

 private:
  oip::model_config config_;
};

// Keeps the executor's worker until `open` is set.
class gate final : public oip::model {
 public:
  gate() : config_{int32_model("gate")} {}
  [[nodiscard]] const oip::model_config& config() const noexcept override { return config_; }
  void execute(oip::inference_call call) override {
    ++entered;
    while (!open) std::this_thread::sleep_for(1ms);
    call.finish(int32_output(0));
  }
  std::atomic<int> entered{0};
  std::atomic<bool> open{false};

 private:
  oip::model_config config_;
};

// A sequence model that answers 1 and whose sequences idle out after 20 ms: what its release
// does is the test's.
class quickly_idle_sequences : public oip::model {
 public:
  explicit quickly_idle_sequences(std::string name) : config_{int32_model(std::move(name))} {
    config_.sequence_batching = true;
    config_.sequence.max_idle = 20ms;
  }
  [[nodiscard]] const oip::model_config& config() const noexcept override { return config_; }
  void execute(oip::inference_call call) override {
    *call.sequence()->state = std::int32_t{1};
    call.finish(int32_output(1));
  }

 private:
  oip::model_config config_;
};

oip::server_options with_model_control() {
  oip::server_options options;
  options.model_control = oip::model_control_mode::explicit_loading;
  return options;
}

using reply_callback = std::function<void(oip::result<oip::inference_response>)>;

void send(oip::inference_service& service, std::string_view model, std::int32_t value,
          std::optional<oip::sequence_flags> flags, reply_callback done) {
  oip::inference_request request;
  request.inputs.push_back(
      *oip::tensor::from_values<std::int32_t>("INPUT", {1}, std::vector{value}));
  if (flags) {
    request.parameters.set("sequence_id", static_cast<std::int64_t>(flags->id.number()));
    if (flags->start) request.parameters.set("sequence_start", true);
    if (flags->end) request.parameters.set("sequence_end", true);
  }
  service.infer({.model = model, .cancel = {}}, std::move(request), oip::reply_to(std::move(done)));
}

std::future<oip::result<oip::inference_response>> send(oip::inference_service& service,
                                                       std::string_view model, std::int32_t value,
                                                       std::optional<oip::sequence_flags> flags) {
  auto promise = std::make_shared<std::promise<oip::result<oip::inference_response>>>();
  auto future = promise->get_future();
  send(service, model, value, flags,
       [promise](oip::result<oip::inference_response> r) { promise->set_value(std::move(r)); });
  return future;
}

// The sum a sequence step answered, or its error.
oip::result<std::int32_t> sum_of(std::future<oip::result<oip::inference_response>> reply) {
  oip::result<oip::inference_response> r = reply.get();
  if (!r.ok()) return std::move(r).error();
  return r->outputs.at(0).at<std::int32_t>(0);
}

oip::errc code_of(const oip::result<std::int32_t>& r) {
  return r.ok() ? oip::errc::ok : r.error().code();
}
std::int32_t sum_or_minus_one(const oip::result<std::int32_t>& r) { return r.ok() ? *r : -1; }

}  // namespace

TEST_CASE("a sequence's request that the full executor refuses leaves the sequence to its retry") {
  oip::model_repository models;
  auto summing = std::make_shared<summing_sequences>();
  auto blocking = std::make_shared<gate>();
  REQUIRE(models.add(summing).ok());
  REQUIRE(models.add(blocking).ok());
  oip::executor workers{oip::executor_options{1, 1}};
  oip::server_options options;
  options.inline_below = std::chrono::microseconds{0};  // every request goes to the executor
  oip::inference_service service{models, workers, options};
  const auto step = [&](std::uint64_t id, std::int32_t value, bool start, bool end) {
    return sum_of(send(service, "summing", value, oip::sequence_flags{id, start, end}));
  };
  // The worker busy and the queue's one place taken.
  const auto fill_executor = [&] {
    blocking->open = false;
    const int before = blocking->entered.load();
    auto running = send(service, "gate", 0, std::nullopt);
    REQUIRE(oip::testing::wait_until([&] { return blocking->entered.load() == before + 1; }));
    auto queued = send(service, "gate", 0, std::nullopt);
    return std::pair{std::move(running), std::move(queued)};
  };
  const auto empty_executor = [&](auto filled) {
    blocking->open = true;
    CHECK(filled.first.get().ok());
    CHECK(filled.second.get().ok());
  };

  REQUIRE(sum_or_minus_one(step(5, 1, true, false)) == 1);
  auto filled = fill_executor();
  // The client hears of the refusal once its sequence is as before: sent again from the reply's
  // callback, the request is refused only because the executor is still full, not cancelled.
  std::promise<oip::result<std::int32_t>> resent;
  send(service, "summing", 10, oip::sequence_flags{5, false, false},
       [&](oip::result<oip::inference_response> refused) {
         REQUIRE_FALSE(refused.ok());
         CHECK(refused.error().code() == oip::errc::unavailable);
         CHECK(refused.error().message().find("overloaded") != std::string::npos);
         send(service, "summing", 10, oip::sequence_flags{5, false, false},
              [&](oip::result<oip::inference_response> r) {
                if (!r.ok()) return resent.set_value(std::move(r).error());
                resent.set_value(r->outputs.at(0).at<std::int32_t>(0));
              });
       });
  const oip::result<std::int32_t> again = resent.get_future().get();
  REQUIRE_FALSE(again.ok());
  CHECK(again.error().code() == oip::errc::unavailable);
  CHECK(again.error().message().find("overloaded") != std::string::npos);
  // A START that did not run: the sequence it would begin has no state to go on from.
  CHECK(code_of(step(6, 7, true, false)) == oip::errc::unavailable);
  // An END that did not run leaves its sequence open.
  CHECK(code_of(step(5, 100, false, true)) == oip::errc::unavailable);
  empty_executor(std::move(filled));

  CHECK(sum_or_minus_one(step(5, 10, false, false)) ==
        11);  // the retry goes on from the sum before
  const oip::result<std::int32_t> no_start = step(6, 1, false, false);
  REQUIRE_FALSE(no_start.ok());
  CHECK(no_start.error().code() == oip::errc::invalid_argument);
  CHECK(no_start.error().message().find("must specify the START flag") != std::string::npos);
  CHECK(sum_or_minus_one(step(5, 100, false, true)) == 111);
  CHECK(code_of(step(5, 1, false, false)) == oip::errc::invalid_argument);  // ended
}

TEST_CASE("a sequence's next request after the service is gone is refused, never run") {
  // A model that finishes on its own thread after the host has destroyed the service and then
  // the executor: the request waiting behind it in its sequence must not reach the executor.
  oip::model_repository models;
  auto summing = std::make_shared<summing_sequences>();
  REQUIRE(models.add(summing).ok());
  summing->hold = true;
  auto workers = std::make_unique<oip::executor>(oip::executor_options{2, 16});
  auto service = std::make_unique<oip::inference_service>(models, *workers);
  auto first = send(*service, "summing", 1, oip::sequence_flags{9, true, false});
  auto second = send(*service, "summing", 2, oip::sequence_flags{9, false, false});
  REQUIRE(oip::testing::wait_until([&] {
    const std::lock_guard lock{summing->mutex};
    return summing->held.size() == 1;
  }));
  service.reset();
  workers.reset();
  std::vector<std::pair<oip::inference_call, std::int32_t>> held;
  {
    const std::lock_guard lock{summing->mutex};
    held = std::move(summing->held);
  }
  std::thread{[&held] { held.at(0).first.finish(int32_output(held.at(0).second)); }}.join();
  CHECK(sum_of(std::move(first)).value() == 1);
  const oip::result<std::int32_t> refused = sum_of(std::move(second));
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code() == oip::errc::unavailable);
  CHECK(refused.error().message() == "the server is stopping");
}

TEST_CASE("an unloaded sequence model hears of its sequences' end before it is destroyed") {
  // What the model saw, in order; it outlives the model.
  struct journal {
    std::mutex mutex;
    std::vector<std::string> events;
    void add(std::string event) {
      const std::lock_guard lock{mutex};
      events.push_back(std::move(event));
    }
    std::vector<std::string> read() {
      const std::lock_guard lock{mutex};
      return events;
    }
  };
  // Keeps the call of a request whose INPUT is 0, for the test to finish.
  class remembering final : public oip::model {
   public:
    explicit remembering(std::shared_ptr<journal> seen)
        : config_{int32_model("remembering")}, seen_{std::move(seen)} {
      config_.sequence_batching = true;
      config_.sequence.max_idle = std::chrono::hours{1};
    }
    remembering(const remembering&) = delete;
    remembering& operator=(const remembering&) = delete;
    ~remembering() override { seen_->add("destroyed"); }
    [[nodiscard]] const oip::model_config& config() const noexcept override { return config_; }
    void execute(oip::inference_call call) override {
      *call.sequence()->state = std::int32_t{1};
      if (call.request().inputs.at(0).at<std::int32_t>(0) == 0) {
        held.set_value(std::move(call));
        return;
      }
      call.finish(int32_output(1));
    }
    void release_sequence(const oip::sequence_id& id, std::any& /*state*/,
                          oip::sequence_release reason) override {
      seen_->add(id.to_string() + " " + std::string{oip::to_string(reason)});
    }
    std::promise<oip::inference_call> held;

   private:
    oip::model_config config_;
    std::shared_ptr<journal> seen_;
  };
  auto seen = std::make_shared<journal>();
  oip::model_repository models;
  auto made = std::make_shared<remembering>(seen);
  std::future<oip::inference_call> held = made->held.get_future();
  REQUIRE(models.add(std::move(made)).ok());
  oip::executor workers{oip::executor_options{2, 16}};
  oip::inference_service service{models, workers, with_model_control()};
  for (const std::uint64_t id : {3, 4}) {
    REQUIRE(sum_or_minus_one(sum_of(
                send(service, "remembering", 1, oip::sequence_flags{id, true, false}))) == 1);
  }
  auto running = send(service, "remembering", 0, oip::sequence_flags{5, true, false});
  oip::inference_call call = held.get();  // sequence 5's request runs through the unload
  REQUIRE(service.unload("remembering").ok());
  const auto sorted = [&] {
    std::vector<std::string> events = seen->read();
    std::sort(events.begin(), events.end());
    return events;
  };
  REQUIRE(oip::testing::wait_until([&] { return seen->read().size() == 2; }));
  CHECK(sorted() == std::vector<std::string>{"3 shut down", "4 shut down"});
  call.finish(int32_output(1));
  CHECK(sum_or_minus_one(sum_of(std::move(running))) == 1);
  REQUIRE(oip::testing::wait_until([&] { return seen->read().size() == 4; }));
  const std::vector<std::string> events = seen->read();
  CHECK(events[2] == "5 shut down");
  CHECK(events[3] == "destroyed");
}

namespace {

// What a `counting` model did; it outlives the model.
struct counting_journal {
  std::atomic<int> runs{0};
  std::atomic<int> releases{0};
  std::atomic<int> destroyed{0};
};

// A sequence model that counts its runs, its sequences' releases and its end.
class counting final : public oip::model {
 public:
  counting(std::string name, std::shared_ptr<counting_journal> seen)
      : config_{int32_model(std::move(name))}, seen_{std::move(seen)} {
    config_.sequence_batching = true;
    config_.sequence.max_idle = std::chrono::hours{1};
  }
  counting(const counting&) = delete;
  counting& operator=(const counting&) = delete;
  ~counting() override { ++seen_->destroyed; }
  [[nodiscard]] const oip::model_config& config() const noexcept override { return config_; }
  void execute(oip::inference_call call) override {
    ++seen_->runs;
    *call.sequence()->state = std::int32_t{1};
    call.finish(int32_output(1));
  }
  void release_sequence(const oip::sequence_id& /*id*/, std::any& /*state*/,
                        oip::sequence_release /*reason*/) override {
    ++seen_->releases;
  }

 private:
  oip::model_config config_;
  std::shared_ptr<counting_journal> seen_;
};

// A sequence START for `model` whose decoding first calls `meanwhile`: the service holds the
// model's lease for the request by then.
oip::result<oip::inference_response> start_after(oip::inference_service& service,
                                                 std::string_view model,
                                                 const std::function<void()>& meanwhile) {
  std::promise<oip::result<oip::inference_response>> promise;
  std::future<oip::result<oip::inference_response>> reply = promise.get_future();
  const auto decode = [&](const oip::model_config&) -> oip::result<oip::inference_request> {
    meanwhile();
    oip::inference_request request;
    request.inputs.push_back(
        *oip::tensor::from_values<std::int32_t>("INPUT", {1}, std::vector{std::int32_t{1}}));
    request.parameters.set("sequence_id", std::int64_t{7});
    request.parameters.set("sequence_start", true);
    return request;
  };
  service.infer({.model = model, .cancel = {}}, decode,
                oip::reply_to([&promise](oip::result<oip::inference_response> r) {
                  promise.set_value(std::move(r));
                }));
  return reply.get();
}

// Hands out `next` on each load.
class handing_out final : public oip::model_loader {
 public:
  std::shared_ptr<oip::model> next;
  [[nodiscard]] std::vector<std::string> available() const override { return {"counting"}; }
  oip::result<std::shared_ptr<oip::model>> load(std::string_view /*name*/) override { return next; }
  oip::result<std::shared_ptr<oip::model>> load_with(std::string_view name,
                                                     const oip::parameters& /*request*/) override {
    return load(name);
  }
};

}  // namespace

TEST_CASE("a sequence's request that took its model before an unload starts no sequence on it") {
  auto seen = std::make_shared<counting_journal>();
  oip::model_repository models;
  REQUIRE(models.add(std::make_shared<counting>("counting", seen)).ok());
  oip::executor workers{oip::executor_options{2, 16}};
  oip::inference_service service{models, workers, with_model_control()};
  // The unload comes while the request holds its model: the service lets go of the model's
  // sequences before the request reaches them.
  const oip::result<oip::inference_response> refused =
      start_after(service, "counting", [&] { REQUIRE(service.unload("counting").ok()); });
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code() == oip::errc::unavailable);
  CHECK(refused.error().message() == "model 'counting' version 1 is unloading");
  REQUIRE(oip::testing::wait_until([&] { return seen->destroyed == 1; }));
  CHECK(seen->runs == 0);
  CHECK(seen->releases == 0);
}

TEST_CASE("a sequence's request that took its model before a reload goes on only if it serves") {
  auto seen = std::make_shared<counting_journal>();
  oip::model_repository models;
  auto first = std::make_shared<counting>("counting", seen);
  REQUIRE(models.add(first).ok());
  auto loader = std::make_shared<handing_out>();
  models.set_loader(loader);
  oip::executor workers{oip::executor_options{2, 16}};
  oip::inference_service service{models, workers, with_model_control()};
  oip::parameters reload;
  reload.set("config", std::string{"{}"});

  SUBCASE("the loader hands back the instance that serves: the sequence starts on it") {
    loader->next = first;
    const oip::result<oip::inference_response> started =
        start_after(service, "counting", [&] { REQUIRE(service.load("counting", reload).ok()); });
    REQUIRE(started.ok());
    CHECK(seen->runs == 1);
    CHECK(seen->destroyed == 0);
  }
  SUBCASE("the loader makes a new instance: the request is refused, the old model untouched") {
    loader->next = std::make_shared<counting>("counting", seen);
    const oip::result<oip::inference_response> refused =
        start_after(service, "counting", [&] { REQUIRE(service.load("counting", reload).ok()); });
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error().code() == oip::errc::unavailable);
    CHECK(refused.error().message() ==
          "model 'counting' version 1 was unloaded or reloaded after this request came; send it "
          "again");
    CHECK(seen->runs == 0);
    loader->next.reset();
    first.reset();
    REQUIRE(oip::testing::wait_until([&] { return seen->destroyed == 1; }));  // the old one
    CHECK(seen->releases == 0);
    // The new instance takes sequences.
    CHECK(sum_or_minus_one(
              sum_of(send(service, "counting", 1, oip::sequence_flags{8, true, false}))) == 1);
  }
}

TEST_CASE("a model's release_sequence that waits for an unload of its model is refused the wait") {
  // The release runs on the sequence manager's reaper; the unload it asked for would retire the
  // model's sequences on the model-control thread, which waits for the reaper to stop.
  struct journal {
    std::atomic<oip::inference_service*> service{nullptr};
    std::mutex mutex;
    std::optional<oip::status> waited;
  };
  class unloading_itself final : public quickly_idle_sequences {
   public:
    explicit unloading_itself(std::shared_ptr<journal> seen)
        : quickly_idle_sequences{"unloading_itself"}, seen_{std::move(seen)} {}
    void release_sequence(const oip::sequence_id& /*id*/, std::any& /*state*/,
                          oip::sequence_release /*reason*/) override {
      oip::status outcome = seen_->service.load()->unload("unloading_itself");
      const std::lock_guard lock{seen_->mutex};
      seen_->waited = std::move(outcome);
    }

   private:
    std::shared_ptr<journal> seen_;
  };
  auto seen = std::make_shared<journal>();
  oip::model_repository models;
  REQUIRE(models.add(std::make_shared<unloading_itself>(seen)).ok());
  oip::executor workers{oip::executor_options{2, 16}};
  oip::inference_service service{models, workers, with_model_control()};
  seen->service = &service;
  REQUIRE(sum_or_minus_one(sum_of(
              send(service, "unloading_itself", 1, oip::sequence_flags{9, true, false}))) == 1);
  REQUIRE(oip::testing::wait_until([&] {
    const std::lock_guard lock{seen->mutex};
    return seen->waited.has_value();
  }));
  {
    const std::lock_guard lock{seen->mutex};
    CHECK(seen->waited->code() == oip::errc::internal);
    CHECK(seen->waited->message().find("release_sequence") != std::string::npos);
  }
  CHECK(models.acquire("unloading_itself", std::nullopt).ok());  // the refused unload never ran
  REQUIRE(service.unload("unloading_itself").ok());
}

TEST_CASE("a sequence manager let go of last on its own reaper ends there") {
  // A model's release (on the reaper) sends a request of its own model, which an unload retires
  // while the request still holds the model's manager: the reaper thread then holds the manager
  // last, and its end must not join the thread it runs on. The release waits for the unload,
  // which `release_sequence` must not do, so that the unload comes at that point.
  struct journal {
    std::atomic<oip::inference_service*> service{nullptr};
    std::atomic<int> released{0};
    std::atomic<int> released_before_destroyed{-1};
    std::atomic<bool> answered{false};
  };
  class retiring_itself final : public quickly_idle_sequences {
   public:
    explicit retiring_itself(std::shared_ptr<journal> seen)
        : quickly_idle_sequences{"retiring_itself"}, seen_{std::move(seen)} {}
    retiring_itself(const retiring_itself&) = delete;
    retiring_itself& operator=(const retiring_itself&) = delete;
    ~retiring_itself() override { seen_->released_before_destroyed = seen_->released.load(); }
    void release_sequence(const oip::sequence_id& /*id*/, std::any& /*state*/,
                          oip::sequence_release /*reason*/) override {
      if (seen_->released++ != 0) return;
      oip::inference_service& service = *seen_->service.load();
      // No START for an unknown sequence: refused while the service holds the model's manager,
      // and answered there, on this thread; the answer waits for the unload to finish.
      send(service, "retiring_itself", 1, oip::sequence_flags{11, false, false},
           [&service, seen = seen_](const oip::result<oip::inference_response>& r) {
             std::promise<oip::status> unloaded;
             std::future<oip::status> done = unloaded.get_future();
             service.unload("retiring_itself",
                            [&unloaded](const oip::status& s) { unloaded.set_value(s); });
             CHECK(done.get().ok());
             CHECK(r.error().code() == oip::errc::invalid_argument);
             seen->answered = true;
           });
    }

   private:
    std::shared_ptr<journal> seen_;
  };
  auto seen = std::make_shared<journal>();
  oip::model_repository models;
  REQUIRE(models.add(std::make_shared<retiring_itself>(seen)).ok());
  oip::executor workers{oip::executor_options{2, 16}};
  oip::inference_service service{models, workers, with_model_control()};
  seen->service = &service;
  // Two sequences, which the reaper most often finds idle in the same sweep: the second is
  // released by the manager's end, while the model is still held.
  for (const std::uint64_t id : {10, 12}) {
    REQUIRE(sum_or_minus_one(sum_of(
                send(service, "retiring_itself", 1, oip::sequence_flags{id, true, false}))) == 1);
  }
  REQUIRE(oip::testing::wait_until([&] { return seen->answered.load(); }));
  REQUIRE(oip::testing::wait_until([&] { return seen->released_before_destroyed >= 0; }));
  CHECK(seen->released_before_destroyed == 2);
}
