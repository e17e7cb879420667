// Decoding inference requests and responses from JSON: the general reader, which takes every form
// and words every error (the usual form of a request or response is read first by
// json_usual_request.cpp).

#include "codecs/detail/json_read.hpp"
#include "codecs/detail/json_tensor_data.hpp"
#include "codecs/detail/json_usual_request.hpp"

#include <oip/json.hpp>

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <simdjson.h>

namespace oip {

namespace {

namespace od = simdjson::ondemand;
using simdjson::error_code;

using detail::decode_data;
using detail::document_context;
using detail::for_each_element;
using detail::for_each_field;
using detail::malformed;
using detail::malformed_at;
using detail::missing_field;
using detail::name_set;
using detail::padded_json;
using detail::parse_document;
using detail::parse_integer;
using detail::parser_lease;
using detail::read_parameters;
using detail::read_string;
using detail::read_string_view;
using detail::read_usual_request;
using detail::read_usual_response;
using detail::take_binary_data_size;
using detail::tensor_context;
using detail::token_of;
using detail::walk_value;

// --- tensors in a request or response ------------------------------------------------------------

// What a tensor object holds before its data is placed.
struct parsed_tensor {
  std::string name;
  std::optional<datatype> type;
  std::optional<shape_type> shape;
  oip::parameters parameters;
  std::optional<std::int64_t> binary_size;
  std::optional<shared_memory_reference> shared_memory;
  bool has_data = false;
  buffer data;
  // "data" seen before "datatype"/"shape": its raw text, decoded once the object is complete.
  std::string_view deferred_data;
};

status read_shape(const document_context& doc, od::value value, std::size_t depth,
                  std::string_view role, std::string_view name, shape_type& out) {
  od::json_type type;
  if (error_code e = value.type().get(type)) return malformed_at(doc, e, value);
  if (type != od::json_type::array) {
    if (status walked = walk_value(doc, value, depth); !walked.ok()) return walked;
    return status{
        errc::invalid_argument,
        fmt::format("unable to parse 'shape' for {} '{}': expected an array", role, name)};
  }
  return for_each_element(doc, value, depth, [&](od::value element) {
    const std::string_view token = token_of(doc, element);
    std::int64_t dim = 0;
    bool out_of_range = false;
    if (!parse_integer(token, dim, out_of_range)) {
      if (status walked = walk_value(doc, element, depth + 1); !walked.ok()) return walked;
      return status{errc::invalid_argument,
                    fmt::format("unable to parse 'shape' for {} '{}': dimension {} is not an "
                                "integer in [0, 2^63)",
                                role, name, out.size())};
    }
    out.push_back(dim);
    return status{};
  });
}

// Decodes the `data` of a tensor that came before its datatype or shape, from its text `raw`.
result<buffer> decode_deferred_data(const tensor_context& t, std::string_view raw,
                                    const shape_type& shape, std::uint64_t expected,
                                    const char* document_end) {
  // `raw` lies inside the document, whose padding follows `document_end`.
  const auto readable =
      static_cast<std::size_t>(document_end - raw.data()) + simdjson::SIMDJSON_PADDING;
  const parser_lease parser{1, raw.size()};
  od::document doc;
  if (error_code e = parser.get().iterate(raw.data(), raw.size(), readable).get(doc)) {
    return malformed(*t.doc, e, raw.data());
  }
  // Checked by the document itself: the array is closed (see parse_document).
  od::array closed;
  if (error_code e = doc.get_array().get(closed)) return malformed(*t.doc, e, raw.data());
  doc.rewind();
  od::value root;
  if (error_code e = doc.get_value().get(root)) return malformed(*t.doc, e, raw.data());
  // Offsets in messages stay relative to the outer document.
  buffer data;
  if (status s = decode_data(t, root, 1, shape, expected, raw.size(), data); !s.ok()) return s;
  if (const char* trailing = nullptr; doc.current_location().get(trailing) == error_code::SUCCESS) {
    return malformed(*t.doc, error_code::TRAILING_CONTENT, trailing);
  }
  return data;
}

// Reads one tensor object ($request_input or $response_output).
status read_tensor(const document_context& doc, od::value value, std::size_t depth,
                   std::string_view role, std::size_t index, std::size_t json_size,
                   const char* document_end, parsed_tensor& out) {
  od::json_type type;
  if (error_code e = value.type().get(type)) return malformed_at(doc, e, value);
  if (type != od::json_type::object) {
    if (status walked = walk_value(doc, value, depth); !walked.ok()) return walked;
    return status{
        errc::invalid_argument,
        fmt::format("unable to parse the {} JSON: {} {} is not an object", doc.what, role, index)};
  }
  // Until its "name" is read, a tensor is called by its position in messages.
  char position[24] = {'#'};
  std::string_view name_for_messages(
      position,
      static_cast<std::size_t>(std::to_chars(position + 1, position + 24, index).ptr - position));
  bool has_name = false;
  status field_status = for_each_field(doc, value, depth, [&](std::string_view key, od::value v) {
    if (key == "name") {
      if (status s = read_string(doc, v, "name", out.name); !s.ok()) return s;
      name_for_messages = out.name;
      has_name = true;
      return status{};
    }
    if (key == "datatype") {
      std::string_view text;
      if (status s = read_string_view(doc, v, "datatype", text); !s.ok()) return s;
      result<datatype> parsed = parse_datatype(text);
      if (!parsed) {
        return status{errc::invalid_argument, fmt::format("invalid datatype '{}' for {} '{}'", text,
                                                          role, name_for_messages)};
      }
      out.type = *parsed;
      return status{};
    }
    if (key == "shape") {
      shape_type shape;
      if (status s = read_shape(doc, v, depth + 1, role, name_for_messages, shape); !s.ok()) {
        return s;
      }
      out.shape = std::move(shape);
      return status{};
    }
    if (key == "parameters") {
      if (status s = read_parameters(doc, v, depth + 1, out.parameters); !s.ok()) return s;
      if (role == "input") {
        result<std::optional<shared_memory_reference>> place =
            take_shared_memory_reference(out.parameters, role, name_for_messages);
        if (!place) return std::move(place).error();
        out.shared_memory = std::move(*place);
      }
      return take_binary_data_size(out.parameters, role, name_for_messages, out.binary_size);
    }
    if (key == "data") {
      out.has_data = true;
      od::json_type data_type;
      if (error_code e = v.type().get(data_type)) return malformed_at(doc, e, v);
      if (data_type != od::json_type::array) {
        if (status walked = walk_value(doc, v, depth + 1); !walked.ok()) return walked;
        return status{errc::invalid_argument,
                      fmt::format("unable to parse 'data' for {} '{}': expected an array", role,
                                  name_for_messages)};
      }
      if (out.type && out.shape) {
        const tensor_context t{&doc, role, name_for_messages, *out.type};
        result<std::uint64_t> count = element_count(*out.shape);
        if (!count) return status{};                             // reported with the shape below
        if (*count > doc.bounds->max_elements) return status{};  // reported below
        return decode_data(t, v, depth + 1, *out.shape, *count, json_size, out.data);
      }
      od::array array;
      if (error_code e = v.get_array().get(array)) return malformed_at(doc, e, v);
      std::string_view raw;
      if (error_code e = array.raw_json().get(raw)) return malformed_at(doc, e, v);
      out.deferred_data = raw;
      return status{};
    }
    return walk_value(doc, v, depth + 1);
  });
  if (!field_status.ok()) return field_status;

  if (!has_name) return missing_field(doc, role, "name", index);
  if (!out.type) return missing_field(doc, role, "datatype", index);
  if (!out.shape) return missing_field(doc, role, "shape", index);
  result<std::uint64_t> count = element_count(*out.shape);
  if (!count) {
    return status{errc::invalid_argument, fmt::format("unable to parse 'shape' for {} '{}': {}",
                                                      role, out.name, count.error().message())};
  }
  if (*count > doc.bounds->max_elements) {
    return status{errc::payload_too_large,
                  fmt::format("{} '{}' has {} elements, above the limit of {}", role, out.name,
                              *count, doc.bounds->max_elements)};
  }
  if (!out.has_data && !out.binary_size && doc.placed_outputs != nullptr) {
    // A server answers an output that it wrote to shared memory with no data at all.
    if (const shared_memory_reference* place = doc.placed_outputs->find(out.name)) {
      out.shared_memory = *place;
    }
  }
  const int sources =
      (out.has_data ? 1 : 0) + (out.binary_size ? 1 : 0) + (out.shared_memory ? 1 : 0);
  if (sources != 1) {
    std::string set = "no field is set";
    if (sources > 1) {
      set = fmt::format("set{}{}{}", out.has_data ? " 'data'" : "",
                        out.binary_size ? " 'binary_data_size'" : "",
                        out.shared_memory ? " 'shared_memory_region'" : "");
    }
    // A client reading a reply: an output with nothing is most likely one the server wrote to
    // shared memory.
    const std::string_view hint = role == "output" && sources == 0
                                      ? " (an output written to shared memory is read with the "
                                        "client's shared_memory_outputs)"
                                      : "";
    return status{
        errc::invalid_argument,
        fmt::format("{} '{}' must set only one of the following fields: 'data', "
                    "'binary_data_size' in 'parameters'{}. But {}{}",
                    role, out.name,
                    role == "input" ? ", 'shared_memory_region' in 'parameters'" : "", set, hint)};
  }
  if (!out.deferred_data.empty()) {
    const tensor_context t{&doc, role, out.name, *out.type};
    result<buffer> data =
        decode_deferred_data(t, out.deferred_data, *out.shape, *count, document_end);
    if (!data) return std::move(data).error();
    out.data = std::move(*data);
  }
  return {};
}

// A fixed-size tensor's binary data against its shape.
status check_byte_size(const document_context& doc, std::string_view role, const parsed_tensor& t,
                       std::uint64_t size) {
  if (is_bytes(*t.type)) return {};  // its elements are checked when the tensor is made
  // Fails only where a host's element limit lets the byte size pass 2^64.
  const result<std::uint64_t> expected = byte_size(*t.type, *t.shape);
  if (!expected) {
    return status{errc::invalid_argument, fmt::format("unable to parse 'shape' for {} '{}': {}",
                                                      role, t.name, expected.error().message())};
  }
  if (size != *expected) {
    return status{errc::invalid_argument,
                  fmt::format("{} byte size mismatch for {} '{}'{}. Expected {}, got {}", role,
                              role, t.name, doc.for_model(), *expected, size)};
  }
  return {};
}

// Places a client's outputs that a server wrote to shared memory: views into its mapping.
status place_shared_memory_outputs(const document_context& doc,
                                   std::vector<parsed_tensor>& tensors) {
  for (parsed_tensor& t : tensors) {
    if (!t.shared_memory) continue;
    result<buffer> bytes =
        doc.placed_outputs->read(*t.shared_memory, t.name, *t.type, *t.shape, *doc.bounds);
    if (!bytes) return std::move(bytes).error();
    t.data = std::move(*bytes);
  }
  return {};
}

// Places binary tensors: each `binary_data_size` bytes of `binary`, in tensor order, as views.
status place_binary(const document_context& doc, std::string_view role,
                    std::vector<parsed_tensor>& tensors, const buffer& binary) {
  std::size_t offset = 0;
  for (parsed_tensor& t : tensors) {
    if (!t.binary_size) continue;
    const auto size = static_cast<std::uint64_t>(*t.binary_size);
    if (size > binary.size() - offset) {
      return status{errc::invalid_argument,
                    fmt::format("unexpected size for {} '{}', expecting {} additional bytes{}",
                                role, t.name, size - (binary.size() - offset), doc.for_model())};
    }
    result<buffer> slice = binary.slice(offset, static_cast<std::size_t>(size));
    if (!slice) return slice.error();
    offset += static_cast<std::size_t>(size);
    if (status s = check_byte_size(doc, role, t, size); !s.ok()) return s;
    t.data = std::move(*slice);
  }
  if (offset != binary.size()) {
    return status{errc::invalid_argument,
                  fmt::format("unexpected additional {} data{}: {} bytes after the last binary {}",
                              role, doc.for_model(), binary.size() - offset, role)};
  }
  return {};
}

result<tensor> finish_tensor(const document_context& doc, parsed_tensor&& t) {
  result<tensor> made =
      tensor::make(std::move(t.name), *t.type, std::move(*t.shape), std::move(t.data));
  if (!made) {
    // Only BYTES data can be malformed here (fixed sizes were checked): name the model too.
    return status{made.error().code(),
                  fmt::format("{}{}", made.error().message(), doc.for_model())};
  }
  made->parameters() = std::move(t.parameters);
  return made;
}

// Places the binary tensors, then builds the final tensors in order. A request's inputs that name
// a shared-memory region go to `in_regions` (null for a response's outputs), for the server to
// read.
result<std::vector<tensor>> assemble_tensors(
    const document_context& doc, std::string_view role, std::vector<parsed_tensor>& parsed,
    const buffer& binary, std::vector<input_in_shared_memory>* in_regions = nullptr) {
  if (role != "input") {
    if (status s = place_shared_memory_outputs(doc, parsed); !s.ok()) return s;
  }
  if (status s = place_binary(doc, role, parsed, binary); !s.ok()) return s;
  std::vector<tensor> tensors;
  tensors.reserve(parsed.size());
  for (parsed_tensor& p : parsed) {
    if (in_regions != nullptr && p.shared_memory) {
      in_regions->push_back({tensors.size() + in_regions->size(), std::move(p.name), *p.type,
                             std::move(*p.shape), std::move(p.parameters),
                             std::move(*p.shared_memory)});
      continue;
    }
    result<tensor> t = finish_tensor(doc, std::move(p));
    if (!t) return std::move(t).error();
    tensors.push_back(std::move(*t));
  }
  return tensors;
}

// An optional string field, such as "id".
status read_optional_string(const document_context& doc, od::value value, std::string_view field,
                            std::optional<std::string>& out) {
  std::string text;
  if (status s = read_string(doc, value, field, text); !s.ok()) return s;
  out = std::move(text);
  return {};
}

// Triton's wording for two tensors (or requested outputs) of one name.
template <class Item>
status check_unique_names(const std::vector<Item>& items, std::string Item::*name,
                          std::string_view role, std::string_view where) {
  name_set names;
  for (const Item& item : items) names.add(item.*name);
  if (std::optional<std::string_view> duplicate = names.duplicate()) {
    return status{errc::invalid_argument,
                  fmt::format("{} '{}' already exists in {}", role, *duplicate, where)};
  }
  return {};
}

status read_request_outputs(const document_context& doc, od::value value,
                            std::vector<requested_output>& outputs) {
  std::size_t index = 0;
  status read = for_each_element(doc, value, 1, [&](od::value element) {
    requested_output out;
    bool has_name = false;
    status s = for_each_field(doc, element, 2, [&](std::string_view key, od::value v) {
      if (key == "name") {
        has_name = true;
        return read_string(doc, v, "name", out.name);
      }
      if (key == "parameters") return read_parameters(doc, v, 3, out.parameters);
      return walk_value(doc, v, 3);
    });
    if (!s.ok()) return s;
    if (!has_name) return missing_field(doc, "output", "name", index);
    outputs.push_back(std::move(out));
    ++index;
    return status{};
  });
  if (!read.ok()) return read;
  return check_unique_names(outputs, &requested_output::name, "output", "request");
}

status read_tensors(const document_context& doc, od::value value, std::string_view role,
                    std::size_t json_size, const char* document_end,
                    std::vector<parsed_tensor>& tensors) {
  tensors.reserve(4);
  status read = for_each_element(doc, value, 1, [&](od::value element) {
    parsed_tensor t;
    if (status s = read_tensor(doc, element, 2, role, tensors.size(), json_size, document_end, t);
        !s.ok()) {
      return s;
    }
    tensors.push_back(std::move(t));
    return status{};
  });
  if (!read.ok()) return read;
  return check_unique_names(tensors, &parsed_tensor::name, role, doc.what);
}

// --- documents -----------------------------------------------------------------------------------

// Splits a body into its JSON part and binary part per the header length.
struct body_parts {
  const char* json = nullptr;
  std::size_t json_size = 0;
  std::size_t readable_after = 0;
  buffer binary;
};

result<body_parts> split_body(const buffer& body, std::optional<std::size_t> header_length,
                              const limits& bounds, std::string_view what) {
  if (body.size() > bounds.max_body_bytes) {
    return status{errc::payload_too_large,
                  fmt::format("the {} body is {} bytes, above the limit of {}", what, body.size(),
                              bounds.max_body_bytes)};
  }
  body_parts parts;
  parts.json = reinterpret_cast<const char*>(body.data());
  parts.json_size = header_length.value_or(body.size());
  if (parts.json_size > body.size()) {
    return status{errc::invalid_argument,
                  fmt::format("inference header size should be in range (0, {}), got: {}",
                              body.size(), parts.json_size)};
  }
  parts.readable_after = body.size() - parts.json_size + body.padding();
  if (parts.json_size == body.size()) {
    // No binary part: an empty view at the body's end, which needs no share of its ownership.
    parts.binary = buffer::unowned(std::span(body.data() + body.size(), 0));
    return parts;
  }
  result<buffer> binary = body.slice(parts.json_size, body.size() - parts.json_size);
  if (!binary) return binary.error();
  parts.binary = std::move(*binary);
  return parts;
}

status decode_request_into(const buffer& body, std::optional<std::size_t> header_length,
                           const limits& bounds, std::string_view model_name,
                           inference_request& request) {
  if (header_length && *header_length == 0) {
    return status{errc::invalid_argument,
                  "a raw binary request (Inference-Header-Content-Length: 0) needs the model's "
                  "input metadata: decode it with decode_raw_request"};
  }
  result<body_parts> parts = split_body(body, header_length, bounds, "request");
  if (!parts) return std::move(parts).error();
  document_context doc{nullptr, nullptr, &bounds, "request", model_name};
  const padded_json json{parts->json, parts->json_size, parts->readable_after};
  const char* document_end = json.data + json.size;

  if (read_usual_request(doc, json, parts->binary, request)) return {};
  request = inference_request{};
  std::vector<parsed_tensor> inputs;
  bool has_inputs = false;
  status parsed = parse_document(doc, json, [&](auto&& fields) {
    return fields([&](std::string_view key, od::value v) {
      if (key == "id") return read_optional_string(doc, v, "id", request.id);
      if (key == "parameters") return read_parameters(doc, v, 1, request.parameters);
      if (key == "inputs") {
        has_inputs = true;
        return read_tensors(doc, v, "input", json.size, document_end, inputs);
      }
      if (key == "outputs") return read_request_outputs(doc, v, request.outputs);
      return walk_value(doc, v, 1);
    });
  });
  if (!parsed.ok()) return parsed;
  if (!has_inputs) {
    return status{errc::invalid_argument, "unable to parse the request JSON: it has no 'inputs'"};
  }
  result<std::vector<tensor>> tensors =
      assemble_tensors(doc, "input", inputs, parts->binary, &request.shared_memory_inputs);
  if (!tensors) return std::move(tensors).error();
  request.inputs = std::move(*tensors);
  return {};
}

}  // namespace

result<inference_request> decode_request(const buffer& body,
                                         std::optional<std::size_t> header_length,
                                         const limits& bounds, std::string_view model_name) {
  // Decoded in place in the result that is returned (one object, so no move of the request).
  result<inference_request> decoded{inference_request{}};
  if (status s = decode_request_into(body, header_length, bounds, model_name, *decoded); !s.ok()) {
    decoded = std::move(s);
  }
  return decoded;
}

result<inference_response> decode_response(const buffer& body,
                                           std::optional<std::size_t> header_length,
                                           const limits& bounds,
                                           const shared_memory_output_source* shared_memory) {
  result<body_parts> parts = split_body(body, header_length, bounds, "response");
  if (!parts) return std::move(parts).error();
  document_context doc{nullptr, nullptr, &bounds, "response", {}, shared_memory};
  const padded_json json{parts->json, parts->json_size, parts->readable_after};
  const char* document_end = json.data + json.size;

  inference_response response;
  if (read_usual_response(doc, json, parts->binary, response)) return response;
  response = inference_response{};
  std::vector<parsed_tensor> outputs;
  status parsed = parse_document(doc, json, [&](auto&& fields) {
    return fields([&](std::string_view key, od::value v) {
      if (key == "id") return read_optional_string(doc, v, "id", response.id);
      if (key == "model_name") return read_string(doc, v, "model_name", response.model_name);
      if (key == "model_version") {
        return read_string(doc, v, "model_version", response.model_version);
      }
      if (key == "parameters") return read_parameters(doc, v, 1, response.parameters);
      if (key == "outputs") return read_tensors(doc, v, "output", json.size, document_end, outputs);
      return walk_value(doc, v, 1);
    });
  });
  if (!parsed.ok()) return parsed;
  result<std::vector<tensor>> tensors = assemble_tensors(doc, "output", outputs, parts->binary);
  if (!tensors) return std::move(tensors).error();
  response.outputs = std::move(*tensors);
  return response;
}

}  // namespace oip
