// Top-5 classification over 1,000 and 1,000,000 FP32 scores: oip's thresholded scan against
// std::partial_sort over an index array (the straightforward way, and Triton's), same data.

#include <oip/classification.hpp>
#include <oip/float16.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include <benchmark/benchmark.h>

namespace {

constexpr std::size_t top_n = 5;

std::vector<float> scores(std::size_t n) {
  std::mt19937 rng{11};
  std::normal_distribution<float> dist{0.0F, 1.0F};
  std::vector<float> out(n);
  for (float& v : out) v = dist(rng);
  return out;
}

void top5_oip(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const std::vector<float> values = scores(n);
  const oip::tensor t = *oip::tensor::from_values<float>("scores", {static_cast<std::int64_t>(n)},
                                                         std::span<const float>(values));
  for (auto _ : state) {
    oip::result<std::vector<std::uint64_t>> top =
        oip::top_classes(t, top_n, oip::classification_rows::whole_tensor);
    benchmark::DoNotOptimize(top);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * n * sizeof(float)));
}

// The same selection into the caller's storage (no allocation).
void top5_oip_into(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const std::vector<float> values = scores(n);
  const oip::tensor t = *oip::tensor::from_values<float>("scores", {static_cast<std::int64_t>(n)},
                                                         std::span<const float>(values));
  std::array<std::uint64_t, top_n> best{};
  for (auto _ : state) {
    oip::result<std::size_t> written =
        oip::top_classes(t, top_n, oip::classification_rows::whole_tensor, best);
    benchmark::DoNotOptimize(written);
    benchmark::DoNotOptimize(best);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * n * sizeof(float)));
}

// FP16 scores (a half-precision model's output), the same values rounded: each chunk is
// converted to FP32 and takes the FP32 kernel.
void top5_oip_fp16(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const std::vector<float> floats = scores(n);
  std::vector<oip::half> values(n);
  std::transform(floats.begin(), floats.end(), values.begin(),
                 [](float f) { return oip::to_half(f); });
  const oip::tensor t = *oip::tensor::from_values<oip::half>(
      "scores", {static_cast<std::int64_t>(n)}, std::span<const oip::half>(values));
  std::array<std::uint64_t, top_n> best{};
  for (auto _ : state) {
    oip::result<std::size_t> written =
        oip::top_classes(t, top_n, oip::classification_rows::whole_tensor, best);
    benchmark::DoNotOptimize(written);
    benchmark::DoNotOptimize(best);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * n * sizeof(oip::half)));
}

void top5_partial_sort(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const std::vector<float> values = scores(n);
  for (auto _ : state) {
    std::vector<std::uint64_t> index(n);
    std::iota(index.begin(), index.end(), 0);
    std::partial_sort(index.begin(), index.begin() + top_n, index.end(),
                      [&](std::uint64_t a, std::uint64_t b) { return values[a] > values[b]; });
    index.resize(top_n);
    benchmark::DoNotOptimize(index);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * n * sizeof(float)));
}

// The whole extension: selection plus the five "<value>:<index>" strings in a BYTES tensor.
void classify_oip(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const std::vector<float> values = scores(n);
  const oip::tensor t = *oip::tensor::from_values<float>("scores", {static_cast<std::int64_t>(n)},
                                                         std::span<const float>(values));
  for (auto _ : state) {
    oip::result<oip::tensor> classes =
        oip::classify(t, top_n, oip::classification_rows::whole_tensor);
    benchmark::DoNotOptimize(classes);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * n * sizeof(float)));
}

}  // namespace

BENCHMARK(top5_oip)->Arg(1000)->Arg(1000000);
BENCHMARK(top5_oip_into)->Arg(1000)->Arg(1000000);
BENCHMARK(top5_oip_fp16)->Arg(1000)->Arg(1000000);
BENCHMARK(top5_partial_sort)->Arg(1000)->Arg(1000000);
BENCHMARK(classify_oip)->Arg(1000)->Arg(1000000);

BENCHMARK_MAIN();
