#pragma once
/// \file
/// Triton's generate extension (`POST /v2/models/<m>[/versions/<v>]/generate` and
/// `/generate_stream`): a flat JSON object in, a flat JSON object out, for text-oriented clients
/// (LLM front ends send `{"text_input": "...", "parameters": {...}}`).

#include <oip/buffer.hpp>
#include <oip/export.hpp>
#include <oip/infer.hpp>
#include <oip/limits.hpp>
#include <oip/model_config.hpp>
#include <oip/status.hpp>

#include <cstddef>
#include <limits>
#include <string>

namespace oip {

/// Reads a generate request for `model`, as Triton does: each member named like one of the
/// model's inputs is that input (its datatype the model's; a value or an array of values, nested
/// at will; its shape the model's with the element count filling the variable dimensions: the
/// innermost one takes it, the others are 1), `id` (a string) is the request's id, `parameters`
/// (an object) is read the same way, and every other member is a request parameter (a string,
/// number or bool). The members then go, as their JSON text, into the infer request that
/// `decode_request` decodes: ids, parameters and values are read and checked exactly as there.
/// Every mistake is a 400 (413 above `bounds.max_json_bytes`).
///
/// Example:
/// \code
///   // {"text_input": "hello", "parameters": {"max_tokens": 16}} for a model whose BYTES input
///   // `text_input` has shape [1]: one input ["hello"], one parameter max_tokens = 16.
///   oip::result<oip::inference_request> r = oip::decode_generate_request(body, config);
/// \endcode
[[nodiscard]] OIP_EXPORT result<inference_request> decode_generate_request(
    const buffer& body, const model_config& model, const limits& bounds = {});

/// Writes a generate reply: one object of `id` (when there is one), `model_name`,
/// `model_version`, the response parameters, then each output by name: its value alone when it
/// has one element, else its values as a flat array (BYTES as strings, bytes that are not UTF-8
/// as U+FFFD). Members are in the order of their names, and a name already written is not
/// written again (Triton's rules). An output whose values take the text past `max_json_bytes`
/// (a server's `limits::json_response_bound`) stops the reply with a 400.
///
/// Example:
/// \code
///   // {"model_name":"echo","model_version":"1","text_output":"hello"}
///   oip::result<std::string> json = oip::encode_generate_response(response);
/// \endcode
[[nodiscard]] OIP_EXPORT result<std::string> encode_generate_response(
    const inference_response& response,
    std::size_t max_json_bytes = std::numeric_limits<std::size_t>::max());

}  // namespace oip
