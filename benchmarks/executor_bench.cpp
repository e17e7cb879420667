// oip-serve's `simple` and `classifier` through the inference service (validation, the executor,
// the model, the response), batch 1 to 8: on the CPU path always, and on a CUDA device (oip::cuda)
// when one is usable here. Rows per second is the figure; `bytes_per_second` counts the input
// bytes. Then `simple` handed to a worker and run inline (model_config::inline_execution), side
// by side: what the hand-off costs a request; and the check of simple's outputs against its
// configuration (name, datatype, shape), which every request above includes, alone. On a CUDA
// device, the classifier's top 5 classes (with its labels) at batch 1, 8 and 64 both ways, side by
// side: ranked on the device with only the classes copied back (the request asks for
// `classification`), and the whole output copied back and classified on the host.

#include "served.hpp"
#include "serving/detail/validation.hpp"
#include "serving_support.hpp"

#include <oip/classification.hpp>

#include <cstdint>
#include <functional>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <device_models.hpp>
#include <reference_models.hpp>

namespace {

using oip::testing::served;

oip::inference_request simple_request(std::int64_t batch) {
  std::vector<std::int32_t> values(static_cast<std::size_t>(batch) * 16);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<std::int32_t>(i);
  oip::inference_request r;
  r.inputs.push_back(*oip::tensor::from_values<std::int32_t>("INPUT0", {batch, 16}, values));
  r.inputs.push_back(*oip::tensor::from_values<std::int32_t>("INPUT1", {batch, 16}, values));
  return r;
}

oip::inference_request classifier_request(std::int64_t batch) {
  std::mt19937 rng{1};
  std::normal_distribution<float> dist{0.0F, 1.0F};
  std::vector<float> values(static_cast<std::size_t>(batch) * 2048);
  for (float& v : values) v = dist(rng);
  oip::inference_request r;
  r.inputs.push_back(*oip::tensor::from_values<float>("INPUT0", {batch, 2048}, values));
  return r;
}

// `then` runs on each response (the host's classification, say).
void run(benchmark::State& state, served& s, const std::string& model,
         const oip::inference_request& request,
         const std::function<oip::status(const oip::inference_response&)>& then = nullptr) {
  const auto batch = static_cast<std::int64_t>(request.inputs[0].shape()[0]);
  std::size_t input_bytes = 0;
  for (const oip::tensor& t : request.inputs) input_bytes += t.data().size();
  for (auto _ : state) {
    oip::result<oip::inference_response> out = s.infer(model, request);
    if (!out) {
      state.SkipWithError(out.error().message().c_str());
      return;
    }
    if (then) {
      if (oip::status failed = then(*out); !failed.ok()) {
        state.SkipWithError(failed.message().c_str());
        return;
      }
    }
    benchmark::DoNotOptimize(out);
  }
  state.SetItemsProcessed(state.iterations() * batch);
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * input_bytes));
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  std::vector<std::pair<std::string, std::unique_ptr<served>>> placements;
  for (const char* device : {"cpu", "cuda"}) {
    bool failed = false;
    oip_serve::placement placed =
        oip_serve::place_models(oip_serve::reference_models(false), device, failed);
    if (failed) {
      std::cerr << "executor_bench: no " << device << " figures: " << placed.where << "\n";
      continue;
    }
    placements.emplace_back(device, std::make_unique<served>(placed.models));
  }
  for (auto& [device, s] : placements) {
    for (const std::int64_t batch : {1, 2, 4, 8}) {
      for (const auto& [model, request] :
           {std::pair{std::string{"simple"}, simple_request(batch)},
            std::pair{std::string{"classifier"}, classifier_request(batch)}}) {
        benchmark::RegisterBenchmark(
            fmt::format("executor/{}/{}/batch:{}", device, model, batch).c_str(),
            [&s = *s, model = model, request = request](benchmark::State& state) {
              run(state, s, model, request);
            })
            ->UseRealTime();
      }
    }
  }
  // The classifier on the device with batches past oip-serve's 8 rows, one request at a time.
  std::unique_ptr<served> wide;
  std::vector<std::string> labels;
  if (oip::result<std::shared_ptr<oip::model>> classifier = oip_serve::device_classifier(64)) {
    labels = (*classifier)->config().labels_of("OUTPUT0");
    wide = std::make_unique<served>(std::vector<std::shared_ptr<oip::model>>{*classifier});
  }
  for (const std::int64_t batch : {1, 8, 64}) {
    if (!wide) break;
    oip::inference_request ranked = classifier_request(batch);
    ranked.outputs.push_back({"OUTPUT0", {}});
    ranked.outputs.back().parameters.set("classification", std::int64_t{5});
    benchmark::RegisterBenchmark(
        fmt::format("classification/top5/batch:{}/device", batch).c_str(),
        [&s = *wide, ranked](benchmark::State& state) { run(state, s, "classifier", ranked); })
        ->UseRealTime();
    benchmark::RegisterBenchmark(
        fmt::format("classification/top5/batch:{}/host", batch).c_str(),
        [&s = *wide, batch, &labels](benchmark::State& state) {
          run(state, s, "classifier", classifier_request(batch),
              [&labels](const oip::inference_response& r) {
                oip::result<oip::tensor> classes =
                    oip::classify(r.outputs.at(0), 5, oip::classification_rows::batch_rows, labels);
                benchmark::DoNotOptimize(classes);
                return classes ? oip::status{} : classes.error();
              });
        })
        ->UseRealTime();
  }
  served handed_over{{oip::testing::make_simple(), oip::testing::make_inline_simple("inline")}};
  for (const auto& [row, model] : {std::pair<std::string, std::string>{"worker", "simple"},
                                   std::pair<std::string, std::string>{"inline", "inline"}}) {
    benchmark::RegisterBenchmark(fmt::format("hand_off/{}", row).c_str(),
                                 [&handed_over, model = model](benchmark::State& state) {
                                   run(state, handed_over, model, simple_request(1));
                                 })
        ->UseRealTime();
  }
  benchmark::RegisterBenchmark("output_check/simple", [](benchmark::State& state) {
    const oip::model_config config = oip::testing::simple_config();
    const oip::inference_request request = simple_request(1);
    std::vector<oip::tensor> outputs{
        *oip::tensor::make("OUTPUT0", oip::datatype::int32, {1, 16}, request.inputs[0].data()),
        *oip::tensor::make("OUTPUT1", oip::datatype::int32, {1, 16}, request.inputs[1].data())};
    for (auto _ : state) {
      oip::status checked = oip::detail::check_outputs(config, outputs);
      benchmark::DoNotOptimize(checked);
    }
  });
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
