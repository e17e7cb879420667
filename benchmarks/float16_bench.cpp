// FP16/BF16 <-> FP32 conversion of 16M elements, side by side with a memcpy of the output bytes
// (the memory-speed ceiling) and with the portable scalar path.
//
//   cmake --preset release && cmake --build --preset release --target float16_bench
//   build/release/benchmarks/float16_bench --benchmark_repetitions=5
//       --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true

#include <oip/float16.hpp>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <benchmark/benchmark.h>

namespace {

constexpr std::size_t element_count = 16U << 20U;

using oip::detail::simd_path;

const std::vector<float>& floats() {
  static const std::vector<float> values = [] {
    std::vector<float> v(element_count);
    std::mt19937 rng{1};
    std::normal_distribution<float> normal{0.0F, 10.0F};
    for (float& f : v) f = normal(rng);
    return v;
  }();
  return values;
}

const std::vector<std::uint16_t>& halves() {
  static const std::vector<std::uint16_t> values = [] {
    std::vector<std::uint16_t> v(element_count);
    oip::detail::float_to_half(simd_path::portable, floats().data(), v.data(), v.size());
    return v;
  }();
  return values;
}

void set_bytes(benchmark::State& state, std::size_t bytes_per_element) {
  state.SetBytesProcessed(
      static_cast<std::int64_t>(state.iterations() * element_count * bytes_per_element));
}

// Baseline: copying the bytes the conversion writes.
template <std::size_t OutputBytes>
void BM_memcpy_output(benchmark::State& state) {
  std::vector<std::byte> in(element_count * OutputBytes);
  std::vector<std::byte> out(element_count * OutputBytes);
  std::memset(in.data(), 1, in.size());
  for (auto _ : state) {
    std::memcpy(out.data(), in.data(), out.size());
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, OutputBytes);
}

template <void (*Convert)(simd_path, const void*, void*, std::size_t), std::size_t OutputBytes,
          bool FromFloat>
void BM_convert(benchmark::State& state) {
  const auto path = static_cast<simd_path>(state.range(0));
  if (!oip::detail::simd_path_supported(path)) {
    state.SkipWithError("this CPU lacks the path");
    return;
  }
  std::vector<std::byte> out(element_count * OutputBytes);
  const void* in = FromFloat ? static_cast<const void*>(floats().data())
                             : static_cast<const void*>(halves().data());
  for (auto _ : state) {
    Convert(path, in, out.data(), element_count);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, OutputBytes);
}

void paths(benchmark::internal::Benchmark* b) {
  b->ArgName("path")->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond);
}

}  // namespace

BENCHMARK(BM_memcpy_output<2>)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_memcpy_output<4>)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_convert<oip::detail::float_to_half, 2, true>)->Name("BM_float_to_half")->Apply(paths);
BENCHMARK(BM_convert<oip::detail::float_to_bfloat16, 2, true>)
    ->Name("BM_float_to_bfloat16")
    ->Apply(paths);
BENCHMARK(BM_convert<oip::detail::half_to_float, 4, false>)->Name("BM_half_to_float")->Apply(paths);
BENCHMARK(BM_convert<oip::detail::bfloat16_to_float, 4, false>)
    ->Name("BM_bfloat16_to_float")
    ->Apply(paths);

BENCHMARK_MAIN();
