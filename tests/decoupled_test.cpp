// Decoupled models through the inference service: many responses to one request, none, an error
// that ends the stream, a send after completion, cancellation, a slow reader holding the model
// back without a response lost, and the configurations refused.

#include "served.hpp"
#include "serving_support.hpp"
#include "wait.hpp"

#include <oip/http_handler.hpp>
#include <oip/in_process_client.hpp>
#include <oip/model.hpp>
#include <oip/reply_sink.hpp>

#include <any>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

namespace {

using namespace std::chrono_literals;

oip::model_config counting_config(std::string name) {
  oip::model_config c;
  c.name = std::move(name);
  c.decoupled = true;
  c.inputs = {{"N", oip::datatype::int32, {1}, {}}};
  c.outputs = {{"I", oip::datatype::int32, {1}, {}}};
  return c;
}

oip::model_output count_output(std::int32_t i) {
  oip::model_output out;
  out.outputs.push_back(
      *oip::tensor::from_values<std::int32_t>("I", {1}, std::span<const std::int32_t>{&i, 1}));
  return out;
}

oip::inference_request count_request(std::int32_t n) {
  oip::inference_request r;
  r.inputs.push_back(
      *oip::tensor::from_values<std::int32_t>("N", {1}, std::span<const std::int32_t>{&n, 1}));
  return r;
}

// What a request's stream delivered, in order: responses (their I and final flag), then the end.
struct recorded_stream final : oip::reply_sink {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<std::int32_t> values;
  std::vector<bool> finals;
  std::optional<oip::status> outcome;
  // A transport that writes later: each response held until `write_one` (none: written at once).
  std::optional<oip::response_backlog> held;
  std::size_t most_held = 0;

  void on_response(oip::inference_response r, oip::response_flag flag) override {
    const std::lock_guard lock{mutex};
    values.push_back(r.outputs.at(0).at<std::int32_t>(0));
    finals.push_back(flag == oip::response_flag::final_response);
    if (held) {
      held->add();
      most_held = std::max(most_held, held->held());
    }
    changed.notify_all();
  }
  void on_complete(const oip::status& s) override {
    const std::lock_guard lock{mutex};
    outcome = s;
    changed.notify_all();
  }
  oip::response_backlog* backlog() noexcept override { return held ? &*held : nullptr; }

  oip::status wait_for_end() {
    std::unique_lock lock{mutex};
    changed.wait_for(lock, 10s, [&] { return outcome.has_value(); });
    return outcome.value_or(oip::status{oip::errc::internal, "no end within 10 s"});
  }
  std::size_t responses() {
    const std::lock_guard lock{mutex};
    return values.size();
  }
};

// A decoupled model whose execute is `run`.
class decoupled_model final : public oip::model {
 public:
  decoupled_model(std::string name, std::function<void(oip::inference_call)> run)
      : config_{counting_config(std::move(name))}, run_{std::move(run)} {}
  [[nodiscard]] const oip::model_config& config() const noexcept override { return config_; }
  void execute(oip::inference_call call) override { run_(std::move(call)); }

 private:
  oip::model_config config_;
  std::function<void(oip::inference_call)> run_;
};

std::int32_t n_of(const oip::inference_call& call) {
  return call.request().inputs.at(0).at<std::int32_t>(0);
}

}  // namespace

TEST_CASE("a decoupled model streams many responses, then a flag-only or a last final") {
  auto flag_only = std::make_shared<decoupled_model>("flag_only", [](oip::inference_call call) {
    for (std::int32_t i = 0; i < n_of(call); ++i) REQUIRE(call.send(count_output(i)).ok());
    call.finish();
  });
  auto last_final = std::make_shared<decoupled_model>("last_final", [](oip::inference_call call) {
    for (std::int32_t i = 0; i + 1 < n_of(call); ++i) REQUIRE(call.send(count_output(i)).ok());
    call.finish(count_output(n_of(call) - 1));
  });
  oip::testing::served s{{flag_only, last_final}};
  REQUIRE(s.failures.empty());

  auto flags = std::make_shared<recorded_stream>();
  s.service.infer({.model = "flag_only", .cancel = {}}, count_request(5), flags);
  CHECK(flags->wait_for_end().ok());
  CHECK(flags->values == std::vector<std::int32_t>{0, 1, 2, 3, 4});
  CHECK(flags->finals == std::vector<bool>(5, false));

  auto last = std::make_shared<recorded_stream>();
  s.service.infer({.model = "last_final", .cancel = {}}, count_request(3), last);
  CHECK(last->wait_for_end().ok());
  CHECK(last->values == std::vector<std::int32_t>{0, 1, 2});
  CHECK(last->finals == std::vector<bool>{false, false, true});

  // No response at all: the request completes, and the statistics count its empty final.
  auto none = std::make_shared<recorded_stream>();
  s.service.infer({.model = "flag_only", .cancel = {}}, count_request(0), none);
  CHECK(none->wait_for_end().ok());
  CHECK(none->values.empty());
  const auto stats = s.service.statistics("flag_only", std::nullopt);
  REQUIRE(stats);
  const auto& responses = stats->at(0).responses;
  CHECK(responses.at(0).success.count == 1);
  CHECK(responses.at(4).success.count == 1);
  CHECK(responses.at(0).empty_response.count == 1);  // the request that sent none
  CHECK(responses.at(5).empty_response.count == 1);
  CHECK(stats->at(0).success.count == 2);
  CHECK(stats->at(0).first_response.count == 1);

  // A caller that expects one response learns that there were several.
  CHECK(s.infer("flag_only", count_request(2)).error().message() ==
        "the model gave more than one response to a request that expects one");
  REQUIRE(s.infer("last_final", count_request(1)));
}

TEST_CASE("an error ends a decoupled model's stream after its responses") {
  auto failing = std::make_shared<decoupled_model>("failing", [](oip::inference_call call) {
    REQUIRE(call.send(count_output(7)).ok());
    call.finish(oip::status{oip::errc::internal, "the engine stopped"});
  });
  oip::testing::served s{{failing}};
  auto stream = std::make_shared<recorded_stream>();
  s.service.infer({.model = "failing", .cancel = {}}, count_request(1), stream);
  const oip::status end = stream->wait_for_end();
  CHECK(end.message() == "the engine stopped");
  CHECK(stream->values == std::vector<std::int32_t>{7});
  const auto stats = s.service.statistics("failing", std::nullopt);
  CHECK(stats->at(0).responses.at(1).fail.count == 1);
  CHECK(stats->at(0).fail.count == 1);
}

TEST_CASE("a send after completion is refused and sends nothing") {
  std::promise<oip::status> late;
  auto keeps = std::make_shared<decoupled_model>("keeps", [&late](oip::inference_call call) {
    call.finish();
    late.set_value(call.send(count_output(1)));
    call.finish(count_output(2));  // ignored
  });
  oip::testing::served s{{keeps}};
  auto stream = std::make_shared<recorded_stream>();
  s.service.infer({.model = "keeps", .cancel = {}}, count_request(1), stream);
  CHECK(stream->wait_for_end().ok());
  const oip::status refused = late.get_future().get();
  CHECK(refused.code() == oip::errc::failed_precondition);
  CHECK(refused.message() == "the call has finished: the response was not sent");
  CHECK(stream->values.empty());

  // A model that is not decoupled answers with finish: send is not for it.
  std::promise<oip::status> not_decoupled;
  oip::model_config config = oip::testing::simple_config();
  config.name = "once";
  auto once = oip::make_model(config, [&](oip::inference_call& call) {
    not_decoupled.set_value(call.send({}));
    return oip::result<oip::model_output>{oip::status{oip::errc::internal, "done"}};
  });
  oip::testing::served t{{once}};
  CHECK_FALSE(t.infer("once", oip::testing::simple_request()));
  CHECK(not_decoupled.get_future().get().code() == oip::errc::failed_precondition);
}

TEST_CASE("a cancelled request stops a decoupled model's sends at once") {
  std::atomic<int> sent{0};
  std::promise<oip::status> stopped;
  auto endless = std::make_shared<decoupled_model>("endless", [&](oip::inference_call call) {
    for (;;) {
      oip::status s = call.send(count_output(sent.load()));
      if (!s.ok()) {
        stopped.set_value(s);
        return call.finish(s);
      }
      ++sent;
      std::this_thread::sleep_for(1ms);
    }
  });
  oip::testing::served s{{endless}};
  oip::cancellation cancel;
  auto stream = std::make_shared<recorded_stream>();
  s.service.infer({.model = "endless", .cancel = cancel}, count_request(1), stream);
  REQUIRE(oip::testing::wait_until([&] { return stream->responses() >= 3; }));
  cancel.cancel();
  auto refused = stopped.get_future();
  REQUIRE(refused.wait_for(5s) == std::future_status::ready);
  CHECK(refused.get().code() == oip::errc::unavailable);
  CHECK(stream->wait_for_end().code() == oip::errc::unavailable);
  // Nothing went to the client after the cancel was seen.
  CHECK(stream->responses() == static_cast<std::size_t>(sent.load()));
  const auto stats = s.service.statistics("endless", std::nullopt);
  CHECK(stats->at(0).failures[static_cast<std::size_t>(oip::failure_reason::canceled)] == 1);
}

TEST_CASE("a slow reader holds a decoupled model back without losing a response") {
  constexpr std::int32_t total = 300;
  auto fast = std::make_shared<decoupled_model>("fast", [](oip::inference_call call) {
    for (std::int32_t i = 0; i < n_of(call); ++i) {
      if (!call.send(count_output(i)).ok())
        return call.finish(oip::status{oip::errc::unavailable, "gone"});
    }
    call.finish();
  });
  oip::testing::served s{{fast}};
  const std::size_t limit = s.service.options().bounds.max_unsent_responses;
  auto stream = std::make_shared<recorded_stream>();
  stream->held.emplace();
  s.service.infer({.model = "fast", .cancel = {}}, count_request(total), stream);
  // The reader writes one response every so often; the model waits for it at the limit.
  std::size_t written = 0;
  while (written < static_cast<std::size_t>(total)) {
    if (stream->held->held() == 0) {
      std::this_thread::sleep_for(100us);
      continue;
    }
    if (written % 50 == 0) std::this_thread::sleep_for(5ms);  // now and then, a slow write
    stream->held->written();
    ++written;
  }
  CHECK(stream->wait_for_end().ok());
  CHECK(stream->values.size() == static_cast<std::size_t>(total));
  for (std::int32_t i = 0; i < total; ++i) CHECK(stream->values[static_cast<std::size_t>(i)] == i);
  CHECK(stream->most_held <= limit);
  CHECK(stream->most_held == limit);  // it did fill up: the model was held back

  // A reader that goes away (its backlog closed) stops the model waiting for room.
  auto gone = std::make_shared<recorded_stream>();
  gone->held.emplace();
  s.service.infer({.model = "fast", .cancel = {}}, count_request(total), gone);
  REQUIRE(oip::testing::wait_until([&] { return gone->responses() >= limit; }));
  gone->held->close();
  CHECK(gone->wait_for_end().code() == oip::errc::unavailable);
  CHECK(gone->responses() == limit);
}

TEST_CASE("a reader that reads nothing for limits::max_unread_wait makes the waiting send fail") {
  auto fast = std::make_shared<decoupled_model>("fast", [](oip::inference_call call) {
    for (std::int32_t i = 0; i < n_of(call); ++i) {
      if (oip::status sent = call.send(count_output(i)); !sent.ok()) return call.finish(sent);
    }
    call.finish();
  });
  oip::server_options options;
  options.bounds.max_unsent_responses = 4;
  options.bounds.max_unread_wait = 1s;
  oip::testing::served s{{fast}, options};

  // A reader that writes one response, then none: the wait is counted from that write.
  auto stalled = std::make_shared<recorded_stream>();
  stalled->held.emplace();
  s.service.infer({.model = "fast", .cancel = {}}, count_request(100), stalled);
  REQUIRE(oip::testing::wait_until([&] { return stalled->responses() == 4; }));
  std::this_thread::sleep_for(100ms);
  const auto wrote = std::chrono::steady_clock::now();
  stalled->held->written();
  const oip::status ended = stalled->wait_for_end();
  const auto waited = std::chrono::steady_clock::now() - wrote;
  CHECK(ended.code() == oip::errc::unavailable);
  CHECK(ended.message() ==
        "the client read no response for too long (limits::max_unread_wait): the response was "
        "not sent");
  CHECK(stalled->responses() == 5);
  CHECK(waited >= 1s);
  CHECK(waited < 10s);

  // One that keeps reading, however slowly, is waited for.
  auto slow = std::make_shared<recorded_stream>();
  slow->held.emplace();
  s.service.infer({.model = "fast", .cancel = {}}, count_request(12), slow);
  std::size_t written = 0;
  while (written < 12) {
    if (slow->held->held() == 0) {
      std::this_thread::sleep_for(1ms);
      continue;
    }
    std::this_thread::sleep_for(100ms);
    slow->held->written();
    ++written;
  }
  CHECK(slow->wait_for_end().ok());
  CHECK(slow->responses() == 12);
}

TEST_CASE("a decoupled model with dynamic batching is refused when it is added") {
  oip::model_config config = counting_config("batched");
  config.max_batch_size = 4;
  config.dynamic_batching = true;
  oip::model_repository models;
  auto batched = oip::make_model(config, [](const oip::inference_request&) {
    return oip::result<oip::model_output>{oip::model_output{}};
  });
  const oip::status s = models.add(batched);
  CHECK(s.code() == oip::errc::invalid_argument);
  CHECK(s.message().find("a decoupled model cannot use dynamic batching") != std::string::npos);
}

TEST_CASE("in_process_client streams a decoupled model's responses as they are sent") {
  std::promise<void> second_may_go;
  std::shared_future<void> go = second_may_go.get_future().share();
  auto paced = std::make_shared<decoupled_model>("paced", [go](oip::inference_call call) {
    REQUIRE(call.send(count_output(1)).ok());
    go.wait();  // the second waits until the client has seen the first
    call.finish(count_output(2));
  });
  oip::testing::served s{{paced}};
  oip::http_handler handler{s.service};
  oip::in_process_client client{handler};
  std::vector<std::int32_t> seen;
  const oip::status end =
      client.infer_stream("paced", count_request(2), [&](oip::inference_response r) {
        seen.push_back(r.outputs.at(0).at<std::int32_t>(0));
        if (seen.size() == 1) second_may_go.set_value();
      });
  CHECK(end.ok());
  CHECK(seen == std::vector<std::int32_t>{1, 2});

  const oip::status unknown = client.infer_stream("nothing", count_request(1), [](auto) {});
  CHECK(unknown.http_status() == 404);
  const oip::status bad = client.infer_stream("paced", {}, [](auto) {});
  CHECK(bad.http_status() == 400);
}

TEST_CASE(
    "in_process_client: a streaming callback that throws loses its response, not the process") {
  auto twice = std::make_shared<decoupled_model>("twice", [](oip::inference_call call) {
    REQUIRE(call.send(count_output(1)).ok());
    call.finish(count_output(2));
  });
  oip::testing::served s{{twice}};
  oip::http_handler handler{s.service};
  oip::in_process_client client{handler};
  std::vector<std::int32_t> seen;
  const oip::status end =
      client.infer_stream("twice", count_request(2), [&](oip::inference_response r) {
        seen.push_back(r.outputs.at(0).at<std::int32_t>(0));
        if (seen.size() == 1) throw std::runtime_error{"a caller's bug"};
      });
  CHECK(end.ok());
  CHECK(seen == std::vector<std::int32_t>{1, 2});
}

TEST_CASE("a decoupled sequence model streams each request's responses, in its sequence's order") {
  // Each request adds N to its sequence's sum and streams the sum so far, N times.
  class summing final : public oip::model {
   public:
    summing() {
      config_ = counting_config("summing");
      config_.sequence_batching = true;
    }
    [[nodiscard]] const oip::model_config& config() const noexcept override { return config_; }
    void execute(oip::inference_call call) override {
      std::any& state = *call.sequence()->state;
      if (!state.has_value()) state = std::int32_t{0};
      auto& sum = std::any_cast<std::int32_t&>(state);
      const std::int32_t n = n_of(call);
      sum += n;
      for (std::int32_t i = 0; i < n; ++i) REQUIRE(call.send(count_output(sum)).ok());
      call.finish();
    }

   private:
    oip::model_config config_;
  };
  oip::testing::served s{{std::make_shared<summing>()}};
  const auto step = [&](std::int32_t n, bool start) {
    oip::inference_request r = count_request(n);
    r.parameters.set("sequence_id", std::int64_t{42});
    if (start) r.parameters.set("sequence_start", true);
    auto stream = std::make_shared<recorded_stream>();
    s.service.infer({.model = "summing", .cancel = {}}, std::move(r), stream);
    return stream;
  };
  auto first = step(2, true);
  auto second = step(3, false);  // runs once the first has finished
  CHECK(first->wait_for_end().ok());
  CHECK(second->wait_for_end().ok());
  CHECK(first->values == std::vector<std::int32_t>{2, 2});
  CHECK(second->values == std::vector<std::int32_t>{5, 5, 5});
}

TEST_CASE("a decoupled request's deadline stops its model's sends") {
  std::promise<oip::status> stopped;
  auto endless = std::make_shared<decoupled_model>("timed", [&](oip::inference_call call) {
    for (std::int32_t i = 0;; ++i) {
      if (oip::status s = call.send(count_output(i)); !s.ok()) {
        stopped.set_value(s);
        return call.finish(s);
      }
      std::this_thread::sleep_for(1ms);
    }
  });
  oip::testing::served s{{endless}};
  oip::inference_request r = count_request(1);
  r.parameters.set("timeout", std::int64_t{50'000});  // 50 ms, in microseconds
  auto stream = std::make_shared<recorded_stream>();
  s.service.infer({.model = "timed", .cancel = {}}, std::move(r), stream);
  auto refused = stopped.get_future();
  REQUIRE(refused.wait_for(5s) == std::future_status::ready);
  CHECK(refused.get().code() == oip::errc::unavailable);
  CHECK(stream->wait_for_end().code() == oip::errc::unavailable);
  CHECK(stream->responses() > 0);
}

TEST_CASE("generate_stream's events waiting for the transport count against the memory budget") {
  std::promise<void> sent;
  auto three = std::make_shared<decoupled_model>("three", [&sent](oip::inference_call call) {
    for (std::int32_t i = 0; i < 3; ++i) REQUIRE(call.send(count_output(i)).ok());
    sent.set_value();
    call.finish();
  });
  oip::testing::served s{{three}};
  oip::http_handler handler{s.service};
  std::promise<oip::http_response> replied;
  oip::http_request request;
  request.method = "POST";
  request.target = "/v2/models/three/generate_stream";
  request.body = oip::buffer::from_string(R"({"N":1})");
  handler.handle(std::move(request),
                 [&replied](oip::http_response r) { replied.set_value(std::move(r)); }, {});
  oip::http_response reply = replied.get_future().get();
  REQUIRE(reply.stream != nullptr);
  sent.get_future().wait();
  // No transport has taken an event yet: the three wait, counted.
  const std::string event = R"(data: {"I":1,"model_name":"three","model_version":"1"})"
                            "\n\n";
  CHECK(oip::testing::wait_until([&] { return s.service.memory().held() >= 3 * event.size(); }));
  const std::string rest = reply.stream->read_all();
  CHECK(rest.find(event) != std::string::npos);
  CHECK(oip::testing::wait_until([&] { return s.service.memory().held() == 0; }));
}

TEST_CASE("generate_stream sends an event per response, and an error mid-stream as an event") {
  auto failing = std::make_shared<decoupled_model>("failing_later", [](oip::inference_call call) {
    REQUIRE(call.send(count_output(1)).ok());
    REQUIRE(call.send(count_output(2)).ok());
    call.finish(oip::status{oip::errc::internal, "the engine stopped"});
  });
  oip::testing::served s{{failing}};
  oip::http_handler handler{s.service};
  oip::in_process_client client{handler};
  const oip::http_response reply =
      client.send("POST", "/v2/models/failing_later/generate_stream", R"({"N":1})");
  CHECK(reply.status == 200);
  CHECK(reply.header("Content-Type") == "text/event-stream; charset=utf-8");
  CHECK(reply.body() ==
        "data: {\"I\":1,\"model_name\":\"failing_later\",\"model_version\":\"1\"}\n\n"
        "data: {\"I\":2,\"model_name\":\"failing_later\",\"model_version\":\"1\"}\n\n"
        "data: {\"error\":\"the engine stopped\"}\n\n");
  // Unary generate: one response only.
  const oip::http_response one =
      client.send("POST", "/v2/models/failing_later/generate", R"({"N":1})");
  CHECK(one.status == 500);  // the model's own error ends it before the count is judged
}
