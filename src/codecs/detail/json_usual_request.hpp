#pragma once
// Internal: the fast readers of the usual form of an inference request and response, which
// decode_request and decode_response try before the general reader (json_usual_request.cpp).

#include "codecs/detail/json_read.hpp"

#include <oip/buffer.hpp>
#include <oip/infer.hpp>

namespace oip::detail {

// Reads `json` into `request` when it is a request in the usual form (see json_usual_request.cpp)
// and returns true; returns false at anything else, an error included, with `request` partly
// filled: decode_request then resets it and reads the document again with the general reader.
bool read_usual_request(document_context& doc, const padded_json& json, const buffer& binary,
                        inference_request& request);

// The same for a response (known keys: id, model_name, model_version, parameters, outputs), which
// decode_response tries before its general reader: what a client reads from every server.
bool read_usual_response(document_context& doc, const padded_json& json, const buffer& binary,
                         inference_response& response);

}  // namespace oip::detail
