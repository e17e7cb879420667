#pragma once
// Internal: the JSON of OpenAI's API, as the front end (serving/openai_front_end.cpp) reads and
// writes it: requests of the three POST routes, completions and their stream chunks, embeddings,
// the model list, and errors in OpenAI's shape.

#include <oip/buffer.hpp>
#include <oip/chat_message.hpp>
#include <oip/limits.hpp>
#include <oip/parameters.hpp>
#include <oip/status.hpp>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace oip::detail {

enum class openai_route : std::uint8_t { completions, chat, embeddings };

// A request as the front end needs it. Fields that the front end does not offer (tools, images,
// `n` above 1, logprobs, `echo`, `suffix`, token prompts) are refused with a 400 naming them.
struct openai_request {
  std::string model;
  bool stream = false;
  bool include_usage = false;          // stream_options.include_usage
  std::string prompt;                  // completions
  std::vector<chat_message> messages;  // chat
  std::vector<std::string> texts;      // embeddings
  bool base64 = false;                 // embeddings: encoding_format "base64"
  std::vector<std::string> stop;
  // What goes to the model: max_tokens (max_completion_tokens is read as it), the sampling
  // fields, and any other number, string or bool sent.
  parameters sampling;
};

[[nodiscard]] result<openai_request> decode_openai_request(const buffer& body, openai_route route,
                                                           const limits& bounds,
                                                           std::size_t max_texts);

// OpenAI's error object: {"error":{"message","type","param","code"}}. The type follows the
// status (invalid_request_error, authentication_error, permission_error, not_found_error,
// rate_limit_error, server_error); `code` is written when given.
[[nodiscard]] std::string openai_error_json(const status& error, std::string_view code = {});

struct openai_usage {
  std::int64_t prompt_tokens = 0;
  std::int64_t completion_tokens = 0;
};

// What every completion object and chunk starts with.
struct openai_completion_head {
  openai_route route = openai_route::completions;
  std::string id;  // "cmpl-..." or "chatcmpl-..."
  std::int64_t created = 0;
  std::string_view model;
};

// A whole completion (not streamed).
[[nodiscard]] std::string encode_openai_completion(const openai_completion_head& head,
                                                   std::string_view text,
                                                   std::string_view finish_reason,
                                                   const std::optional<openai_usage>& usage);
// One chunk of a streamed completion: `text` (for a chat, the delta's content; the first chunk
// of a chat also carries the role), and the finish reason on the last one.
struct openai_chunk {
  std::string_view text;
  bool first = false;
  std::string_view finish_reason;  // empty: null
};
[[nodiscard]] std::string encode_openai_chunk(const openai_completion_head& head,
                                              const openai_chunk& chunk);
// The chunk that `stream_options.include_usage` asks for: no choices, the usage.
[[nodiscard]] std::string encode_openai_usage_chunk(const openai_completion_head& head,
                                                    const openai_usage& usage);

// The embeddings reply: each vector as numbers, or as base64 of its float32 bytes (little
// endian, as OpenAI's clients decode them).
[[nodiscard]] result<std::string> encode_openai_embeddings(
    std::string_view model, std::span<const std::vector<float>> vectors, bool base64,
    std::int64_t prompt_tokens);

struct openai_model_entry {
  std::string_view id;
  std::string_view owned_by;
  std::int64_t created = 0;
};
[[nodiscard]] std::string encode_openai_model(const openai_model_entry& model);
[[nodiscard]] std::string encode_openai_model_list(std::span<const openai_model_entry> models);

}  // namespace oip::detail
