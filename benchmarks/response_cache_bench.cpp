// Triton's response cache through the inference service: oip-serve's `classifier` (a 2048x1000
// dense layer, hundreds of microseconds) and `simple` (two INT32 [1,16], a microsecond), each
// three ways side by side: on a server without a cache (the baseline), answered from the cache
// (the same request every time), and missing it (a new request every time: the key built, the
// model run, the response copied in). Every iteration makes its request afresh from the same
// template, so that the three rows of a model do the same work outside the service.

#include "served.hpp"
#include "serving_support.hpp"

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <reference_models.hpp>

namespace {

using oip::testing::served;

// A model as it is, with the response cache asked for in its configuration.
class with_cache final : public oip::model {
 public:
  explicit with_cache(std::shared_ptr<oip::model> wrapped)
      : model_{std::move(wrapped)}, config_{model_->config()} {
    config_.response_cache = true;
  }
  [[nodiscard]] const oip::model_config& config() const noexcept override { return config_; }
  void execute(oip::inference_call call) override { model_->execute(std::move(call)); }

 private:
  std::shared_ptr<oip::model> model_;
  oip::model_config config_;
};

oip::inference_request classifier_request() {
  std::mt19937 rng{1};
  std::normal_distribution<float> dist{0.0F, 1.0F};
  std::vector<float> values(2048);
  for (float& v : values) v = dist(rng);
  oip::inference_request r;
  r.inputs.push_back(*oip::tensor::from_values<float>("INPUT0", {1, 2048}, values));
  return r;
}

oip::inference_request simple_request() {
  std::vector<std::int32_t> values(16);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<std::int32_t>(i);
  oip::inference_request r;
  r.inputs.push_back(*oip::tensor::from_values<std::int32_t>("INPUT0", {1, 16}, values));
  r.inputs.push_back(*oip::tensor::from_values<std::int32_t>("INPUT1", {1, 16}, values));
  return r;
}

// The template with its first input's first four bytes set to `n`: a new request for each `n`.
oip::inference_request numbered(const oip::inference_request& model_request, std::uint32_t n) {
  oip::inference_request r;
  const oip::tensor& first = model_request.inputs.front();
  oip::mutable_buffer bytes = *oip::mutable_buffer::allocate_for_overwrite(first.data().size());
  std::memcpy(bytes.data(), first.data().data(), first.data().size());
  std::memcpy(bytes.data(), &n, sizeof n);
  r.inputs.push_back(
      *oip::tensor::make(first.name(), first.type(), first.shape(), std::move(bytes)));
  for (std::size_t i = 1; i < model_request.inputs.size(); ++i) {
    r.inputs.push_back(model_request.inputs[i]);
  }
  return r;
}

enum class row { no_cache, hit, miss };

void run(benchmark::State& state, served& s, const std::string& model,
         const oip::inference_request& model_request, row kind) {
  std::uint32_t n = 0;
  if (kind == row::hit && !s.infer(model, numbered(model_request, n))) {  // the entry
    state.SkipWithError("the first request failed");
    return;
  }
  for (auto _ : state) {
    if (kind == row::miss) ++n;
    oip::result<oip::inference_response> out = s.infer(model, numbered(model_request, n));
    if (!out) {
      state.SkipWithError(out.error().message().c_str());
      return;
    }
    benchmark::DoNotOptimize(out);
  }
  state.SetItemsProcessed(state.iterations());
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  const auto models = [](bool cached) {
    std::vector<std::shared_ptr<oip::model>> list{oip_serve::reference_model("classifier", false),
                                                  oip::testing::make_simple()};
    if (cached) {
      for (std::shared_ptr<oip::model>& m : list) m = std::make_shared<with_cache>(std::move(m));
    }
    return list;
  };
  oip::server_options with_room;
  with_room.response_cache_bytes = std::size_t{64} << 20U;
  served plain{models(false)};
  served cached{models(true), with_room};
  for (const auto& [model, request] : {std::pair{std::string{"classifier"}, classifier_request()},
                                       std::pair{std::string{"simple"}, simple_request()}}) {
    for (const auto& [name, kind] : {std::pair{"no_cache", row::no_cache},
                                     std::pair{"hit", row::hit}, std::pair{"miss", row::miss}}) {
      served& s = kind == row::no_cache ? plain : cached;
      benchmark::RegisterBenchmark(
          fmt::format("response_cache/{}/{}", model, name).c_str(),
          [&s, model = model, request = request, kind = kind](benchmark::State& state) {
            run(state, s, model, request, kind);
          })
          ->UseRealTime();
    }
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
