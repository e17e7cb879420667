#include "detail/json_string.hpp"
#include "detail/json_values.hpp"

#include <oip/generate.hpp>
#include <oip/json.hpp>

#include <algorithm>
#include <map>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <simdjson.h>

namespace oip {

namespace {

namespace od = simdjson::ondemand;
using simdjson::error_code;

status invalid(std::string message) { return status{errc::invalid_argument, std::move(message)}; }

status malformed(error_code error) {
  return invalid(fmt::format("failed to parse the generate request JSON buffer: {}",
                             simdjson::error_message(error)));
}

// The values a member holds, nested arrays flattened: a second reading of the member's text (the
// first one skipped it unchecked; `decode_request` checks every value later).
result<std::uint64_t> count_values(std::string_view text, std::size_t max_depth) {
  const simdjson::padded_string padded{text};
  od::parser parser;
  od::document doc;
  if (error_code e = parser.iterate(padded).get(doc)) return malformed(e);
  std::uint64_t count = 0;
  const auto count_in = [&](auto& self, od::array array, std::size_t depth) -> status {
    if (depth > max_depth) {
      return invalid(fmt::format("the generate request nests arrays deeper than {}", max_depth));
    }
    for (auto element : array) {
      if (error_code e = element.error()) return malformed(e);
      od::value value = element.value_unsafe();
      // A token that is no JSON value (NaN, Infinity) counts as one; decoding judges it.
      od::json_type type = od::json_type::number;
      if (value.type().get(type) == error_code::SUCCESS && type == od::json_type::array) {
        od::array inner;
        if (error_code e = value.get_array().get(inner)) return malformed(e);
        if (status s = self(self, inner, depth + 1); !s.ok()) return s;
      } else {
        ++count;
      }
    }
    return {};
  };
  od::array array;
  if (error_code e = doc.get_array().get(array)) return malformed(e);
  if (status s = count_in(count_in, array, 1); !s.ok()) return s;
  return count;
}

// Triton's shape for `count` values of an input: the model's dimensions (the batch one first when
// it batches), the fixed ones dividing the count from the innermost out, then the innermost
// variable one taking what is left and the others 1.
result<shape_type> shape_for(const tensor_metadata& input, bool batched, std::uint64_t count) {
  shape_type shape = input.shape;
  if (batched) shape.insert(shape.begin(), -1);
  std::uint64_t left = count;
  const auto refused = [&] {
    return invalid(fmt::format("The schema can not convert input '{}' to tensor with proper shape",
                               input.name));
  };
  for (auto dim = shape.rbegin(); dim != shape.rend(); ++dim) {
    if (*dim < 0) continue;
    const auto fixed = static_cast<std::uint64_t>(*dim);
    if (fixed == 0 ? left != 0 : left % fixed != 0) return refused();
    if (fixed != 0) left /= fixed;
  }
  bool filled = false;
  for (auto dim = shape.rbegin(); dim != shape.rend(); ++dim) {
    if (*dim >= 0) continue;
    *dim = filled ? 1 : static_cast<std::int64_t>(left);
    filled = true;
  }
  if (!filled && left != 1 && count != 0) return refused();
  return shape;
}

// Reads a generate request's members into `inputs` (the JSON of `decode_request`'s inputs),
// `id` and `parameters`.
class generate_reader {
 public:
  generate_reader(const model_config& model, const limits& bounds)
      : model_{model}, bounds_{bounds} {}

  status read(od::object members, bool nested) {
    for (auto member : members) {
      od::field field;
      if (error_code e = std::move(member).get(field)) return malformed(e);
      std::string_view key;
      if (error_code e = field.unescaped_key().get(key)) return malformed(e);
      const std::string name{key};
      od::value value = field.value();
      if (!nested && name == "id") {
        std::string_view id;
        if (value.get_string().get(id) != error_code::SUCCESS) {
          return invalid("unable to parse 'id': expected a string");
        }
        if (id.size() > bounds_.max_string_id_length) {
          return invalid(fmt::format("'id' of {} characters is longer than the limit of {}",
                                     id.size(), bounds_.max_string_id_length));
        }
        id_ = std::string{id};
      } else if (!nested && name == "parameters" && find_input(name) == nullptr) {
        od::object inner;
        if (value.get_object().get(inner) != error_code::SUCCESS) {
          return invalid("Expected JSON object for keyword: 'parameters'");
        }
        if (status s = read(inner, true); !s.ok()) {
          return status{s.code(), fmt::format("Converting keyword: 'parameters': {}", s.message())};
        }
      } else if (!nested && name == "parameters") {
        return invalid("Keyword 'parameters' for nested schema also given as input tensor name");
      } else if (const tensor_metadata* input = find_input(name)) {
        if (status s = add_input(*input, value); !s.ok()) return s;
      } else if (status s = add_parameter(name, value); !s.ok()) {
        return s;
      }
    }
    return {};
  }

  [[nodiscard]] result<inference_request> request() {
    inputs_ += "]}";
    result<inference_request> out =
        decode_request(buffer::from_string(std::move(inputs_)), std::nullopt, bounds_, model_.name);
    if (!out) return out;
    out->id = std::move(id_);
    out->parameters = std::move(parameters_);
    return out;
  }

 private:
  [[nodiscard]] const tensor_metadata* find_input(std::string_view name) const {
    const auto it = std::find_if(model_.inputs.begin(), model_.inputs.end(),
                                 [&](const tensor_metadata& t) { return t.name == name; });
    return it == model_.inputs.end() ? nullptr : &*it;
  }

  status add_input(const tensor_metadata& input, od::value& value) {
    // A token that is no JSON value (NaN, Infinity) is taken as a number; decoding judges it.
    od::json_type type = od::json_type::number;
    if (value.type().get(type) != error_code::SUCCESS) type = od::json_type::number;
    std::string_view text;
    std::uint64_t count = 1;
    if (type == od::json_type::object) {
      return invalid(
          fmt::format("unable to parse input '{}': expected a value or an array of "
                      "values, not an object",
                      input.name));
    }
    if (type == od::json_type::array) {
      od::array array;
      if (error_code e = value.get_array().get(array)) return malformed(e);
      if (error_code e = array.raw_json().get(text)) return malformed(e);
      result<std::uint64_t> counted = count_values(text, bounds_.max_json_depth);
      if (!counted) return std::move(counted).error();
      count = *counted;
    } else {
      text = value.raw_json_token();
    }
    result<shape_type> shape = shape_for(input, model_.max_batch_size > 0, count);
    if (!shape) return std::move(shape).error();
    if (inputs_.size() > std::string_view{R"({"inputs":[)"}.size()) inputs_ += ',';
    inputs_ += R"({"name":)";
    detail::append_json_string(inputs_, input.name);
    inputs_ += fmt::format(R"(,"datatype":"{}","shape":[{}],"data":)", to_string(input.type),
                           fmt::join(*shape, ","));
    if (type == od::json_type::array) {
      inputs_ += text;
    } else {
      inputs_ += '[';
      inputs_ += text;
      inputs_ += ']';
    }
    inputs_ += '}';
    return {};
  }

  status add_parameter(const std::string& name, od::value& value) {
    od::json_type type;
    if (error_code e = value.type().get(type)) return malformed(e);
    std::optional<parameter_value> read;
    if (type == od::json_type::string) {
      std::string_view text;
      if (error_code e = value.get_string().get(text)) return malformed(e);
      read = std::string{text};
    } else if (type == od::json_type::boolean) {
      bool flag = false;
      if (error_code e = value.get_bool().get(flag)) return malformed(e);
      read = flag;
    } else if (type == od::json_type::number) {
      od::number_type kind;
      if (error_code e = value.get_number_type().get(kind)) return malformed(e);
      if (kind == od::number_type::signed_integer) {
        std::int64_t n = 0;
        if (error_code e = value.get_int64().get(n)) return malformed(e);
        read = n;
      } else if (kind == od::number_type::unsigned_integer) {
        std::uint64_t n = 0;
        if (error_code e = value.get_uint64().get(n)) return malformed(e);
        read = n;
      } else {
        double n = 0;
        if (error_code e = value.get_double().get(n)) return malformed(e);
        read = n;
      }
    } else {
      return invalid(fmt::format(
          "parameter '{}' has invalid type. It should be either 'int', 'bool', or 'string'.",
          name));
    }
    if (!parameters_.try_add(name, std::move(*read))) {
      return invalid(fmt::format("duplicate parameter '{}' in the generate request", name));
    }
    return {};
  }

  const model_config& model_;
  const limits& bounds_;
  std::string inputs_ = R"({"inputs":[)";
  std::optional<std::string> id_;
  parameters parameters_;
};

}  // namespace

result<inference_request> decode_generate_request(const buffer& body, const model_config& model,
                                                  const limits& bounds) {
  if (body.size() > bounds.max_json_bytes) {
    return status{errc::payload_too_large,
                  fmt::format("the generate request's {} bytes of JSON are above the limit of {}",
                              body.size(), bounds.max_json_bytes)};
  }
  const simdjson::padded_string padded{body.as_string_view()};
  od::parser parser;
  od::document doc;
  if (error_code e = parser.iterate(padded).get(doc)) return malformed(e);
  od::object members;
  if (error_code e = doc.get_object().get(members)) {
    return e == error_code::INCORRECT_TYPE ? invalid("the generate request must be a JSON object")
                                           : malformed(e);
  }
  generate_reader reader{model, bounds};
  if (status s = reader.read(members, false); !s.ok()) return s;
  if (const char* trailing = nullptr; doc.current_location().get(trailing) == error_code::SUCCESS) {
    return invalid("unexpected content after the generate request's JSON object");
  }
  return reader.request();
}

result<std::string> encode_generate_response(const inference_response& response) {
  // Triton's reply is a map: names in order, the first of a name kept.
  std::map<std::string, std::string, std::less<>> members;
  const auto add = [&](const std::string& name, std::string&& json) {
    members.try_emplace(name, std::move(json));
  };
  const auto quoted = [](std::string_view text) {
    std::string out;
    detail::append_json_string(out, text);
    return out;
  };
  if (response.id && !response.id->empty()) add("id", quoted(*response.id));
  add("model_name", quoted(response.model_name));
  add("model_version", quoted(response.model_version));
  for (const auto& [name, value] : response.parameters) {
    std::string json;
    detail::append_json_parameter(json, value);
    add(name, std::move(json));
  }
  for (const tensor& output : response.outputs) {
    std::string json;
    const bool alone = output.element_count() == 1;
    if (!alone) json += '[';
    if (status s = detail::append_json_values(json, output, "output", {}); !s.ok()) return s;
    if (!alone) json += ']';
    add(output.name(), std::move(json));
  }
  std::string out = "{";
  for (const auto& [name, json] : members) {
    if (out.size() > 1) out += ',';
    detail::append_json_string(out, name);
    out += ':';
    out += json;
  }
  out += '}';
  return out;
}

}  // namespace oip
