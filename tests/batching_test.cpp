#include "wait.hpp"

#include <oip/classification.hpp>
#include <oip/http_handler.hpp>
#include <oip/inference_service.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

using namespace std::chrono_literals;

namespace {

// IN FP32 [-1] and TAG BYTES [1] per row → OUT = 2 × IN (times IN's parameter `scale`, if
// given), TAG echoed; records each execution's batch size, and can hold executions until
// released.
class doubler : public oip::model {
 public:
  explicit doubler(oip::model_config::batching_settings settings, bool wrong_rows = false)
      : wrong_rows_{wrong_rows} {
    config_.name = "doubler";
    config_.max_batch_size = 8;
    config_.inputs = {{"IN", oip::datatype::fp32, {-1}, {}},
                      {"TAG", oip::datatype::bytes, {1}, {}}};
    config_.outputs = {{"OUT", oip::datatype::fp32, {-1}, {}},
                       {"TAG", oip::datatype::bytes, {1}, {}}};
    config_.dynamic_batching = true;
    config_.batching = settings;
  }
  [[nodiscard]] const oip::model_config& config() const noexcept override { return config_; }

  void execute(oip::inference_call call) override {
    entered.fetch_add(1);
    {
      std::unique_lock lock{mutex_};
      released_.wait(lock, [&] { return open_; });
      batches.push_back(call.request().inputs[0].shape()[0]);
      first_tags.emplace_back(*call.request().inputs[1].strings().begin());
      request_parameters.push_back(call.request().parameters);
    }
    const oip::tensor& in = call.request().inputs[0];
    const auto* scale = in.parameters().get<std::int64_t>("scale");
    const float factor = 2.0F * static_cast<float>(scale != nullptr ? *scale : 1);
    std::vector<float> out(in.element_count());
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = factor * in.at<float>(i);
    oip::shape_type shape = in.shape();
    if (wrong_rows_) {  // one row too many
      shape[0] += 1;
      out.resize(out.size() + static_cast<std::size_t>(shape[1]));
    }
    const oip::tensor& tags = call.request().inputs[1];
    oip::model_output result;
    oip::tensor doubled = *oip::tensor::from_values<float>("OUT", shape, out);
    // Asked for OUT's classification, it classifies the batch itself, as a GPU model does.
    const std::vector<oip::requested_output>& asked = call.request().outputs;
    const auto* classes =
        asked.empty() ? nullptr : asked[0].parameters.get<std::int64_t>("classification");
    if (classes != nullptr) {
      result.classified.push_back(*oip::classify(doubled, static_cast<std::size_t>(*classes),
                                                 oip::classification_rows::batch_rows));
    } else {
      result.outputs.push_back(std::move(doubled));
    }
    result.outputs.push_back(*oip::tensor::make("TAG", tags.type(), tags.shape(), tags.data()));
    call.finish(std::move(result));
  }

  std::atomic<int> entered{0};  // executions started

  void hold() {
    const std::lock_guard lock{mutex_};
    open_ = false;
  }
  void release() {
    {
      const std::lock_guard lock{mutex_};
      open_ = true;
    }
    released_.notify_all();
  }

  std::vector<std::int64_t> batches;                // read after the requests finished
  std::vector<std::string> first_tags;              // each batch's first TAG, in the order they ran
  std::vector<oip::parameters> request_parameters;  // each batch's
  std::mutex mutex_;

 private:
  oip::model_config config_;
  bool wrong_rows_;
  std::condition_variable released_;
  bool open_ = true;
};

struct service_fixture {
  explicit service_fixture(std::shared_ptr<doubler> m) : model{std::move(m)} {
    REQUIRE(models.add(model).ok());
  }
  std::shared_ptr<doubler> model;
  oip::model_repository models;
  oip::executor workers{oip::executor_options{4, 1024}};
  oip::inference_service service{models, workers};

  // Sends rows × width values (row r of request `tag` holds tag*1000 + r*width + column).
  // With `classes`, asks for OUT's classification and for TAG; `reordered` lists them the other
  // way round, TAG sent binary (what the model is asked is the same).
  std::future<oip::result<oip::inference_response>> send(
      int tag, std::int64_t rows, std::int64_t width, std::int64_t classes = 0,
      bool reordered = false, std::optional<std::uint64_t> version = std::nullopt,
      std::optional<std::int64_t> scale = std::nullopt) {
    oip::inference_request r = make_request(tag, rows, width);
    if (classes > 0) {
      r.outputs.push_back({"OUT", {}});
      r.outputs.back().parameters.set("classification", classes);
      r.outputs.push_back({"TAG", {}});
      if (reordered) {
        r.outputs.back().parameters.set("binary_data", true);
        std::swap(r.outputs.front(), r.outputs.back());
      }
    }
    if (scale) r.inputs.front().parameters().set("scale", *scale);
    return submit(std::move(r), version);
  }

  // Sends request `tag` (rows × 2 values) with these request parameters.
  std::future<oip::result<oip::inference_response>> send_with(int tag, std::int64_t rows,
                                                              oip::parameters given) {
    oip::inference_request r = make_request(tag, rows, 2);
    r.parameters = std::move(given);
    return submit(std::move(r));
  }

  static oip::inference_request make_request(int tag, std::int64_t rows, std::int64_t width) {
    oip::inference_request r;
    r.id = std::to_string(tag);
    std::vector<float> values(static_cast<std::size_t>(rows * width));
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(tag * 1000 + i);
    r.inputs.push_back(*oip::tensor::from_values<float>("IN", {rows, width}, values));
    std::vector<std::string> tags(static_cast<std::size_t>(rows));
    for (std::int64_t i = 0; i < rows; ++i) tags[i] = fmt_tag(tag, i);
    std::vector<std::string_view> views(tags.begin(), tags.end());
    r.inputs.push_back(*oip::tensor::from_strings("TAG", {rows, 1}, views));
    return r;
  }

  std::future<oip::result<oip::inference_response>> submit(
      oip::inference_request r, std::optional<std::uint64_t> version = std::nullopt) {
    auto promise = std::make_shared<std::promise<oip::result<oip::inference_response>>>();
    auto future = promise->get_future();
    service.infer({.model = "doubler", .version = version, .cancel = {}}, std::move(r),
                  oip::reply_to([promise](oip::result<oip::inference_response> response) {
                    promise->set_value(std::move(response));
                  }));
    return future;
  }

  static std::string fmt_tag(int tag, std::int64_t row) {
    return "request " + std::to_string(tag) + " row " + std::to_string(row);
  }

  // Checks that a response holds exactly its own request's rows.
  static void check_own_rows(const oip::inference_response& response, int tag, std::int64_t rows,
                             std::int64_t width) {
    REQUIRE(response.outputs.size() == 2);
    const oip::tensor& out = response.outputs[0];
    CHECK(out.shape() == oip::shape_type{rows, width});
    for (std::size_t i = 0; i < out.element_count(); ++i) {
      CHECK(out.at<float>(i) == 2 * static_cast<float>(tag * 1000 + i));
    }
    std::int64_t row = 0;
    for (std::string_view t : response.outputs[1].strings()) CHECK(t == fmt_tag(tag, row++));
    CHECK(row == rows);
  }
};

}  // namespace

TEST_CASE("concurrent requests of random shapes are merged and split back exactly") {
  service_fixture f{std::make_shared<doubler>(oip::model_config::batching_settings{2ms, 1024, 1})};
  std::mt19937 rng{5};
  std::uniform_int_distribution<std::int64_t> rows{1, 3};
  std::uniform_int_distribution<std::int64_t> width{2, 3};  // two widths: two kinds of batch
  struct sent {
    int tag;
    std::int64_t rows;
    std::int64_t width;
    std::future<oip::result<oip::inference_response>> reply;
  };
  std::vector<sent> all;
  std::mutex mutex;
  std::vector<std::thread> clients;
  for (int c = 0; c < 4; ++c) {
    std::vector<std::pair<std::int64_t, std::int64_t>> shapes;
    for (int i = 0; i < 50; ++i) shapes.emplace_back(rows(rng), width(rng));
    clients.emplace_back([&, c, shapes] {
      for (int i = 0; i < 50; ++i) {
        const int tag = c * 100 + i;
        auto reply = f.send(tag, shapes[i].first, shapes[i].second);
        const std::lock_guard lock{mutex};
        all.push_back({tag, shapes[i].first, shapes[i].second, std::move(reply)});
      }
    });
  }
  for (std::thread& t : clients) t.join();
  std::int64_t total_rows = 0;
  for (sent& s : all) {
    oip::result<oip::inference_response> r = s.reply.get();
    REQUIRE(r);
    CHECK(r->id == std::to_string(s.tag));
    service_fixture::check_own_rows(*r, s.tag, s.rows, s.width);
    total_rows += s.rows;
  }
  std::int64_t executed_rows = 0;
  for (std::int64_t b : f.model->batches) {
    CHECK(b <= 8);
    executed_rows += b;
  }
  CHECK(executed_rows == total_rows);
  CHECK(f.model->batches.size() < all.size());  // some requests shared an execution
  const std::vector<oip::statistics_snapshot> stats = *f.service.statistics("doubler", {});
  CHECK(stats[0].inference_count == static_cast<std::uint64_t>(total_rows));
  CHECK(stats[0].execution_count == f.model->batches.size());
  CHECK(stats[0].success.count == all.size());
  // batch_stats: one entry per batch size the model ran, counting its executions.
  std::map<std::uint64_t, std::uint64_t> executions;
  for (std::int64_t b : f.model->batches) ++executions[static_cast<std::uint64_t>(b)];
  REQUIRE(stats[0].batches.size() == executions.size());
  for (const auto& [size, took] : stats[0].batches) {
    CAPTURE(size);
    CHECK(took.count == executions[size]);
    CHECK(took.compute_infer_ns > 0);
  }
}

TEST_CASE("a batch's own classification is split back per request; other outputs batch apart") {
  service_fixture f{std::make_shared<doubler>(oip::model_config::batching_settings{2ms, 1024, 1})};
  f.model->hold();
  auto first = f.send(0, 1, 4, 2);  // runs alone, held
  while (f.model->entered.load() == 0) std::this_thread::sleep_for(1ms);
  std::vector<std::future<oip::result<oip::inference_response>>> classified;
  for (int tag = 1; tag <= 3; ++tag) classified.push_back(f.send(tag, 2, 4, 2, tag == 3));
  auto plain = f.send(4, 1, 4);
  f.model->release();
  REQUIRE(first.get());
  for (int tag = 1; tag <= 3; ++tag) {
    oip::result<oip::inference_response> r = classified[static_cast<std::size_t>(tag - 1)].get();
    REQUIRE(r);
    REQUIRE(r->outputs.size() == 2);
    const oip::tensor& classes = r->outputs[tag == 3 ? 1 : 0];
    CHECK(classes.shape() == oip::shape_type{2, 2});
    // Each row's top two of 2 × (tag*1000 + i): its last two columns, as "<value>:<index>".
    std::vector<std::string> got;
    for (std::string_view e : classes.strings()) got.emplace_back(e);
    const auto value = [&](int i) { return std::to_string(2 * (tag * 1000 + i)); };
    CHECK(got == std::vector<std::string>{value(3) + ":3", value(2) + ":2", value(7) + ":3",
                                          value(6) + ":2"});
  }
  oip::result<oip::inference_response> alone = plain.get();
  REQUIRE(alone);
  service_fixture::check_own_rows(*alone, 4, 1, 4);
  // The three that asked the same outputs ran as one batch (the order and the binary flag aside);
  // the plain one on its own.
  const std::lock_guard lock{f.model->mutex_};
  CHECK(f.model->batches == std::vector<std::int64_t>{1, 6, 1});
}

TEST_CASE("a lone request waits at most the queue delay; a full batch runs at once") {
  service_fixture f{
      std::make_shared<doubler>(oip::model_config::batching_settings{150ms, 1024, 1})};
  const auto began = std::chrono::steady_clock::now();
  REQUIRE(f.send(1, 1, 2).get());
  const auto waited = std::chrono::steady_clock::now() - began;
  CHECK(waited >= 140ms);
  CHECK(waited < 5s);

  const auto full_began = std::chrono::steady_clock::now();
  std::vector<std::future<oip::result<oip::inference_response>>> replies;
  for (int i = 0; i < 4; ++i) replies.push_back(f.send(10 + i, 2, 2));  // 8 rows: full
  for (auto& r : replies) REQUIRE(r.get());
  CHECK(std::chrono::steady_clock::now() - full_began < 140ms);
  const std::lock_guard lock{f.model->mutex_};
  CHECK(f.model->batches.back() == 8);
}

TEST_CASE("a batch of a preferred size runs at once, without waiting for the delay") {
  service_fixture f{
      std::make_shared<doubler>(oip::model_config::batching_settings{10s, 1024, 1, {6}})};
  const auto began = std::chrono::steady_clock::now();
  std::vector<std::future<oip::result<oip::inference_response>>> replies;
  for (int i = 0; i < 3; ++i) replies.push_back(f.send(20 + i, 2, 2));  // 2 + 2 + 2 rows
  for (auto& r : replies) REQUIRE(r.get());
  CHECK(std::chrono::steady_clock::now() - began < 5s);  // not the 10 s delay
  const std::lock_guard lock{f.model->mutex_};
  CHECK(f.model->batches == std::vector<std::int64_t>{6});
}

TEST_CASE("one model instance serving two versions batches each version's requests apart") {
  service_fixture f{std::make_shared<doubler>(oip::model_config::batching_settings{1s, 1024, 1})};
  REQUIRE(f.models.add(f.model, 2).ok());  // the same instance as version 2 too
  auto first = f.send(1, 2, 2, 0, false, 1);
  auto second = f.send(2, 2, 2, 0, false, 2);
  auto third = f.send(3, 2, 2, 0, false, 1);
  for (auto* reply : {&first, &second, &third}) {
    const oip::result<oip::inference_response> r = reply->get();
    REQUIRE(r);
    CHECK(r->model_version == (reply == &second ? "2" : "1"));
  }
  const std::lock_guard lock{f.model->mutex_};
  CHECK(f.model->batches.size() >= 2);  // never one batch of the three
  CHECK(std::find(f.model->batches.begin(), f.model->batches.end(), 6) == f.model->batches.end());
}

TEST_CASE("inputs whose parameters differ for the model batch apart; the model sees each one's") {
  // A preferred batch of 4 rows would take both requests at once; their IN's `scale` differs, so
  // each waits out the delay alone and runs with its own. A transport's parameter (how an
  // output travels) keeps no requests apart: the classification case above.
  service_fixture f{
      std::make_shared<doubler>(oip::model_config::batching_settings{300ms, 1024, 1, {4}})};
  auto once = f.send(1, 2, 2, 0, false, std::nullopt, 1);
  auto thrice = f.send(2, 2, 2, 0, false, std::nullopt, 3);
  for (auto [reply, tag, scale] : {std::tuple{&once, 1, 1}, std::tuple{&thrice, 2, 3}}) {
    const oip::result<oip::inference_response> r = reply->get();
    REQUIRE(r);
    const oip::tensor& out = r->outputs.at(0);
    for (std::size_t i = 0; i < out.element_count(); ++i) {
      CHECK(out.at<float>(i) == static_cast<float>(2 * scale * (tag * 1000 + static_cast<int>(i))));
    }
  }
  {
    const std::lock_guard lock{f.model->mutex_};
    CHECK(f.model->batches == std::vector<std::int64_t>{2, 2});
  }
  // The same `scale` on both: one batch, whose merged input carries it.
  auto first = f.send(3, 2, 2, 0, false, std::nullopt, 3);
  auto second = f.send(4, 2, 2, 0, false, std::nullopt, 3);
  for (auto [reply, tag] : {std::pair{&first, 3}, std::pair{&second, 4}}) {
    const oip::result<oip::inference_response> r = reply->get();
    REQUIRE(r);
    const oip::tensor& out = r->outputs.at(0);
    for (std::size_t i = 0; i < out.element_count(); ++i) {
      CHECK(out.at<float>(i) == static_cast<float>(6 * (tag * 1000 + static_cast<int>(i))));
    }
  }
  const std::lock_guard lock{f.model->mutex_};
  CHECK(f.model->batches == std::vector<std::int64_t>{2, 2, 4});
}

TEST_CASE("a queue delay past any deadline waits for a full batch") {
  service_fixture f{std::make_shared<doubler>(
      oip::model_config::batching_settings{std::chrono::microseconds::max(), 1024, 1, {4}})};
  auto first = f.send(1, 2, 2);
  std::this_thread::sleep_for(300ms);
  CHECK(f.model->entered.load() == 0);  // waiting for a fuller batch, not run at once
  auto second = f.send(2, 2, 2);
  REQUIRE(first.get());
  REQUIRE(second.get());
  const std::lock_guard lock{f.model->mutex_};
  CHECK(f.model->batches == std::vector<std::int64_t>{4});
}

namespace {

oip::parameters priority(std::int64_t level) {
  oip::parameters p;
  p.set("priority", level);
  return p;
}

std::vector<std::string> first_tags(const service_fixture& f) {
  const std::lock_guard lock{f.model->mutex_};
  return f.model->first_tags;
}

}  // namespace

TEST_CASE("priority levels: a request runs ahead of those queued at lower levels, in any batch") {
  // Three levels, the default the middle one; 8 rows make a full batch, so each request runs
  // alone.
  service_fixture f{
      std::make_shared<doubler>(oip::model_config::batching_settings{0ms, 1024, 1, {}, 3, 2})};
  f.model->hold();
  std::vector<std::future<oip::result<oip::inference_response>>> replies;
  replies.push_back(f.send(1, 8, 2));
  REQUIRE(oip::testing::wait_until([&] { return f.model->entered.load() == 1; }));
  replies.push_back(f.send_with(2, 8, priority(2)));
  replies.push_back(f.send_with(8, 8, priority(3)));  // the lowest: behind all that follow
  replies.push_back(f.send_with(3, 8, {}));           // none: the default, 2
  replies.push_back(f.send_with(4, 8, priority(1)));  // ahead of 2 and 3
  replies.push_back(f.send_with(5, 8, priority(7)));  // above the levels: the default
  replies.push_back(f.send_with(6, 8, priority(1)));  // behind 4, ahead of the rest
  replies.push_back(f.send_with(7, 8, priority(0)));  // 0: the default
  f.model->release();
  for (auto& r : replies) REQUIRE(r.get());
  CHECK(first_tags(f) == std::vector<std::string>{"request 1 row 0", "request 4 row 0",
                                                  "request 6 row 0", "request 2 row 0",
                                                  "request 3 row 0", "request 5 row 0",
                                                  "request 7 row 0", "request 8 row 0"});

  // Requests of both levels that can run together do, the higher level's rows first, and each
  // gets its own rows back.
  f.model->hold();
  auto running = f.send(10, 8, 2);
  REQUIRE(oip::testing::wait_until([&] { return f.model->entered.load() == 9; }));
  auto low = f.send_with(11, 2, priority(3));
  auto high = f.send_with(12, 3, priority(1));
  f.model->release();
  REQUIRE(running.get());
  const oip::result<oip::inference_response> low_reply = low.get();
  const oip::result<oip::inference_response> high_reply = high.get();
  REQUIRE(low_reply);
  REQUIRE(high_reply);
  service_fixture::check_own_rows(*low_reply, 11, 2, 2);
  service_fixture::check_own_rows(*high_reply, 12, 3, 2);
  CHECK(first_tags(f).back() == "request 12 row 0");
  const std::lock_guard lock{f.model->mutex_};
  CHECK(f.model->batches.back() == 5);
}

TEST_CASE("without priority levels, `priority` leaves requests in arrival order") {
  service_fixture f{std::make_shared<doubler>(oip::model_config::batching_settings{0ms, 1024, 1})};
  f.model->hold();
  std::vector<std::future<oip::result<oip::inference_response>>> replies;
  replies.push_back(f.send(1, 8, 2));
  REQUIRE(oip::testing::wait_until([&] { return f.model->entered.load() == 1; }));
  replies.push_back(f.send_with(2, 8, priority(2)));
  replies.push_back(f.send_with(3, 8, priority(1)));
  f.model->release();
  for (auto& r : replies) REQUIRE(r.get());
  CHECK(first_tags(f) ==
        std::vector<std::string>{"request 1 row 0", "request 2 row 0", "request 3 row 0"});
}

TEST_CASE(
    "requests that differ in how they are scheduled or sent batch together, apart from "
    "the model's own parameters") {
  service_fixture f{std::make_shared<doubler>(oip::model_config::batching_settings{0ms, 1024, 1})};
  f.model->hold();
  auto running = f.send(1, 8, 2);
  REQUIRE(oip::testing::wait_until([&] { return f.model->entered.load() == 1; }));
  oip::parameters timed;
  timed.set("timeout", std::int64_t{10'000'000});
  timed.set("priority", std::int64_t{1});
  oip::parameters binary;
  binary.set("binary_data_output", true);
  oip::parameters for_the_model;
  for_the_model.set("mode", std::string{"fast"});
  auto a = f.send_with(2, 1, std::move(timed));
  auto b = f.send_with(3, 1, std::move(binary));
  auto c = f.send_with(4, 1, {});
  auto d = f.send_with(5, 1, std::move(for_the_model));
  f.model->release();
  REQUIRE(running.get());
  for (auto* reply : {&a, &b, &c, &d}) REQUIRE(reply->get());
  const std::lock_guard lock{f.model->mutex_};
  CHECK(f.model->batches == std::vector<std::int64_t>{8, 3, 1});
  REQUIRE(f.model->request_parameters.size() == 3);
  CHECK(f.model->request_parameters[1].empty());  // the server's parameters stay the server's
  CHECK(f.model->request_parameters[2].contains("mode"));
}

TEST_CASE("a batch queue bound of 0, Triton's \"no bound\", is refused when the model is added") {
  oip::model_repository models;
  const oip::status added =
      models.add(std::make_shared<doubler>(oip::model_config::batching_settings{0ms, 0, 1}));
  CHECK(added.http_status() == 400);
  CHECK(added.message().find("a max_queue_size of 0 would refuse every request") !=
        std::string::npos);
  CHECK(models.index().empty());
}

TEST_CASE("a default priority level outside the levels is refused when the model is added") {
  for (const std::uint64_t wrong : {std::uint64_t{0}, std::uint64_t{3}}) {
    oip::model_repository models;
    const oip::status added = models.add(std::make_shared<doubler>(
        oip::model_config::batching_settings{0ms, 1024, 1, {}, 2, wrong}));
    CHECK(added.http_status() == 400);
    CHECK(added.message() == "model 'doubler': default priority level must be in range [1, 2]");
  }
}

TEST_CASE("a request whose timeout passed while it waited leaves the queue: it makes no batch") {
  // A preferred size of 2 rows and a long delay: one row alone waits.
  service_fixture f{
      std::make_shared<doubler>(oip::model_config::batching_settings{10s, 1024, 1, {2}})};
  f.model->hold();
  auto running = f.send(1, 8, 2);
  REQUIRE(oip::testing::wait_until([&] { return f.model->entered.load() == 1; }));
  oip::parameters short_timeout;
  short_timeout.set("timeout", std::int64_t{1000});  // µs
  auto expired = f.send_with(2, 1, std::move(short_timeout));
  auto waiting = f.send_with(3, 1, {});
  std::this_thread::sleep_for(20ms);
  f.model->release();
  REQUIRE(running.get());
  const oip::result<oip::inference_response> refused = expired.get();
  REQUIRE_FALSE(refused);
  CHECK(refused.error().http_status() == 503);
  CHECK(refused.error().message() == "Request timeout expired");
  // The expired request's row does not make request 3's batch the preferred size.
  CHECK(waiting.wait_for(300ms) == std::future_status::timeout);
  auto partner = f.send_with(4, 1, {});
  REQUIRE(waiting.get());
  REQUIRE(partner.get());
  const std::lock_guard lock{f.model->mutex_};
  CHECK(f.model->batches == std::vector<std::int64_t>{8, 2});
}

TEST_CASE(
    "a request whose timeout passes while it waits is answered then, not when a batch forms") {
  service_fixture f{std::make_shared<doubler>(oip::model_config::batching_settings{10s, 1024, 1})};
  oip::parameters timeout;
  timeout.set("timeout", std::int64_t{100'000});  // µs
  const auto expires_in_time = [&](std::future<oip::result<oip::inference_response>>& reply) {
    REQUIRE(reply.wait_for(5s) == std::future_status::ready);  // not the 10 s delay
    const oip::result<oip::inference_response> refused = reply.get();
    REQUIRE_FALSE(refused);
    CHECK(refused.error().message() == "Request timeout expired");
  };
  // Alone, its batch would wait 10 s for more.
  auto lone = f.send_with(1, 1, timeout);
  expires_in_time(lone);
  // Behind a batch that holds the only instance.
  f.model->hold();
  auto running = f.send(2, 8, 2);
  REQUIRE(oip::testing::wait_until([&] { return f.model->entered.load() == 1; }));
  auto behind = f.send_with(3, 1, timeout);
  expires_in_time(behind);
  f.model->release();
  REQUIRE(running.get());
}

namespace {

oip::parameters timeout_us(std::int64_t microseconds) {
  oip::parameters p;
  p.set("timeout", microseconds);
  return p;
}

}  // namespace

TEST_CASE("a queue policy that rejects: a request waiting past its level's timeout gets a 503") {
  // Two levels: the first times out after 100 ms, the second has no timeout.
  oip::model_config::batching_settings settings{10s, 1024, 1, {}, 2, 2};
  settings.priority_queue_policy = {{1, {.default_timeout = 100ms}}};
  service_fixture f{std::make_shared<doubler>(settings)};
  f.model->hold();
  auto running = f.send(1, 8, 2);
  REQUIRE(oip::testing::wait_until([&] { return f.model->entered.load() == 1; }));
  auto urgent = f.send_with(2, 8, priority(1));
  auto patient = f.send_with(3, 8, priority(2));
  // Answered when its timeout passes, while the only instance is still busy.
  REQUIRE(urgent.wait_for(5s) == std::future_status::ready);
  const oip::result<oip::inference_response> refused = urgent.get();
  REQUIRE_FALSE(refused);
  CHECK(refused.error().http_status() == 503);
  CHECK(refused.error().message() == "Request timeout expired");  // Triton's words
  CHECK(patient.wait_for(200ms) == std::future_status::timeout);
  f.model->release();
  REQUIRE(running.get());
  REQUIRE(patient.get());
  CHECK(first_tags(f) == std::vector<std::string>{"request 1 row 0", "request 3 row 0"});
}

TEST_CASE(
    "a queue policy that delays: a request past its timeout runs after the rest of its level") {
  // One level whose policy delays after 10 s, or after a request's own shorter timeout.
  oip::model_config::batching_settings settings{0ms, 1024, 1};
  settings.default_queue_policy = {oip::queue_policy::timeout_action::delay, 10s, true, 0};
  service_fixture f{std::make_shared<doubler>(settings)};
  f.model->hold();
  std::vector<std::future<oip::result<oip::inference_response>>> replies;
  replies.push_back(f.send(1, 8, 2));
  REQUIRE(oip::testing::wait_until([&] { return f.model->entered.load() == 1; }));
  replies.push_back(f.send_with(2, 8, timeout_us(1000)));  // delayed after 1 ms
  replies.push_back(f.send_with(3, 8, {}));
  std::this_thread::sleep_for(50ms);
  replies.push_back(f.send_with(4, 8, timeout_us(20'000'000)));  // longer than the default: 10 s
  replies.push_back(f.send_with(5, 8, {}));
  f.model->release();
  // The request whose timeout passed is not refused: the policy delays it.
  for (auto& r : replies) REQUIRE(r.get());
  CHECK(first_tags(f) == std::vector<std::string>{"request 1 row 0", "request 3 row 0",
                                                  "request 4 row 0", "request 5 row 0",
                                                  "request 2 row 0"});

  // Without the override, a request's timeout does nothing under this policy.
  settings.default_queue_policy.allow_timeout_override = false;
  service_fixture g{std::make_shared<doubler>(settings)};
  g.model->hold();
  auto running = g.send(1, 8, 2);
  REQUIRE(oip::testing::wait_until([&] { return g.model->entered.load() == 1; }));
  auto timed = g.send_with(2, 8, timeout_us(1000));
  auto next = g.send_with(3, 8, {});
  std::this_thread::sleep_for(50ms);
  g.model->release();
  REQUIRE(running.get());
  REQUIRE(timed.get());
  REQUIRE(next.get());
  CHECK(first_tags(g) ==
        std::vector<std::string>{"request 1 row 0", "request 2 row 0", "request 3 row 0"});
}

TEST_CASE("a level's delayed requests stay ahead of lower levels") {
  oip::model_config::batching_settings settings{0ms, 1024, 1, {}, 2, 2};
  // Only request 3 times out: by its own timeout, shorter than the level's.
  settings.priority_queue_policy = {{1, {oip::queue_policy::timeout_action::delay, 10s, true, 0}}};
  service_fixture f{std::make_shared<doubler>(settings)};
  f.model->hold();
  std::vector<std::future<oip::result<oip::inference_response>>> replies;
  replies.push_back(f.send(1, 8, 2));
  REQUIRE(oip::testing::wait_until([&] { return f.model->entered.load() == 1; }));
  replies.push_back(f.send_with(2, 8, priority(2)));
  oip::parameters short_timeout = priority(1);
  short_timeout.set("timeout", std::int64_t{1000});
  replies.push_back(f.send_with(3, 8, std::move(short_timeout)));  // delayed after 1 ms
  std::this_thread::sleep_for(50ms);
  replies.push_back(f.send_with(4, 8, priority(1)));
  f.model->release();
  for (auto& r : replies) REQUIRE(r.get());
  CHECK(first_tags(f) == std::vector<std::string>{"request 1 row 0", "request 4 row 0",
                                                  "request 3 row 0", "request 2 row 0"});
}

TEST_CASE("a level's queue bound: one more request at that level is a 503, others still queue") {
  oip::model_config::batching_settings settings{0ms, 1024, 1, {}, 2, 2};
  settings.priority_queue_policy = {{1, {.max_queue_size = 1}}};
  service_fixture f{std::make_shared<doubler>(settings)};
  f.model->hold();
  auto running = f.send(1, 8, 2);
  REQUIRE(oip::testing::wait_until([&] { return f.model->entered.load() == 1; }));
  auto first = f.send_with(2, 8, priority(1));
  const oip::result<oip::inference_response> refused = f.send_with(3, 8, priority(1)).get();
  REQUIRE_FALSE(refused);
  CHECK(refused.error().http_status() == 503);
  CHECK(refused.error().message() ==
        "Exceeds maximum queue size: the batch queue of model 'doubler' is full at priority "
        "level 1 (1 requests waiting)");
  auto lower = f.send_with(4, 8, priority(2));
  auto lower_too = f.send_with(5, 8, priority(2));
  f.model->release();
  REQUIRE(running.get());
  REQUIRE(first.get());
  REQUIRE(lower.get());
  REQUIRE(lower_too.get());
}

TEST_CASE("queue policies for levels the model does not have are refused when it is added") {
  const auto add = [](std::uint64_t levels,
                      std::vector<std::pair<std::uint64_t, oip::queue_policy>> policies) {
    oip::model_config::batching_settings settings{0ms, 1024, 1, {}, levels, levels > 0 ? 1U : 0U};
    settings.priority_queue_policy = std::move(policies);
    oip::model_repository models;
    return models.add(std::make_shared<doubler>(settings));
  };
  for (const std::uint64_t wrong : {std::uint64_t{0}, std::uint64_t{3}}) {
    const oip::status added = add(2, {{1, {}}, {wrong, {}}});
    CHECK(added.http_status() == 400);
    CHECK(added.message() ==
          "model 'doubler': priority queue policy must have priority level in range [1, 2]");
  }
  CHECK(add(0, {{1, {}}}).message() ==
        "model 'doubler': priority queue policy must have priority level in range [1, 0]");
  CHECK(add(2, {{2, {}}, {2, {}}}).message() ==
        "model 'doubler': priority level 2 has two queue policies");
  CHECK(add(2, {{2, {}}, {1, {}}}).ok());
  CHECK(add(2, {{2, {.default_timeout = -1us}}}).message() ==
        "model 'doubler': a queue policy's default timeout cannot be negative");
}

TEST_CASE("a sequence model's request keeps its timeout as a deadline under a delaying policy") {
  // Its requests go to the sequence manager, never to a batch queue whose policy could apply.
  oip::model_config config;
  config.name = "sequenced";
  config.max_batch_size = 4;
  config.inputs = {{"IN", oip::datatype::fp32, {1}, {}}};
  config.outputs = {{"OUT", oip::datatype::fp32, {1}, {}}};
  config.sequence_batching = true;
  config.dynamic_batching = true;
  config.batching.default_queue_policy = {oip::queue_policy::timeout_action::delay, 10s, true, 0};
  std::promise<void> gate;
  std::shared_future<void> open = gate.get_future().share();
  std::atomic<int> entered{0};
  oip::model_repository models;
  REQUIRE(models
              .add(oip::make_model(
                  config,
                  [&, open](const oip::inference_request& r) -> oip::result<oip::model_output> {
                    entered.fetch_add(1);
                    open.wait();
                    oip::model_output out;
                    out.outputs.push_back(*oip::tensor::make(
                        "OUT", r.inputs[0].type(), r.inputs[0].shape(), r.inputs[0].data()));
                    return out;
                  }))
              .ok());
  oip::executor workers{oip::executor_options{2, 64}};
  oip::inference_service service{models, workers};
  const auto send = [&](oip::parameters p) {
    oip::inference_request r;
    r.inputs.push_back(*oip::tensor::from_values<float>("IN", {1, 1}, std::vector<float>{1.0F}));
    r.parameters = std::move(p);
    auto promise = std::make_shared<std::promise<oip::result<oip::inference_response>>>();
    auto future = promise->get_future();
    service.infer({.model = "sequenced", .version = std::nullopt, .cancel = {}}, std::move(r),
                  oip::reply_to([promise](oip::result<oip::inference_response> response) {
                    promise->set_value(std::move(response));
                  }));
    return future;
  };
  oip::parameters first;
  first.set("sequence_id", std::int64_t{7});
  first.set("sequence_start", true);
  auto running = send(std::move(first));
  REQUIRE(oip::testing::wait_until([&] { return entered.load() == 1; }));
  oip::parameters second;
  second.set("sequence_id", std::int64_t{7});
  second.set("timeout", std::int64_t{1000});
  auto behind = send(std::move(second));
  std::this_thread::sleep_for(50ms);
  gate.set_value();
  REQUIRE(running.get());
  const oip::result<oip::inference_response> refused = behind.get();
  REQUIRE_FALSE(refused);
  CHECK(refused.error().message() == "Request timeout expired");
}

TEST_CASE("the batch queue is bounded: a 503 when it is full") {
  service_fixture f{std::make_shared<doubler>(oip::model_config::batching_settings{0ms, 2, 1})};
  f.model->hold();
  auto running = f.send(1, 8, 2);  // a full batch: taken at once, then held in the model
  // Once the model has it, the queue is empty again.
  REQUIRE(oip::testing::wait_until([&] { return f.model->entered.load() == 1; }));
  auto queued_a = f.send(2, 8, 2);
  auto queued_b = f.send(3, 8, 2);
  oip::result<oip::inference_response> refused = f.send(4, 8, 2).get();
  REQUIRE_FALSE(refused);
  CHECK(refused.error().http_status() == 503);
  CHECK(refused.error().message() ==
        "Exceeds maximum queue size: the batch queue of model 'doubler' is full (2 requests "
        "waiting)");
  f.model->release();
  CHECK(running.get());
  CHECK(queued_a.get());
  CHECK(queued_b.get());
}

TEST_CASE("a model that returns the wrong number of rows fails the whole batch with a 500") {
  service_fixture f{
      std::make_shared<doubler>(oip::model_config::batching_settings{50ms, 1024, 1}, true)};
  auto a = f.send(1, 1, 2);
  auto b = f.send(2, 1, 2);
  for (auto* reply : {&a, &b}) {
    oip::result<oip::inference_response> r = reply->get();
    REQUIRE_FALSE(r);
    CHECK(r.error().http_status() == 500);
    CHECK(r.error().message().find("for a batch of 2 rows") != std::string::npos);
  }
}

TEST_CASE("the configuration route shows the batcher, where perf_analyzer looks for it") {
  service_fixture f{std::make_shared<doubler>(oip::model_config::batching_settings{2ms, 16, 1})};
  oip::http_handler handler{f.service};
  const oip::http_response reply = handler.handle({"GET", "/v2/models/doubler/config", {}, {}});
  CHECK(reply.status == 200);
  CHECK(reply.body().find(R"("dynamic_batching":{"preferred_batch_size":[],)"
                          R"("max_queue_delay_microseconds":2000,"preserve_ordering":false,)"
                          R"("priority_levels":0,"default_priority_level":0,)"
                          R"("default_queue_policy":{"timeout_action":"REJECT",)"
                          R"("default_timeout_microseconds":0,"allow_timeout_override":false,)"
                          R"("max_queue_size":0},"priority_queue_policy":{}})") !=
        std::string::npos);

  service_fixture preferring{
      std::make_shared<doubler>(oip::model_config::batching_settings{2ms, 16, 1, {4, 8}})};
  oip::http_handler shows{preferring.service};
  CHECK(shows.handle({"GET", "/v2/models/doubler/config", {}, {}})
            .body()
            .find(R"("preferred_batch_size":[4,8],)") != std::string::npos);

  service_fixture prioritizing{
      std::make_shared<doubler>(oip::model_config::batching_settings{2ms, 16, 1, {}, 3, 2})};
  oip::http_handler levels{prioritizing.service};
  CHECK(levels.handle({"GET", "/v2/models/doubler/config", {}, {}})
            .body()
            .find(R"("priority_levels":3,"default_priority_level":2,)") != std::string::npos);

  oip::model_config::batching_settings with_policies{2ms, 16, 1, {}, 3, 2};
  with_policies.default_queue_policy = {oip::queue_policy::timeout_action::delay, 5ms, true, 7};
  with_policies.priority_queue_policy = {{3, {.max_queue_size = 2}}, {1, {.default_timeout = 1ms}}};
  service_fixture policing{std::make_shared<doubler>(with_policies)};
  oip::http_handler policies{policing.service};
  CHECK(policies.handle({"GET", "/v2/models/doubler/config", {}, {}})
            .body()
            .find(R"("default_queue_policy":{"timeout_action":"DELAY",)"
                  R"("default_timeout_microseconds":5000,"allow_timeout_override":true,)"
                  R"("max_queue_size":7},"priority_queue_policy":{)"
                  R"("3":{"timeout_action":"REJECT","default_timeout_microseconds":0,)"
                  R"("allow_timeout_override":false,"max_queue_size":2},)"
                  R"("1":{"timeout_action":"REJECT","default_timeout_microseconds":1000,)"
                  R"("allow_timeout_override":false,"max_queue_size":0}}})") != std::string::npos);
}
