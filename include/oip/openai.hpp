#pragma once
/// \file
/// An OpenAI-compatible front end over oip's models, served by `http_handler` under `/v1` beside
/// the protocol's routes when a host turns it on (`http_routes::openai`): `GET /v1/models`,
/// `GET /v1/models/{id}`, `POST /v1/completions`, `POST /v1/chat/completions` (both with
/// `stream: true` as server-sent events) and `POST /v1/embeddings`. The host declares which oip
/// model serves which OpenAI model name, and how: nothing is guessed from a model's shape.
///
/// Example:
/// \code
///   oip::openai_options openai;
///   openai.models.push_back({.id = "my-llm", .model = "llm"});  // text_input -> text_output
///   openai.api_keys = {"sk-local"};
///   oip::http_handler handler{service, {.protocol = true, .openai = openai}};
/// \endcode

#include <oip/access.hpp>
#include <oip/chat_message.hpp>
#include <oip/parameters.hpp>
#include <oip/status.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace oip {

/// Turns a chat's messages into the prompt a text model reads.
using chat_template = std::function<result<std::string>(const std::vector<chat_message>&)>;

/// The template used when a mapping gives none: each message as `<role>: <content>` on a line of
/// its own, then `assistant:` for the model to go on from.
[[nodiscard]] OIP_EXPORT std::string default_chat_template(const std::vector<chat_message>& chat);

/// An OpenAI request field that goes to one of the model's inputs instead of a request parameter.
/// The input takes one value of its own datatype (a `[1]` tensor, or `[1,1]` when the model
/// batches), converted from the JSON value; a value that does not fit is a 400.
struct openai_field_input {
  std::string field;  ///< "max_tokens", "temperature", "seed", ...
  std::string input;  ///< the model's input
  /// The value when a request leaves the field out; none: the input is left out then.
  std::optional<parameter_value> otherwise;
};

/// What an OpenAI model name is served by.
///
/// Text models (completions and chats) take the prompt in `prompt_input` (BYTES, one element)
/// and give text in `text_output` (BYTES; each response's elements are concatenated). A decoupled
/// model streams its text, one chunk per response; an ordinary model answers once. The sampling
/// fields (`max_tokens`, `max_completion_tokens` as `max_tokens`, `temperature`, `top_p` and the
/// two penalties as doubles, `seed`, `stop` when the request holds one stop string, and any other
/// number, string or bool the client sends, up to 64 fields; the protocol's own parameters such
/// as `timeout` or `sequence_id` are refused) are request parameters, unless `field_inputs` sends
/// them to inputs. The parameters `prompt_tokens` and `completion_tokens` (the counts so far; the
/// latest of each is kept) give the reply's `usage`, and `finish_reason` ("stop" or "length") its
/// finish reason. The front end also cuts the text before the first of the request's `stop`
/// strings and then calls the model's request off (`cancellation::finish_early`), which its
/// statistics count as a success.
///
/// Embedding models take one text in `prompt_input` and give its vector in `embedding_output`
/// (FP32, FP64, FP16 or BF16); each text of a request is one inference.
struct openai_model {
  enum class kind : std::uint8_t { text, embedding };

  std::string id{};     ///< the name OpenAI clients ask for
  std::string model{};  ///< the oip model that serves it
  std::optional<std::uint64_t> version{};
  kind serves = kind::text;
  std::string prompt_input = "text_input";
  std::string text_output = "text_output";
  std::string embedding_output = "embedding";
  std::vector<openai_field_input> field_inputs{};
  /// Null: `default_chat_template`.
  chat_template chat{};
  std::string owned_by = "oip";
};

/// The front end's settings.
struct openai_options {
  std::vector<openai_model> models;
  /// Keys that `Authorization: Bearer <key>` must name (compared in constant time); a request
  /// without one of them gets a 401. Empty: any `Authorization` header, or none, is accepted.
  std::vector<std::string> api_keys;
  /// Triton's `--openai-restricted-api`: a header and value per group of APIs, the groups being
  /// `inference` (completions, chats, embeddings) and `model-repository` (the model list).
  api_restrictions restrictions;
  /// The most texts one embeddings request may carry.
  std::size_t max_embedding_inputs = 2048;
};

}  // namespace oip
