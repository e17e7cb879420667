// OpenAI's replies (`detail/openai_json.hpp`): completions, their stream chunks, embeddings, the
// model list and errors, in the members and order OpenAI's own API writes.

#include "codecs/detail/base64.hpp"
#include "codecs/detail/number_format.hpp"
#include "codecs/detail/openai_json.hpp"
#include "core/detail/json_string.hpp"

#include <bit>
#include <cmath>
#include <cstring>
#include <iterator>

#include <fmt/format.h>

namespace oip::detail {

namespace {

std::string_view error_type(const status& error) {
  switch (error.http_status()) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 429: return "rate_limit_error";
    default: break;
  }
  return error.http_status() < 500 ? "invalid_request_error" : "server_error";
}

void append_usage(std::string& out, const openai_usage& usage) {
  fmt::format_to(std::back_inserter(out),
                 R"("usage":{{"prompt_tokens":{},"completion_tokens":{},"total_tokens":{}}})",
                 usage.prompt_tokens, usage.completion_tokens,
                 usage.prompt_tokens + usage.completion_tokens);
}

void append_head(std::string& out, const openai_completion_head& head, bool chunk) {
  std::string_view object = "text_completion";
  if (head.route == openai_route::chat)
    object = chunk ? "chat.completion.chunk" : "chat.completion";
  out += R"({"id":)";
  append_json_string(out, head.id);
  fmt::format_to(std::back_inserter(out), R"(,"object":"{}","created":{},"model":)", object,
                 head.created);
  append_json_string(out, head.model);
}

void append_finish_reason(std::string& out, std::string_view finish_reason) {
  out += R"("finish_reason":)";
  if (finish_reason.empty()) {
    out += "null";
  } else {
    append_json_string(out, finish_reason);
  }
}

}  // namespace

std::string openai_error_json(const status& error, std::string_view code) {
  std::string out = R"({"error":{"message":)";
  append_json_string(out, error.message());
  out += R"(,"type":)";
  append_json_string(out, error_type(error));
  out += R"(,"param":null,"code":)";
  if (code.empty()) {
    out += "null";
  } else {
    append_json_string(out, code);
  }
  out += "}}";
  return out;
}

std::string encode_openai_completion(const openai_completion_head& head, std::string_view text,
                                     std::string_view finish_reason,
                                     const std::optional<openai_usage>& usage) {
  std::string out;
  out.reserve(text.size() + 256);
  append_head(out, head, false);
  out += R"(,"choices":[{"index":0,)";
  if (head.route == openai_route::chat) {
    out += R"("message":{"role":"assistant","content":)";
    append_json_string(out, text);
    out += "},";
  } else {
    out += R"("text":)";
    append_json_string(out, text);
    out += ",";
  }
  out += R"("logprobs":null,)";
  append_finish_reason(out, finish_reason);
  out += "}]";
  if (usage) {
    out += ",";
    append_usage(out, *usage);
  }
  out += "}";
  return out;
}

std::string encode_openai_chunk(const openai_completion_head& head, const openai_chunk& chunk) {
  std::string out;
  out.reserve(chunk.text.size() + 256);
  append_head(out, head, true);
  out += R"(,"choices":[{"index":0,)";
  if (head.route == openai_route::chat) {
    out += R"("delta":{)";
    if (chunk.first) out += R"("role":"assistant")";
    if (!chunk.text.empty() || chunk.first) {
      if (chunk.first) out += ",";
      out += R"("content":)";
      append_json_string(out, chunk.text);
    }
    out += "},";
  } else {
    out += R"("text":)";
    append_json_string(out, chunk.text);
    out += ",";
  }
  out += R"("logprobs":null,)";
  append_finish_reason(out, chunk.finish_reason);
  out += "}]}";
  return out;
}

std::string encode_openai_usage_chunk(const openai_completion_head& head,
                                      const openai_usage& usage) {
  std::string out;
  append_head(out, head, true);
  out += R"(,"choices":[],)";
  append_usage(out, usage);
  out += "}";
  return out;
}

result<std::string> encode_openai_embeddings(std::string_view model,
                                             std::span<const std::vector<float>> vectors,
                                             bool base64, std::int64_t prompt_tokens) {
  std::string out = R"({"object":"list","data":[)";
  for (std::size_t i = 0; i < vectors.size(); ++i) {
    if (i != 0) out += ",";
    fmt::format_to(std::back_inserter(out), R"({{"object":"embedding","index":{},"embedding":)", i);
    const std::vector<float>& v = vectors[i];
    if (base64) {
      // OpenAI's clients read the bytes as little-endian float32.
      static_assert(std::endian::native == std::endian::little);
      out += '"';
      detail::append_base64(out, reinterpret_cast<const unsigned char*>(v.data()),
                            v.size() * sizeof(float));
      out += '"';
    } else {
      out += '[';
      char number[32];
      for (std::size_t j = 0; j < v.size(); ++j) {
        if (!std::isfinite(v[j])) {
          return status{
              errc::internal,
              fmt::format("the embedding of input {} holds a value that JSON cannot carry "
                          "({}); ask for encoding_format 'base64'",
                          i, v[j])};
        }
        if (j != 0) out += ',';
        out.append(number, write_shortest(number, v[j]));
      }
      out += ']';
    }
    out += '}';
  }
  out += R"(],"model":)";
  append_json_string(out, model);
  fmt::format_to(std::back_inserter(out), R"(,"usage":{{"prompt_tokens":{},"total_tokens":{}}}}})",
                 prompt_tokens, prompt_tokens);
  return out;
}

std::string encode_openai_model(const openai_model_entry& model) {
  std::string out = R"({"id":)";
  append_json_string(out, model.id);
  fmt::format_to(std::back_inserter(out), R"(,"object":"model","created":{},"owned_by":)",
                 model.created);
  append_json_string(out, model.owned_by);
  out += "}";
  return out;
}

std::string encode_openai_model_list(std::span<const openai_model_entry> models) {
  std::string out = R"({"object":"list","data":[)";
  for (std::size_t i = 0; i < models.size(); ++i) {
    if (i != 0) out += ",";
    out += encode_openai_model(models[i]);
  }
  out += "]}";
  return out;
}

}  // namespace oip::detail
