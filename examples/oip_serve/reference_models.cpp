#include "reference_models.hpp"

#include <oip/tensor.hpp>

#include <charconv>
#include <cstdint>
#include <span>
#include <string_view>

#include <fmt/format.h>

namespace oip_serve {

namespace {

using oip::datatype;
using oip::model_output;
using oip::result;
using oip::tensor;

oip::model_config add_sub_config(std::string name, datatype type) {
  oip::model_config c;
  c.name = std::move(name);
  c.max_batch_size = 8;
  c.inputs = {{"INPUT0", type, {16}, {}}, {"INPUT1", type, {16}, {}}};
  c.outputs = {{"OUTPUT0", type, {16}, {}}, {"OUTPUT1", type, {16}, {}}};
  return c;
}

const tensor& input(const oip::inference_request& r, std::string_view name) {
  return r.inputs[0].name() == name ? r.inputs[0] : r.inputs[1];
}

// OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1, wrapping like Triton's C++ example.
template <class T>
std::shared_ptr<oip::model> add_sub(std::string name) {
  return oip::make_model(add_sub_config(std::move(name), oip::datatype_of<T>),
                         [](const oip::inference_request& r) -> result<model_output> {
                           const tensor& a = input(r, "INPUT0");
                           const tensor& b = input(r, "INPUT1");
                           std::vector<T> sum(a.element_count());
                           std::vector<T> difference(a.element_count());
                           for (std::size_t i = 0; i < sum.size(); ++i) {
                             const auto x = static_cast<std::int64_t>(a.at<T>(i));
                             const auto y = static_cast<std::int64_t>(b.at<T>(i));
                             sum[i] = static_cast<T>(x + y);
                             difference[i] = static_cast<T>(x - y);
                           }
                           model_output out;
                           for (auto* values : {&sum, &difference}) {
                             result<tensor> t =
                                 tensor::from_values<T>(values == &sum ? "OUTPUT0" : "OUTPUT1",
                                                        a.shape(), std::span<const T>(*values));
                             if (!t) return std::move(t).error();
                             out.outputs.push_back(std::move(*t));
                           }
                           return out;
                         });
}

result<std::int64_t> parse_decimal(std::string_view text, std::string_view name) {
  std::int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size()) {
    return oip::status{oip::errc::invalid_argument,
                       fmt::format("input '{}' holds '{}', which is not a decimal integer", name,
                                   text.substr(0, 64))};
  }
  return value;
}

// The BYTES form of `simple`: decimal integers as strings, in and out.
std::shared_ptr<oip::model> simple_string() {
  return oip::make_model(
      add_sub_config("simple_string", datatype::bytes),
      [](const oip::inference_request& r) -> result<model_output> {
        const tensor& a = input(r, "INPUT0");
        const tensor& b = input(r, "INPUT1");
        std::vector<std::string> sum;
        std::vector<std::string> difference;
        auto y = b.strings().begin();
        for (std::string_view x_text : a.strings()) {
          result<std::int64_t> x = parse_decimal(x_text, "INPUT0");
          if (!x) return std::move(x).error();
          result<std::int64_t> y_value = parse_decimal(*y++, "INPUT1");
          if (!y_value) return std::move(y_value).error();
          sum.push_back(std::to_string(*x + *y_value));
          difference.push_back(std::to_string(*x - *y_value));
        }
        model_output out;
        for (auto* values : {&sum, &difference}) {
          const std::vector<std::string_view> views(values->begin(), values->end());
          result<tensor> t =
              tensor::from_strings(values == &sum ? "OUTPUT0" : "OUTPUT1", a.shape(), views);
          if (!t) return std::move(t).error();
          out.outputs.push_back(std::move(*t));
        }
        return out;
      });
}

// INPUT0 [-1,-1] of `type` → OUTPUT0, the same bytes (shared, not copied).
std::shared_ptr<oip::model> identity(std::string name, datatype type) {
  oip::model_config c;
  c.name = std::move(name);
  c.inputs = {{"INPUT0", type, {-1, -1}, {}}};
  c.outputs = {{"OUTPUT0", type, {-1, -1}, {}}};
  return oip::make_model(
      std::move(c), [type](const oip::inference_request& r) -> result<model_output> {
        result<tensor> out = tensor::make("OUTPUT0", type, r.inputs[0].shape(), r.inputs[0].data());
        if (!out) return std::move(out).error();
        return model_output{{std::move(*out)}, {}};
      });
}

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return out;
}

}  // namespace

std::vector<std::shared_ptr<oip::model>> reference_models() {
  std::vector<std::shared_ptr<oip::model>> models{
      add_sub<std::int32_t>("simple"), add_sub<std::int8_t>("simple_int8"), simple_string(),
      identity("simple_identity", datatype::bytes)};
  for (const datatype type :
       {datatype::boolean, datatype::uint8, datatype::uint16, datatype::uint32, datatype::uint64,
        datatype::int8, datatype::int16, datatype::int32, datatype::int64, datatype::fp16,
        datatype::bf16, datatype::fp32, datatype::fp64, datatype::bytes}) {
    models.push_back(identity("identity_" + lower(to_string(type)), type));
  }
  return models;
}

}  // namespace oip_serve
