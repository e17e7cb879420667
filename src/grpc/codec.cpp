#include "codecs/detail/sequence_controls.hpp"
#include "core/detail/find_duplicate.hpp"
#include "grpc/messages.hpp"

#include <oip/grpc/codec.hpp>
#include <oip/json.hpp>
#include <oip/tensor.hpp>

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace oip::grpc {

namespace {

using contents_message = inference::InferTensorContents;

status invalid(std::string message) { return status{errc::invalid_argument, std::move(message)}; }

// --- parameters ----------------------------------------------------------------------------------

inference::InferParameter to_message(const parameter_value& value) {
  inference::InferParameter out;
  std::visit(
      [&out](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, bool>) {
          out.set_bool_param(v);
        } else if constexpr (std::is_same_v<T, std::int64_t>) {
          out.set_int64_param(v);
        } else if constexpr (std::is_same_v<T, std::uint64_t>) {
          out.set_uint64_param(v);
        } else if constexpr (std::is_same_v<T, double>) {
          out.set_double_param(v);
        } else {
          out.set_string_param(v);
        }
      },
      value);
  return out;
}

// --- typed contents ------------------------------------------------------------------------------

// Which typed field carries each datatype (FP16 and BF16 have none).
std::string_view contents_field(datatype type) {
  switch (type) {
    case datatype::boolean: return "bool_contents";
    case datatype::int8:
    case datatype::int16:
    case datatype::int32: return "int_contents";
    case datatype::int64: return "int64_contents";
    case datatype::uint8:
    case datatype::uint16:
    case datatype::uint32: return "uint_contents";
    case datatype::uint64: return "uint64_contents";
    case datatype::fp32: return "fp32_contents";
    case datatype::fp64: return "fp64_contents";
    case datatype::bytes: return "bytes_contents";
    case datatype::fp16:
    case datatype::bf16: break;
  }
  return {};
}

// The typed fields that hold elements, by name, with their counts.
std::vector<std::pair<std::string_view, int>> filled_fields(const contents_message& c) {
  std::vector<std::pair<std::string_view, int>> filled;
  const std::pair<std::string_view, int> all[] = {
      {"bool_contents", c.bool_contents_size()},     {"int_contents", c.int_contents_size()},
      {"int64_contents", c.int64_contents_size()},   {"uint_contents", c.uint_contents_size()},
      {"uint64_contents", c.uint64_contents_size()}, {"fp32_contents", c.fp32_contents_size()},
      {"fp64_contents", c.fp64_contents_size()},     {"bytes_contents", c.bytes_contents_size()}};
  for (const auto& field : all) {
    if (field.second > 0) filled.push_back(field);
  }
  return filled;
}

// Narrows each value of a typed field to T; a value outside T's range is refused, never wrapped.
template <class T, class Field>
result<buffer> narrowed(const Field& values, std::string_view role, const std::string& name) {
  std::vector<T> out;
  out.reserve(static_cast<std::size_t>(values.size()));
  for (int i = 0; i < values.size(); ++i) {
    const auto v = values.Get(i);
    if (v < std::numeric_limits<T>::min() || v > std::numeric_limits<T>::max()) {
      return invalid(fmt::format("{} '{}': element {} is {}, out of range for {} [{}, {}]", role,
                                 name, i, v, to_string(datatype_of<T>),
                                 +std::numeric_limits<T>::min(), +std::numeric_limits<T>::max()));
    }
    out.push_back(static_cast<T>(v));
  }
  return buffer::copy_of(std::as_bytes(std::span<const T>(out)));
}

template <class T, class Field>
result<buffer> copied(const Field& values) {
  static_assert(sizeof(T) == sizeof(typename Field::value_type));
  return buffer::copy_of(std::as_bytes(std::span<const T>(
      reinterpret_cast<const T*>(values.data()), static_cast<std::size_t>(values.size()))));
}

// The bytes of a tensor from its typed contents.
result<buffer> from_contents(const contents_message& c, datatype type, std::string_view role,
                             const std::string& name) {
  switch (type) {
    case datatype::boolean: {
      std::vector<std::uint8_t> bits;
      bits.reserve(static_cast<std::size_t>(c.bool_contents_size()));
      for (const bool b : c.bool_contents()) bits.push_back(b ? 1 : 0);
      return buffer::copy_of(std::as_bytes(std::span<const std::uint8_t>(bits)));
    }
    case datatype::int8: return narrowed<std::int8_t>(c.int_contents(), role, name);
    case datatype::int16: return narrowed<std::int16_t>(c.int_contents(), role, name);
    case datatype::int32: return copied<std::int32_t>(c.int_contents());
    case datatype::int64: return copied<std::int64_t>(c.int64_contents());
    case datatype::uint8: return narrowed<std::uint8_t>(c.uint_contents(), role, name);
    case datatype::uint16: return narrowed<std::uint16_t>(c.uint_contents(), role, name);
    case datatype::uint32: return copied<std::uint32_t>(c.uint_contents());
    case datatype::uint64: return copied<std::uint64_t>(c.uint64_contents());
    case datatype::fp32: return copied<float>(c.fp32_contents());
    case datatype::fp64: return copied<double>(c.fp64_contents());
    case datatype::bytes: {
      std::vector<std::string_view> elements(c.bytes_contents().begin(), c.bytes_contents().end());
      return encode_bytes_elements(elements);
    }
    case datatype::fp16:
    case datatype::bf16: break;
  }
  return invalid(fmt::format("{} '{}': {} has no typed contents", role, name, to_string(type)));
}

template <class T, class Field>
void append_values(const tensor& t, Field* field) {
  field->Reserve(static_cast<int>(t.element_count()));
  for (std::size_t i = 0; i < t.element_count(); ++i) field->Add(t.at<T>(i));
}

void to_contents(const tensor& t, contents_message& c) {
  switch (t.type()) {
    case datatype::boolean: return append_values<bool>(t, c.mutable_bool_contents());
    case datatype::int8: return append_values<std::int8_t>(t, c.mutable_int_contents());
    case datatype::int16: return append_values<std::int16_t>(t, c.mutable_int_contents());
    case datatype::int32: return append_values<std::int32_t>(t, c.mutable_int_contents());
    case datatype::int64: return append_values<std::int64_t>(t, c.mutable_int64_contents());
    case datatype::uint8: return append_values<std::uint8_t>(t, c.mutable_uint_contents());
    case datatype::uint16: return append_values<std::uint16_t>(t, c.mutable_uint_contents());
    case datatype::uint32: return append_values<std::uint32_t>(t, c.mutable_uint_contents());
    case datatype::uint64: return append_values<std::uint64_t>(t, c.mutable_uint64_contents());
    case datatype::fp32: return append_values<float>(t, c.mutable_fp32_contents());
    case datatype::fp64: return append_values<double>(t, c.mutable_fp64_contents());
    case datatype::bytes:
      for (std::string_view s : t.strings()) c.add_bytes_contents(std::string{s});
      return;
    case datatype::fp16:
    case datatype::bf16: return;  // always raw
  }
}

bool needs_raw(const std::vector<tensor>& tensors) {
  for (const tensor& t : tensors) {
    if (t.type() == datatype::fp16 || t.type() == datatype::bf16) return true;
  }
  return false;
}

// --- tensors -------------------------------------------------------------------------------------

// What a tensor's message says of it besides its data.
struct tensor_header {
  datatype type = datatype::fp32;
  shape_type shape;
  std::uint64_t count = 0;
  parameters params;
};

template <class TensorMessage>
result<tensor_header> decode_header(const TensorMessage& message, std::string_view role,
                                    const limits& bounds) {
  const std::string& name = message.name();
  result<datatype> type = parse_datatype(message.datatype());
  if (!type) {
    return invalid(
        fmt::format("invalid datatype '{}' for {} '{}'", message.datatype(), role, name));
  }
  shape_type shape(message.shape().begin(), message.shape().end());
  result<std::uint64_t> count = element_count(shape);
  if (!count) {
    return invalid(fmt::format("unable to parse 'shape' for {} '{}': {}", role, name,
                               count.error().message()));
  }
  if (*count > bounds.max_elements) {
    return status{errc::payload_too_large,
                  fmt::format("{} '{}' has {} elements, above the limit of {}", role, name, *count,
                              bounds.max_elements)};
  }
  result<parameters> params = decode_parameters(message.parameters(), name);
  if (!params) return std::move(params).error();
  return tensor_header{*type, std::move(shape), *count, std::move(*params)};
}

template <class TensorMessage>
bool has_contents(const TensorMessage& message) {
  return message.has_contents() && !filled_fields(message.contents()).empty();
}

// An input that names a shared-memory region, left for the server to read.
template <class TensorMessage>
result<input_in_shared_memory> decode_shared_memory_input(const TensorMessage& message,
                                                          std::size_t position,
                                                          std::string_view model,
                                                          const limits& bounds) {
  result<tensor_header> header = decode_header(message, "input", bounds);
  if (!header) return std::move(header).error();
  result<std::optional<shared_memory_reference>> place =
      take_shared_memory_reference(header->params, "input", message.name());
  if (!place) return std::move(place).error();
  if (has_contents(message)) {
    return invalid(
        fmt::format("unexpected 'content' provided when using shared memory for "
                    "input tensor '{}'{}",
                    message.name(), model.empty() ? "" : fmt::format(" for model '{}'", model)));
  }
  return input_in_shared_memory{position,
                                message.name(),
                                header->type,
                                std::move(header->shape),
                                std::move(header->params),
                                std::move(**place)};
}

// One tensor from its message fields and either its typed contents or its raw bytes (taken).
template <class TensorMessage>
result<tensor> decode_tensor(const TensorMessage& message, std::string* raw, std::string_view role,
                             std::string_view model, const limits& bounds,
                             const shared_memory_output_source* placed_outputs) {
  const std::string& name = message.name();
  // Formatted only for an error: the path of a good tensor formats nothing.
  const auto for_model = [model] {
    return model.empty() ? std::string{} : fmt::format(" for model '{}'", model);
  };
  result<tensor_header> header = decode_header(message, role, bounds);
  if (!header) return std::move(header).error();
  const datatype type = header->type;
  const std::uint64_t count = header->count;
  shape_type& shape = header->shape;
  if (role == "input") {  // a malformed reference without a region is refused too
    result<std::optional<shared_memory_reference>> place =
        take_shared_memory_reference(header->params, role, name);
    if (!place) return std::move(place).error();
  }
  // A server answers an output that it wrote to shared memory with no contents (and an empty raw
  // entry when the reply is raw).
  const shared_memory_reference* written = nullptr;
  if (placed_outputs != nullptr && (raw == nullptr || raw->empty()) && !has_contents(message)) {
    written = placed_outputs->find(name);
  }
  result<buffer> data = status{errc::internal, "no data"};
  if (written != nullptr) {
    data = placed_outputs->read(*written, name, type, shape, bounds);
  } else if (raw != nullptr) {
    if (has_contents(message)) {
      return invalid(
          fmt::format("contents field must not be specified when using raw_{}_"
                      "contents for '{}'{}",
                      role, name, for_model()));
    }
    data = buffer::from_string(std::move(*raw));
  } else {
    const std::vector<std::pair<std::string_view, int>> filled = filled_fields(message.contents());
    const std::string_view expected = contents_field(type);
    if (expected.empty() && count > 0) {
      return invalid(
          fmt::format("{} '{}'{} is {}, which has no typed contents: send it in "
                      "raw_{}_contents",
                      role, name, for_model(), to_string(type), role));
    }
    for (const auto& [field, size] : filled) {
      if (field != expected) {
        return invalid(
            fmt::format("unexpected explicit tensor data for {} tensor '{}'{} of "
                        "type '{}': the data is in '{}', expected '{}'",
                        role, name, for_model(), to_string(type), field, expected));
      }
      if (static_cast<std::uint64_t>(size) != count) {
        return invalid(
            fmt::format("unexpected number of elements in '{}' for {} '{}'{}: shape {} "
                        "expects {}, got {}",
                        field, role, name, for_model(), to_string(shape), count, size));
      }
    }
    if (filled.empty() && count > 0) {
      return invalid(
          fmt::format("unable to find data for {} tensor '{}'{} in the request: "
                      "expected {} elements in '{}' or raw_{}_contents",
                      role, name, for_model(), count, expected, role));
    }
    data = expected.empty() ? result<buffer>{buffer{}}
                            : from_contents(message.contents(), type, role, name);
  }
  if (!data) return std::move(data).error();
  result<tensor> made = tensor::make(name, type, std::move(shape), std::move(*data));
  if (!made) {
    return status{made.error().code(), fmt::format("{}{}", made.error().message(), for_model())};
  }
  made->parameters() = std::move(header->params);
  return made;
}

// Whether an input names a shared-memory region: its bytes are not among the raw contents.
template <class TensorMessage>
bool in_shared_memory(const TensorMessage& message) {
  // Most tensors have no parameters: the key, longer than a string's inline capacity, is then not
  // made at all.
  return !message.parameters().empty() &&
         message.parameters().contains(std::string{parameter_names::shared_memory_region});
}

// Decodes every tensor of a request or response; raw contents must be one per tensor or none.
// A request's inputs that name a shared-memory region go to `in_regions` (null for a response's
// outputs), for the server to read.
template <class Tensors>
result<std::vector<tensor>> decode_tensors(
    const Tensors& messages, google::protobuf::RepeatedPtrField<std::string>& raw,
    std::string_view role, std::string_view model, const limits& bounds,
    const shared_memory_output_source* placed_outputs,
    std::vector<input_in_shared_memory>* in_regions = nullptr) {
  // As in Triton, an input in shared memory has no entry among the raw contents.
  int carried = 0;
  for (const auto& message : messages) {
    if (in_regions == nullptr || !in_shared_memory(message)) ++carried;
  }
  if (!raw.empty() && raw.size() != carried) {
    return invalid(
        fmt::format("expected {} raw_{}_contents, one for each {}{}, got {}", carried, role, role,
                    carried == messages.size() ? "" : " not in shared memory", raw.size()));
  }
  if (const std::optional<std::string_view> twin = detail::find_duplicate_name(
          messages, [](const auto& m) { return std::string_view{m.name()}; })) {
    return invalid(fmt::format("duplicate {} name '{}'", role, *twin));
  }
  std::vector<tensor> out;
  out.reserve(static_cast<std::size_t>(messages.size()));
  int next_raw = 0;
  for (int i = 0; i < messages.size(); ++i) {
    const bool carries = in_regions == nullptr || !in_shared_memory(messages.Get(i));
    if (!carries) {
      result<input_in_shared_memory> placed = decode_shared_memory_input(
          messages.Get(i), out.size() + in_regions->size(), model, bounds);
      if (!placed) return std::move(placed).error();
      in_regions->push_back(std::move(*placed));
      continue;
    }
    std::string* bytes = raw.empty() ? nullptr : raw.Mutable(next_raw++);
    result<tensor> t = decode_tensor(messages.Get(i), bytes, role, model, bounds, placed_outputs);
    if (!t) return std::move(t).error();
    out.push_back(std::move(*t));
  }
  return out;
}

// A tensor's name, datatype, shape and (unless its data are in shared memory) parameters.
template <class TensorMessage>
void encode_tensor_fields(const tensor& t, TensorMessage& message, bool in_shared_memory) {
  message.set_name(t.name());
  message.set_datatype(std::string{to_string(t.type())});
  for (const std::int64_t d : t.shape()) message.add_shape(d);
  if (!in_shared_memory) encode_parameters(t.parameters(), *message.mutable_parameters());
}

// A tensor in shared memory has its name, datatype and shape only, and an empty raw entry (so
// that raw contents stay one per output, as Triton's clients read them).
template <class TensorMessage>
void encode_tensor(const tensor& t, bool raw, TensorMessage& message,
                   google::protobuf::RepeatedPtrField<std::string>& raw_out,
                   bool in_shared_memory = false) {
  encode_tensor_fields(t, message, in_shared_memory);
  if (in_shared_memory) {
    if (raw) raw_out.Add();
    return;
  }
  if (raw) {
    raw_out.Add()->assign(reinterpret_cast<const char*>(t.data().data()), t.data().size());
  } else {
    to_contents(t, *message.mutable_contents());
  }
}

}  // namespace

void encode_parameters(const parameters& in, parameter_map& out) {
  for (const auto& [name, value] : in) out[name] = to_message(value);
}

result<parameters> decode_load_parameters(
    const google::protobuf::Map<std::string, inference::ModelRepositoryParameter>& in) {
  using choice = inference::ModelRepositoryParameter::ParameterChoiceCase;
  parameters out;
  for (const auto& [name, value] : in) {
    switch (value.parameter_choice_case()) {
      case choice::kBoolParam: out.set(name, value.bool_param()); break;
      case choice::kInt64Param: out.set(name, value.int64_param()); break;
      case choice::kStringParam: out.set(name, value.string_param()); break;
      case choice::kBytesParam: out.set(name, value.bytes_param()); break;
      case choice::PARAMETER_CHOICE_NOT_SET:
        return invalid(fmt::format("parameter '{}' of the model load request has no value", name));
    }
  }
  return out;
}

status encode_load_parameters(
    const parameters& in,
    google::protobuf::Map<std::string, inference::ModelRepositoryParameter>& out) {
  for (const auto& [name, value] : in) {
    inference::ModelRepositoryParameter& message = out[name];
    if (const auto* flag = std::get_if<bool>(&value)) {
      message.set_bool_param(*flag);
    } else if (const auto* integer = std::get_if<std::int64_t>(&value)) {
      message.set_int64_param(*integer);
    } else if (const auto* text = std::get_if<std::string>(&value)) {
      if (name.starts_with("file:")) {
        message.set_bytes_param(*text);
      } else {
        message.set_string_param(*text);
      }
    } else if (const auto* large = std::get_if<std::uint64_t>(&value);
               large != nullptr && *large <= std::numeric_limits<std::int64_t>::max()) {
      message.set_int64_param(static_cast<std::int64_t>(*large));
    } else {
      return invalid(
          fmt::format("parameter '{}' of a model load request must be a bool, an "
                      "integer up to {} or a string",
                      name, std::numeric_limits<std::int64_t>::max()));
    }
  }
  return {};
}

result<parameters> decode_parameters(const parameter_map& in, std::string_view where) {
  // A protobuf map's keys are unique.
  parameters out;
  for (const auto& [name, value] : in) {
    parameter_value decoded;
    switch (value.parameter_choice_case()) {
      case inference::InferParameter::kBoolParam: decoded = value.bool_param(); break;
      case inference::InferParameter::kInt64Param: decoded = value.int64_param(); break;
      case inference::InferParameter::kUint64Param: decoded = value.uint64_param(); break;
      case inference::InferParameter::kDoubleParam: decoded = value.double_param(); break;
      case inference::InferParameter::kStringParam: decoded = value.string_param(); break;
      case inference::InferParameter::PARAMETER_CHOICE_NOT_SET:
        return invalid(fmt::format("parameter '{}' of {} has no value", name, where));
    }
    out.append_unchecked(name, std::move(decoded));
  }
  return out;
}

result<inference_request> decode_request(inference::ModelInferRequest& message,
                                         const limits& bounds) {
  inference_request request;
  const std::string& model = message.model_name();
  if (!message.id().empty()) request.id = message.id();
  result<parameters> params = decode_parameters(message.parameters(), "the request");
  if (!params) return std::move(params).error();
  request.parameters = std::move(*params);
  restore_unsigned_sequence_id(request.parameters);
  result<std::vector<tensor>> inputs =
      decode_tensors(message.inputs(), *message.mutable_raw_input_contents(), "input", model,
                     bounds, nullptr, &request.shared_memory_inputs);
  if (!inputs) return std::move(inputs).error();
  request.inputs = std::move(*inputs);
  if (const std::optional<std::string_view> twin = detail::find_duplicate_name(
          message.outputs(), [](const auto& o) { return std::string_view{o.name()}; })) {
    return invalid(fmt::format("duplicate requested output name '{}'", *twin));
  }
  request.outputs.reserve(static_cast<std::size_t>(message.outputs().size()));
  for (const auto& output : message.outputs()) {
    result<parameters> output_params = decode_parameters(output.parameters(), output.name());
    if (!output_params) return std::move(output_params).error();
    request.outputs.push_back({output.name(), std::move(*output_params)});
  }
  return request;
}

status encode_response(const inference_response& response, inference::ModelInferResponse& out,
                       contents_form form) {
  out.set_model_name(response.model_name);
  out.set_model_version(response.model_version);
  if (response.id) out.set_id(*response.id);
  encode_parameters(response.parameters, *out.mutable_parameters());
  const bool all_raw = form == contents_form::raw || needs_raw(response.outputs);
  for (const tensor& t : response.outputs) {
    encode_tensor(t, all_raw, *out.add_outputs(), *out.mutable_raw_output_contents(),
                  response.in_shared_memory(t.name()));
  }
  return {};
}

status encode_request(const inference_request& request, std::string_view model,
                      std::string_view version, contents_form form,
                      inference::ModelInferRequest& out) {
  if (status s = require_host_memory(request.inputs, "input"); !s.ok()) return s;
  out.set_model_name(std::string{model});
  out.set_model_version(std::string{version});
  if (request.id) out.set_id(*request.id);
  encode_parameters(request.parameters, *out.mutable_parameters());
  // Triton takes a uint64_param for `priority` only: an unsigned value goes as int64_param, a
  // sequence id above INT64_MAX as the negative int64 that Triton reads back as the uint64 (what
  // Triton's own clients send).
  for (auto& [name, message] : *out.mutable_parameters()) {
    if (message.parameter_choice_case() != inference::InferParameter::kUint64Param ||
        name == "priority") {
      continue;
    }
    const std::uint64_t value = message.uint64_param();
    if (value <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) ||
        name == "sequence_id") {
      message.set_int64_param(static_cast<std::int64_t>(value));
    }
  }
  const bool all_raw = form == contents_form::raw || needs_raw(request.inputs);
  // Inputs in shared memory take their positions among the others, with no raw entry (Triton).
  const std::size_t count = request.inputs.size() + request.shared_memory_inputs.size();
  std::size_t next_in_message = 0;
  for (std::size_t position = 0; position < count; ++position) {
    if (const input_in_shared_memory* placed = request.shared_memory_input_at(position)) {
      parameters with_place = placed->parameters;
      if (status s = put_shared_memory_reference(with_place, placed->place); !s.ok()) return s;
      auto* input = out.add_inputs();
      input->set_name(placed->name);
      input->set_datatype(std::string{to_string(placed->type)});
      for (const std::int64_t d : placed->shape) input->add_shape(d);
      encode_parameters(with_place, *input->mutable_parameters());
      continue;
    }
    if (next_in_message == request.inputs.size()) {
      return status{errc::invalid_argument,
                    "the request's inputs in shared memory do not take positions among its "
                    "inputs (each position from 0 once)"};
    }
    encode_tensor(request.inputs[next_in_message++], all_raw, *out.add_inputs(),
                  *out.mutable_raw_input_contents());
  }
  for (const requested_output& asked : request.outputs) {
    auto* output = out.add_outputs();
    output->set_name(asked.name);
    encode_parameters(asked.parameters, *output->mutable_parameters());
  }
  return {};
}

result<inference_response> decode_response(inference::ModelInferResponse& message,
                                           const limits& bounds,
                                           const shared_memory_output_source* shared_memory) {
  inference_response response;
  response.model_name = message.model_name();
  response.model_version = message.model_version();
  if (!message.id().empty()) response.id = message.id();
  result<parameters> params = decode_parameters(message.parameters(), "the response");
  if (!params) return std::move(params).error();
  response.parameters = std::move(*params);
  result<std::vector<tensor>> outputs =
      decode_tensors(message.outputs(), *message.mutable_raw_output_contents(), "output",
                     message.model_name(), bounds, shared_memory);
  if (!outputs) return std::move(outputs).error();
  response.outputs = std::move(*outputs);
  return response;
}

result<log_settings_update> decode_log_settings_update(
    const inference::LogSettingsRequest& request) {
  using value = inference::LogSettingsRequest::SettingValue;
  log_settings_update update;
  // A log file, which `update_log_settings` refuses, comes first whatever else is wrong (Triton).
  if (const auto file = request.settings().find("log_file"); file != request.settings().end()) {
    update.file = file->second.string_param();
    return update;
  }
  for (const auto& entry : request.settings()) {
    const std::string& key = entry.first;
    const value& setting = entry.second;
    const auto expect = [&](std::string_view kind) {
      return status{errc::invalid_argument, fmt::format("expect {} for '{}'", kind, key)};
    };
    if (std::optional<bool>* level = key == "log_error"     ? &update.error
                                     : key == "log_warning" ? &update.warning
                                     : key == "log_info"    ? &update.info
                                                            : nullptr) {
      if (setting.parameter_choice_case() != value::kBoolParam) return expect("boolean");
      *level = setting.bool_param();
    } else if (key == "log_verbose_level") {
      if (setting.parameter_choice_case() != value::kUint32Param) return expect("uint32");
      update.verbose_level = setting.uint32_param();
    } else if (key == "log_format") {
      if (setting.parameter_choice_case() != value::kStringParam) return expect("string");
      result<log_format> format = parse_log_format(setting.string_param());
      if (!format) return std::move(format).error();
      update.format = *format;
    }
  }
  return update;
}

void encode_log_settings(const log_settings& settings, inference::LogSettingsResponse& out) {
  auto& map = *out.mutable_settings();
  map["log_file"].set_string_param("");
  map["log_info"].set_bool_param(settings.info);
  map["log_warning"].set_bool_param(settings.warning);
  map["log_error"].set_bool_param(settings.error);
  map["log_verbose_level"].set_uint32_param(settings.verbose_level);
  map["log_format"].set_string_param(std::string{to_string(settings.format)});
}

trace_settings_change decode_trace_settings_change(const inference::TraceSettingRequest& request) {
  trace_settings_change change;
  for (const auto& entry : request.settings()) {
    std::optional<std::vector<std::string>> values;
    if (!entry.second.value().empty()) {
      values.emplace(entry.second.value().begin(), entry.second.value().end());
    }
    change.settings.emplace_back(entry.first, std::move(values));
  }
  return change;
}

void encode_trace_settings(const trace_settings& settings, inference::TraceSettingResponse& out) {
  auto& map = *out.mutable_settings();
  for (const std::string_view name : level_names(settings.level)) {
    map["trace_level"].add_value(std::string{name});
  }
  map["trace_rate"].add_value(std::to_string(settings.rate));
  map["trace_count"].add_value(std::to_string(settings.count));
  map["log_frequency"].add_value(std::to_string(settings.log_frequency));
  map["trace_file"].add_value(settings.file);
  map["trace_mode"].add_value("triton");
}

// --- model configuration, statistics, metadata ---------------------------------------------------

namespace {

inference::DataType config_datatype(datatype type) {
  inference::DataType out = inference::TYPE_INVALID;
  inference::DataType_Parse(std::string{config_name(type)}, &out);
  return out;
}

}  // namespace

void encode_model_config(const model_config& config, inference::ModelConfig& out) {
  out.set_name(config.name);
  out.set_platform(config.platform);
  out.set_backend(config.platform);
  out.set_max_batch_size(static_cast<std::int32_t>(config.max_batch_size));
  out.mutable_version_policy()->mutable_latest()->set_num_versions(1);
  inference::ModelInstanceGroup* group = out.add_instance_group();
  group->set_name(config.name);
  group->set_kind(config.gpus.empty() ? inference::ModelInstanceGroup::KIND_CPU
                                      : inference::ModelInstanceGroup::KIND_GPU);
  group->set_count(static_cast<std::int32_t>(config.batching.instances));
  for (const int gpu : config.gpus) group->add_gpus(gpu);
  out.mutable_model_transaction_policy()->set_decoupled(config.decoupled);
  out.mutable_response_cache()->set_enable(config.response_cache);
  for (const tensor_metadata& t : config.inputs) {
    inference::ModelInput* input = out.add_input();
    input->set_name(t.name);
    input->set_data_type(config_datatype(t.type));
    for (const std::int64_t d : t.shape) input->add_dims(d);
  }
  for (const tensor_metadata& t : config.outputs) {
    inference::ModelOutput* output = out.add_output();
    output->set_name(t.name);
    output->set_data_type(config_datatype(t.type));
    for (const std::int64_t d : t.shape) output->add_dims(d);
  }
  // Triton's config has one scheduler: sequence batching wins over dynamic batching.
  if (config.sequence_batching) {
    inference::ModelSequenceBatching* sequences = out.mutable_sequence_batching();
    sequences->set_max_sequence_idle_microseconds(
        static_cast<std::uint64_t>(config.sequence.max_idle.count()));
    for (const detail::sequence_control& c : detail::sequence_controls(config.sequence)) {
      inference::ModelSequenceBatching::ControlInput* input = sequences->add_control_input();
      input->set_name(c.name);
      inference::ModelSequenceBatching::Control* control = input->add_control();
      inference::ModelSequenceBatching::Control::Kind kind{};
      inference::ModelSequenceBatching::Control::Kind_Parse(std::string{c.kind}, &kind);
      control->set_kind(kind);
      if (c.is_correlation) {
        inference::DataType type{};
        inference::DataType_Parse(std::string{detail::correlation_data_type(config.sequence)},
                                  &type);
        control->set_data_type(type);
      } else {
        control->add_int32_false_true(0);
        control->add_int32_false_true(1);
      }
    }
  } else if (config.dynamic_batching) {
    inference::ModelDynamicBatching* batching = out.mutable_dynamic_batching();
    batching->set_max_queue_delay_microseconds(
        static_cast<std::uint64_t>(config.batching.max_queue_delay.count()));
    for (const std::uint64_t size : config.batching.preferred_batch_sizes) {
      batching->add_preferred_batch_size(static_cast<std::int32_t>(size));
    }
    batching->set_priority_levels(config.batching.priority_levels);
    batching->set_default_priority_level(config.batching.default_priority_level);
    const auto policy = [](const queue_policy& p, inference::ModelQueuePolicy& message) {
      message.set_timeout_action(p.on_timeout == queue_policy::timeout_action::delay
                                     ? inference::ModelQueuePolicy::DELAY
                                     : inference::ModelQueuePolicy::REJECT);
      message.set_default_timeout_microseconds(
          static_cast<std::uint64_t>(p.default_timeout.count()));
      message.set_allow_timeout_override(p.allow_timeout_override);
      // A bound past the field's 32 bits is shown as the largest it holds.
      message.set_max_queue_size(static_cast<std::uint32_t>(
          std::min<std::size_t>(p.max_queue_size, std::numeric_limits<std::uint32_t>::max())));
    };
    policy(config.batching.default_queue_policy, *batching->mutable_default_queue_policy());
    for (const auto& [level, p] : config.batching.priority_queue_policy) {
      policy(p, (*batching->mutable_priority_queue_policy())[level]);
    }
  }
}

void encode_statistics(const statistics_snapshot& s, inference::ModelStatistics& out) {
  const auto duration = [](const statistics_snapshot::duration& d,
                           inference::StatisticDuration* message) {
    message->set_count(d.count);
    message->set_ns(d.ns);
  };
  out.set_name(s.name);
  out.set_version(std::to_string(s.version));
  out.set_last_inference(s.last_inference_ms);
  out.set_inference_count(s.inference_count);
  out.set_execution_count(s.execution_count);
  inference::InferStatistics* stats = out.mutable_inference_stats();
  duration(s.success, stats->mutable_success());
  duration(s.fail, stats->mutable_fail());
  duration(s.queue, stats->mutable_queue());
  duration(s.compute_input, stats->mutable_compute_input());
  duration(s.compute_infer, stats->mutable_compute_infer());
  duration(s.compute_output, stats->mutable_compute_output());
  duration(s.cache_hit, stats->mutable_cache_hit());
  duration(s.cache_miss, stats->mutable_cache_miss());
  for (const auto& [size, took] : s.batches) {
    inference::InferBatchStatistics* batch = out.add_batch_stats();
    batch->set_batch_size(size);
    duration({took.count, took.compute_input_ns}, batch->mutable_compute_input());
    duration({took.count, took.compute_infer_ns}, batch->mutable_compute_infer());
    duration({took.count, took.compute_output_ns}, batch->mutable_compute_output());
  }
  for (const auto& [index, at] : s.responses) {
    inference::InferResponseStatistics& response =
        (*out.mutable_response_stats())[std::to_string(index)];
    duration(at.compute_infer, response.mutable_compute_infer());
    duration(at.compute_output, response.mutable_compute_output());
    duration(at.success, response.mutable_success());
    duration(at.fail, response.mutable_fail());
    duration(at.empty_response, response.mutable_empty_response());
    duration(at.cancel, response.mutable_cancel());
  }
}

namespace {

void to_message(const tensor_metadata& t, inference::ModelMetadataResponse::TensorMetadata& out) {
  out.set_name(t.name);
  out.set_datatype(std::string{to_string(t.type)});
  for (const std::int64_t d : t.shape) out.add_shape(d);
}

}  // namespace

void encode_model_metadata(const model_metadata& metadata, inference::ModelMetadataResponse& out) {
  out.set_name(metadata.name);
  for (const std::string& v : metadata.versions) out.add_versions(v);
  out.set_platform(metadata.platform);
  for (const tensor_metadata& t : metadata.inputs) to_message(t, *out.add_inputs());
  for (const tensor_metadata& t : metadata.outputs) to_message(t, *out.add_outputs());
}

}  // namespace oip::grpc
