#include "reference_models.hpp"

#include "decoupled_models.hpp"
#include "text_models.hpp"

#include <oip/elementwise.hpp>
#include <oip/tensor.hpp>

#include <algorithm>
#include <any>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <span>
#include <string_view>

#include <fmt/format.h>

#if OIP_SERVE_WITH_BLAS
#include <cblas.h>
#endif

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

// OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1, element by element with the functors
// that the CUDA models run (integers wrap like Triton's C++ example).
template <class T>
std::shared_ptr<oip::model> add_sub(std::string name) {
  return oip::make_model(add_sub_config(std::move(name), oip::datatype_of<T>),
                         [](const oip::inference_request& r) -> result<model_output> {
                           const tensor& a = input(r, "INPUT0");
                           const tensor& b = input(r, "INPUT1");
                           // The outputs are written where they will be sent from: no vector to
                           // copy them out of.
                           const std::size_t count = a.element_count();
                           result<oip::mutable_buffer> sum =
                               oip::mutable_buffer::allocate_for_overwrite(count * sizeof(T));
                           if (!sum) return std::move(sum).error();
                           result<oip::mutable_buffer> difference =
                               oip::mutable_buffer::allocate_for_overwrite(count * sizeof(T));
                           if (!difference) return std::move(difference).error();
                           for (std::size_t i = 0; i < count; ++i) {
                             T s{};
                             T d{};
                             oip::elementwise::add_sub(a.at<T>(i), b.at<T>(i), s, d);
                             std::memcpy(sum->data() + i * sizeof(T), &s, sizeof(T));
                             std::memcpy(difference->data() + i * sizeof(T), &d, sizeof(T));
                           }
                           model_output out;
                           out.outputs.reserve(2);
                           for (auto* values : {&*sum, &*difference}) {
                             result<tensor> t =
                                 tensor::make(values == &*sum ? "OUTPUT0" : "OUTPUT1",
                                              oip::datatype_of<T>, a.shape(), std::move(*values));
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
    // At most 64 bytes of it, cut before a UTF-8 continuation byte rather than within a character.
    std::size_t cut = std::min<std::size_t>(text.size(), 64);
    while (cut > 0 && cut < text.size() &&
           (static_cast<unsigned char>(text[cut]) & 0xC0U) == 0x80U) {
      --cut;
    }
    return oip::status{oip::errc::invalid_argument,
                       fmt::format("input '{}' holds '{}', which is not a decimal integer", name,
                                   text.substr(0, cut))};
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

// FP32 [-1,2048] → softmax(x · W) FP32 [-1,1000], W a fixed 2048×1000 matrix from a seeded
// generator, with 1000 labels: for the classification extension and batching. One sgemm per
// batch, which is what makes batching pay.
class classifier : public oip::model {
 public:
  static constexpr std::size_t features = 2048;
  static constexpr std::size_t classes = 1000;

  explicit classifier(bool dynamic_batching) : weights_(classifier_weights()) {
    config_.name = "classifier";
    config_.max_batch_size = 8;
    // Requests queued while a batch runs join the next one: one sgemm reads the 8 MB of weights
    // once for up to 8 rows, where unbatched requests read them once each.
    config_.dynamic_batching = dynamic_batching;
    config_.batching.max_queue_delay = std::chrono::microseconds{0};
    config_.inputs = {{"INPUT0", datatype::fp32, {features}, {}}};
    config_.outputs = {{"OUTPUT0", datatype::fp32, {classes}, {}}};
    std::vector<std::string> labels;
    for (std::size_t i = 0; i < classes; ++i) labels.push_back(fmt::format("class_{:03}", i));
    config_.labels = {{"OUTPUT0", std::move(labels)}};
  }

  [[nodiscard]] const oip::model_config& config() const noexcept override { return config_; }

  void execute(oip::inference_call call) override {
    const tensor& x = call.request().inputs[0];
    const auto batch = static_cast<std::size_t>(x.shape()[0]);
    std::vector<float> in(batch * features);
    std::memcpy(in.data(), x.data().data(), in.size() * sizeof(float));  // aligned copy
    std::vector<float> out(batch * classes);
#if OIP_SERVE_WITH_BLAS
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(batch),
                static_cast<int>(classes), static_cast<int>(features), 1.0F, in.data(),
                static_cast<int>(features), weights_.data(), static_cast<int>(classes), 0.0F,
                out.data(), static_cast<int>(classes));
#else
    for (std::size_t b = 0; b < batch; ++b) {
      for (std::size_t k = 0; k < features; ++k) {
        const float v = in[b * features + k];
        for (std::size_t c = 0; c < classes; ++c)
          out[b * classes + c] += v * weights_[k * classes + c];
      }
    }
#endif
    for (std::size_t b = 0; b < batch; ++b) {
      float* row = out.data() + b * classes;
      float top = row[0];
      for (std::size_t c = 1; c < classes; ++c) top = std::max(top, row[c]);
      float sum = 0;
      for (std::size_t c = 0; c < classes; ++c) sum += (row[c] = std::exp(row[c] - top));
      for (std::size_t c = 0; c < classes; ++c) row[c] /= sum;
    }
    result<tensor> y = tensor::from_values<float>(
        "OUTPUT0", {static_cast<std::int64_t>(batch), static_cast<std::int64_t>(classes)},
        std::span<const float>(out));
    if (!y) return call.finish(std::move(y).error());
    call.finish(model_output{{std::move(*y)}, {}});
  }

 private:
  oip::model_config config_;
  std::vector<float> weights_;
};

// The sequence models: INPUT INT32 [1] → OUTPUT INT32 [1], one step of arithmetic per request
// on the request's control values and its sequence's state, as Triton's models of these names do.
class sequence_model : public oip::model {
 public:
  using step_function = std::function<result<std::int32_t>(std::int32_t, oip::sequence_step&)>;

  sequence_model(oip::model_config config, step_function step)
      : config_{std::move(config)}, step_{std::move(step)} {}

  [[nodiscard]] const oip::model_config& config() const noexcept override { return config_; }

  void execute(oip::inference_call call) override {
    const tensor& in = call.request().inputs[0];
    result<std::int32_t> value = step_(in.at<std::int32_t>(0), *call.sequence());
    if (!value) return call.finish(std::move(value).error());
    const std::int32_t out = *value;
    result<tensor> y = tensor::from_values<std::int32_t>("OUTPUT", in.shape(),
                                                         std::span<const std::int32_t>(&out, 1));
    if (!y) return call.finish(std::move(y).error());
    call.finish(model_output{{std::move(*y)}, {}});
  }

 private:
  oip::model_config config_;
  step_function step_;
};

// Wrapping int32 arithmetic, as the models' int32 tensors do.
std::int32_t wrapping_add(std::int32_t a, std::int64_t b) {
  return static_cast<std::int32_t>(static_cast<std::uint32_t>(a) + static_cast<std::uint64_t>(b));
}

oip::model_config sequence_config(std::string name, std::int64_t max_batch_size,
                                  std::chrono::microseconds max_idle) {
  oip::model_config c;
  c.name = std::move(name);
  c.max_batch_size = max_batch_size;
  c.inputs = {{"INPUT", datatype::int32, {1}, {}}};
  c.outputs = {{"OUTPUT", datatype::int32, {1}, {}}};
  c.sequence_batching = true;
  // A shared server's bounds: one client can hold at most this many sequences, each until it
  // has been idle `max_idle` (at most 10 s here), before others get a 503 for a START.
  c.sequence.max_idle = max_idle;
  c.sequence.max_active = 256;
  c.sequence.max_waiting = 1024;
  c.sequence.start_input = "START";
  c.sequence.ready_input = "READY";
  return c;
}

// simple_sequence: OUTPUT = INPUT + START while READY (no state): Triton's example model.
std::shared_ptr<oip::model> simple_sequence() {
  return std::make_shared<sequence_model>(
      sequence_config("simple_sequence", 8, std::chrono::seconds{1}),
      [](std::int32_t input, oip::sequence_step& step) -> result<std::int32_t> {
        if (!step.ready) return 0;
        return wrapping_add(input, step.start ? 1 : 0);
      });
}

// The dyna models' configuration: START, END, READY and a CORRID control of `id_type`.
oip::model_config dyna_config(std::string name, oip::correlation_id_type id_type) {
  oip::model_config c = sequence_config(std::move(name), 8, std::chrono::seconds{10});
  c.sequence.end_input = "END";
  c.sequence.correlation_input = "CORRID";
  c.sequence.id_type = id_type;
  return c;
}

// The sequence's running sum, 0 on START.
std::int32_t& running_sum(oip::sequence_step& step) {
  std::any& state = *step.state;
  if (step.start || !state.has_value()) state = std::int32_t{0};
  return std::any_cast<std::int32_t&>(state);
}

// simple_dyna_sequence: OUTPUT = INPUT + START + END × CORRID (uint64 ids).
std::shared_ptr<oip::model> simple_dyna_sequence() {
  oip::model_config c = dyna_config("simple_dyna_sequence", oip::correlation_id_type::uint64);
  return std::make_shared<sequence_model>(
      std::move(c), [](std::int32_t input, oip::sequence_step& step) -> result<std::int32_t> {
        if (!step.ready) return 0;
        const std::int32_t id = step.end ? static_cast<std::int32_t>(step.id.number()) : 0;
        return wrapping_add(wrapping_add(input, step.start ? 1 : 0), id);
      });
}

// simple_string_dyna_sequence: Triton's dyna_sequence backend with string ids. A running sum per
// sequence (START sets it), and at END the id, read as a decimal integer, is added.
std::shared_ptr<oip::model> simple_string_dyna_sequence() {
  oip::model_config c =
      dyna_config("simple_string_dyna_sequence", oip::correlation_id_type::string);
  return std::make_shared<sequence_model>(
      std::move(c), [](std::int32_t input, oip::sequence_step& step) -> result<std::int32_t> {
        std::int32_t& sum = running_sum(step);
        sum = wrapping_add(sum, input);
        if (step.end) {
          result<std::int64_t> id = parse_decimal(step.id.text(), "CORRID");
          if (!id) {
            return oip::status{oip::errc::invalid_argument,
                               fmt::format("model 'simple_string_dyna_sequence' expects a "
                                           "correlation ID that reads as an integer, got '{}'",
                                           step.id.text().substr(0, 64))};
          }
          sum = wrapping_add(sum, *id);
        }
        return sum;
      });
}

// sequence_accumulator: INT32 [1] → the sequence's running sum (any id type, no batching).
std::shared_ptr<oip::model> sequence_accumulator() {
  oip::model_config c = sequence_config("sequence_accumulator", 0, std::chrono::seconds{10});
  c.sequence.end_input = "END";
  return std::make_shared<sequence_model>(
      std::move(c), [](std::int32_t input, oip::sequence_step& step) -> result<std::int32_t> {
        std::int32_t& sum = running_sum(step);
        sum = wrapping_add(sum, input);
        return sum;
      });
}

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return out;
}

}  // namespace

std::vector<float> classifier_weights() {
  std::vector<float> weights(classifier::features * classifier::classes);
  std::mt19937 rng{2048};
  std::normal_distribution<float> dist{0.0F, 0.05F};
  for (float& w : weights) w = dist(rng);
  return weights;
}

namespace {

// Each reference model by name, with what builds it: the index lists the names, and a load builds
// the one model it names (the classifier's weights are 8 MB).
struct catalogue_entry {
  std::string name;
  std::function<std::shared_ptr<oip::model>(bool dynamic_batching)> make;
};

const std::vector<catalogue_entry>& catalogue() {
  static const std::vector<catalogue_entry> entries = [] {
    std::vector<catalogue_entry> out{
        {"simple", [](bool) { return add_sub<std::int32_t>("simple"); }},
        {"simple_int8", [](bool) { return add_sub<std::int8_t>("simple_int8"); }},
        {"simple_string", [](bool) { return simple_string(); }},
        {"simple_identity", [](bool) { return identity("simple_identity", datatype::bytes); }},
        {"classifier",
         [](bool dynamic_batching) { return std::make_shared<classifier>(dynamic_batching); }},
        {"simple_sequence", [](bool) { return simple_sequence(); }},
        {"simple_dyna_sequence", [](bool) { return simple_dyna_sequence(); }},
        {"simple_string_dyna_sequence", [](bool) { return simple_string_dyna_sequence(); }},
        {"sequence_accumulator", [](bool) { return sequence_accumulator(); }},
        {"repeat_int32", [](bool) { return repeat_int32(); }},
        {"square_int32", [](bool) { return square_int32(); }},
        {"text_stream", [](bool) { return text_stream(); }},
        {"text_upper", [](bool) { return text_upper(); }},
        {"text_embed", [](bool) { return text_embed(); }},
        // simple_<type>: `simple` over every other numeric type (`simple` itself is INT32).
        {"simple_uint8", [](bool) { return add_sub<std::uint8_t>("simple_uint8"); }},
        {"simple_uint16", [](bool) { return add_sub<std::uint16_t>("simple_uint16"); }},
        {"simple_uint32", [](bool) { return add_sub<std::uint32_t>("simple_uint32"); }},
        {"simple_uint64", [](bool) { return add_sub<std::uint64_t>("simple_uint64"); }},
        {"simple_int16", [](bool) { return add_sub<std::int16_t>("simple_int16"); }},
        {"simple_int64", [](bool) { return add_sub<std::int64_t>("simple_int64"); }},
        {"simple_fp16", [](bool) { return add_sub<oip::half>("simple_fp16"); }},
        {"simple_bf16", [](bool) { return add_sub<oip::bfloat16>("simple_bf16"); }},
        {"simple_fp32", [](bool) { return add_sub<float>("simple_fp32"); }},
        {"simple_fp64", [](bool) { return add_sub<double>("simple_fp64"); }},
    };
    for (const datatype type :
         {datatype::boolean, datatype::uint8, datatype::uint16, datatype::uint32, datatype::uint64,
          datatype::int8, datatype::int16, datatype::int32, datatype::int64, datatype::fp16,
          datatype::bf16, datatype::fp32, datatype::fp64, datatype::bytes}) {
      std::string name = "identity_" + lower(to_string(type));
      out.push_back({name, [name, type](bool) { return identity(name, type); }});
    }
    return out;
  }();
  return entries;
}

}  // namespace

std::vector<std::shared_ptr<oip::model>> reference_models(bool dynamic_batching) {
  std::vector<std::shared_ptr<oip::model>> models;
  for (const catalogue_entry& entry : catalogue()) models.push_back(entry.make(dynamic_batching));
  return models;
}

std::vector<std::string> reference_model_names() {
  std::vector<std::string> names;
  for (const catalogue_entry& entry : catalogue()) names.push_back(entry.name);
  return names;
}

std::shared_ptr<oip::model> reference_model(std::string_view name, bool dynamic_batching) {
  for (const catalogue_entry& entry : catalogue()) {
    if (entry.name == name) return entry.make(dynamic_batching);
  }
  return nullptr;
}

}  // namespace oip_serve
