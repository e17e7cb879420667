#include <oip/in_process_client.hpp>
#include <oip/xtensor.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <xtensor/xmath.hpp>

TEST_CASE("aligned tensors are viewed without a copy") {
  const std::vector<float> v{1, 2, 3, 4, 5, 6};
  oip::result<oip::tensor> t = oip::tensor::from_values<float>("x", {2, 3}, v);
  REQUIRE(t.ok());
  oip::result<oip::xtensor_view<float>> x = oip::as_xtensor<float>(*t);
  REQUIRE(x.ok());
  CHECK_FALSE(x->copied);
  CHECK(x->array.data() == reinterpret_cast<const float*>(t->data().data()));
  CHECK(x->array.dimension() == 2);
  CHECK(x->array(1, 2) == 6.0F);
  CHECK(xt::sum(x->array)() == 21.0F);
}

TEST_CASE("the view keeps the bytes alive after the tensor is gone") {
  oip::result<oip::xtensor_view<std::int64_t>> x = [] {
    const std::vector<std::int64_t> v{7, 8, 9};
    oip::result<oip::tensor> t = oip::tensor::from_values<std::int64_t>("x", {3}, v);
    return oip::as_xtensor<std::int64_t>(*t);
  }();
  REQUIRE(x.ok());
  CHECK(x->array(2) == 9);
}

TEST_CASE("unaligned tensors are copied once, and say so") {
  std::string body(1 + 3 * sizeof(double), '\0');
  const double values[3] = {0.5, 1.5, -2.0};
  std::memcpy(body.data() + 1, values, sizeof(values));
  const oip::buffer whole = oip::buffer::from_string(std::move(body));
  oip::result<oip::buffer> slice = whole.slice(1, sizeof(values));
  REQUIRE(slice.ok());
  oip::result<oip::tensor> t = oip::tensor::make("x", oip::datatype::fp64, {3}, *slice);
  REQUIRE(t.ok());
  oip::result<oip::xtensor_view<double>> x = oip::as_xtensor<double>(*t);
  REQUIRE(x.ok());
  CHECK(x->copied);
  CHECK(x->array(0) == 0.5);
  CHECK(x->array(2) == -2.0);
  CHECK(reinterpret_cast<std::uintptr_t>(x->array.data()) % alignof(double) == 0);
}

TEST_CASE("BOOL bytes other than 0 and 1 are normalised in a copy") {
  oip::result<oip::tensor> clean = oip::tensor::make(
      "b", oip::datatype::boolean, {2}, oip::buffer::from_string(std::string("\x01\x00", 2)));
  REQUIRE(clean.ok());
  oip::result<oip::xtensor_view<bool>> c = oip::as_xtensor<bool>(*clean);
  REQUIRE(c.ok());
  CHECK_FALSE(c->copied);
  oip::result<oip::tensor> dirty = oip::tensor::make(
      "b", oip::datatype::boolean, {2}, oip::buffer::from_string(std::string("\x07\x00", 2)));
  REQUIRE(dirty.ok());
  oip::result<oip::xtensor_view<bool>> d = oip::as_xtensor<bool>(*dirty);
  REQUIRE(d.ok());
  CHECK(d->copied);
  CHECK(d->array(0) == true);
  CHECK(d->array(1) == false);
}

TEST_CASE("viewing as the wrong type is an error") {
  const std::vector<std::int32_t> v{1};
  oip::result<oip::tensor> t = oip::tensor::from_values<std::int32_t>("INPUT0", {1}, v);
  REQUIRE(t.ok());
  oip::result<oip::xtensor_view<float>> x = oip::as_xtensor<float>(*t);
  REQUIRE_FALSE(x.ok());
  CHECK(x.error().message() == "tensor 'INPUT0' has datatype INT32, not FP32");
}

TEST_CASE("tensors are built from xtensor expressions, row-major") {
  const xt::xarray<float> a = {{1.F, 2.F, 3.F}, {4.F, 5.F, 6.F}};
  oip::result<oip::tensor> t = oip::from_xtensor("OUTPUT0", a * 2.F);
  REQUIRE(t.ok());
  CHECK(t->type() == oip::datatype::fp32);
  CHECK(t->shape() == oip::shape_type{2, 3});
  CHECK(t->at<float>(0) == 2.F);
  CHECK(t->at<float>(5) == 12.F);

  const xt::xarray<std::uint8_t> empty = xt::xarray<std::uint8_t>::from_shape({0, 4});
  oip::result<oip::tensor> e = oip::from_xtensor("E", empty);
  REQUIRE(e.ok());
  CHECK(e->element_count() == 0);
  CHECK(e->shape() == oip::shape_type{0, 4});
}

TEST_CASE("a model written with xtensor in a few lines, served through the protocol") {
  oip::model_config config;
  config.name = "add";
  config.inputs = {{"A", oip::datatype::fp32, {-1}, {}}, {"B", oip::datatype::fp32, {-1}, {}}};
  config.outputs = {{"SUM", oip::datatype::fp32, {-1}, {}}};
  auto add =
      oip::make_xtensor_model<float>(config, [](const auto& in) -> oip::result<oip::model_output> {
        oip::result<oip::tensor> sum = oip::from_xtensor("SUM", in[0].array + 10.0F * in[1].array);
        if (!sum) return std::move(sum).error();
        return oip::model_output{{std::move(*sum)}, {}};
      });
  oip::model_repository repository;
  REQUIRE(repository.add(add).ok());
  oip::executor workers{{1, 8}};
  oip::http_handler handler{repository, workers};
  oip::in_process_client client{handler};

  // B first in the request: the model still sees its inputs in its configured order.
  const std::vector<float> a{1, 2, 3};
  const std::vector<float> b{4, 5, 6};
  oip::inference_request request;
  request.inputs.push_back(*oip::tensor::from_values<float>("B", {3}, std::span<const float>(b)));
  request.inputs.push_back(*oip::tensor::from_values<float>("A", {3}, std::span<const float>(a)));
  oip::result<oip::inference_response> r = client.infer("add", request, {true, false});
  REQUIRE(r.ok());
  REQUIRE(r->outputs.size() == 1);
  CHECK(r->outputs[0].at<float>(0) == 41.0F);
  CHECK(r->outputs[0].at<float>(2) == 63.0F);
}
