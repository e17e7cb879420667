// oip-serve's reference models on the CPU path, through the inference service, and the device
// choice (--device). The CUDA versions are compared with these in cuda_device_test.cpp.

#include "served.hpp"

#include <oip/float16.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <device_models.hpp>
#include <reference_models.hpp>

namespace {

using oip::testing::served;

template <class T>
oip::inference_request add_sub_request(const std::vector<T>& a, const std::vector<T>& b) {
  oip::inference_request r;
  const std::int64_t n = static_cast<std::int64_t>(a.size());
  r.inputs.push_back(*oip::tensor::from_values<T>("INPUT0", {1, n}, std::span<const T>(a)));
  r.inputs.push_back(*oip::tensor::from_values<T>("INPUT1", {1, n}, std::span<const T>(b)));
  return r;
}

template <class T>
void check_add_sub(served& s, const std::string& name, const std::vector<T>& a,
                   const std::vector<T>& b, const std::vector<T>& sum,
                   const std::vector<T>& difference) {
  CAPTURE(name);
  oip::result<oip::inference_response> out = s.infer(name, add_sub_request(a, b));
  REQUIRE(out);
  REQUIRE(out->outputs.size() == 2);
  CHECK(out->outputs[0].name() == "OUTPUT0");
  CHECK(out->outputs[0].type() == oip::datatype_of<T>);
  CHECK(out->outputs[0].shape() == oip::shape_type{1, static_cast<std::int64_t>(a.size())});
  for (std::size_t i = 0; i < a.size(); ++i) {
    CAPTURE(i);
    CHECK(out->outputs[0].at<T>(i) == sum[i]);
    CHECK(out->outputs[1].at<T>(i) == difference[i]);
  }
}

template <class T>
std::vector<T> ramp(T first) {
  std::vector<T> v(16);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<T>(first + static_cast<T>(i));
  return v;
}

}  // namespace

TEST_CASE("simple and simple_<type> add and subtract for every numeric type, wrapping integers") {
  served s{oip_serve::reference_models()};
  REQUIRE(s.failures.empty());
  {
    std::vector<std::int32_t> a = ramp<std::int32_t>(0);
    std::vector<std::int32_t> b(16, 1);
    a[15] = std::numeric_limits<std::int32_t>::max();
    std::vector<std::int32_t> sum(16);
    std::vector<std::int32_t> difference(16);
    for (std::size_t i = 0; i < 16; ++i) {
      sum[i] = static_cast<std::int32_t>(i + 1);
      difference[i] = static_cast<std::int32_t>(i) - 1;
    }
    sum[15] = std::numeric_limits<std::int32_t>::min();
    difference[15] = std::numeric_limits<std::int32_t>::max() - 1;
    check_add_sub(s, "simple", a, b, sum, difference);
  }
  {
    const std::vector<std::int8_t> a(16, 127);
    const std::vector<std::int8_t> b(16, 1);
    check_add_sub(s, "simple_int8", a, b, std::vector<std::int8_t>(16, -128),
                  std::vector<std::int8_t>(16, 126));
  }
  {
    const std::vector<std::uint8_t> a(16, 0);
    const std::vector<std::uint8_t> b(16, 1);
    check_add_sub(s, "simple_uint8", a, b, std::vector<std::uint8_t>(16, 1),
                  std::vector<std::uint8_t>(16, 255));
  }
  {
    const std::vector<std::uint16_t> a(16, 65535);
    const std::vector<std::uint16_t> b(16, 2);
    check_add_sub(s, "simple_uint16", a, b, std::vector<std::uint16_t>(16, 1),
                  std::vector<std::uint16_t>(16, 65533));
  }
  {
    const std::vector<std::uint32_t> a(16, 5);
    const std::vector<std::uint32_t> b(16, 7);
    check_add_sub(s, "simple_uint32", a, b, std::vector<std::uint32_t>(16, 12),
                  std::vector<std::uint32_t>(16, 4294967294U));
  }
  {
    const std::vector<std::uint64_t> a(16, 18446744073709551615ULL);
    const std::vector<std::uint64_t> b(16, 1);
    check_add_sub(s, "simple_uint64", a, b, std::vector<std::uint64_t>(16, 0),
                  std::vector<std::uint64_t>(16, 18446744073709551614ULL));
  }
  {
    const std::vector<std::int16_t> a(16, -32768);
    const std::vector<std::int16_t> b(16, 1);
    check_add_sub(s, "simple_int16", a, b, std::vector<std::int16_t>(16, -32767),
                  std::vector<std::int16_t>(16, 32767));
  }
  {
    const std::vector<std::int64_t> a(16, std::numeric_limits<std::int64_t>::max());
    const std::vector<std::int64_t> b(16, -1);
    check_add_sub(s, "simple_int64", a, b, std::vector<std::int64_t>(16, a[0] - 1),
                  std::vector<std::int64_t>(16, std::numeric_limits<std::int64_t>::min()));
  }
  {
    const std::vector<float> a(16, 0.5F);
    const std::vector<float> b(16, 0.25F);
    check_add_sub(s, "simple_fp32", a, b, std::vector<float>(16, 0.75F),
                  std::vector<float>(16, 0.25F));
  }
  {
    const std::vector<double> a(16, 0.1);
    const std::vector<double> b(16, 0.2);
    check_add_sub(s, "simple_fp64", a, b, std::vector<double>(16, 0.30000000000000004),
                  std::vector<double>(16, -0.1));
  }
  {
    // 1 + 2^-11 ties to even (1); 1 - 2^-11 is exact in FP16.
    const std::vector<oip::half> a(16, oip::to_half(1.0F));
    const std::vector<oip::half> b(16, oip::to_half(0x1p-11F));
    check_add_sub(s, "simple_fp16", a, b, std::vector<oip::half>(16, oip::to_half(1.0F)),
                  std::vector<oip::half>(16, oip::to_half(1.0F - 0x1p-11F)));
  }
  {
    const std::vector<oip::bfloat16> a(16, oip::to_bfloat16(256.0F));
    const std::vector<oip::bfloat16> b(16, oip::to_bfloat16(3.0F));
    check_add_sub(s, "simple_bf16", a, b, std::vector<oip::bfloat16>(16, oip::to_bfloat16(260.0F)),
                  std::vector<oip::bfloat16>(16, oip::to_bfloat16(253.0F)));
  }
}

TEST_CASE("identity_<type> returns its input's bytes for every datatype") {
  served s{oip_serve::reference_models()};
  for (const char* name :
       {"identity_uint8", "identity_int64", "identity_fp16", "identity_fp64", "identity_bool"}) {
    CAPTURE(name);
    const std::string type_name = std::string{name}.substr(9);
    std::string upper;
    for (char c : type_name) upper += static_cast<char>(c >= 'a' && c <= 'z' ? c - 32 : c);
    const oip::result<oip::datatype> type = oip::parse_datatype(upper);
    REQUIRE(type);
    const std::size_t size = oip::element_size(*type);
    std::vector<std::byte> bytes(6 * size);
    for (std::size_t i = 0; i < bytes.size(); ++i) {
      bytes[i] = static_cast<std::byte>(*type == oip::datatype::boolean ? i % 2 : i * 37 + 1);
    }
    oip::inference_request r;
    r.inputs.push_back(*oip::tensor::make("INPUT0", *type, {2, 3}, *oip::buffer::copy_of(bytes)));
    oip::result<oip::inference_response> out = s.infer(name, std::move(r));
    REQUIRE(out);
    REQUIRE(out->outputs.size() == 1);
    CHECK(out->outputs[0].type() == *type);
    CHECK(out->outputs[0].shape() == oip::shape_type{2, 3});
    const auto got = out->outputs[0].data().bytes();
    CHECK(std::equal(got.begin(), got.end(), bytes.begin(), bytes.end()));
  }
}

TEST_CASE("the classifier's rows are softmax distributions, the same alone as in a batch") {
  served s{oip_serve::reference_models()};
  std::vector<float> x(2 * 2048);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i) * 0.01F);
  oip::inference_request both;
  both.inputs.push_back(*oip::tensor::from_values<float>("INPUT0", {2, 2048}, x));
  oip::result<oip::inference_response> batch = s.infer("classifier", std::move(both));
  REQUIRE(batch);
  const oip::tensor& y = batch->outputs.at(0);
  REQUIRE(y.shape() == oip::shape_type{2, 1000});
  for (std::size_t row = 0; row < 2; ++row) {
    double total = 0;
    for (std::size_t c = 0; c < 1000; ++c) {
      const float p = y.at<float>(row * 1000 + c);
      CHECK(p >= 0.0F);
      total += p;
    }
    CHECK(total == doctest::Approx(1.0).epsilon(1e-4));
  }
  oip::inference_request second;
  second.inputs.push_back(*oip::tensor::from_values<float>(
      "INPUT0", {1, 2048}, std::span<const float>(x).subspan(2048)));
  oip::result<oip::inference_response> alone = s.infer("classifier", std::move(second));
  REQUIRE(alone);
  for (std::size_t c = 0; c < 1000; ++c) {
    CHECK(alone->outputs.at(0).at<float>(c) ==
          doctest::Approx(y.at<float>(1000 + c)).epsilon(1e-5));
  }
}

TEST_CASE("sequence_accumulator keeps a running sum per sequence") {
  served s{oip_serve::reference_models()};
  CHECK(*s.sequence_step("sequence_accumulator", 1, 5, true) == 5);
  CHECK(*s.sequence_step("sequence_accumulator", 2, 100, true) == 100);
  CHECK(*s.sequence_step("sequence_accumulator", 1, 7, false) == 12);
  CHECK(*s.sequence_step("sequence_accumulator", 2, -1, false) == 99);
  CHECK(*s.sequence_step("sequence_accumulator", 1, 1, true) ==
        1);  // START again: the sum restarts
}

TEST_CASE(
    "--device: cpu and auto run on the CPU here; a bad choice or a missing device is an error") {
  bool failed = true;
  oip_serve::placement cpu = oip_serve::place_models(oip_serve::reference_models(), "cpu", failed);
  CHECK_FALSE(failed);
  CHECK(cpu.models.size() == oip_serve::reference_models().size());
  CHECK(cpu.where.find("CPU") != std::string::npos);

  oip_serve::placement bad = oip_serve::place_models(oip_serve::reference_models(), "gpu", failed);
  CHECK(failed);
  CHECK(bad.models.empty());
  CHECK(bad.where.find("expected auto, cpu, cuda or cuda:N") != std::string::npos);

  oip_serve::placement bad_index =
      oip_serve::place_models(oip_serve::reference_models(), "cuda:x", failed);
  CHECK(failed);

  oip_serve::placement automatic =
      oip_serve::place_models(oip_serve::reference_models(), "auto", failed);
  CHECK_FALSE(failed);
  CHECK(automatic.models.size() == cpu.models.size());
  CHECK_FALSE(automatic.where.empty());
}
