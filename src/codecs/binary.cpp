#include <oip/binary.hpp>
#include <oip/json.hpp>

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

namespace oip {

result<std::size_t> parse_header_length(std::string_view value, std::size_t body_size) {
  const auto invalid = [&] {
    return status{
        errc::invalid_argument,
        fmt::format("inference header size should be in range (0, {}), got: {}", body_size, value)};
  };
  std::size_t length = 0;
  if (value.empty() || value.front() < '0' || value.front() > '9') return invalid();
  const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), length);
  if (error != std::errc{} || end != value.data() + value.size() || length > body_size) {
    return invalid();
  }
  return length;
}

result<inference_request> decode_raw_request(const buffer& body, const raw_input_spec& spec,
                                             const limits& bounds) {
  if (body.size() > bounds.max_body_bytes) {
    return status{errc::payload_too_large,
                  fmt::format("the request body is {} bytes, above the limit of {}", body.size(),
                              bounds.max_body_bytes)};
  }
  shape_type shape;
  if (spec.batching) shape.push_back(1);
  shape.insert(shape.end(), spec.shape.begin(), spec.shape.end());

  buffer data = body;
  if (is_bytes(spec.type)) {
    const bool single =
        std::all_of(spec.shape.begin(), spec.shape.end(), [](std::int64_t d) { return d == 1; });
    if (!single) {
      return status{errc::invalid_argument,
                    fmt::format("For BYTE datatype raw input '{}', the model must have input "
                                "shape [1]",
                                spec.name)};
    }
    // The body is the one element; the BYTES format needs its length in front (one copy).
    const std::string_view element = body.as_string_view();
    result<buffer> framed = encode_bytes_elements(std::span<const std::string_view>(&element, 1));
    if (!framed) return std::move(framed).error();
    data = std::move(*framed);
  } else {
    std::size_t variable = shape.size();
    std::uint64_t fixed = element_size(spec.type);
    for (std::size_t i = 0; i < shape.size(); ++i) {
      if (shape[i] == -1) {
        if (variable != shape.size()) {
          return status{errc::invalid_argument,
                        fmt::format("The shape of the raw input '{}' can not be deduced because "
                                    "there are more than one variable-sized dimension",
                                    spec.name)};
        }
        variable = i;
      } else if (shape[i] < 0 ||
                 __builtin_mul_overflow(fixed, static_cast<std::uint64_t>(shape[i]), &fixed)) {
        return status{errc::invalid_argument, fmt::format("invalid shape {} for raw input '{}'",
                                                          to_string(shape), spec.name)};
      }
    }
    if (variable != shape.size()) {
      if (fixed == 0 ? !body.empty() : body.size() % fixed != 0) {
        return status{errc::invalid_argument,
                      fmt::format("unexpected size {} for raw input '{}': not a whole number of "
                                  "{}-byte rows of shape {}",
                                  body.size(), spec.name, fixed, to_string(shape))};
      }
      shape[variable] = fixed == 0 ? 0 : static_cast<std::int64_t>(body.size() / fixed);
    }
  }
  result<std::uint64_t> count = element_count(shape);
  if (count && *count > bounds.max_elements) {
    return status{errc::payload_too_large,
                  fmt::format("input '{}' has {} elements, above the limit of {}", spec.name,
                              *count, bounds.max_elements)};
  }
  result<tensor> input = tensor::make(spec.name, spec.type, std::move(shape), std::move(data));
  if (!input) {
    return status{input.error().code(), fmt::format("raw input: {}", input.error().message())};
  }
  inference_request request;
  request.parameters.set(std::string{parameter_names::binary_data_output}, true);
  request.inputs.push_back(std::move(*input));
  return request;
}

result<response_format> response_format::from_request(const inference_request& request) {
  response_format format;
  if (const parameter_value* all = request.parameters.find(parameter_names::binary_data_output)) {
    const bool* flag = std::get_if<bool>(all);
    if (flag == nullptr) {
      return status{errc::invalid_argument,
                    "unable to parse 'binary_data_output': expected a boolean"};
    }
    format.binary_by_default = *flag;
  }
  for (const requested_output& output : request.outputs) {
    if (const parameter_value* one = output.parameters.find(parameter_names::binary_data)) {
      const bool* flag = std::get_if<bool>(one);
      if (flag == nullptr) {
        return status{errc::invalid_argument,
                      fmt::format("unable to parse 'binary_data' for output '{}': expected a "
                                  "boolean",
                                  output.name)};
      }
      format.binary_outputs.emplace_back(output.name, *flag);
    }
  }
  return format;
}

}  // namespace oip
