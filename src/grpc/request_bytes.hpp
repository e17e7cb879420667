#pragma once
// A ModelInferRequest read straight from the bytes grpc++ received, without protobuf's message
// objects: the counterpart of response_bytes. It reads what clients send on the hot path (raw
// contents, and parameters on the request and its outputs) and declines the rest: typed contents,
// inputs with parameters (those in shared memory among them), a message in more than one slice
// (a large one, which protobuf copies no more than this would), and every message that is
// malformed or that decode_request refuses. Protobuf's parse and decode_request read what it
// declines, so every error is worded in one place.

#include <oip/infer.hpp>
#include <oip/limits.hpp>

#include <optional>
#include <string>
#include <string_view>

#include <grpcpp/support/byte_buffer.h>

namespace oip::grpc {

/// What a ModelInferRequest carries: the model it names, its id, and the request decoded.
struct request_fields {
  std::string model_name;
  std::string model_version;
  std::string id;
  inference_request request;
};

/// The request in `bytes`, or nullopt where this reader leaves the message to protobuf. What it
/// returns is what decode_infer_message makes of protobuf's parse of the same bytes, but for the
/// order of the parameters, which a protobuf map leaves open. The raw contents are copied once,
/// into one block for the request in which each tensor's bytes are 64-byte aligned; nothing
/// returned refers to `bytes`.
[[nodiscard]] std::optional<request_fields> read_request_bytes(const ::grpc::ByteBuffer& bytes,
                                                               const limits& bounds);
/// The same for a message's bytes in one piece.
[[nodiscard]] std::optional<request_fields> read_request_bytes(std::string_view bytes,
                                                               const limits& bounds);

}  // namespace oip::grpc
