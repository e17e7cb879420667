#include "codecs/detail/json_values.hpp"
#include "core/detail/json_string.hpp"

#include <oip/generate.hpp>
#include <oip/json.hpp>

#include <algorithm>
#include <map>
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
  bool has_zero = false;  // a fixed dimension of 0 takes no values, and leaves none
  const auto refused = [&] {
    return invalid(fmt::format("The schema can not convert input '{}' to tensor with proper shape",
                               input.name));
  };
  for (auto dim = shape.rbegin(); dim != shape.rend(); ++dim) {
    if (*dim < 0) continue;
    const auto fixed = static_cast<std::uint64_t>(*dim);
    if (fixed == 0) {
      if (left != 0) return refused();
      has_zero = true;
    } else if (left % fixed != 0) {
      return refused();
    } else {
      left /= fixed;
    }
  }
  bool filled = false;
  for (auto dim = shape.rbegin(); dim != shape.rend(); ++dim) {
    if (*dim >= 0) continue;
    *dim = filled || has_zero ? 1 : static_cast<std::int64_t>(left);
    filled = true;
  }
  if (!filled && !has_zero && left != 1) return refused();
  return shape;
}

// The token of a value that is not an array or an object. simdjson does not type NaN and the
// infinities (JSON has no such values): those are taken as numbers, to be judged where numbers
// are read; any other token that is no value is malformed.
result<std::string_view> scalar_token(od::value& value, od::json_type& type) {
  if (value.type().get(type) == error_code::SUCCESS) return value.raw_json_token();
  const std::string_view token = value.raw_json_token();
  const std::string_view unsigned_token = token.starts_with('-') ? token.substr(1) : token;
  if (!unsigned_token.starts_with('N') && !unsigned_token.starts_with('I')) {
    return malformed(error_code::TAPE_ERROR);
  }
  type = od::json_type::number;
  return token;
}

// Reads a generate request's members into the infer request that `decode_request` then decodes
// and checks: inputs with their datatype and shape, `id`, and `parameters`, each value as its
// JSON text (so that numbers, strings and duplicates are read exactly as in an infer request).
class generate_reader {
 public:
  generate_reader(const model_config& model, const limits& bounds)
      : model_{model}, bounds_{bounds}, inputs_seen_(model.inputs.size(), false) {}

  status read(od::object members, bool nested) {
    for (auto member : members) {
      od::field field;
      if (error_code e = std::move(member).get(field)) return malformed(e);
      std::string_view key;
      if (error_code e = field.unescaped_key().get(key)) return malformed(e);
      od::value value = field.value();
      const std::ptrdiff_t input = input_index(key);
      if (!nested && key == "parameters") {
        if (input >= 0) {
          return invalid("Keyword 'parameters' for nested schema also given as input tensor name");
        }
        od::object inner;
        if (value.get_object().get(inner) != error_code::SUCCESS) {
          return invalid("Expected JSON object for keyword: 'parameters'");
        }
        if (status s = read(inner, true); !s.ok()) {
          return status{s.code(), fmt::format("Converting keyword: 'parameters': {}", s.message())};
        }
      } else if (input >= 0) {
        if (status s = add_input(static_cast<std::size_t>(input), value); !s.ok()) return s;
      } else if (!nested && key == "id") {
        od::json_type type{};
        result<std::string_view> token = scalar_token(value, type);
        if (!token || type != od::json_type::string) {
          return invalid("unable to parse 'id': expected a string");
        }
        append_member(id_, "id", *token);
      } else if (status s = add_parameter(key, value); !s.ok()) {
        return s;
      }
    }
    return {};
  }

  [[nodiscard]] result<inference_request> request() {
    std::string json = "{";
    json += id_;
    if (!parameters_.empty()) {
      json += R"("parameters":{)";
      json += parameters_;
      json += "},";
    }
    json += R"("inputs":[)";
    json += inputs_;
    json += "]}";
    // The infer request's text is the body's, plus a few bytes per input: what the body was
    // allowed, it is allowed.
    limits bounds = bounds_;
    bounds.max_json_bytes = std::max(bounds.max_json_bytes, json.size());
    return decode_request(buffer::from_string(std::move(json)), std::nullopt, bounds, model_.name);
  }

 private:
  [[nodiscard]] std::ptrdiff_t input_index(std::string_view name) const {
    const auto it = std::find_if(model_.inputs.begin(), model_.inputs.end(),
                                 [&](const tensor_metadata& t) { return t.name == name; });
    return it == model_.inputs.end() ? -1 : it - model_.inputs.begin();
  }

  // Appends `"key":token,` to `out`.
  static void append_member(std::string& out, std::string_view key, std::string_view token) {
    detail::append_json_string(out, key);
    out += ':';
    out += token;
    out += ',';
  }

  status add_input(std::size_t index, od::value& value) {
    const tensor_metadata& input = model_.inputs[index];
    if (inputs_seen_[index]) {
      return invalid(fmt::format("input '{}' already exists in request", input.name));
    }
    inputs_seen_[index] = true;
    std::string_view text;
    std::uint64_t count = 1;
    od::json_type type{};
    if (value.type().get(type) == error_code::SUCCESS && type == od::json_type::object) {
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
      result<std::string_view> token = scalar_token(value, type);
      if (!token) return std::move(token).error();
      text = *token;
    }
    result<shape_type> shape = shape_for(input, model_.max_batch_size > 0, count);
    if (!shape) return std::move(shape).error();
    if (!inputs_.empty()) inputs_ += ',';
    inputs_ += R"({"name":)";
    detail::append_json_string(inputs_, input.name);
    inputs_ += fmt::format(R"(,"datatype":"{}","shape":[{}],"data":)", to_string(input.type),
                           fmt::join(*shape, ","));
    const bool array = type == od::json_type::array;
    if (!array) inputs_ += '[';
    inputs_ += text;
    if (!array) inputs_ += ']';
    inputs_ += '}';
    return {};
  }

  status add_parameter(std::string_view name, od::value& value) {
    od::json_type type{};
    result<std::string_view> token = scalar_token(value, type);
    if (!token) return std::move(token).error();
    if (type == od::json_type::null || type == od::json_type::array ||
        type == od::json_type::object) {
      return invalid(fmt::format(
          "parameter '{}' has invalid type. It should be either 'int', 'bool', or 'string'.",
          name));
    }
    if (!parameters_.empty()) parameters_ += ',';
    append_member(parameters_, name, *token);
    parameters_.pop_back();  // append_member's comma
    return {};
  }

  const model_config& model_;
  const limits& bounds_;
  std::vector<bool> inputs_seen_;
  std::string inputs_;      // the inputs' objects, comma-separated
  std::string id_;          // `"id":"...",` or nothing
  std::string parameters_;  // the parameters' members, comma-separated
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

result<std::string> encode_generate_response(const inference_response& response,
                                             std::size_t max_json_bytes) {
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
  std::size_t written = 0;  // the outputs' text so far, against `max_json_bytes`
  for (const tensor& output : response.outputs) {
    std::string json;
    const bool alone = output.element_count() == 1;
    if (!alone) json += '[';
    // Text cut inside a character (at a token limit, say) must still make valid JSON, and a
    // generate client cannot ask for binary data instead: bytes that are not UTF-8 become U+FFFD.
    const std::size_t left = max_json_bytes - std::min(max_json_bytes, written);
    status s = detail::append_json_values(json, output, "output",
                                          {.replace_invalid_utf8 = true, .max_text_bytes = left});
    if (s.code() == errc::payload_too_large) {
      return status{errc::invalid_argument,
                    fmt::format("the generate reply of model '{}' would be larger than {} bytes, "
                                "this request's bound",
                                response.model_name, max_json_bytes)};
    }
    if (!s.ok()) return s;
    written += json.size();
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
