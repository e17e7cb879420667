// Triton's response cache: the key, the bounded map, and a model behind oip's HTTP server whose
// repeated requests are answered without running it.

#include "serving/detail/response_cache.hpp"

#include "served.hpp"
#include "shm_object.hpp"

#include <oip/buffer.hpp>
#include <oip/executor.hpp>
#include <oip/http/client.hpp>
#include <oip/http/server.hpp>
#include <oip/http_handler.hpp>
#include <oip/model.hpp>
#include <oip/repository.hpp>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <doctest/doctest.h>

namespace {

oip::inference_request request_of(std::vector<float> values, std::string name = "IN") {
  oip::inference_request r;
  const auto rows = static_cast<std::int64_t>(values.size());
  r.inputs.push_back(*oip::tensor::from_values<float>(std::move(name), {1, rows}, values));
  return r;
}

std::string key_of(const oip::inference_request& r, std::string_view model = "m",
                   std::uint64_t version = 1) {
  const std::optional<std::size_t> length = oip::detail::cache_key_length(model, version, r);
  REQUIRE(length);
  return oip::detail::make_cache_key(model, version, r, *length).bytes;
}

oip::detail::cache_key named(std::string name) {
  oip::detail::cache_key key;
  key.hash = std::hash<std::string>{}(name);
  key.bytes = std::move(name);
  return key;
}

std::shared_ptr<oip::model> any_model() {
  oip::model_config config;
  config.name = "m";
  return oip::make_model(config,
                         [](const oip::inference_request&) -> oip::result<oip::model_output> {
                           return oip::model_output{};
                         });
}

oip::inference_response response_of(std::size_t bytes, std::string id = "") {
  oip::inference_response r;
  r.model_name = "m";
  r.id = std::move(id);
  std::vector<std::uint8_t> values(bytes, 7);
  r.outputs.push_back(
      *oip::tensor::from_values<std::uint8_t>("OUT", {static_cast<std::int64_t>(bytes)}, values));
  return r;
}

}  // namespace

TEST_CASE("two requests share a key exactly when the model would see the same") {
  const oip::inference_request base = request_of({1, 2, 3});
  CHECK(key_of(base) == key_of(request_of({1, 2, 3})));
  CHECK(key_of(base) != key_of(request_of({1, 2, 4})));  // a byte
  oip::inference_request reshaped = base;
  reshaped.inputs[0] = *oip::tensor::make("IN", oip::datatype::fp32, {3, 1}, base.inputs[0].data());
  CHECK(key_of(base) != key_of(reshaped));                      // the same bytes in another shape
  CHECK(key_of(base) != key_of(request_of({1, 2, 3}, "IN2")));  // a name
  CHECK(key_of(base) != key_of(base, "m", 2));                  // the version
  CHECK(key_of(base) != key_of(base, "n", 1));                  // the model

  oip::inference_request as_int = base;
  as_int.inputs[0] = *oip::tensor::make("IN", oip::datatype::int32, {1, 3}, base.inputs[0].data());
  CHECK(key_of(base) != key_of(as_int));  // the same bytes as another datatype

  oip::inference_request with_parameter = base;
  with_parameter.parameters.set("mode", std::string{"fast"});
  CHECK(key_of(base) != key_of(with_parameter));
  oip::inference_request with_int_parameter = base;
  with_int_parameter.parameters.set("mode", std::int64_t{1});
  CHECK(key_of(with_parameter) != key_of(with_int_parameter));

  oip::inference_request asking = base;
  asking.outputs.push_back({"OUT", {}});
  CHECK(key_of(base) != key_of(asking));
  oip::inference_request classifying = asking;
  classifying.outputs[0].parameters.set("classification", std::int64_t{3});
  CHECK(key_of(asking) != key_of(classifying));

  // How a request is scheduled, and its id, are not the model's.
  oip::inference_request scheduled = base;
  scheduled.id = "another";
  scheduled.parameters.set("priority", std::int64_t{1});
  scheduled.parameters.set("timeout", std::int64_t{1000});
  CHECK(key_of(base) == key_of(scheduled));
  // Nor is how the tensors travel.
  oip::inference_request travelling = base;
  travelling.inputs[0].parameters().set("binary_data_size", std::int64_t{12});
  travelling.parameters.set("binary_data_output", true);
  CHECK(key_of(base) == key_of(travelling));
  oip::inference_request binary_out = asking;
  binary_out.outputs[0].parameters.set("binary_data", true);
  CHECK(key_of(asking) == key_of(binary_out));

  // A name that runs into the next field cannot be told from another split: lengths go first.
  oip::inference_request a = base;
  a.parameters.set("ab", std::string{"c"});
  oip::inference_request b = base;
  b.parameters.set("a", std::string{"bc"});
  CHECK(key_of(a) != key_of(b));
}

TEST_CASE("the cache keeps copies, the most recently used, within its bytes") {
  const std::shared_ptr<oip::model> model = any_model();
  oip::detail::response_cache cache{3000};
  CHECK(cache.insert(named("a"), response_of(1000), model));
  CHECK(cache.insert(named("b"), response_of(1000), model));
  REQUIRE(cache.find(named("a"), model));  // now the most recently used: "b" goes first
  CHECK(cache.insert(named("c"), response_of(1000), model));
  CHECK(cache.find(named("a"), model));
  CHECK_FALSE(cache.find(named("b"), model));
  CHECK(cache.find(named("c"), model));
  CHECK(cache.entries() == 2);
  CHECK_FALSE(cache.insert(named("c"), response_of(1000), model));  // there already

  // Larger than the whole cache: not kept, and nothing else goes for it.
  CHECK_FALSE(cache.insert(named("huge"), response_of(4000), model));
  CHECK_FALSE(cache.find(named("huge"), model));
  CHECK(cache.entries() == 2);

  // The bytes are copied: a response that viewed a buffer changed later is kept as it was.
  std::array<std::byte, 4> shared{};
  std::memset(shared.data(), 1, 4);
  oip::inference_response viewing;
  viewing.id = "first";
  viewing.outputs.push_back(
      *oip::tensor::make("OUT", oip::datatype::uint8, {4}, oip::buffer::unowned(shared)));
  CHECK(cache.insert(named("view"), viewing, model));
  std::memset(shared.data(), 9, 4);
  const std::optional<oip::inference_response> found = cache.find(named("view"), model);
  REQUIRE(found);
  CHECK(found->outputs[0].at<std::uint8_t>(0) == 1);
  CHECK_FALSE(found->id);  // the id is the request's, given when it is answered
}

TEST_CASE("an entry made by a model since replaced is dropped, never answered") {
  oip::detail::response_cache cache{1 << 20};
  std::shared_ptr<oip::model> before = any_model();
  const std::shared_ptr<oip::model> after = any_model();
  CHECK(cache.insert(named("k"), response_of(10), before));
  CHECK_FALSE(cache.find(named("k"), after));
  CHECK(cache.entries() == 0);
  // Nor once the first model is gone.
  CHECK(cache.insert(named("k"), response_of(10), before));
  before.reset();
  CHECK_FALSE(cache.find(named("k"), after));
  // A model's own entry replaces a dead model's.
  CHECK(cache.insert(named("k"), response_of(10), after));
  CHECK(cache.find(named("k"), after));
}

namespace {

// OUT = IN + 1, counting its executions.
struct counting {
  std::shared_ptr<std::atomic<int>> runs = std::make_shared<std::atomic<int>>(0);

  std::shared_ptr<oip::model> model(std::string name, bool cached) const {
    oip::model_config config;
    config.name = std::move(name);
    config.inputs = {{"IN", oip::datatype::fp32, {1, -1}, {}}};
    config.outputs = {{"OUT", oip::datatype::fp32, {1, -1}, {}}};
    config.response_cache = cached;
    return oip::make_model(
        config, [runs = runs](const oip::inference_request& r) -> oip::result<oip::model_output> {
          runs->fetch_add(1);
          const oip::tensor& in = r.inputs[0];
          std::vector<float> out(in.element_count());
          for (std::size_t i = 0; i < out.size(); ++i) out[i] = in.at<float>(i) + 1;
          oip::model_output result;
          result.outputs.push_back(*oip::tensor::from_values<float>("OUT", in.shape(), out));
          return result;
        });
  }
};

struct served {
  explicit served(std::size_t cache_bytes)
      : handler{repository, workers,
                [cache_bytes] {
                  oip::server_options o;
                  o.response_cache_bytes = cache_bytes;
                  return o;
                }()},
        server{handler, [] {
                 oip::http::server_options o;
                 o.address = "127.0.0.1";
                 o.port = 0;
                 return o;
               }()} {}
  std::uint16_t start() {
    oip::result<std::uint16_t> port = server.start();
    REQUIRE(port);
    return *port;
  }
  oip::model_repository repository;
  oip::executor workers{{2, 64}};
  oip::http_handler handler;
  oip::http::server server;
};

std::string figure(const std::string& stats, const std::string& name) {
  const std::size_t at = stats.find("\"" + name + "\":");
  REQUIRE(at != std::string::npos);
  return stats.substr(at, stats.find('}', at) - at + 1);
}

}  // namespace

TEST_CASE("a repeated request is answered from the cache over HTTP, without running the model") {
  counting cached_model;
  counting plain_model;
  served s{std::size_t{1} << 20U};
  REQUIRE(s.repository.add(cached_model.model("cached", true)).ok());
  REQUIRE(s.repository.add(plain_model.model("plain", false)).ok());
  oip::http::client client{"127.0.0.1:" + std::to_string(s.start())};

  oip::inference_request first = request_of({1, 2, 3});
  first.id = "one";
  oip::inference_request again = request_of({1, 2, 3});
  again.id = "two";
  const oip::result<oip::inference_response> ran = client.infer("cached", first);
  const oip::result<oip::inference_response> hit = client.infer("cached", again);
  REQUIRE(ran);
  REQUIRE(hit);
  CHECK(cached_model.runs->load() == 1);
  CHECK(hit->id == "two");
  REQUIRE(hit->outputs.size() == 1);
  CHECK(hit->outputs[0].shape() == oip::shape_type{1, 3});
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(hit->outputs[0].at<float>(i) == ran->outputs[0].at<float>(i));
    CHECK(hit->outputs[0].at<float>(i) == static_cast<float>(i + 2));
  }
  // As JSON too: the cache holds the response, and each reply is encoded as its request asks.
  const oip::result<oip::inference_response> as_json =
      client.infer("cached", request_of({1, 2, 3}), oip::request_format{});
  REQUIRE(as_json);
  CHECK(as_json->outputs[0].at<float>(2) == 4.0F);
  CHECK(cached_model.runs->load() == 1);

  // Other values run the model.
  REQUIRE(client.infer("cached", request_of({1, 2, 4})));
  CHECK(cached_model.runs->load() == 2);

  // Triton's statistics: hits are successes, not inferences or executions.
  const oip::result<std::string> stats = client.statistics("cached");
  REQUIRE(stats);
  CHECK(figure(*stats, "cache_hit").starts_with(R"("cache_hit":{"count":2,)"));
  CHECK(figure(*stats, "cache_miss").starts_with(R"("cache_miss":{"count":2,)"));
  CHECK(figure(*stats, "success").starts_with(R"("success":{"count":4,)"));
  CHECK(stats->find(R"("inference_count":2,"execution_count":2)") != std::string::npos);

  // A model replaced under the same name and version answers for itself.
  counting replacement;
  REQUIRE(s.repository.replace(replacement.model("cached", true)).ok());
  REQUIRE(client.infer("cached", request_of({1, 2, 3})));
  CHECK(replacement.runs->load() == 1);

  // A model without the setting runs every time.
  REQUIRE(client.infer("plain", request_of({1, 2, 3})));
  REQUIRE(client.infer("plain", request_of({1, 2, 3})));
  CHECK(plain_model.runs->load() == 2);
  const oip::result<std::string> config = client.model_config("cached");
  REQUIRE(config);
  CHECK(config->find(R"("response_cache":{"enable":true})") != std::string::npos);
}

TEST_CASE("requests whose inputs a client can change under the model are not cached") {
  // Inputs in system shared memory are views of the client's region: the client could change
  // them between the lookup and the model's read, so such requests always run.
  counting model;
  oip::server_options options;
  options.response_cache_bytes = std::size_t{1} << 20U;
  options.shared_memory = true;
  oip::testing::served s{{model.model("cached", true)}, options};
  REQUIRE(s.failures.empty());
  oip::testing::shm_object object{"response_cache", 4096};
  object.put(0, std::vector<float>{1, 2, 3});
  REQUIRE(s.service.register_system_shared_memory({"inputs", object.key(), 0, 4096}).ok());
  const auto from_region = [] {
    oip::inference_request r;
    r.shared_memory_inputs.push_back({.position = 0,
                                      .name = "IN",
                                      .type = oip::datatype::fp32,
                                      .shape = {1, 3},
                                      .parameters = {},
                                      .place = {"inputs", 0, 12}});
    return r;
  };
  REQUIRE(s.infer("cached", from_region()));
  REQUIRE(s.infer("cached", from_region()));
  CHECK(model.runs->load() == 2);
  // The same values sent with the request are cached as usual.
  REQUIRE(s.infer("cached", request_of({1, 2, 3})));
  REQUIRE(s.infer("cached", request_of({1, 2, 3})));
  CHECK(model.runs->load() == 3);
}

TEST_CASE("a request's key is held in the memory budget while it runs; without room, no cache") {
  counting model;
  oip::server_options options;
  options.response_cache_bytes = std::size_t{1} << 20U;
  oip::testing::served s{{model.model("cached", true)}, options};
  REQUIRE(s.failures.empty());
  REQUIRE(s.infer("cached", request_of({1, 2, 3})));
  REQUIRE(s.infer("cached", request_of({1, 2, 3})));
  CHECK(model.runs->load() == 1);
  CHECK(s.service.memory().held() == 0);  // given back after the miss and after the hit

  counting squeezed_model;
  options.bounds.max_inflight_bytes = 64;  // less than any key
  oip::testing::served squeezed{{squeezed_model.model("cached", true)}, options};
  REQUIRE(squeezed.infer("cached", request_of({1, 2, 3})));
  REQUIRE(squeezed.infer("cached", request_of({1, 2, 3})));
  CHECK(squeezed_model.runs->load() == 2);
}

TEST_CASE("without room for a cache, a model that asks for one runs every time") {
  counting model;
  served s{0};
  REQUIRE(s.repository.add(model.model("cached", true)).ok());
  oip::http::client client{"127.0.0.1:" + std::to_string(s.start())};
  REQUIRE(client.infer("cached", request_of({1})));
  REQUIRE(client.infer("cached", request_of({1})));
  CHECK(model.runs->load() == 2);
}

TEST_CASE("the cache is refused to models whose responses depend on more than the request") {
  oip::model_repository models;
  oip::model_config config;
  config.name = "stateful";
  config.response_cache = true;
  config.sequence_batching = true;
  const auto never = [](const oip::inference_request&) -> oip::result<oip::model_output> {
    return oip::model_output{};
  };
  oip::status added = models.add(oip::make_model(config, never));
  CHECK(added.http_status() == 400);
  CHECK(added.message() ==
        "model 'stateful': the response cache is not offered for a sequence model (its "
        "responses depend on more than the request)");
  config.sequence_batching = false;
  config.decoupled = true;
  added = models.add(oip::make_model(config, never));
  CHECK(added.message().find("for a decoupled model") != std::string::npos);
}
