// OpenAI's requests (`detail/openai_json.hpp`), read with the same primitives, limits and
// checks as the protocol's JSON: every value is visited, keys are unique, depth and size bounded.

#include "codecs/detail/json_read.hpp"
#include "codecs/detail/openai_json.hpp"

#include <fmt/format.h>

namespace oip::detail {

namespace {

status invalid(std::string message) { return status{errc::invalid_argument, std::move(message)}; }

status not_supported(std::string_view field) {
  return invalid(fmt::format("'{}' is not supported by this server", field));
}

od::json_type type_of(od::value& value) {
  od::json_type type = od::json_type::null;
  (void)value.type().get(type);
  return type;
}

// Whether a value is JSON's null, which stands for a field left out.
bool is_null(od::value& value) {
  if (type_of(value) != od::json_type::null) return false;
  bool null = false;
  return value.is_null().get(null) == error_code::SUCCESS && null;
}

status read_integer(const document_context& doc, od::value value, std::string_view field,
                    std::int64_t& out) {
  parameter_value read;
  if (status s = read_parameter_value(doc, field, value, read); !s.ok()) return s;
  if (const auto* i = std::get_if<std::int64_t>(&read)) {
    out = *i;
    return {};
  }
  return wrong_type(doc, field, "an integer");
}

// A string, or an array of strings (`at_most` of them).
status read_strings(const document_context& doc, od::value value, std::string_view field,
                    std::size_t at_most, std::vector<std::string>& out, bool& was_array) {
  was_array = type_of(value) == od::json_type::array;
  if (!was_array) {
    out.emplace_back();
    return read_string(doc, value, field, out.back());
  }
  return for_each_element(doc, value, 1, [&](od::value element) {
    if (out.size() == at_most) {
      if (status walked = walk_value(doc, element, 2); !walked.ok()) return walked;
      return invalid(fmt::format("'{}' holds more than {} values", field, at_most));
    }
    if (type_of(element) == od::json_type::number || type_of(element) == od::json_type::array) {
      if (status walked = walk_value(doc, element, 2); !walked.ok()) return walked;
      return invalid(
          fmt::format("'{}' as tokens is not supported by this server: send text", field));
    }
    out.emplace_back();
    return read_string(doc, element, field, out.back());
  });
}

// A message's content: a string, or parts of which only text ones are taken.
status read_content(const document_context& doc, od::value value, std::string& out) {
  if (type_of(value) != od::json_type::array) return read_string(doc, value, "content", out);
  bool first = true;
  return for_each_element(doc, value, 3, [&](od::value part) {
    std::string type;
    std::string text;
    status read = for_each_field(doc, part, 4, [&](std::string_view key, od::value v) {
      if (key == "type") return read_string(doc, v, "type", type);
      if (key == "text") return read_string(doc, v, "text", text);
      return walk_value(doc, v, 5);
    });
    if (!read.ok()) return read;
    if (type != "text") {
      return invalid(
          fmt::format("content parts of type '{}' are not supported by this server; "
                      "only text",
                      type.substr(0, 64)));
    }
    // Text parts are lines of one message, as vLLM joins them.
    if (!first) out += '\n';
    first = false;
    out += text;
    return status{};
  });
}

status read_messages(const document_context& doc, od::value value, std::vector<chat_message>& out) {
  if (type_of(value) != od::json_type::array) {
    if (status walked = walk_value(doc, value, 1); !walked.ok()) return walked;
    return wrong_type(doc, "messages", "an array of messages");
  }
  return for_each_element(doc, value, 1, [&](od::value element) {
    chat_message message;
    bool has_role = false;
    status read = for_each_field(doc, element, 2, [&](std::string_view key, od::value v) {
      if (key == "role") {
        has_role = true;
        return read_string(doc, v, "role", message.role);
      }
      if (key == "content") {
        if (is_null(v)) return status{};
        return read_content(doc, v, message.content);
      }
      if (key == "name") {
        std::string ignored;
        return read_string(doc, v, "name", ignored);
      }
      if (key == "tool_calls" || key == "function_call" || key == "audio") {
        if (is_null(v)) return status{};
        if (status walked = walk_value(doc, v, 3); !walked.ok()) return walked;
        return not_supported(fmt::format("messages[].{}", key));
      }
      return walk_value(doc, v, 3);
    });
    if (!read.ok()) return read;
    if (!has_role) return invalid("each message needs a 'role'");
    out.push_back(std::move(message));
    return status{};
  });
}

// stream_options: {"include_usage": bool}.
status read_stream_options(const document_context& doc, od::value value, bool& include_usage) {
  return for_each_field(doc, value, 1, [&](std::string_view key, od::value v) {
    if (key == "include_usage") return read_bool(doc, v, "include_usage", include_usage);
    return walk_value(doc, v, 2);
  });
}

// Fields that ask for what the front end does not offer, refused unless they hold what leaves
// them off.
status refuse_offered_not(const document_context& doc, std::string_view key, od::value value,
                          openai_route route) {
  const od::json_type type = type_of(value);
  if (key == "n" || key == "best_of") {
    std::int64_t n = 1;
    if (status s = read_integer(doc, value, key, n); !s.ok()) return s;
    return n == 1 ? status{} : invalid(fmt::format("'{}' must be 1 on this server", key));
  }
  if (key == "echo" || (key == "logprobs" && route == openai_route::chat)) {
    bool on = false;
    if (status s = read_bool(doc, value, key, on); !s.ok()) return s;
    return on ? not_supported(key) : status{};
  }
  if (key == "logit_bias" && type == od::json_type::object) {
    bool any = false;
    status walked = for_each_field(doc, value, 1, [&](std::string_view, od::value v) {
      any = true;
      return walk_value(doc, v, 2);
    });
    if (!walked.ok()) return walked;
    return any ? not_supported(key) : status{};
  }
  if (key == "response_format" && type == od::json_type::object) {
    std::string kind;
    status read = for_each_field(doc, value, 1, [&](std::string_view k, od::value v) {
      if (k == "type") return read_string(doc, v, "type", kind);
      return walk_value(doc, v, 2);
    });
    if (!read.ok()) return read;
    return kind == "text" ? status{} : not_supported("response_format");
  }
  if (key == "tool_choice" && type == od::json_type::string) {
    std::string choice;
    if (status s = read_string(doc, value, key, choice); !s.ok()) return s;
    return choice == "none" ? status{} : not_supported(key);
  }
  if (status walked = walk_value(doc, value, 1); !walked.ok()) return walked;
  return not_supported(key);
}

bool is_offered_not(std::string_view key, openai_route route) {
  for (std::string_view k :
       {"n", "best_of", "echo", "logprobs", "top_logprobs", "suffix", "logit_bias", "tools",
        "tool_choice", "functions", "function_call", "response_format", "audio", "modalities",
        "prediction", "dimensions"}) {
    if (key == k) return true;
  }
  (void)route;
  return false;
}

// The most fields one request passes to its model, and the longest stop string: what a client
// can make the front end hold and search stays small.
constexpr std::size_t max_passed_fields = 64;
constexpr std::size_t max_stop_bytes = 256;

// Names that the inference service reads as its own request parameters (a deadline, a priority,
// a sequence, output formats): a client of the OpenAI API does not reach them.
bool is_reserved(std::string_view key) {
  if (key.starts_with("triton_")) return true;
  for (std::string_view k : {"timeout", "priority", "sequence_id", "sequence_start", "sequence_end",
                             "binary_data_output", "binary_data", "classification", "headers"}) {
    if (key == k) return true;
  }
  return false;
}

// Fields that OpenAI's API defines as real numbers.
bool is_real(std::string_view key) {
  return key == "temperature" || key == "top_p" || key == "frequency_penalty" ||
         key == "presence_penalty";
}

}  // namespace

result<openai_request> decode_openai_request(const buffer& body, openai_route route,
                                             const limits& bounds, std::size_t max_texts) {
  document_context doc{nullptr, nullptr, &bounds, "request", {}};
  const std::string_view text = body.as_string_view();
  const padded_json json{text.data(), text.size(), body.padding()};
  openai_request out;
  bool has_model = false;
  bool has_input = false;
  bool has_max_tokens = false;
  bool has_stream_options = false;
  std::size_t passed_on = 0;
  status read = parse_document(doc, json, [&](auto&& fields) {
    return fields([&](std::string_view key, od::value value) -> status {
      if (is_null(value)) return {};  // a field sent as null is one left out
      if (key == "model") {
        has_model = true;
        return read_string(doc, value, key, out.model);
      }
      if (key == "stream" && route != openai_route::embeddings) {
        return read_bool(doc, value, key, out.stream);
      }
      if (key == "stream_options" && route != openai_route::embeddings) {
        has_stream_options = true;
        return read_stream_options(doc, value, out.include_usage);
      }
      if (key == "user") {
        std::string ignored;
        return read_string(doc, value, key, ignored);
      }
      if (key == "prompt" && route == openai_route::completions) {
        has_input = true;
        std::vector<std::string> prompts;
        bool array = false;
        if (status s = read_strings(doc, value, key, max_texts, prompts, array); !s.ok()) return s;
        if (prompts.empty()) return invalid("'prompt' is empty");
        if (prompts.size() > 1) return invalid("one prompt per request on this server");
        out.prompt = std::move(prompts.front());
        return {};
      }
      if (key == "messages" && route == openai_route::chat) {
        has_input = true;
        return read_messages(doc, value, out.messages);
      }
      if (key == "input" && route == openai_route::embeddings) {
        has_input = true;
        bool array = false;
        return read_strings(doc, value, key, max_texts, out.texts, array);
      }
      if (key == "encoding_format" && route == openai_route::embeddings) {
        std::string format;
        if (status s = read_string(doc, value, key, format); !s.ok()) return s;
        if (format != "float" && format != "base64") {
          return invalid(fmt::format("'encoding_format' is 'float' or 'base64', not '{}'",
                                     format.substr(0, 64)));
        }
        out.base64 = format == "base64";
        return {};
      }
      if (key == "stop" && route != openai_route::embeddings) {
        bool array = false;
        if (status s = read_strings(doc, value, key, 16, out.stop, array); !s.ok()) return s;
        std::erase(out.stop, std::string{});
        for (const std::string& stop : out.stop) {
          if (stop.size() > max_stop_bytes) {
            return invalid(fmt::format("a stop string is at most {} bytes", max_stop_bytes));
          }
        }
        if (out.stop.size() == 1) out.sampling.append_unchecked("stop", out.stop.front());
        return {};
      }
      if (is_offered_not(key, route)) return refuse_offered_not(doc, key, value, route);
      // Everything else goes to the model as a parameter, when it is one.
      const od::json_type type = type_of(value);
      if (type == od::json_type::object || type == od::json_type::array) {
        if (status walked = walk_value(doc, value, 1); !walked.ok()) return walked;
        return not_supported(key);
      }
      if (is_reserved(key)) {
        if (status walked = walk_value(doc, value, 1); !walked.ok()) return walked;
        return invalid(fmt::format(
            "'{}' is a parameter of the inference protocol, not a field of OpenAI's API", key));
      }
      if (++passed_on > max_passed_fields) {
        return invalid(
            fmt::format("a request passes at most {} fields to the model", max_passed_fields));
      }
      parameter_value parsed;
      if (status s = read_parameter_value(doc, key, value, parsed); !s.ok()) return s;
      const bool tokens = key == "max_tokens" || key == "max_completion_tokens";
      if (tokens) {
        const auto* i = std::get_if<std::int64_t>(&parsed);
        if (i == nullptr || *i < 1) {
          return invalid(fmt::format("'{}' must be a positive integer", key));
        }
        if (has_max_tokens) {
          return invalid("'max_tokens' and 'max_completion_tokens' are the same field; send one");
        }
        has_max_tokens = true;
      }
      // Sampling fields are numbers: 0 and 1 from a client's JSON are doubles to the model too.
      if (is_real(key)) {
        if (const auto* i = std::get_if<std::int64_t>(&parsed)) {
          parsed = static_cast<double>(*i);
        } else if (const auto* u = std::get_if<std::uint64_t>(&parsed)) {
          parsed = static_cast<double>(*u);
        } else if (!std::holds_alternative<double>(parsed)) {
          return invalid(fmt::format("'{}' must be a number", key));
        }
      }
      if (key == "seed" && !std::holds_alternative<std::int64_t>(parsed) &&
          !std::holds_alternative<std::uint64_t>(parsed)) {
        return invalid("'seed' must be an integer");
      }
      // Keys are unique (the object's reader refuses duplicates): no lookup before adding.
      out.sampling.append_unchecked(tokens ? "max_tokens" : std::string{key}, std::move(parsed));
      return {};
    });
  });
  if (!read.ok()) return read;
  if (!has_model) return invalid("'model' is required");
  if (!has_input) {
    switch (route) {
      case openai_route::completions: return invalid("'prompt' is required");
      case openai_route::chat: return invalid("'messages' is required");
      case openai_route::embeddings: return invalid("'input' is required");
    }
  }
  if (route == openai_route::chat && out.messages.empty()) return invalid("'messages' is empty");
  if (has_stream_options && !out.stream) {
    return invalid("The 'stream_options' parameter is only allowed when 'stream' is enabled.");
  }
  if (route == openai_route::embeddings && out.texts.empty()) return invalid("'input' is empty");
  return out;
}

}  // namespace oip::detail
