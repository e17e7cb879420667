#pragma once
// Models shared by the serving tests: `simple` (Triton's add/sub example, batching up to 8),
// `scores` (FP32 scores with labels, for classification) and `waiter` (runs until cancelled).

#include <oip/inference_service.hpp>
#include <oip/model.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace oip::testing {

inline model_config simple_config() {
  model_config c;
  c.name = "simple";
  c.max_batch_size = 8;
  c.inputs = {{"INPUT0", datatype::int32, {16}, {}}, {"INPUT1", datatype::int32, {16}, {}}};
  c.outputs = {{"OUTPUT0", datatype::int32, {16}, {}}, {"OUTPUT1", datatype::int32, {16}, {}}};
  return c;
}

// OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1.
inline std::shared_ptr<model> make_simple(model_config config = simple_config()) {
  return make_model(std::move(config), [](const inference_request& r) -> result<model_output> {
    const tensor& a = r.inputs[0].name() == "INPUT0" ? r.inputs[0] : r.inputs[1];
    const tensor& b = r.inputs[0].name() == "INPUT0" ? r.inputs[1] : r.inputs[0];
    std::vector<std::int32_t> sum(a.element_count());
    std::vector<std::int32_t> difference(a.element_count());
    for (std::size_t i = 0; i < sum.size(); ++i) {
      sum[i] = a.at<std::int32_t>(i) + b.at<std::int32_t>(i);
      difference[i] = a.at<std::int32_t>(i) - b.at<std::int32_t>(i);
    }
    model_output out;
    out.outputs.push_back(*tensor::from_values<std::int32_t>("OUTPUT0", a.shape(),
                                                             std::span<const std::int32_t>(sum)));
    out.outputs.push_back(*tensor::from_values<std::int32_t>(
        "OUTPUT1", a.shape(), std::span<const std::int32_t>(difference)));
    out.parameters.set("computed_by", std::string{"simple"});
    return out;
  });
}

// `simple` under another name, run on the thread that receives its requests.
inline std::shared_ptr<model> make_inline_simple(std::string name) {
  model_config config = simple_config();
  config.name = std::move(name);
  config.inline_execution = true;
  return make_simple(std::move(config));
}

// A request for `simple`: `rows` rows of INPUT0 and INPUT1 (ones), INPUT1 left out when not
// `complete` (a client's mistake).
inline inference_request simple_request(std::int64_t rows = 1, std::optional<std::string> id = {},
                                        bool complete = true) {
  const std::vector<std::int32_t> ones(static_cast<std::size_t>(rows) * 16, 1);
  inference_request r;
  r.id = std::move(id);
  r.inputs.push_back(*tensor::from_values<std::int32_t>("INPUT0", {rows, 16}, ones));
  if (complete) r.inputs.push_back(*tensor::from_values<std::int32_t>("INPUT1", {rows, 16}, ones));
  return r;
}

// Copies its FP32 input to its output; three labels.
inline std::shared_ptr<model> make_scores() {
  model_config c;
  c.name = "scores";
  c.inputs = {{"IN", datatype::fp32, {-1}, {}}};
  c.outputs = {{"OUT", datatype::fp32, {-1}, {}}};
  c.labels = {{"OUT", {"cat", "dog", "bird"}}};
  return make_model(std::move(c), [](const inference_request& r) -> result<model_output> {
    model_output out;
    out.outputs.push_back(
        *tensor::make("OUT", datatype::fp32, r.inputs[0].shape(), r.inputs[0].data()));
    return out;
  });
}

// Finishes only when its call is cancelled (or after 10 s); counts its executions.
class waiter : public model {
 public:
  waiter() {
    config_.name = "waiter";
    config_.inputs = {{"IN", datatype::int32, {1}, {}}};
    config_.outputs = {{"OUT", datatype::int32, {1}, {}}};
  }
  [[nodiscard]] const model_config& config() const noexcept override { return config_; }
  void execute(inference_call call) override {
    started.fetch_add(1);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds{10};
    while (!call.cancelled() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds{1});
    }
    saw_cancel.store(call.cancelled());
    call.finish(status{errc::unavailable, "cancelled while running"});
  }
  std::atomic<int> started{0};
  std::atomic<bool> saw_cancel{false};

 private:
  model_config config_;
};

// A server whose clients may load and unload models.
inline server_options with_model_control() {
  server_options options;
  options.model_control = model_control_mode::explicit_loading;
  return options;
}

}  // namespace oip::testing
