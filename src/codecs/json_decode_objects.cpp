// JSON decoding of the protocol's objects other than inference bodies: metadata, health, the
// extensions' requests (repository, shared memory, logging, trace settings) and error replies.

#include "codecs/detail/base64.hpp"
#include "codecs/detail/json_read.hpp"

#include <oip/json.hpp>

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <fmt/format.h>

#include <simdjson.h>

namespace oip {

namespace {

namespace od = simdjson::ondemand;
using simdjson::error_code;

using detail::document_context;
using detail::for_each_element;
using detail::for_each_field;
using detail::malformed_at;
using detail::missing_field;
using detail::padded_json;
using detail::parse_document;
using detail::parse_integer;
using detail::read_bool;
using detail::read_parameters;
using detail::read_string;
using detail::read_string_view;
using detail::token_of;
using detail::walk_value;
using detail::wrong_type;

template <class Reader>
status decode_small(std::string_view text, std::string_view what, const limits& bounds,
                    Reader&& read) {
  document_context doc{nullptr, nullptr, &bounds, what, {}};
  const padded_json json{text.data(), text.size(), 0};
  return parse_document(doc, json, [&](auto&& fields) { return read(doc, fields); });
}

status read_string_array(const document_context& doc, od::value value, std::string_view field,
                         std::vector<std::string>& out) {
  od::json_type type;
  if (error_code e = value.type().get(type)) return malformed_at(doc, e, value);
  if (type != od::json_type::array) {
    if (status walked = walk_value(doc, value, 1); !walked.ok()) return walked;
    return wrong_type(doc, field, "an array of strings");
  }
  return for_each_element(doc, value, 1, [&](od::value element) {
    std::string s;
    if (status st = read_string(doc, element, field, s); !st.ok()) return st;
    out.push_back(std::move(s));
    return status{};
  });
}

status read_tensor_metadata(const document_context& doc, od::value value,
                            std::vector<tensor_metadata>& out, std::string_view role) {
  return for_each_element(doc, value, 1, [&](od::value element) {
    tensor_metadata t;
    bool has_name = false;
    bool has_type = false;
    bool has_shape = false;
    status s = for_each_field(doc, element, 2, [&](std::string_view key, od::value v) {
      if (key == "name") {
        has_name = true;
        return read_string(doc, v, "name", t.name);
      }
      if (key == "datatype") {
        std::string_view text;
        if (status st = read_string_view(doc, v, "datatype", text); !st.ok()) return st;
        result<datatype> parsed = parse_datatype(text);
        if (!parsed) return parsed.error();
        t.type = *parsed;
        has_type = true;
        return status{};
      }
      if (key == "shape") {
        has_shape = true;
        return for_each_element(doc, v, 3, [&](od::value dim) {
          const std::string_view token = token_of(doc, dim);
          std::int64_t d = 0;
          bool out_of_range = false;
          if (!parse_integer(token, d, out_of_range) || d < -1) {
            if (status walked = walk_value(doc, dim, 4); !walked.ok()) return walked;
            return status{errc::invalid_argument,
                          fmt::format("unable to parse 'shape' of {} '{}': dimensions are -1 or "
                                      "non-negative integers",
                                      role, t.name)};
          }
          t.shape.push_back(d);
          return status{};
        });
      }
      if (key == "parameters") return read_parameters(doc, v, 3, t.parameters);
      return walk_value(doc, v, 3);
    });
    if (!s.ok()) return s;
    if (!has_name) return missing_field(doc, role, "name", out.size());
    if (!has_type) return missing_field(doc, role, "datatype", out.size());
    if (!has_shape) return missing_field(doc, role, "shape", out.size());
    out.push_back(std::move(t));
    return status{};
  });
}

// A reply whose root is an array: read as the value of a wrapping object, since a document's
// root is read as an object (the replies are small; the copy is of their JSON only).
template <class OnElement>
status decode_small_array(std::string_view text, std::string_view what, const limits& bounds,
                          OnElement&& on_element) {
  std::string wrapped;
  wrapped.reserve(text.size() + 8);
  wrapped.append(R"({"a":)").append(text).append("}");
  int fields_seen = 0;
  status s = decode_small(wrapped, what, bounds, [&](auto& doc, auto&& fields) {
    return fields([&](std::string_view /*key*/, od::value v) -> status {
      // A text that closes the array and goes on (`[], "a": [...]`) would add a field.
      if (++fields_seen > 1) {
        return status{errc::invalid_argument,
                      fmt::format("the {} JSON has more than one array", what)};
      }
      od::json_type type;
      if (error_code e = v.type().get(type)) return malformed_at(doc, e, v);
      if (type != od::json_type::array) {
        if (status walked = walk_value(doc, v, 1); !walked.ok()) return walked;
        return status{errc::invalid_argument, fmt::format("the {} JSON is not an array", what)};
      }
      return for_each_element(doc, v, 1, [&](od::value element) {
        od::json_type element_type;
        if (error_code e = element.type().get(element_type)) return malformed_at(doc, e, element);
        if (element_type != od::json_type::object) {
          if (status walked = walk_value(doc, element, 2); !walked.ok()) return walked;
          return status{errc::invalid_argument,
                        fmt::format("the {} JSON has an element that is not an object", what)};
        }
        return on_element(doc, element);
      });
    });
  });
  if (s.ok() && fields_seen == 0) {
    return status{errc::invalid_argument, fmt::format("no {} JSON", what)};
  }
  return s;
}

// An unsigned integer, written as a number or (Triton's versions) as a string of digits.
status read_unsigned(const document_context& doc, od::value value, std::string_view field,
                     std::uint64_t& out) {
  std::string_view token = token_of(doc, value);
  if (token.size() >= 2 && token.front() == '"' && token.back() == '"') {
    token = token.substr(1, token.size() - 2);
  }
  bool out_of_range = false;
  if (token.empty() || !parse_integer(token, out, out_of_range)) {
    if (status walked = walk_value(doc, value, 3); !walked.ok()) return walked;
    return wrong_type(doc, field, "an unsigned integer");
  }
  return status{};
}

}  // namespace

result<std::vector<model_index_entry>> decode_repository_index(std::string_view json,
                                                               const limits& bounds) {
  std::vector<model_index_entry> out;
  status s = decode_small_array(
      json, "repository index", bounds, [&](const document_context& doc, od::value row) {
        model_index_entry entry;
        bool has_name = false;
        status read = for_each_field(doc, row, 2, [&](std::string_view key, od::value v) {
          if (key == "name") {
            has_name = true;
            return read_string(doc, v, "name", entry.name);
          }
          if (key == "version") return read_unsigned(doc, v, "version", entry.version);
          if (key == "state") return read_string(doc, v, "state", entry.state);
          if (key == "reason") return read_string(doc, v, "reason", entry.reason);
          return walk_value(doc, v, 3);
        });
        if (!read.ok()) return read;
        if (!has_name) return missing_field(doc, "model", "name", out.size());
        out.push_back(std::move(entry));
        return status{};
      });
  if (!s.ok()) return s;
  return out;
}

result<std::vector<shared_memory_region>> decode_shared_memory_status(std::string_view json,
                                                                      const limits& bounds) {
  std::vector<shared_memory_region> out;
  status s = decode_small_array(
      json, "shared memory status", bounds, [&](const document_context& doc, od::value row) {
        shared_memory_region region;
        bool has_name = false;
        bool has_size = false;
        status read = for_each_field(doc, row, 2, [&](std::string_view key, od::value v) {
          if (key == "name") {
            has_name = true;
            return read_string(doc, v, "name", region.name);
          }
          if (key == "key") return read_string(doc, v, "key", region.key);
          if (key == "offset") return read_unsigned(doc, v, "offset", region.offset);
          if (key == "byte_size") {
            has_size = true;
            return read_unsigned(doc, v, "byte_size", region.byte_size);
          }
          return walk_value(doc, v, 3);
        });
        if (!read.ok()) return read;
        if (!has_name) return missing_field(doc, "region", "name", out.size());
        if (!has_size) return missing_field(doc, "region", "byte_size", out.size());
        out.push_back(std::move(region));
        return status{};
      });
  if (!s.ok()) return s;
  return out;
}

result<server_metadata> decode_server_metadata(std::string_view json, const limits& bounds) {
  server_metadata out;
  status s = decode_small(json, "server metadata", bounds, [&](auto& doc, auto&& fields) {
    return fields([&](std::string_view key, od::value v) {
      if (key == "name") return read_string(doc, v, "name", out.name);
      if (key == "version") return read_string(doc, v, "version", out.version);
      if (key == "extensions") return read_string_array(doc, v, "extensions", out.extensions);
      return walk_value(doc, v, 1);
    });
  });
  if (!s.ok()) return s;
  return out;
}

result<model_metadata> decode_model_metadata(std::string_view json, const limits& bounds) {
  model_metadata out;
  status s = decode_small(json, "model metadata", bounds, [&](auto& doc, auto&& fields) {
    return fields([&](std::string_view key, od::value v) {
      if (key == "name") return read_string(doc, v, "name", out.name);
      if (key == "versions") return read_string_array(doc, v, "versions", out.versions);
      if (key == "platform") return read_string(doc, v, "platform", out.platform);
      if (key == "inputs") return read_tensor_metadata(doc, v, out.inputs, "input");
      if (key == "outputs") return read_tensor_metadata(doc, v, out.outputs, "output");
      if (key == "properties") return read_parameters(doc, v, 1, out.properties);
      return walk_value(doc, v, 1);
    });
  });
  if (!s.ok()) return s;
  return out;
}

namespace {
bool is_blank(std::string_view text) {
  return text.find_first_not_of(" \t\r\n") == std::string_view::npos;
}

// The first 200 bytes of a body for a message: runs of white space as one space, any other byte
// that is not printable ASCII as '?', and "..." where it was cut.
std::string printable_start(std::string_view body) {
  constexpr std::size_t most = 200;
  std::string out;
  out.reserve(most + 3);
  bool space = false;
  std::size_t i = 0;
  for (; i < body.size() && out.size() < most; ++i) {
    const auto byte = static_cast<unsigned char>(body[i]);
    if (byte == ' ' || byte == '\t' || byte == '\r' || byte == '\n') {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += byte > 0x20 && byte < 0x7F ? static_cast<char>(byte) : '?';
  }
  if (!is_blank(body.substr(i))) out += "...";
  return out;
}

template <class Object>
result<Object> decode_flag_object(std::string_view json, std::optional<int> http_status,
                                  std::string_view what, std::string_view flag,
                                  bool Object::*member, std::string* name = nullptr) {
  Object out;
  if (http_status && is_blank(json)) {
    out.*member = *http_status == 200;
    return out;
  }
  bool found = false;
  const limits bounds;
  status s = decode_small(json, what, bounds, [&](auto& doc, auto&& fields) {
    return fields([&](std::string_view key, od::value v) {
      if (key == flag) {
        found = true;
        return read_bool(doc, v, flag, out.*member);
      }
      if (name != nullptr && key == "name") return read_string(doc, v, "name", *name);
      return walk_value(doc, v, 1);
    });
  });
  if (!s.ok()) return s;
  if (!found) {
    return status{errc::invalid_argument,
                  fmt::format("unable to parse the {} JSON: it has no '{}'", what, flag)};
  }
  return out;
}
}  // namespace

result<server_live> decode_server_live(std::string_view json, std::optional<int> http_status) {
  return decode_flag_object<server_live>(json, http_status, "server live", "live",
                                         &server_live::live);
}

result<server_ready> decode_server_ready(std::string_view json, std::optional<int> http_status) {
  return decode_flag_object<server_ready>(json, http_status, "server ready", "ready",
                                          &server_ready::ready);
}

result<model_ready> decode_model_ready(std::string_view json, std::optional<int> http_status) {
  std::string name;
  result<model_ready> out = decode_flag_object<model_ready>(json, http_status, "model ready",
                                                            "ready", &model_ready::ready, &name);
  if (out) out->name = std::move(name);
  return out;
}

result<repository_index_request> decode_repository_index_request(std::string_view json,
                                                                 const limits& bounds) {
  repository_index_request out;
  if (is_blank(json)) return out;
  status s = decode_small(json, "repository index request", bounds, [&](auto& doc, auto&& fields) {
    return fields([&](std::string_view key, od::value v) {
      if (key == "ready") return read_bool(doc, v, "ready", out.ready);
      return walk_value(doc, v, 1);
    });
  });
  if (!s.ok()) return s;
  return out;
}

result<parameters> decode_repository_load_request(std::string_view json, const limits& bounds) {
  parameters out;
  if (is_blank(json)) return out;
  status s = decode_small(json, "model load request", bounds, [&](auto& doc, auto&& fields) {
    return fields([&](std::string_view key, od::value v) {
      if (key == "parameters") return read_parameters(doc, v, 1, out);
      return walk_value(doc, v, 1);
    });
  });
  if (!s.ok()) return s;
  // A file's content comes in base64 over HTTP (Triton's form): the loader gets its bytes.
  parameters decoded;
  for (const auto& [name, value] : out) {
    if (!name.starts_with("file:")) {
      decoded.set(name, value);
      continue;
    }
    const auto* text = std::get_if<std::string>(&value);
    std::optional<std::string> bytes = text != nullptr ? detail::from_base64(*text) : std::nullopt;
    if (!bytes) {
      return status{errc::invalid_argument,
                    fmt::format("unable to parse parameter '{}' of the model load request: "
                                "expected its content in base64",
                                name)};
    }
    decoded.set(name, std::move(*bytes));
  }
  return decoded;
}

result<cuda_shared_memory_registration> decode_cuda_shared_memory_register(std::string_view json,
                                                                           std::string name,
                                                                           const limits& bounds) {
  cuda_shared_memory_registration out;
  out.name = std::move(name);
  bool has_handle = false;
  bool has_device = false;
  bool has_byte_size = false;
  status s = decode_small(
      json, "CUDA shared memory register request", bounds, [&](auto& doc, auto&& fields) {
        return fields([&](std::string_view key, od::value v) -> status {
          if (key == "raw_handle") {
            has_handle = true;
            std::string encoded;
            bool has_b64 = false;
            status read = for_each_field(doc, v, 1, [&](std::string_view inner, od::value w) {
              if (inner != "b64") return walk_value(doc, w, 2);
              has_b64 = true;
              return read_string(doc, w, "raw_handle.b64", encoded);
            });
            if (!read.ok()) return read;
            std::optional<std::string> bytes =
                has_b64 ? detail::from_base64(encoded) : std::nullopt;
            if (!bytes) {
              return status{errc::invalid_argument,
                            "'raw_handle' must be {\"b64\": <the handle's bytes in base64>}"};
            }
            out.raw_handle = std::move(*bytes);
            return status{};
          }
          if (key == "device_id") {
            has_device = true;
            if (v.get_int64().get(out.device_id) != error_code::SUCCESS) {
              if (status walked = walk_value(doc, v, 1); !walked.ok()) return walked;
              return wrong_type(doc, "device_id", "an integer");
            }
            return status{};
          }
          if (key == "byte_size") {
            has_byte_size = true;
            return read_unsigned(doc, v, "byte_size", out.byte_size);
          }
          return walk_value(doc, v, 1);
        });
      });
  if (!s.ok()) return s;
  for (const auto& [present, field] :
       {std::pair{has_handle, "raw_handle"}, std::pair{has_device, "device_id"},
        std::pair{has_byte_size, "byte_size"}}) {
    if (!present) {
      return status{errc::invalid_argument,
                    fmt::format("CUDA shared memory register request has no '{}' field", field)};
    }
  }
  return out;
}

result<shared_memory_region> decode_shared_memory_register(std::string_view json, std::string name,
                                                           const limits& bounds) {
  shared_memory_region out;
  out.name = std::move(name);
  bool has_key = false;
  bool has_byte_size = false;
  const auto read_size = [](const document_context& doc, od::value v, std::string_view field,
                            std::uint64_t& size) {
    if (v.get_uint64().get(size) != error_code::SUCCESS) {
      if (status walked = walk_value(doc, v, 0); !walked.ok()) return walked;
      return wrong_type(doc, field, "a non-negative integer");
    }
    return status{};
  };
  status s =
      decode_small(json, "shared memory register request", bounds, [&](auto& doc, auto&& fields) {
        return fields([&](std::string_view key, od::value v) {
          if (key == "key") {
            has_key = true;
            return read_string(doc, v, "key", out.key);
          }
          if (key == "offset") return read_size(doc, v, "offset", out.offset);
          if (key == "byte_size") {
            has_byte_size = true;
            return read_size(doc, v, "byte_size", out.byte_size);
          }
          return walk_value(doc, v, 1);
        });
      });
  if (!s.ok()) return s;
  if (!has_key) {
    return status{errc::invalid_argument, "Shared memory register request has no 'key' field"};
  }
  if (!has_byte_size) {
    return status{errc::invalid_argument,
                  "Shared memory register request has no 'byte_size' field"};
  }
  return out;
}

namespace {

// The logging settings' fields, in either direction; a null leaves `out` as it is.
status read_log_field(const document_context& doc, std::string_view key, od::value v,
                      log_settings_update& out) {
  bool is_null = false;
  if (v.is_null().get(is_null) == error_code::SUCCESS && is_null) return status{};
  const auto read_level = [&](std::optional<bool>& level) {
    bool on = false;
    if (status s = read_bool(doc, v, key, on); !s.ok()) return s;
    level = on;
    return status{};
  };
  if (key == "log_error") return read_level(out.error);
  if (key == "log_warning") return read_level(out.warning);
  if (key == "log_info") return read_level(out.info);
  if (key == "log_verbose_level") {
    std::uint64_t level = 0;
    if (v.get_uint64().get(level) != error_code::SUCCESS ||
        level > std::numeric_limits<std::uint32_t>::max()) {
      if (status walked = walk_value(doc, v, 0); !walked.ok()) return walked;
      return wrong_type(doc, key, "an integer from 0 to 4294967295");
    }
    out.verbose_level = static_cast<std::uint32_t>(level);
    return status{};
  }
  if (key == "log_format") {
    std::string name;
    if (status s = read_string(doc, v, key, name); !s.ok()) return s;
    result<log_format> format = parse_log_format(name);
    if (!format) return std::move(format).error();
    out.format = *format;
    return status{};
  }
  if (key == "log_file") {
    std::string file;
    if (status s = read_string(doc, v, key, file); !s.ok()) return s;
    out.file = std::move(file);
    return status{};
  }
  return walk_value(doc, v, 1);
}

}  // namespace

result<log_settings_update> decode_log_settings_update(std::string_view json,
                                                       const limits& bounds) {
  log_settings_update out;
  status s = decode_small(json, "logging settings", bounds, [&](auto& doc, auto&& fields) {
    return fields(
        [&](std::string_view key, od::value v) { return read_log_field(doc, key, v, out); });
  });
  if (!s.ok()) return s;
  return out;
}

result<log_settings> decode_log_settings(std::string_view json, const limits& bounds) {
  log_settings_update read;
  status s = decode_small(json, "logging settings", bounds, [&](auto& doc, auto&& fields) {
    return fields(
        [&](std::string_view key, od::value v) { return read_log_field(doc, key, v, read); });
  });
  if (!s.ok()) return s;
  if (!read.error || !read.warning || !read.info || !read.verbose_level || !read.format) {
    return status{errc::invalid_argument,
                  "the logging settings JSON lacks one of 'log_error', 'log_warning', 'log_info', "
                  "'log_verbose_level' and 'log_format'"};
  }
  return log_settings{*read.error, *read.warning, *read.info, *read.verbose_level, *read.format};
}

result<trace_settings_change> decode_trace_settings_change(std::string_view json,
                                                           const limits& bounds) {
  trace_settings_change out;
  status s = decode_small(json, "trace settings", bounds, [&](auto& doc, auto&& fields) {
    return fields([&](std::string_view key, od::value v) -> status {
      if (key != "trace_level" && key != "trace_rate" && key != "trace_count" &&
          key != "log_frequency" && key != "trace_file" && key != "trace_mode") {
        return walk_value(doc, v, 1);
      }
      auto& [name, values] = out.settings.emplace_back(std::string{key}, std::nullopt);
      bool is_null = false;
      if (v.is_null().get(is_null) == error_code::SUCCESS && is_null) return status{};
      values.emplace();
      if (key == "trace_level") return read_string_array(doc, v, name, *values);
      return read_string(doc, v, name, values->emplace_back());
    });
  });
  if (!s.ok()) return s;
  return out;
}

status decode_error(std::string_view json, int http_status) {
  std::string message;
  bool found = false;
  const limits bounds;
  status s = decode_small(json, "error", bounds, [&](auto& doc, auto&& fields) {
    return fields([&](std::string_view key, od::value v) {
      if (key == "error") {
        found = true;
        return read_string(doc, v, "error", message);
      }
      return walk_value(doc, v, 1);
    });
  });
  errc code = errc::internal;
  for (const detail::errc_mapping& row : detail::errc_table) {
    if (row.http_status == http_status && row.code != errc::ok) {
      code = row.code;
      break;
    }
  }
  if (is_blank(json)) return status{code, fmt::format("HTTP {} with no body", http_status)};
  if (!s.ok() || !found) {
    // Not the protocol's error object (a proxy's page, another framework's JSON): what it says is
    // still the best account of the failure, so its start is kept.
    return status{code, fmt::format("HTTP {} with a body that is not the protocol's error object: "
                                    "'{}'",
                                    http_status, printable_start(json))};
  }
  return status{code, std::move(message)};
}

}  // namespace oip
