// The text reference models that answer once (`text_models.hpp`).

#include "text_models.hpp"

#include <oip/tensor.hpp>

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <span>
#include <string>
#include <utility>

#include <fmt/format.h>

namespace oip_serve {

using oip::datatype;
using oip::model_output;
using oip::status;
using oip::tensor;

// The prompt's words, each with the white space before it (the last with the white space after
// it too), so that they add up to the prompt.
std::vector<std::string_view> words_of(std::string_view text) {
  std::vector<std::string_view> words;
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  std::size_t start = 0;
  std::size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && space(text[i])) ++i;
    while (i < text.size() && !space(text[i])) ++i;
    words.push_back(text.substr(start, i - start));
    start = i;
  }
  if (!words.empty() && start < text.size()) {
    words.back() = text.substr(words.back().data() - text.data());
  }
  return words;
}

oip::result<std::int64_t> integer_parameter(const oip::parameters& p, std::string_view name,
                                            std::int64_t otherwise) {
  const oip::parameter_value* value = p.find(name);
  if (value == nullptr) return otherwise;
  if (const auto* i = std::get_if<std::int64_t>(value); i != nullptr && *i >= 0) return *i;
  if (const auto* u = std::get_if<std::uint64_t>(value)) {
    return static_cast<std::int64_t>(std::min<std::uint64_t>(*u, INT64_MAX));
  }
  return oip::status{oip::errc::invalid_argument,
                     fmt::format("parameter '{}' must be a non-negative integer", name)};
}

namespace {

class text_upper_model final : public oip::model {
 public:
  text_upper_model() {
    config_.name = "text_upper";
    config_.platform = "text_upper";
    config_.inputs = {{"prompt", datatype::bytes, {1}, {}},
                      {"max_tokens", datatype::int32, {1}, {}}};
    config_.outputs = {{"completion", datatype::bytes, {1}, {}}};
  }
  [[nodiscard]] const oip::model_config& config() const noexcept override { return config_; }

  void execute(oip::inference_call call) override {
    const oip::inference_request& request = call.request();
    const tensor* prompt = nullptr;
    const tensor* most = nullptr;
    for (const tensor& input : request.inputs) {
      (input.name() == "prompt" ? prompt : most) = &input;
    }
    const std::int32_t max_tokens = most->at<std::int32_t>(0);
    if (max_tokens < 0) {
      return call.finish(status{oip::errc::invalid_argument, "max_tokens must not be negative"});
    }
    const std::vector<std::string_view> words = words_of(*prompt->strings().begin());
    const std::size_t kept = std::min(words.size(), static_cast<std::size_t>(max_tokens));
    std::string text;
    for (std::size_t i = 0; i < kept; ++i) text += words[i];
    std::transform(text.begin(), text.end(), text.begin(), [](char c) {
      return c >= 'a' && c <= 'z' ? static_cast<char>(c - 'a' + 'A') : c;
    });
    const std::string_view completion = text;
    oip::result<tensor> out = tensor::from_strings("completion", {1}, std::span{&completion, 1});
    if (!out) return call.finish(out.error());
    model_output answer{{std::move(*out)}, {}};
    answer.parameters.set("prompt_tokens", static_cast<std::int64_t>(words.size()));
    answer.parameters.set("completion_tokens", static_cast<std::int64_t>(kept));
    answer.parameters.set("finish_reason", std::string{kept < words.size() ? "length" : "stop"});
    call.finish(std::move(answer));
  }

 private:
  oip::model_config config_;
};

class text_embed_model final : public oip::model {
 public:
  static constexpr std::size_t dimensions = 8;

  text_embed_model() {
    config_.name = "text_embed";
    config_.platform = "text_embed";
    config_.inputs = {{"text", datatype::bytes, {1}, {}}};
    config_.outputs = {{"embedding", datatype::fp32, {static_cast<std::int64_t>(dimensions)}, {}}};
  }
  [[nodiscard]] const oip::model_config& config() const noexcept override { return config_; }

  void execute(oip::inference_call call) override {
    const std::string_view text = *call.request().inputs.at(0).strings().begin();
    std::array<float, dimensions> v{};
    for (std::size_t i = 0; i < text.size(); ++i) {
      v[i % dimensions] += static_cast<float>(static_cast<unsigned char>(text[i])) / 255.0F;
    }
    float length = 0;
    for (const float x : v) length += x * x;
    length = std::sqrt(length);
    if (length > 0) {
      for (float& x : v) x /= length;
    }
    oip::result<tensor> out = tensor::from_values<float>(
        "embedding", {static_cast<std::int64_t>(dimensions)}, std::span<const float>{v});
    if (!out) return call.finish(out.error());
    model_output answer{{std::move(*out)}, {}};
    answer.parameters.set("prompt_tokens", static_cast<std::int64_t>(words_of(text).size()));
    call.finish(std::move(answer));
  }

 private:
  oip::model_config config_;
};

}  // namespace

std::shared_ptr<oip::model> text_upper() { return std::make_shared<text_upper_model>(); }
std::shared_ptr<oip::model> text_embed() { return std::make_shared<text_embed_model>(); }

}  // namespace oip_serve
