// The fast readers of a request's and a response's usual form, apart from the general reader they
// fall back to; tests/json_test.cpp ("the usual form and the general reader decode alike") proves
// both agree.

#include "codecs/detail/json_usual_request.hpp"

#include "codecs/detail/json_read.hpp"
#include "codecs/detail/json_tensor_data.hpp"

#include <oip/buffer.hpp>
#include <oip/datatype.hpp>
#include <oip/infer.hpp>
#include <oip/parameters.hpp>
#include <oip/shape.hpp>
#include <oip/tensor.hpp>

#include <array>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include <simdjson.h>

namespace oip::detail {

struct checked_tensor_parts {
  // Appends a tensor of parts that tensor::make would accept: `count` is the shape's element
  // count, and `data` holds that many elements of `type` (BYTES elements validated). Built in
  // place: no temporary tensor is moved into the vector.
  static void append(std::vector<tensor>& tensors, std::string_view name, datatype type,
                     shape_type&& shape, std::uint64_t count, buffer&& data, parameters&& params) {
    assert(is_bytes(type) ? validate_bytes_elements(data.bytes(), count, name).ok()
                          : data.size() == count * element_size(type));
    tensors.emplace_back(checked_parts_key{}, name, type, std::move(shape), count, std::move(data),
                         std::move(params));
  }
};

// --- the usual request, read directly ------------------------------------------------------------
// Nearly every request has one form: known keys only, keys and names without escapes, each
// input's datatype and shape before its data. `read_usual_request` reads that form alone, with
// fewer layers than the general reader (no per-object key sets, no status on every value, each
// tensor built as soon as its object ends) and no messages: at anything else, an error included,
// it returns false and decode_request reads the document again with the general reader, which
// takes every form and words every error. What it accepts, it has visited in full, and it decodes
// to what the general reader would (tests/json_test.cpp and the request fuzzer compare the two).

namespace {

// Which of an object's known keys `key` is (one bit each), or 0. A key written with escapes is
// none of them.
// Inlined and unrolled, so that each comparison has a constant length (no call to memcmp).
template <std::size_t n>
[[gnu::always_inline]] inline unsigned key_bit(od::raw_json_string key,
                                               const std::array<std::string_view, n>& known) {
#pragma GCC unroll 8
  for (std::size_t i = 0; i < n; ++i) {
    if (key.unsafe_is_equal(known[i])) return 1U << i;
  }
  return 0;
}

// The bit of a field's key when it is a known key seen for the first time, else 0. The field and
// its value are used in place: a copy of simdjson's small iterator structs, stored piecewise and
// read back whole, stalls on store forwarding.
template <std::size_t n>
[[gnu::always_inline]] inline unsigned usual_key(simdjson::simdjson_result<od::field>& field_result,
                                                 const std::array<std::string_view, n>& known,
                                                 unsigned& seen) {
  if (field_result.error() != error_code::SUCCESS) return 0;
  const unsigned bit = key_bit(field_result.value_unsafe().key(), known);
  if ((seen & bit) != 0) return 0;
  seen |= bit;
  return bit;
}

// The shape and its element count; false for a negative dimension or a product that overflows
// (the general reader then decides: a zero dimension makes the count 0, else it is an error).
bool read_usual_shape(od::value& value, shape_type& shape, std::uint64_t& count) {
  od::array array;
  if (value.get_array().get(array) != error_code::SUCCESS) return false;
  count = 1;
  bool overflow = false;
  for (auto dim_result : array) {
    std::int64_t dim = 0;
    if (dim_result.get_int64().get(dim) != error_code::SUCCESS || dim < 0) return false;
    overflow = __builtin_mul_overflow(count, static_cast<std::uint64_t>(dim), &count) || overflow;
    shape.push_back(dim);
  }
  return !overflow;
}

// The most inputs, and requested outputs, that the usual reader takes.
constexpr std::size_t usual_tensor_count = 16;

constexpr std::array<std::string_view, 5> tensor_keys{"name", "datatype", "shape", "parameters",
                                                      "data"};
constexpr unsigned name_key = 1U;
constexpr unsigned datatype_key = 2U;
constexpr unsigned shape_key = 4U;
constexpr unsigned parameters_key = 8U;
constexpr unsigned data_key = 16U;

// A tensor's parameters: `binary_data_size`, nearly always the only one, taken as it is read (in
// the parameters its key, longer than a string's inline capacity, would cost an allocation, and
// the container another), the others as read_parameters reads them. False where the general
// reader must decide: a key with escapes, one seen twice, a size that is not a non-negative
// integer, a value of no parameter type.
bool read_usual_tensor_parameters(const document_context& doc, od::value& value, parameters& params,
                                  std::optional<std::int64_t>& binary_size) {
  od::object object;
  if (value.get_object().get(object) != error_code::SUCCESS) return false;
  for (auto field_result : object) {
    if (field_result.error() != error_code::SUCCESS) return false;
    od::field& field = field_result.value_unsafe();
    std::string_view key;
    if (!plain_string(doc, field.key().raw(), key)) return false;
    od::value& v = field.value();
    if (key == parameter_names::binary_data_size) {
      std::int64_t size = 0;
      if (binary_size || v.get_int64().get(size) != error_code::SUCCESS || size < 0) return false;
      binary_size = size;
      continue;
    }
    if (params.contains(key)) return false;
    parameter_value parsed;
    if (!read_parameter_value(doc, key, v, parsed).ok()) return false;
    params.append_unchecked(std::string{key}, std::move(parsed));
  }
  return true;
}

// One tensor (a request's input or a response's output, `role`), appended to `tensors`; its
// binary data, if any, is the next bytes of `binary` after `binary_offset`.
bool read_usual_tensor(const document_context& doc, std::string_view role, od::value& value,
                       std::size_t json_size, const buffer& binary, std::size_t& binary_offset,
                       std::vector<tensor>& tensors) {
  // Names are checked against each earlier one: more tensors go to the general reader.
  if (tensors.size() == usual_tensor_count) return false;
  od::object object;
  if (value.get_object().get(object) != error_code::SUCCESS) return false;
  unsigned seen = 0;
  std::string_view name;
  datatype type = datatype::bytes;
  shape_type shape;
  std::uint64_t count = 0;
  parameters params;
  std::optional<std::int64_t> binary_size;
  buffer data;
  for (auto field_result : object) {
    const unsigned key = usual_key(field_result, tensor_keys, seen);
    if (key == 0) return false;
    od::value& v = field_result.value_unsafe().value();
    if (key == name_key) {
      if (!in_place_string(doc, v, name)) return false;
    } else if (key == datatype_key) {
      std::string_view text;
      if (!in_place_string(doc, v, text)) return false;
      result<datatype> parsed = parse_datatype(text);
      if (!parsed) return false;
      type = *parsed;
    } else if (key == shape_key) {
      if (!read_usual_shape(v, shape, count) || count > doc.bounds->max_elements) return false;
    } else if (key == parameters_key) {
      if (!read_usual_tensor_parameters(doc, v, params, binary_size)) return false;
      // Shared memory is for the general reader.
      if (params.contains(parameter_names::shared_memory_region) ||
          params.contains(parameter_names::shared_memory_offset) ||
          params.contains(parameter_names::shared_memory_byte_size)) {
        return false;
      }
    } else {  // data, after the datatype and shape that say how to read it
      if ((seen & (datatype_key | shape_key)) != (datatype_key | shape_key)) return false;
      const tensor_context t{&doc, role, name, type};
      if (!decode_data(t, v, 3, shape, count, json_size, data).ok()) return false;
    }
  }
  if ((seen & (name_key | datatype_key | shape_key)) != (name_key | datatype_key | shape_key) ||
      ((seen & data_key) != 0) == binary_size.has_value()) {
    return false;
  }
  if (binary_size) {
    const auto size = static_cast<std::uint64_t>(*binary_size);
    if (size > binary.size() - binary_offset) return false;
    if (!is_bytes(type)) {
      const result<std::uint64_t> expected = byte_size(type, shape);
      if (!expected || size != *expected) return false;
    }
    result<buffer> slice = binary.slice(binary_offset, static_cast<std::size_t>(size));
    if (!slice) return false;
    binary_offset += static_cast<std::size_t>(size);
    data = std::move(*slice);
  }
  for (const tensor& earlier : tensors) {
    if (earlier.name() == name) return false;
  }
  // Fixed-size data was sized from the shape just read (JSON) or checked against it (binary);
  // BYTES data must hold exactly `count` elements.
  if (is_bytes(type) && !validate_bytes_elements(data.bytes(), count, name).ok()) return false;
  detail::checked_tensor_parts::append(tensors, name, type, std::move(shape), count,
                                       std::move(data), std::move(params));
  return true;
}

bool read_usual_output(const document_context& doc, od::value& value,
                       std::vector<requested_output>& outputs) {
  constexpr std::array<std::string_view, 2> keys{"name", "parameters"};
  constexpr unsigned output_name_key = 1U;
  if (outputs.size() == usual_tensor_count) return false;  // as for inputs
  od::object object;
  if (value.get_object().get(object) != error_code::SUCCESS) return false;
  unsigned seen = 0;
  std::string_view name;
  requested_output out;
  for (auto field_result : object) {
    const unsigned key = usual_key(field_result, keys, seen);
    if (key == 0) return false;
    od::value& v = field_result.value_unsafe().value();
    if (key == output_name_key) {
      if (!in_place_string(doc, v, name)) return false;
    } else if (!read_parameters(doc, v, 3, out.parameters).ok()) {
      return false;
    }
  }
  if ((seen & output_name_key) == 0) return false;
  for (const requested_output& earlier : outputs) {
    if (earlier.name == name) return false;
  }
  out.name.assign(name);
  outputs.push_back(std::move(out));
  return true;
}

template <class ReadElement>
bool read_usual_array(od::value& value, ReadElement&& read_element) {
  od::array array;
  if (value.get_array().get(array) != error_code::SUCCESS) return false;
  for (auto element_result : array) {
    if (element_result.error() != error_code::SUCCESS) return false;
    if (!read_element(element_result.value_unsafe())) return false;
  }
  return true;
}

// Opens `json` and has `read_root(root)` read its root object: true when it did and nothing
// follows the object. Depths 1 to 3 hold the tensors, their objects and their shapes and data: a
// host that sets a smaller limit gets its error from the general reader.
template <class ReadRoot>
bool read_usual_document(document_context& doc, const padded_json& json, ReadRoot&& read_root) {
  if (json.size > doc.bounds->max_json_bytes || doc.bounds->max_json_depth < 3) return false;
  const parser_lease parser{0, json.size};
  doc.begin = json.data;
  doc.end = json.data + json.size;
  od::document document;
  od::object root;
  // The document's get_object() checks that the root object is closed (see open_document).
  if (parser.get().iterate(json.data, json.size, json.capacity).get(document) !=
          error_code::SUCCESS ||
      document.get_object().get(root) != error_code::SUCCESS) {
    return false;
  }
  return read_root(root) && check_nothing_follows(doc, document).ok();
}

}  // namespace

bool read_usual_request(document_context& doc, const padded_json& json, const buffer& binary,
                        inference_request& request) {
  constexpr std::array<std::string_view, 4> keys{"id", "parameters", "inputs", "outputs"};
  constexpr unsigned id_key = 1U;
  constexpr unsigned request_parameters_key = 2U;
  constexpr unsigned inputs_key = 4U;
  constexpr unsigned outputs_key = 8U;
  return read_usual_document(doc, json, [&](od::object& root) {
    unsigned seen = 0;
    std::size_t binary_offset = 0;
    for (auto field_result : root) {
      const unsigned key = usual_key(field_result, keys, seen);
      if (key == 0) return false;
      od::value& v = field_result.value_unsafe().value();
      bool read = false;
      switch (key) {
        case id_key: {
          std::string_view id;
          read = in_place_string(doc, v, id);
          if (read) request.id.emplace(id);
          break;
        }
        case request_parameters_key:
          read = read_parameters(doc, v, 1, request.parameters).ok();
          break;
        case inputs_key:
          request.inputs.reserve(4);
          read = read_usual_array(v, [&](od::value& input) {
            return read_usual_tensor(doc, "input", input, json.size, binary, binary_offset,
                                     request.inputs);
          });
          break;
        case outputs_key:
          read = read_usual_array(v, [&](od::value& output) {
            return read_usual_output(doc, output, request.outputs);
          });
          break;
        default: break;  // usual_key admits known keys only
      }
      if (!read) return false;
    }
    return (seen & inputs_key) != 0 && binary_offset == binary.size();
  });
}

bool read_usual_response(document_context& doc, const padded_json& json, const buffer& binary,
                         inference_response& response) {
  constexpr std::array<std::string_view, 5> keys{"id", "model_name", "model_version", "parameters",
                                                 "outputs"};
  constexpr unsigned id_key = 1U;
  constexpr unsigned model_name_key = 2U;
  constexpr unsigned model_version_key = 4U;
  constexpr unsigned response_parameters_key = 8U;
  constexpr unsigned outputs_key = 16U;
  return read_usual_document(doc, json, [&](od::object& root) {
    unsigned seen = 0;
    std::size_t binary_offset = 0;
    for (auto field_result : root) {
      const unsigned key = usual_key(field_result, keys, seen);
      if (key == 0) return false;
      od::value& v = field_result.value_unsafe().value();
      bool read = false;
      std::string_view text;
      switch (key) {
        case id_key:
          read = in_place_string(doc, v, text);
          if (read) response.id.emplace(text);
          break;
        case model_name_key:
          read = in_place_string(doc, v, text);
          if (read) response.model_name.assign(text);
          break;
        case model_version_key:
          read = in_place_string(doc, v, text);
          if (read) response.model_version.assign(text);
          break;
        case response_parameters_key:
          read = read_parameters(doc, v, 1, response.parameters).ok();
          break;
        case outputs_key:
          response.outputs.reserve(4);
          read = read_usual_array(v, [&](od::value& output) {
            return read_usual_tensor(doc, "output", output, json.size, binary, binary_offset,
                                     response.outputs);
          });
          break;
        default: break;  // usual_key admits known keys only
      }
      if (!read) return false;
    }
    return binary_offset == binary.size();
  });
}

}  // namespace oip::detail
