#pragma once
// The text reference models that are not decoupled, for the OpenAI-compatible front end, and the
// helpers that every text model shares.

#include <oip/model.hpp>

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

namespace oip_serve {

/// `text_upper`: BYTES `prompt` [1] and INT32 `max_tokens` [1] in; BYTES `completion` [1] out,
/// the first `max_tokens` words of the prompt in upper case (ASCII letters), in one response
/// whose parameters carry `prompt_tokens`, `completion_tokens` and `finish_reason` ("length" when
/// words were left out, else "stop"). The front end's second mapping: other names than
/// `text_stream`'s, `max_tokens` as an input, and one response.
std::shared_ptr<oip::model> text_upper();

/// `text_embed`: BYTES `text` [1] in; FP32 `embedding` [8] out, a deterministic vector of the
/// text's bytes: byte i adds its value / 255 to element i mod 8, and the vector is then scaled to
/// length 1 (all zeros for an empty text). Its parameter `prompt_tokens` counts the words.
std::shared_ptr<oip::model> text_embed();

/// The prompt's words, each with the white space before it (the last with the white space after
/// it too), so that they add up to the prompt.
std::vector<std::string_view> words_of(std::string_view text);

/// A request parameter that must be a non-negative integer, or `otherwise` when absent.
oip::result<std::int64_t> integer_parameter(const oip::parameters& p, std::string_view name,
                                            std::int64_t otherwise);

}  // namespace oip_serve
