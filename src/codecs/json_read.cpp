// The JSON reading primitives of codecs/detail/json_read.hpp that are neither templates nor on a
// per-element path: the errors, walking any value, strings, booleans, parameters, documents.

#include "codecs/detail/json_read.hpp"

#include <oip/parameters.hpp>
#include <oip/status.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include <simdjson.h>

namespace oip::detail {

// --- the document and its errors -----------------------------------------------------------------

status malformed(const document_context& doc, error_code error, const char* where) {
  if (error == error_code::MEMALLOC)
    return out_of_memory(fmt::format("parsing the {} JSON", doc.what));
  const std::size_t offset =
      where != nullptr && where >= doc.begin ? static_cast<std::size_t>(where - doc.begin) : 0;
  // Triton writes BYTES output as it is, UTF-8 or not, which makes JSON no parser takes.
  const std::string_view hint =
      error == error_code::UTF8_ERROR && doc.what == "response"
          ? " (a BYTES output that is not UTF-8 must be asked for as binary data)"
          : "";
  return status{errc::invalid_argument,
                fmt::format("failed to parse the {} JSON buffer: {} at {}{}", doc.what,
                            simdjson::error_message(error), offset, hint)};
}

const char* location_of(od::value& value) {
  const char* where = nullptr;
  if (value.current_location().get(where) != error_code::SUCCESS) return nullptr;
  return where;
}

status malformed_at(const document_context& doc, error_code error, od::value& value) {
  return malformed(doc, error, location_of(value));
}

status malformed_token(const document_context& doc, std::string_view token) {
  return malformed(doc, error_code::TAPE_ERROR, token.data());
}

// --- walking any value in full -------------------------------------------------------------------

namespace {
bool is_json_number(std::string_view s) { return scan_number(s).valid; }
}  // namespace

status walk_value(const document_context& doc, od::value value, std::size_t depth) {
  od::json_type type;
  if (error_code e = value.type().get(type)) return malformed_at(doc, e, value);
  switch (type) {
    case od::json_type::object:
      return for_each_field(doc, value, depth + 1, [&](std::string_view, od::value v) {
        return walk_value(doc, v, depth + 1);
      });
    case od::json_type::array:
      return for_each_element(doc, value, depth + 1,
                              [&](od::value v) { return walk_value(doc, v, depth + 1); });
    case od::json_type::string: {
      std::string_view s;
      if (error_code e = value.get_string().get(s)) return malformed_at(doc, e, value);
      return {};
    }
    case od::json_type::number: {
      const std::string_view token = token_of(doc, value);
      if (!is_json_number(token)) return malformed_token(doc, token);
      return {};
    }
    case od::json_type::boolean: {
      bool b = false;
      if (error_code e = value.get_bool().get(b)) return malformed_at(doc, e, value);
      return {};
    }
    case od::json_type::null: {
      bool is_null = false;
      if (error_code e = value.is_null().get(is_null); e || !is_null) {
        return malformed_at(doc, e ? e : error_code::N_ATOM_ERROR, value);
      }
      return {};
    }
  }
  return malformed_at(doc, error_code::TAPE_ERROR, value);
}

// --- typed scalars -------------------------------------------------------------------------------

status wrong_type(const document_context& doc, std::string_view field, std::string_view expected) {
  return status{
      errc::invalid_argument,
      fmt::format("unable to parse '{}' in the {} JSON: expected {}", field, doc.what, expected)};
}

status missing_field(const document_context& doc, std::string_view role, std::string_view field,
                     std::size_t index) {
  return status{
      errc::invalid_argument,
      fmt::format("unable to parse the {} JSON: {} {} has no '{}'", doc.what, role, index, field)};
}

status read_string_view(const document_context& doc, od::value value, std::string_view field,
                        std::string_view& out) {
  if (in_place_string(doc, value, out)) return {};
  if (error_code e = value.get_string().get(out)) {
    if (e == error_code::INCORRECT_TYPE) {
      if (status walked = walk_value(doc, value, 0); !walked.ok()) return walked;
      return wrong_type(doc, field, "a string");
    }
    return malformed_at(doc, e, value);
  }
  return {};
}

status read_string(const document_context& doc, od::value value, std::string_view field,
                   std::string& out) {
  std::string_view s;
  if (status read = read_string_view(doc, value, field, s); !read.ok()) return read;
  out.assign(s);
  return {};
}

status read_bool(const document_context& doc, od::value value, std::string_view field, bool& out) {
  if (value.get_bool().get(out) != error_code::SUCCESS) {
    if (status walked = walk_value(doc, value, 0); !walked.ok()) return walked;
    return wrong_type(doc, field, "a boolean");
  }
  return {};
}

// A parameter value keeps its JSON type: integer (int64, or uint64 above INT64_MAX), double,
// bool or string. Anything else is refused, with Triton's wording.
status read_parameter_value(const document_context& doc, std::string_view key, od::value value,
                            parameter_value& out) {
  // NaN and Infinity, which JSON lacks, as in tensor data (and as the encoder writes them).
  if (const std::string_view token = token_of(doc, value);
      token == "NaN" || token == "Infinity" || token == "-Infinity") {
    double special = 0;
    (void)parse_floating(token, special);
    out = special;
    return {};
  }
  od::json_type type;
  if (error_code e = value.type().get(type)) return malformed_at(doc, e, value);
  switch (type) {
    case od::json_type::string: {
      std::string s;
      if (status st = read_string(doc, value, key, s); !st.ok()) return st;
      out = std::move(s);
      return {};
    }
    case od::json_type::boolean: {
      bool b = false;
      if (status st = read_bool(doc, value, key, b); !st.ok()) return st;
      out = b;
      return {};
    }
    case od::json_type::number: {
      const std::string_view token = token_of(doc, value);
      const number_shape number = scan_number(token);
      if (!number.valid) return malformed_token(doc, token);
      if (number.integer) {
        bool out_of_range = false;
        std::int64_t i = 0;
        if (parse_integer(token, i, out_of_range)) {
          out = i;
          return {};
        }
        std::uint64_t u = 0;
        if (parse_integer(token, u, out_of_range)) {
          out = u;
          return {};
        }
      }
      double d = 0;
      if (!parse_floating(token, d)) return malformed_token(doc, token);
      out = d;
      return {};
    }
    case od::json_type::null:
    case od::json_type::array:
    case od::json_type::object:
      if (status walked = walk_value(doc, value, 1); !walked.ok()) return walked;
      return status{errc::invalid_argument,
                    fmt::format("parameter '{}' has invalid type. It should be either 'int', "
                                "'double', 'bool', or 'string'.",
                                key)};
  }
  return malformed_at(doc, error_code::TAPE_ERROR, value);
}

status read_parameters(const document_context& doc, od::value value, std::size_t depth,
                       parameters& out) {
  od::json_type type;
  if (error_code e = value.type().get(type)) return malformed_at(doc, e, value);
  if (type != od::json_type::object) {
    if (status walked = walk_value(doc, value, depth); !walked.ok()) return walked;
    return wrong_type(doc, "parameters", "an object");
  }
  return for_each_field(doc, value, depth, [&](std::string_view key, od::value v) {
    parameter_value parsed;
    if (status s = read_parameter_value(doc, key, v, parsed); !s.ok()) return s;
    out.append_unchecked(std::string{key}, std::move(parsed));  // for_each_field refuses duplicates
    return status{};
  });
}

// --- documents -----------------------------------------------------------------------------------

status open_document(document_context& doc, const padded_json& json, od::parser& parser,
                     od::document& document, od::object& root) {
  doc.begin = json.data;
  doc.end = json.data + json.size;
  if (error_code e = parser.iterate(json.data, json.size, json.capacity).get(document)) {
    return malformed(doc, e, json.data);
  }
  od::json_type type;
  if (error_code e = document.type().get(type)) return malformed(doc, e, json.data);
  if (type != od::json_type::object) {
    return status{
        errc::invalid_argument,
        fmt::format("failed to parse the {} JSON buffer: expected an object at 0", doc.what)};
  }
  // The document's own get_object() checks that the root object is closed; simdjson relies on
  // that check to never read past the last token of an unbalanced document.
  if (error_code e = document.get_object().get(root)) return malformed(doc, e, json.data);
  return {};
}

status check_nothing_follows(const document_context& doc, od::document& document) {
  if (const char* trailing = nullptr;
      document.current_location().get(trailing) == error_code::SUCCESS) {
    return malformed(doc, error_code::TRAILING_CONTENT, trailing);
  }
  return {};
}

}  // namespace oip::detail
