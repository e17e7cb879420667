#pragma once
// The decoupled reference models of oip-serve: each answers a request with a stream of responses.

#include <oip/model.hpp>

#include <memory>

namespace oip_serve {

/// Triton's repeat example (`repeat_int32`): inputs IN INT32 [-1], DELAY UINT32 [-1] and WAIT
/// UINT32 [1]; a response per element of IN (OUT INT32 [1] = the element, IDX UINT32 [1] = its
/// index), each DELAY[i] ms after the one before, then a flag-only final; WAIT ms that the model
/// holds the request before it takes the next.
std::shared_ptr<oip::model> repeat_int32();

/// Triton's square example (`square_int32`): IN INT32 [1] holds n; n responses of OUT = n.
std::shared_ptr<oip::model> square_int32();

/// `text_stream`: its BYTES `text_input` streamed back a word at a time (`text_output`), at most
/// the request parameter `max_tokens` words, `delay_ms` apart; each response's parameters carry
/// `prompt_tokens`, `completion_tokens` and `finish_reason` ("length" or "stop").
std::shared_ptr<oip::model> text_stream();

}  // namespace oip_serve
