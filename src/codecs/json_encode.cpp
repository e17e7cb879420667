// JSON encoding: compact output, numbers in the shortest form that reads back to the same value of
// their own type, tensor bytes never copied for binary outputs.

#include "codecs/detail/decimal.hpp"
#include "codecs/detail/json_out.hpp"
#include "codecs/detail/json_values.hpp"
#include "codecs/detail/number_format.hpp"
#include "core/detail/json_string.hpp"

#include <oip/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace oip {

namespace {

using detail::json_out;
using detail::max_number_chars;
using detail::member;
using detail::write_floating;
using detail::write_integer;
using detail::write_parameters;
using detail::write_shape;

}  // namespace

namespace detail {

namespace {

// Elements are written a block at a time: room for the block's worst case, the numbers written
// into it, the string cut to what they took. After the first block, the text is given the room
// that block's length projects for the whole tensor, and a sixteenth more (never past the bound),
// so a large tensor grows its string once, not by doublings. A text over its bound stops within a
// block of it.
constexpr std::size_t elements_per_block = 4096;

status too_long() { return status{errc::payload_too_large, "the JSON text is over its bound"}; }

template <class T, class Write>
status append_elements(std::string& text, const tensor& t, std::size_t max_text_bytes,
                       Write write) {
  const std::size_t count = t.element_count();
  const std::size_t room = max_text_bytes - std::min(max_text_bytes, text.size());
  if (count > room / 2 + 1) return too_long();  // each element takes a character and a comma
  const std::size_t block_room = elements_per_block * (detail::max_element_chars<T> + 1);
  const std::size_t begin = text.size();
  for (std::size_t first = 0; first < count; first += elements_per_block) {
    const std::size_t last = std::min(count, first + elements_per_block);
    const std::size_t start = text.size();
    text.resize(start + (last - first) * (detail::max_element_chars<T> + 1));
    char* at = text.data() + start;
    for (std::size_t i = first; i < last; ++i) {
      if (i != 0) *at++ = ',';
      at = write(at, t.data().load<T>(i));
    }
    text.resize(static_cast<std::size_t>(at - text.data()));
    if (text.size() > max_text_bytes) return too_long();
    if (first == 0 && last < count) {
      const std::size_t projected = (text.size() - begin) * count / last;
      text.reserve(std::min(begin + projected + projected / 16, max_text_bytes) + block_room);
    }
  }
  return {};
}

}  // namespace

status append_json_values(std::string& text, const tensor& t, std::string_view role,
                          json_value_format format) {
  const bool non_finite_as_null = format.non_finite_as_null;
  const auto floating = [non_finite_as_null](auto v) {
    return [non_finite_as_null](char* at, decltype(v) x) {
      return write_floating(at, x, non_finite_as_null);
    };
  };
  switch (t.type()) {
    case datatype::boolean:
      return append_elements<std::uint8_t>(
          text, t, format.max_text_bytes, [&format](char* at, std::uint8_t b) {
            const std::string_view token =
                format.booleans_as_digits ? (b != 0 ? "1" : "0") : (b != 0 ? "true" : "false");
            std::memcpy(at, token.data(), token.size());
            return at + token.size();
          });
    case datatype::uint8:
      return append_elements<std::uint8_t>(text, t, format.max_text_bytes,
                                           write_integer<std::uint8_t>);
    case datatype::uint16:
      return append_elements<std::uint16_t>(text, t, format.max_text_bytes,
                                            write_integer<std::uint16_t>);
    case datatype::uint32:
      return append_elements<std::uint32_t>(text, t, format.max_text_bytes,
                                            write_integer<std::uint32_t>);
    case datatype::uint64:
      return append_elements<std::uint64_t>(text, t, format.max_text_bytes,
                                            write_integer<std::uint64_t>);
    case datatype::int8:
      return append_elements<std::int8_t>(text, t, format.max_text_bytes,
                                          write_integer<std::int8_t>);
    case datatype::int16:
      return append_elements<std::int16_t>(text, t, format.max_text_bytes,
                                           write_integer<std::int16_t>);
    case datatype::int32:
      return append_elements<std::int32_t>(text, t, format.max_text_bytes,
                                           write_integer<std::int32_t>);
    case datatype::int64:
      return append_elements<std::int64_t>(text, t, format.max_text_bytes,
                                           write_integer<std::int64_t>);
    case datatype::fp16:
      return append_elements<half>(
          text, t, format.max_text_bytes,
          [non_finite_as_null](char* at, half h) { return write_half(at, h, non_finite_as_null); });
    case datatype::bf16:
      return append_elements<bfloat16>(text, t, format.max_text_bytes,
                                       [non_finite_as_null](char* at, bfloat16 b) {
                                         return write_half(at, b, non_finite_as_null);
                                       });
    case datatype::fp32:
      return append_elements<float>(text, t, format.max_text_bytes, floating(0.0F));
    case datatype::fp64:
      return append_elements<double>(text, t, format.max_text_bytes, floating(0.0));
    case datatype::bytes: {
      std::size_t index = 0;
      for (const std::string_view element : t.strings()) {
        if (const std::size_t bad = detail::find_invalid_utf8(element);
            bad != std::string_view::npos && !format.replace_invalid_utf8) {
          return status{errc::invalid_argument,
                        fmt::format("{} '{}' element {} is not valid UTF-8 (byte {}) and cannot be "
                                    "written as a JSON string: ask for it as binary data",
                                    role, t.name(), index, bad)};
        }
        // An element takes its bytes and two quotes at least: past the bound before it is written.
        if (text.size() + element.size() + (index != 0 ? 3 : 2) > format.max_text_bytes) {
          return too_long();
        }
        if (index != 0) text.push_back(',');
        detail::append_json_string(text, element);
        if (text.size() > format.max_text_bytes) return too_long();
        ++index;
      }
      return {};
    }
  }
  return status{errc::internal, "unknown datatype"};
}

}  // namespace detail

namespace {

void write_parameter_value(json_out& out, const parameter_value& value) {
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, bool>) {
          out.raw(v ? "true" : "false");
        } else if constexpr (std::is_same_v<T, std::string>) {
          out.string(v);
        } else {
          char buffer[max_number_chars];
          char* end = nullptr;
          if constexpr (std::is_same_v<T, double>) {
            end = write_floating(buffer, v, false);  // NaN and Infinity as in tensor data
            // A double parameter stays a double when read back: "1" and "-0" would read as
            // integers (and -0 would lose its sign).
            if (std::all_of(buffer, end,
                            [](char c) { return c == '-' || (c >= '0' && c <= '9'); })) {
              *end++ = '.';
              *end++ = '0';
            }
          } else {
            end = write_integer(buffer, v);
          }
          out.raw(std::string_view(buffer, static_cast<std::size_t>(end - buffer)));
        }
      },
      value);
}

}  // namespace

void detail::append_json_parameter(std::string& text, const parameter_value& value) {
  json_out out{text};
  write_parameter_value(out, value);
}

void detail::write_parameters(json_out& out, const parameters& params, member place,
                              const tensor_framing& framing, std::string_view key) {
  bool open = false;
  const auto next_member = [&] {
    if (open) {
      out.raw(',');
      return;
    }
    if (place == member::after_another) out.raw(',');
    out.key(key);
    out.raw('{');
    open = true;
  };
  for (const auto& [name, value] : params) {
    if (framing.is_tensor && name == parameter_names::binary_data_size) continue;
    next_member();
    out.key(name);
    write_parameter_value(out, value);
  }
  if (framing.binary_size) {
    next_member();
    out.key(parameter_names::binary_data_size);
    char buffer[max_number_chars];
    const char* end = write_integer(buffer, *framing.binary_size);
    out.raw(std::string_view(buffer, static_cast<std::size_t>(end - buffer)));
  }
  if (open) out.raw('}');
}

// Written in place, like the data: digits copied out of a stack buffer were read back before
// their stores could forward.
void detail::write_shape(json_out& out, const shape_type& shape) {
  out.key<"shape">();
  std::string& text = out.text();
  const std::size_t start = text.size();
  text.resize(start + shape.size() * (max_number_chars + 1) + 2);
  char* at = text.data() + start;
  *at++ = '[';
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i != 0) *at++ = ',';
    at = write_integer(at, shape[i]);
  }
  *at++ = ']';
  text.resize(static_cast<std::size_t>(at - text.data()));
}

namespace {

enum class tensor_placement : std::uint8_t { json, binary, shared_memory };

// One tensor object: name, datatype, shape, parameters, then data (JSON) or its bytes appended to
// `body.binary` (binary); only the name, datatype and shape for a tensor in shared memory.
status write_tensor(json_out& out, encoded_body& body, const tensor& t, tensor_placement placement,
                    std::string_view role, detail::json_value_format values) {
  out.raw('{');
  out.key<"name">();
  out.string(t.name());
  out.raw(',');
  out.key<"datatype">();
  out.string(to_string(t.type()));
  out.raw(',');
  write_shape(out, t.shape());
  if (placement == tensor_placement::shared_memory) {
    // Triton's shape: no parameters either (its C++ client reads `binary_data_size` from any
    // output that has them).
  } else if (placement == tensor_placement::binary) {
    write_parameters(out, t.parameters(), member::after_another,
                     {.is_tensor = true, .binary_size = t.data().size()});
    body.binary.push_back(t.data());
    body.uses_binary = true;
  } else {
    write_parameters(out, t.parameters(), member::after_another,
                     {.is_tensor = true, .binary_size = std::nullopt});
    out.raw(',');
    out.key<"data">();
    out.raw('[');
    if (status s = detail::append_json_values(out.text(), t, role, values); !s.ok()) return s;
    out.raw(']');
  }
  out.raw('}');
  return {};
}

// An input whose bytes a registered region holds: its name, datatype and shape, and the
// `shared_memory_*` parameters that say where, beside its own.
status write_shared_memory_input(json_out& out, const input_in_shared_memory& placed) {
  out.raw('{');
  out.key<"name">();
  out.string(placed.name);
  out.raw(',');
  out.key<"datatype">();
  out.string(to_string(placed.type));
  out.raw(',');
  write_shape(out, placed.shape);
  parameters with_place = placed.parameters;
  if (status s = put_shared_memory_reference(with_place, placed.place); !s.ok()) return s;
  write_parameters(out, with_place, member::after_another,
                   {.is_tensor = true, .binary_size = std::nullopt});
  out.raw('}');
  return {};
}

// The refusal of a reply whose JSON text passes `format.max_json_bytes`.
status reply_too_long(const inference_response& response, const response_format& format) {
  return status{errc::invalid_argument,
                fmt::format("the JSON reply of model '{}' would be larger than {} bytes, this "
                            "request's bound: ask for its outputs as binary data "
                            "(binary_data_output, or binary_data on each output)",
                            response.model_name, format.max_json_bytes)};
}

}  // namespace

result<encoded_body> encode_response(const inference_response& response,
                                     const response_format& format) {
  encoded_body body;
  body.json.reserve(128 + 128 * response.outputs.size());  // the framing; data grows it once
  json_out out{body.json};
  out.raw('{');
  if (response.id) {
    out.key<"id">();
    out.string(*response.id);
    out.raw(',');
  }
  out.key<"model_name">();
  out.string(response.model_name);
  if (!response.model_version.empty()) {
    out.raw(',');
    out.key<"model_version">();
    out.string(response.model_version);
  }
  write_parameters(out, response.parameters, member::after_another);
  out.raw(',');
  out.key<"outputs">();
  out.raw('[');
  for (std::size_t i = 0; i < response.outputs.size(); ++i) {
    if (i != 0) out.raw(',');
    const tensor& t = response.outputs[i];
    const tensor_placement placement = response.in_shared_memory(t.name())
                                           ? tensor_placement::shared_memory
                                       : format.is_binary(t.name()) ? tensor_placement::binary
                                                                    : tensor_placement::json;
    status s = write_tensor(
        out, body, t, placement, "output",
        {.non_finite_as_null = format.non_finite_as_null, .max_text_bytes = format.max_json_bytes});
    if (s.code() == errc::payload_too_large) return reply_too_long(response, format);
    if (!s.ok()) return s;
  }
  out.raw("]}");
  if (body.json.size() > format.max_json_bytes) return reply_too_long(response, format);
  return body;
}

result<encoded_body> encode_request(const inference_request& request,
                                    const request_format& format) {
  if (status s = require_host_memory(request.inputs, "input"); !s.ok()) return s;
  encoded_body body;
  // The framing of each tensor; data in the JSON grows it once more.
  body.json.reserve(128 + 128 * (request.inputs.size() + request.outputs.size()));
  json_out out{body.json};
  out.raw('{');
  if (request.id) {
    out.key<"id">();
    out.string(*request.id);
    out.raw(',');
  }
  const bool add_binary_output =
      format.binary_outputs && !request.parameters.contains("binary_data_output");
  if (add_binary_output && request.parameters.empty()) {
    out.raw(R"("parameters":{"binary_data_output":true},)");
  } else if (add_binary_output) {
    parameters with_binary = request.parameters;
    with_binary.set("binary_data_output", true);
    write_parameters(out, with_binary, member::first);
    out.raw(',');
  } else if (!request.parameters.empty()) {
    write_parameters(out, request.parameters, member::first);
    out.raw(',');
  }
  out.key<"inputs">();
  out.raw('[');
  // Inputs in shared memory take their positions among the others: the JSON lists them in order.
  const std::size_t count = request.inputs.size() + request.shared_memory_inputs.size();
  std::size_t next_in_body = 0;
  for (std::size_t position = 0; position < count; ++position) {
    if (position != 0) out.raw(',');
    if (const input_in_shared_memory* placed = request.shared_memory_input_at(position)) {
      if (status s = write_shared_memory_input(out, *placed); !s.ok()) return s;
      continue;
    }
    if (next_in_body == request.inputs.size()) {
      return status{errc::invalid_argument,
                    "the request's inputs in shared memory do not take positions among its "
                    "inputs (each position from 0 once)"};
    }
    const tensor& input = request.inputs[next_in_body++];
    const datatype type = input.type();
    const bool half = type == datatype::fp16 || type == datatype::bf16;
    const tensor_placement placement =
        format.binary_inputs || (half && !format.half_precision_as_json) ? tensor_placement::binary
                                                                         : tensor_placement::json;
    if (status s = write_tensor(out, body, input, placement, "input",
                                {.non_finite_as_null = format.non_finite_as_null});
        !s.ok()) {
      return s;
    }
  }
  out.raw(']');
  if (!request.outputs.empty()) {
    out.raw(',');
    out.key<"outputs">();
    out.raw('[');
    // Triton applies `binary_data_output` only to the outputs a request does not list: each listed
    // one says it itself, so that Triton and oip answer alike.
    const bool* asked_binary = request.parameters.get<bool>("binary_data_output");
    const bool all_binary = add_binary_output || (asked_binary != nullptr && *asked_binary);
    for (std::size_t i = 0; i < request.outputs.size(); ++i) {
      if (i != 0) out.raw(',');
      out.raw('{');
      out.key<"name">();
      const requested_output& asked = request.outputs[i];
      out.string(asked.name);
      // An output placed in shared memory has no data in the reply: binary_data would be refused.
      if (all_binary && !asked.parameters.contains("binary_data") &&
          !asked.parameters.contains(parameter_names::shared_memory_region)) {
        parameters with_binary = asked.parameters;
        with_binary.set("binary_data", true);
        write_parameters(out, with_binary, member::after_another);
      } else {
        write_parameters(out, asked.parameters, member::after_another);
      }
      out.raw('}');
    }
    out.raw(']');
  }
  out.raw('}');
  return body;
}

}  // namespace oip
