// The reference models on a CUDA device (oip::cuda), each compared with the same model on the CPU
// path. Without a GPU this exits 77, which CTest shows as a skip; a GPU that is present but cannot
// be used (a driver older than the runtime, say) fails with the runtime's reason.

#define DOCTEST_CONFIG_IMPLEMENT
#include "served.hpp"

#include <oip/classification.hpp>
#include <oip/cuda/device.hpp>
#include <oip/cuda/ipc_memory.hpp>
#include <oip/cuda/memory_pool.hpp>
#include <oip/cuda/models.hpp>
#include <oip/cuda/top_classes.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cuda_runtime.h>
#include <device_models.hpp>
#include <reference_models.hpp>

namespace {

using oip::testing::served;

// Both placements of the reference models, served side by side.
struct both_paths {
  both_paths() {
    bool failed = false;
    oip_serve::placement on_device =
        oip_serve::place_models(oip_serve::reference_models(), "cuda", failed);
    REQUIRE_MESSAGE(!failed, on_device.where);
    device = std::make_unique<served>(on_device.models);
    REQUIRE(device->failures.empty());
  }
  served cpu{oip_serve::reference_models()};
  std::unique_ptr<served> device;
};

oip::tensor random_tensor(std::mt19937& rng, std::string name, oip::datatype type,
                          oip::shape_type shape) {
  const std::uint64_t count = *oip::element_count(shape);
  std::vector<std::byte> bytes(count * oip::element_size(type));
  for (std::byte& b : bytes) b = static_cast<std::byte>(rng());
  if (type == oip::datatype::boolean) {
    for (std::byte& b : bytes) b &= std::byte{1};
  }
  return *oip::tensor::make(std::move(name), type, std::move(shape), *oip::buffer::copy_of(bytes));
}

void check_same_bytes(const oip::inference_response& cpu, const oip::inference_response& gpu) {
  REQUIRE(cpu.outputs.size() == gpu.outputs.size());
  for (std::size_t i = 0; i < cpu.outputs.size(); ++i) {
    CAPTURE(cpu.outputs[i].name());
    CHECK(gpu.outputs[i].name() == cpu.outputs[i].name());
    CHECK(gpu.outputs[i].type() == cpu.outputs[i].type());
    CHECK(gpu.outputs[i].shape() == cpu.outputs[i].shape());
    const auto a = cpu.outputs[i].data().bytes();
    const auto b = gpu.outputs[i].data().bytes();
    // Bit for bit, NaN payloads included: both paths run the same functors.
    CHECK(std::equal(a.begin(), a.end(), b.begin(), b.end()));
  }
}

}  // namespace

TEST_CASE("simple_<type> gives the CPU path's bits for every numeric type, batch 1 to 8") {
  both_paths paths;
  std::mt19937 rng{7};
  for (const char* name : {"simple", "simple_int8", "simple_uint8", "simple_uint16",
                           "simple_uint32", "simple_uint64", "simple_int16", "simple_int64",
                           "simple_fp16", "simple_bf16", "simple_fp32", "simple_fp64"}) {
    const oip::datatype type =
        paths.cpu.models.find(name, std::nullopt)->get().config().inputs[0].type;
    for (std::int64_t batch = 1; batch <= 8; ++batch) {
      CAPTURE(name);
      CAPTURE(batch);
      oip::inference_request r;
      r.inputs.push_back(random_tensor(rng, "INPUT0", type, {batch, 16}));
      r.inputs.push_back(random_tensor(rng, "INPUT1", type, {batch, 16}));
      oip::result<oip::inference_response> cpu = paths.cpu.infer(name, r);
      oip::result<oip::inference_response> gpu = paths.device->infer(name, r);
      REQUIRE(cpu);
      REQUIRE(gpu);
      check_same_bytes(*cpu, *gpu);
    }
  }
}

TEST_CASE("identity_<type> returns the bytes it was given, through the device") {
  both_paths paths;
  std::mt19937 rng{11};
  for (const char* name :
       {"identity_bool", "identity_uint8", "identity_uint16", "identity_uint32", "identity_uint64",
        "identity_int8", "identity_int16", "identity_int32", "identity_int64", "identity_fp16",
        "identity_bf16", "identity_fp32", "identity_fp64"}) {
    CAPTURE(name);
    const oip::datatype type =
        paths.cpu.models.find(name, std::nullopt)->get().config().inputs[0].type;
    // Small (pinned staging), large (straight from the body) and empty.
    for (const oip::shape_type& shape :
         {oip::shape_type{3, 5}, oip::shape_type{1024, 1024}, oip::shape_type{0, 4}}) {
      oip::inference_request r;
      r.inputs.push_back(random_tensor(rng, "INPUT0", type, shape));
      oip::result<oip::inference_response> gpu = paths.device->infer(name, r);
      REQUIRE(gpu);
      const auto in = r.inputs[0].data().bytes();
      const auto out = gpu->outputs.at(0).data().bytes();
      CHECK(std::equal(in.begin(), in.end(), out.begin(), out.end()));
    }
  }
}

TEST_CASE("the classifier matches the CPU path within FP32 rounding, batched under load") {
  both_paths paths;
  std::mt19937 rng{3};
  std::normal_distribution<float> dist{0.0F, 1.0F};
  std::vector<std::future<oip::result<oip::inference_response>>> pending;
  std::vector<oip::inference_request> sent;
  for (int i = 0; i < 64; ++i) {
    const std::int64_t rows = 1 + i % 4;
    std::vector<float> x(static_cast<std::size_t>(rows) * 2048);
    for (float& v : x) v = dist(rng);
    oip::inference_request r;
    r.inputs.push_back(*oip::tensor::from_values<float>("INPUT0", {rows, 2048}, x));
    sent.push_back(r);
    pending.push_back(paths.device->send("classifier", std::move(r)));
  }
  for (std::size_t i = 0; i < pending.size(); ++i) {
    oip::result<oip::inference_response> gpu = pending[i].get();
    REQUIRE(gpu);
    oip::result<oip::inference_response> cpu = paths.cpu.infer("classifier", sent[i]);
    REQUIRE(cpu);
    const oip::tensor& a = cpu->outputs.at(0);
    const oip::tensor& b = gpu->outputs.at(0);
    REQUIRE(a.shape() == b.shape());
    for (std::size_t j = 0; j < a.element_count(); ++j) {
      CHECK(b.at<float>(j) == doctest::Approx(a.at<float>(j)).epsilon(1e-3).scale(1e-6));
    }
  }
}

// Rows that stress the order: random bits (NaNs, infinities, signed zeros), few distinct values
// (ties), rows sorted ascending (the ranking's worst case) and rows of one value.
std::vector<float> hard_rows(std::mt19937& rng, std::size_t rows, std::size_t columns, int kind) {
  std::vector<float> values(rows * columns);
  const float few[4] = {0.5F, -0.0F, 0.0F, std::nanf("")};
  for (std::size_t i = 0; i < values.size(); ++i) {
    switch (kind % 4) {
      case 0: values[i] = std::bit_cast<float>(static_cast<std::uint32_t>(rng())); break;
      case 1: values[i] = few[rng() % 4]; break;
      case 2: values[i] = static_cast<float>(i % columns); break;
      default: values[i] = 1.0F; break;
    }
  }
  return values;
}

TEST_CASE("the top classes ranked on the device are the host's, ties and NaN included") {
  std::mt19937 rng{11};
  int kind = 0;
  for (const std::size_t columns : {1U, 2U, 255U, 256U, 257U, 1000U, 4099U, 8192U}) {
    for (const std::size_t rows : {1U, 3U, 64U}) {
      const std::size_t k =
          std::min<std::size_t>(columns, 1 + rng() % oip::cuda::max_ranked_classes);
      const std::vector<float> values = hard_rows(rng, rows, columns, kind++);
      CAPTURE(columns);
      CAPTURE(rows);
      CAPTURE(k);
      float* on_device = nullptr;
      float* best = nullptr;
      std::uint32_t* at = nullptr;
      REQUIRE(cudaMalloc(&on_device, values.size() * sizeof(float)) == cudaSuccess);
      REQUIRE(cudaMalloc(&best, rows * k * sizeof(float)) == cudaSuccess);
      REQUIRE(cudaMalloc(&at, rows * k * sizeof(std::uint32_t)) == cudaSuccess);
      REQUIRE(cudaMemcpy(on_device, values.data(), values.size() * sizeof(float),
                         cudaMemcpyHostToDevice) == cudaSuccess);
      REQUIRE(oip::cuda::rank_top_classes(on_device, rows, columns, k, best, at, nullptr).ok());
      std::vector<float> got_best(rows * k);
      std::vector<std::uint32_t> got_at(rows * k);
      REQUIRE(cudaMemcpy(got_best.data(), best, got_best.size() * sizeof(float),
                         cudaMemcpyDeviceToHost) == cudaSuccess);
      REQUIRE(cudaMemcpy(got_at.data(), at, got_at.size() * sizeof(std::uint32_t),
                         cudaMemcpyDeviceToHost) == cudaSuccess);
      cudaFree(on_device);
      cudaFree(best);
      cudaFree(at);
      const oip::tensor output = *oip::tensor::from_values<float>(
          "OUTPUT0", {static_cast<std::int64_t>(rows), static_cast<std::int64_t>(columns)}, values);
      const oip::result<std::vector<std::uint64_t>> host =
          oip::top_classes(output, k, oip::classification_rows::batch_rows);
      REQUIRE(host);
      REQUIRE(host->size() == got_at.size());
      for (std::size_t i = 0; i < got_at.size(); ++i) {
        CHECK(got_at[i] == (*host)[i]);
        const float expected = values[(i / k) * columns + (*host)[i]];
        CHECK(std::bit_cast<std::uint32_t>(got_best[i]) == std::bit_cast<std::uint32_t>(expected));
      }
    }
  }
  // Out of range: a 400, nothing launched.
  CHECK(oip::cuda::rank_top_classes(nullptr, 1, 10, 0, nullptr, nullptr, nullptr).http_status() ==
        400);
  CHECK(oip::cuda::rank_top_classes(nullptr, 1, 10, 11, nullptr, nullptr, nullptr).http_status() ==
        400);
  CHECK(oip::cuda::rank_top_classes(nullptr, 1, 1000, oip::cuda::max_ranked_classes + 1, nullptr,
                                    nullptr, nullptr)
            .http_status() == 400);
  CHECK(oip::cuda::rank_top_classes(nullptr, 1, oip::cuda::max_ranked_columns + 1, 5, nullptr,
                                    nullptr, nullptr)
            .http_status() == 400);
}

TEST_CASE("the classifier's classification on the device matches the host's of its output") {
  both_paths paths;
  std::vector<std::string> labels;  // as oip-serve's classifier has them
  for (int i = 0; i < 1000; ++i) labels.push_back(fmt::format("class_{:03}", i));
  std::mt19937 rng{9};
  std::normal_distribution<float> dist{0.0F, 1.0F};
  for (const std::int64_t rows : {1, 3, 8}) {
    // Ranked on the device from 16 KB of output (8 rows) and up to max_ranked_classes; smaller
    // outputs and more classes on the host.
    for (const std::int64_t k : {1, 5, 64, 65, 1000, 5000}) {
      CAPTURE(rows);
      CAPTURE(k);
      std::vector<float> x(static_cast<std::size_t>(rows) * 2048);
      for (float& v : x) v = dist(rng);
      oip::inference_request whole;
      whole.inputs.push_back(*oip::tensor::from_values<float>("INPUT0", {rows, 2048}, x));
      oip::inference_request classified = whole;
      classified.outputs.push_back({"OUTPUT0", {}});
      classified.outputs.back().parameters.set("classification", k);
      oip::result<oip::inference_response> full = paths.device->infer("classifier", whole);
      oip::result<oip::inference_response> ranked = paths.device->infer("classifier", classified);
      REQUIRE(full);
      REQUIRE(ranked);
      oip::result<oip::tensor> expected =
          oip::classify(full->outputs.at(0), static_cast<std::size_t>(k),
                        oip::classification_rows::batch_rows, labels);
      REQUIRE(expected);
      const oip::tensor& got = ranked->outputs.at(0);
      CHECK(got.shape() == expected->shape());
      CHECK(got.data().bytes().size() == expected->data().bytes().size());
      CHECK(std::equal(got.data().bytes().begin(), got.data().bytes().end(),
                       expected->data().bytes().begin(), expected->data().bytes().end()));
    }
  }
}

TEST_CASE("sequence_accumulator adds on the device and keeps the sum per sequence") {
  both_paths paths;
  for (served* s : {&paths.cpu, paths.device.get()}) {
    CHECK(*s->sequence_step("sequence_accumulator", 1, 5, true) == 5);
    CHECK(*s->sequence_step("sequence_accumulator", 2, 2147483647, true) == 2147483647);
    CHECK(*s->sequence_step("sequence_accumulator", 1, 7, false) == 12);
    CHECK(*s->sequence_step("sequence_accumulator", 2, 1, false) == -2147483647 - 1);
  }
}

TEST_CASE("device memory goes back to the pools: nothing is held once the requests are done") {
  oip::result<std::shared_ptr<oip::cuda::device>> device = oip::cuda::device::open(0);
  REQUIRE(device);
  oip::model_config config;
  config.name = "simple_fp32";
  config.max_batch_size = 8;
  config.inputs = {{"INPUT0", oip::datatype::fp32, {16}, {}},
                   {"INPUT1", oip::datatype::fp32, {16}, {}}};
  config.outputs = {{"OUTPUT0", oip::datatype::fp32, {16}, {}},
                    {"OUTPUT1", oip::datatype::fp32, {16}, {}}};
  oip::result<std::shared_ptr<oip::model>> model = oip::cuda::add_sub_model(*device, config);
  REQUIRE(model);
  // Its configuration says where it runs (Triton's instance_group: KIND_GPU on device 0).
  CHECK((*model)->config().gpus == std::vector<int>{0});
  {
    served s{{*model}};
    std::mt19937 rng{5};
    for (int i = 0; i < 200; ++i) {
      oip::inference_request r;
      r.inputs.push_back(random_tensor(rng, "INPUT0", oip::datatype::fp32, {4, 16}));
      r.inputs.push_back(random_tensor(rng, "INPUT1", oip::datatype::fp32, {4, 16}));
      REQUIRE(s.infer("simple_fp32", std::move(r)));
    }
  }
  CHECK((*device)->device_memory().stats().bytes_in_use == 0);
  CHECK((*device)->pinned_memory().stats().bytes_in_use == 0);
  // Warm pools: 200 requests needed only a handful of allocations.
  CHECK((*device)->device_memory().stats().allocations <= 8);
}

TEST_CASE("inputs in the device's memory are read in place, with the host path's bits") {
  oip::result<std::shared_ptr<oip::cuda::device>> device = oip::cuda::device::open(0);
  REQUIRE(device);
  oip::model_config config;
  config.name = "simple_int32";
  config.inputs = {{"INPUT0", oip::datatype::int32, {1, 16}, {}},
                   {"INPUT1", oip::datatype::int32, {1, 16}, {}}};
  config.outputs = {{"OUTPUT0", oip::datatype::int32, {1, 16}, {}},
                    {"OUTPUT1", oip::datatype::int32, {1, 16}, {}}};
  oip::result<std::shared_ptr<oip::model>> model = oip::cuda::add_sub_model(*device, config);
  REQUIRE(model);
  CHECK((*model)->config().device_inputs);
  served s{{*model}};
  std::mt19937 rng{13};
  // Each input copied into memory of its own on device 0, `offset` bytes in, as a client's CUDA
  // region holds it.
  const auto on_device = [](const oip::tensor& t, std::size_t offset) {
    void* at = nullptr;
    REQUIRE(cudaMalloc(&at, offset + t.data().size()) == cudaSuccess);
    const std::shared_ptr<void> owner{at, [](void* p) { cudaFree(p); }};
    std::byte* place = static_cast<std::byte*>(at) + offset;
    REQUIRE(cudaMemcpy(place, t.data().data(), t.data().size(), cudaMemcpyHostToDevice) ==
            cudaSuccess);
    return *oip::tensor::in_device_memory(t.name(), t.type(), t.shape(),
                                          oip::buffer::view({place, t.data().size()}, owner), 0);
  };
  const auto acquisitions = [](const oip::cuda::memory_pool& pool) {
    const oip::cuda::memory_pool::statistics counted = pool.stats();
    return counted.allocations + counted.reuses;
  };
  const std::size_t device_before = acquisitions((*device)->device_memory());
  const std::size_t pinned_before = acquisitions((*device)->pinned_memory());
  constexpr int requests = 20;
  for (int i = 0; i < requests; ++i) {
    oip::inference_request host;
    host.inputs.push_back(random_tensor(rng, "INPUT0", oip::datatype::int32, {1, 16}));
    host.inputs.push_back(random_tensor(rng, "INPUT1", oip::datatype::int32, {1, 16}));
    oip::inference_request aligned;
    oip::inference_request misaligned;  // an INT32 at offset 4: read through a device copy
    for (const oip::tensor& t : host.inputs) {
      aligned.inputs.push_back(on_device(t, 0));
      misaligned.inputs.push_back(on_device(t, 4));
    }
    oip::result<oip::inference_response> from_host = s.infer("simple_int32", host);
    REQUIRE(from_host);
    for (oip::inference_request* placed : {&aligned, &misaligned}) {
      oip::result<oip::inference_response> from_device = s.infer("simple_int32", *placed);
      REQUIRE(from_device);
      check_same_bytes(*from_host, *from_device);
    }
  }
  // Device blocks: from the host, one per input and one per output (4); in place, the outputs'
  // (2); misaligned, 4 again. Pinned blocks: from the host, staging per input and one per output
  // (4); from the device, the outputs' only (2 each).
  CHECK(acquisitions((*device)->device_memory()) - device_before == requests * (4 + 2 + 4));
  CHECK(acquisitions((*device)->pinned_memory()) - pinned_before == requests * (4 + 2 + 2));
}

TEST_CASE("the runtime tells how far a device allocation reaches from a place in it") {
  void* at = nullptr;
  REQUIRE(cudaMalloc(&at, 1000) == cudaSuccess);
  const std::shared_ptr<oip::device_memory_access> access = oip::cuda::ipc_memory_access();
  const std::optional<std::uint64_t> whole = access->extent(at, 0);
  const std::optional<std::uint64_t> rest = access->extent(static_cast<std::byte*>(at) + 100, 0);
  cudaFree(at);
  REQUIRE(whole);
  REQUIRE(rest);
  CHECK(*whole >= 1000);
  CHECK(*whole - *rest == 100);
}

TEST_CASE("a configuration the device models cannot run is refused with a 400") {
  oip::result<std::shared_ptr<oip::cuda::device>> device = oip::cuda::device::open(0);
  REQUIRE(device);
  oip::model_config strings;
  strings.name = "identity_bytes";
  strings.inputs = {{"INPUT0", oip::datatype::bytes, {-1}, {}}};
  strings.outputs = {{"OUTPUT0", oip::datatype::bytes, {-1}, {}}};
  oip::result<std::shared_ptr<oip::model>> refused = oip::cuda::identity_model(*device, strings);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().http_status() == 400);
  CHECK_FALSE(oip::cuda::device::open(1000));
}

int main(int argc, char** argv) {
  const oip::cuda::probe_result found = oip::cuda::probe();
  std::cout << "cuda_device_test: " << found.message << std::endl;
  if (found.absent) return 77;  // CTest: skipped
  if (!found.usable()) return 1;
  doctest::Context context{argc, argv};
  return context.run();
}
