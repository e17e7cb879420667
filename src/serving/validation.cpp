#include "serving/detail/validation.hpp"

#include "core/detail/find_duplicate.hpp"

#include <oip/classification.hpp>

#include <algorithm>
#include <string>

#include <fmt/format.h>

namespace oip::detail {

namespace {

std::string quoted_list(const std::vector<std::string_view>& names) {
  std::string out = "[";
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i != 0) out += ',';
    out += fmt::format("'{}'", names[i]);
  }
  return out + "]";
}

// The shape a client must send: the batch dimension first when the model batches.
shape_type full_shape(const model_config& config, const shape_type& dims) {
  shape_type shape;
  if (config.max_batch_size > 0) shape.push_back(-1);
  shape.insert(shape.end(), dims.begin(), dims.end());
  return shape;
}

bool shape_matches(const shape_type& expected, std::span<const std::int64_t> actual) {
  if (expected.size() != actual.size()) return false;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    if (expected[i] != -1 && expected[i] != actual[i]) return false;
  }
  return true;
}

status check_classification(const requested_output& output) {
  const parameter_value* value = output.parameters.find(parameter_names::classification);
  if (value == nullptr) return {};
  const auto* count = std::get_if<std::int64_t>(value);
  if (count == nullptr || *count < 0) {
    return status{errc::invalid_argument,
                  fmt::format("parameter 'classification' of output '{}' must be a non-negative "
                              "integer",
                              output.name)};
  }
  return {};
}

// The last of `tensors` named `name`, or null.
tensor* named(std::vector<tensor>& tensors, std::string_view name) {
  tensor* found = nullptr;
  for (tensor& t : tensors) {
    if (t.name() == name) found = &t;
  }
  return found;
}

}  // namespace

status validate_request(const model_config& config, const inference_request& request) {
  const std::string& model = config.name;
  for (const tensor& input : request.inputs) {
    const tensor_metadata* expected = config.find_input(input.name());
    if (expected == nullptr) {
      return status{errc::invalid_argument, fmt::format("unexpected inference input '{}' for "
                                                        "model '{}'",
                                                        input.name(), model)};
    }
    if (input.type() != expected->type) {
      return status{
          errc::invalid_argument,
          fmt::format("inference input '{}' data-type is '{}', but model '{}' expects "
                      "'{}'",
                      input.name(), to_string(input.type()), model, to_string(expected->type))};
    }
  }
  // The decoders refuse twins; a host's own request may hold them, and a model that looks its
  // inputs up by name would miss the one a twin stands in for.
  if (const std::optional<std::string_view> twin = detail::find_duplicate_name(
          request.inputs, [](const tensor& t) { return std::string_view{t.name()}; })) {
    return status{errc::invalid_argument, fmt::format("duplicate input name '{}'", *twin)};
  }
  if (const std::optional<std::string_view> twin = detail::find_duplicate_name(
          request.outputs, [](const requested_output& o) { return std::string_view{o.name}; })) {
    return status{errc::invalid_argument,
                  fmt::format("duplicate requested output name '{}'", *twin)};
  }
  if (request.inputs.size() != config.inputs.size()) {
    std::vector<std::string_view> got;
    for (const tensor& input : request.inputs) got.push_back(input.name());
    std::vector<std::string_view> missing;
    for (const tensor_metadata& t : config.inputs) {
      bool present = false;
      for (const tensor& input : request.inputs) present = present || input.name() == t.name;
      if (!present) missing.push_back(t.name);
    }
    return status{errc::invalid_argument,
                  fmt::format("expected {} inputs but got {} inputs for model '{}'. Got input(s) "
                              "{}, but missing required input(s) {}. Please provide all required "
                              "input(s).",
                              config.inputs.size(), request.inputs.size(), model, quoted_list(got),
                              quoted_list(missing))};
  }

  std::optional<std::int64_t> batch;
  for (const tensor& input : request.inputs) {
    const tensor_metadata& expected = *config.find_input(input.name());
    std::span<const std::int64_t> dims = input.shape();
    const shape_type full = full_shape(config, expected.shape);
    if (config.max_batch_size > 0 && !dims.empty()) {
      if (batch && *batch != dims[0]) {
        return status{errc::invalid_argument,
                      fmt::format("input '{}' batch size does not match other inputs for '{}'",
                                  input.name(), model)};
      }
      batch = dims[0];
    }
    if (!shape_matches(full, dims)) {
      std::string message =
          fmt::format("unexpected shape for input '{}' for model '{}'. Expected {}, got {}",
                      input.name(), model, to_string(full), to_string(dims));
      if (config.max_batch_size > 0 && dims.size() + 1 == full.size()) {
        message +=
            ". NOTE: Setting a non-zero max_batch_size in the model config requires a batch "
            "dimension to be prepended to each input shape. If you want to specify the full "
            "shape including the batch dim in your input dims config, try setting "
            "max_batch_size to zero. See the model configuration docs for more info on "
            "max_batch_size.";
      }
      return status{errc::invalid_argument, std::move(message)};
    }
  }
  if (batch && (*batch < 1 || *batch > config.max_batch_size)) {
    return status{errc::invalid_argument,
                  *batch < 1
                      ? fmt::format("inference request batch-size must be >= 1 for '{}'", model)
                      : fmt::format("inference request batch-size must be <= {} for '{}'",
                                    config.max_batch_size, model)};
  }

  for (const requested_output& output : request.outputs) {
    if (config.find_output(output.name) == nullptr) {
      return status{errc::invalid_argument, fmt::format("unexpected inference output '{}' for "
                                                        "model '{}'",
                                                        output.name, model)};
    }
    if (status s = check_classification(output); !s.ok()) return s;
  }
  return {};
}

std::uint64_t batch_size(const model_config& config, const inference_request& request) noexcept {
  if (config.max_batch_size <= 0 || request.inputs.empty() || request.inputs[0].shape().empty()) {
    return 1;
  }
  return static_cast<std::uint64_t>(request.inputs[0].shape()[0]);
}

status check_input_memory(const model_config& config, const inference_request& request,
                          std::span<const int> readable_devices) {
  for (const tensor& input : request.inputs) {
    if (input.in_host_memory() || std::find(readable_devices.begin(), readable_devices.end(),
                                            input.device()) != readable_devices.end()) {
      continue;
    }
    return status{errc::invalid_argument,
                  fmt::format("input '{}' is in the memory of CUDA device {}, where model '{}' "
                              "does not read its inputs; give it in host memory",
                              input.name(), input.device(), config.name)};
  }
  return {};
}

status check_in_host_memory(std::string_view model, const tensor& output) {
  if (output.in_host_memory()) return {};
  return status{errc::internal,
                fmt::format("model '{}' produced output '{}' in the memory of CUDA device {}; "
                            "outputs must be in host memory",
                            model, output.name(), output.device())};
}

status check_outputs(const model_config& config, const std::vector<tensor>& produced) {
  for (const tensor& t : produced) {
    if (status s = check_in_host_memory(config.name, t); !s.ok()) return s;
    const auto configured =
        std::find_if(config.outputs.begin(), config.outputs.end(),
                     [&](const tensor_metadata& output) { return output.name == t.name(); });
    if (configured == config.outputs.end()) {
      return status{errc::internal, fmt::format("unexpected inference output '{}' for model '{}'",
                                                t.name(), config.name)};
    }
    if (t.type() != configured->type) {
      return status{
          errc::internal,
          fmt::format("model '{}' produced output '{}' as {}, but its configuration "
                      "says {}",
                      config.name, t.name(), to_string(t.type()), to_string(configured->type))};
    }
    if (const shape_type full = full_shape(config, configured->shape);
        !shape_matches(full, t.shape())) {
      return status{errc::internal,
                    fmt::format("model '{}' produced output '{}' with shape {}, which does not "
                                "fit its configuration's {}",
                                config.name, t.name(), to_string(t.shape()), to_string(full))};
    }
  }
  return {};
}

result<inference_response> make_response(const model_config& config, std::uint64_t version,
                                         const std::optional<std::string>& id,
                                         const std::vector<requested_output>& asked,
                                         model_output&& produced) {
  if (status s = check_outputs(config, produced.outputs); !s.ok()) return s;
  for (const tensor& t : produced.classified) {
    if (status s = check_in_host_memory(config.name, t); !s.ok()) return s;
  }
  inference_response response;
  response.model_name = config.name;
  response.model_version = std::to_string(version);
  response.id = id;
  response.parameters = std::move(produced.parameters);
  if (asked.empty()) {
    response.outputs = std::move(produced.outputs);
    return response;
  }
  response.outputs.reserve(asked.size());
  for (const requested_output& output : asked) {
    const std::size_t top = output.classes_asked();
    const bool classifying = top > 0;
    if (classifying) {
      if (tensor* ranked = named(produced.classified, output.name); ranked != nullptr) {
        response.outputs.push_back(std::move(*ranked));
        continue;
      }
    }
    tensor* found = named(produced.outputs, output.name);
    if (found == nullptr) {
      return status{errc::internal, fmt::format("model '{}' did not produce the requested output "
                                                "'{}'",
                                                config.name, output.name)};
    }
    if (classifying) {
      const classification_rows rows = config.max_batch_size > 0
                                           ? classification_rows::batch_rows
                                           : classification_rows::whole_tensor;
      result<tensor> classes = classify(*found, top, rows, config.labels_of(output.name));
      if (!classes) return std::move(classes).error();
      response.outputs.push_back(std::move(*classes));
    } else {
      response.outputs.push_back(std::move(*found));
    }
  }
  return response;
}

}  // namespace oip::detail
