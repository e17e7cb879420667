// The model repository and the executor: versions, readiness, draining on unload, and many
// threads inferring while a model is unloaded and reloaded (run under the asan and tsan presets).

#include "serving_support.hpp"

#include <oip/executor.hpp>
#include <oip/http_handler.hpp>
#include <oip/in_process_client.hpp>
#include <oip/repository.hpp>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

namespace {

class flaky : public oip::model {
 public:
  explicit flaky(std::string name) { config_.name = std::move(name); }
  [[nodiscard]] const oip::model_config& config() const noexcept override { return config_; }
  [[nodiscard]] bool ready() const noexcept override { return is_ready.load(); }
  void execute(oip::inference_call call) override { call.finish(oip::model_output{}); }
  std::atomic<bool> is_ready{true};

 private:
  oip::model_config config_;
};

// Adds a model "m" that only the repository holds, and a watch on it.
std::weak_ptr<flaky> add_watched(oip::model_repository& repository) {
  auto m = std::make_shared<flaky>("m");
  std::weak_ptr<flaky> watch = m;
  REQUIRE(repository.add(std::move(m)).ok());
  return watch;
}

}  // namespace

TEST_CASE("versions: latest ready by default, a specific one on request") {
  oip::model_repository repository;
  auto v1 = std::make_shared<flaky>("m");
  auto v3 = std::make_shared<flaky>("m");
  REQUIRE(repository.add(v1, 1).ok());
  REQUIRE(repository.add(v3, 3).ok());
  CHECK(repository.versions("m") == std::vector<std::uint64_t>{1, 3});
  CHECK(repository.acquire("m", std::nullopt)->version() == 3);
  CHECK(repository.acquire("m", 1)->version() == 1);
  CHECK(repository.acquire("m", 2).error().code() == oip::errc::not_found);
  CHECK(repository.add(std::make_shared<flaky>("m"), 3).code() == oip::errc::invalid_argument);
  CHECK(repository.add(std::make_shared<flaky>("m"), 0).code() == oip::errc::invalid_argument);
  oip::model_config ensemble;
  ensemble.name = "pipeline";
  ensemble.platform = "ensemble";  // Triton's tools would read its missing ensemble_scheduling
  const oip::status refused =
      repository.add(oip::make_model(ensemble, [](const oip::inference_request&) {
        return oip::result<oip::model_output>{oip::model_output{}};
      }));
  CHECK(refused.code() == oip::errc::invalid_argument);
  CHECK(refused.message().find("platform 'ensemble'") != std::string::npos);
  oip::model_config sequences = oip::testing::simple_config();
  sequences.name = "no_room";
  sequences.sequence_batching = true;
  sequences.sequence.max_active = 0;  // every START would be refused
  const oip::status no_room =
      repository.add(oip::make_model(sequences, [](const oip::inference_request&) {
        return oip::result<oip::model_output>{oip::model_output{}};
      }));
  CHECK(no_room.code() == oip::errc::invalid_argument);
  CHECK(no_room.message().find("sequence settings") != std::string::npos);

  v3->is_ready = false;  // the latest that can serve is version 1 now
  CHECK(repository.acquire("m", std::nullopt)->version() == 1);
  CHECK(repository.acquire("m", 3).error().code() == oip::errc::unavailable);
  CHECK(repository.find("m", 3).ok());  // metadata still served
  CHECK_FALSE(repository.all_ready());
  const std::vector<oip::model_index_entry> index = repository.index();
  REQUIRE(index.size() == 2);
  CHECK(index[1].state == "UNAVAILABLE");
}

TEST_CASE("unloading drains: in-flight requests finish, new ones get 503, then 404") {
  oip::model_repository repository;
  const std::weak_ptr<flaky> watch = add_watched(repository);
  oip::result<oip::model_lease> held = repository.acquire("m", std::nullopt);
  REQUIRE(held.ok());
  REQUIRE(repository.remove("m").ok());
  CHECK(repository.acquire("m", std::nullopt).error().code() == oip::errc::unavailable);
  CHECK(repository.index().at(0).state == "UNLOADING");
  CHECK_FALSE(repository.wait_removed("m", std::chrono::milliseconds{10}));
  CHECK(watch.lock() != nullptr);  // still alive for the request that holds it
  *held = oip::model_lease{};      // the request finishes
  CHECK(repository.wait_removed("m", std::chrono::seconds{1}));
  CHECK(repository.acquire("m", std::nullopt).error().code() == oip::errc::not_found);
  CHECK(watch.expired());
  CHECK(repository.remove("m").code() == oip::errc::not_found);
}

TEST_CASE("replacing a model: new requests get the new one, held ones finish on the old") {
  oip::model_repository repository;
  const std::weak_ptr<flaky> old_model = add_watched(repository);
  oip::result<oip::model_lease> held = repository.acquire("m", std::nullopt);
  REQUIRE(held.ok());
  auto fresh = std::make_shared<flaky>("m");
  REQUIRE(repository.replace(fresh).ok());
  oip::result<oip::model_lease> next = repository.acquire("m", std::nullopt);
  REQUIRE(next.ok());
  CHECK(&next->get() == fresh.get());
  CHECK(&held->get() == old_model.lock().get());  // the request in flight keeps its model
  *held = oip::model_lease{};
  CHECK(old_model.expired());  // released with its last request
  CHECK(repository.versions("m") == std::vector<std::uint64_t>{1});
  CHECK(repository.replace(std::make_shared<flaky>("other")).ok());  // nothing to replace: added
  CHECK(repository.acquire("other", std::nullopt).ok());
  CHECK(repository.replace(nullptr).code() == oip::errc::invalid_argument);
}

TEST_CASE("the executor runs every queued job before it stops, and refuses past its capacity") {
  std::atomic<int> ran{0};
  {
    oip::executor workers{{2, 1000}};
    CHECK(workers.threads() == 2);
    for (int i = 0; i < 500; ++i) REQUIRE(workers.submit([&] { ran.fetch_add(1); }).ok());
  }
  CHECK(ran.load() == 500);

  std::atomic<bool> release{false};
  oip::executor one{{1, 2}};
  REQUIRE(one.submit([&] {
               while (!release.load()) std::this_thread::yield();
             })
              .ok());
  while (one.queued() != 0) std::this_thread::yield();  // the worker holds the first job
  CHECK(one.submit([] {}).ok());
  CHECK(one.submit([] {}).ok());
  const oip::status full = one.submit([] {});
  CHECK(full.code() == oip::errc::unavailable);
  CHECK(full.http_status() == 503);
  release = true;
}

TEST_CASE("many threads infer while the model is unloaded and reloaded") {
  oip::model_repository repository;
  REQUIRE(repository.add(oip::testing::make_simple()).ok());
  oip::executor workers{{2, 4096}};
  oip::http_handler handler{repository, workers};
  const std::string body =
      R"({"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"INT32","data":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]},)"
      R"({"name":"INPUT1","shape":[1,16],"datatype":"INT32","data":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}]})";

  std::atomic<bool> stop{false};
  std::atomic<int> ok{0};
  std::atomic<int> unavailable{0};
  std::atomic<int> unexpected{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < 4; ++t) {
    clients.emplace_back([&] {
      oip::in_process_client client{handler};
      while (!stop.load()) {
        const int status = client.send("POST", "/v2/models/simple/infer", body).status;
        if (status == 200) {
          ok.fetch_add(1);
        } else if (status == 503 || status == 404) {
          unavailable.fetch_add(1);
        } else {
          unexpected.fetch_add(1);
        }
      }
    });
  }
  for (int round = 0; round < 20; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds{2});
    REQUIRE(repository.remove("simple").ok());
    REQUIRE(repository.wait_removed("simple", std::chrono::seconds{10}));
    REQUIRE(repository.add(oip::testing::make_simple()).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds{2});
    REQUIRE(repository.replace(oip::testing::make_simple()).ok());  // a reload under load
  }
  std::this_thread::sleep_for(std::chrono::milliseconds{5});
  stop = true;
  for (std::thread& t : clients) t.join();
  CHECK(ok.load() > 0);
  CHECK(unexpected.load() == 0);
  MESSAGE("ok ", ok.load(), ", unavailable ", unavailable.load());
}

TEST_CASE("a success's figures are recorded together: a reading never sees part of them") {
  oip::model_statistics stats;
  std::atomic<bool> stop{false};
  std::vector<std::thread> writers;
  for (int t = 0; t < 2; ++t) {
    writers.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
        stats.add_success({1, 2, 3, 4, 10}, 2, 7);
        stats.add_execution(2, {1, 2, 3, 4});
      }
    });
  }
  int torn = 0;
  std::uint64_t last = 0;
  // Reads until the writers have recorded plenty (on a busy machine they may start late).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{20};
  for (int i = 0; (i < 20'000 || last < 10'000) && std::chrono::steady_clock::now() < deadline;
       ++i) {
    const oip::model_statistics::figures f = stats.read();
    const std::uint64_t n = f.success.count;
    std::uint64_t bucketed = 0;
    for (const std::uint64_t bucket : f.latency_buckets) bucketed += bucket;
    const std::uint64_t executions = f.batches.empty() ? 0 : f.batches.at(2).count;
    if (f.queue.count != n || f.compute_input.count != n || f.compute_infer.count != n ||
        f.compute_output.count != n || bucketed != n || f.compute_infer.ns != 3 * n ||
        f.inference_count != 2 * n || f.execution_count != executions) {
      ++torn;
    }
    last = n;
  }
  stop = true;
  for (std::thread& t : writers) t.join();
  CHECK(torn == 0);
  CHECK(last > 0);
}

TEST_CASE("a latency is bucketed by its nanoseconds, and failures by their reason") {
  oip::model_statistics stats;
  stats.add_success({.total_ns = 100'000}, 1, 0);  // on the first bound: its bucket
  stats.add_success({.total_ns = 100'001}, 1, 0);  // a nanosecond above: the next
  stats.add_failure(5, oip::failure_reason::canceled);
  stats.add_failure(7, oip::failure_reason::backend);
  stats.add_failure(9, oip::failure_reason::backend);
  const oip::model_statistics::figures f = stats.read();
  CHECK(f.latency_buckets[0] == 1);
  CHECK(f.latency_buckets[1] == 1);
  CHECK(f.fail.count == 3);
  CHECK(f.fail.ns == 21);
  CHECK(f.failures[static_cast<std::size_t>(oip::failure_reason::canceled)] == 1);
  CHECK(f.failures[static_cast<std::size_t>(oip::failure_reason::backend)] == 2);
  CHECK(f.failures[static_cast<std::size_t>(oip::failure_reason::rejected)] == 0);
}

TEST_CASE("statistics read while requests complete agree on their compute counts") {
  oip::model_repository repository;
  REQUIRE(repository.add(oip::testing::make_simple()).ok());
  oip::executor workers{{2, 4096}};
  oip::inference_service service{repository, workers};
  oip::http_handler handler{service};
  const std::string body =
      R"({"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"INT32","data":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]},)"
      R"({"name":"INPUT1","shape":[1,16],"datatype":"INT32","data":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}]})";
  std::atomic<bool> stop{false};
  std::atomic<int> failed{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < 2; ++t) {
    clients.emplace_back([&] {
      oip::in_process_client client{handler};
      while (!stop.load()) {
        if (client.send("POST", "/v2/models/simple/infer", body).status != 200) ++failed;
      }
    });
  }
  int disagreements = 0;
  std::uint64_t last = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{20};
  for (int i = 0; (i < 2'000 || last < 1'000) && std::chrono::steady_clock::now() < deadline; ++i) {
    const auto snapshots = service.statistics("simple", std::nullopt);
    REQUIRE(snapshots);
    const oip::statistics_snapshot& s = snapshots->front();
    if (s.compute_input.count != s.success.count || s.compute_infer.count != s.success.count ||
        s.compute_output.count != s.success.count || s.queue.count != s.success.count) {
      ++disagreements;
    }
    last = s.success.count;
  }
  stop = true;
  for (std::thread& t : clients) t.join();
  CHECK(disagreements == 0);
  CHECK(last > 0);
  CHECK(failed.load() == 0);
}

TEST_CASE("model names: what a name may hold, checked by every member that takes one") {
  for (const std::string& good :
       {std::string{"simple"}, std::string{"a.b-c_d e"}, std::string{"..."},
        std::string{"mod\u00e8le"}, std::string(255, 'm')}) {
    CAPTURE(good);
    CHECK(oip::check_model_name(good).ok());
  }
  for (const std::string& bad :
       {std::string{}, std::string{"."}, std::string{".."}, std::string{"a/b"}, std::string{"/"},
        std::string{"a\\b"}, std::string("a\0b", 3), std::string{"a\tb"}, std::string{"a\x7f"},
        std::string(256, 'm')}) {
    CAPTURE(bad);
    const oip::status s = oip::check_model_name(bad);
    CHECK(s.code() == oip::errc::invalid_argument);
    CHECK(s.message() ==  // one wording, which does not repeat the name
          "invalid model name: a model name is 1 to 255 bytes, not '.' or '..', without '/', "
          "'\\', NUL or other control characters");
  }
  oip::model_repository repository;
  oip::model_config config = oip::testing::simple_config();
  config.name = "../simple";
  CHECK(repository.add(oip::testing::make_simple(config)).code() == oip::errc::invalid_argument);
  CHECK(repository.acquire("..", std::nullopt).error().code() == oip::errc::invalid_argument);
  CHECK(repository.find("a/b", std::nullopt).error().code() == oip::errc::invalid_argument);
  CHECK(repository.remove("a\nb").code() == oip::errc::invalid_argument);
  CHECK(repository.acquire("simple", std::nullopt).error().code() == oip::errc::not_found);
}
