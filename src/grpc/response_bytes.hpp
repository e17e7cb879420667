#pragma once
// A ModelInferResponse's wire bytes, written straight from the response without protobuf's
// message objects, and without copying its large tensors: the raw contents of a large output go
// to grpc++ as a slice that shares the output's buffer, so that the bytes pass from the model to
// the socket untouched (grpc++ writes each slice as it is).

#include <oip/infer.hpp>
#include <oip/status.hpp>

#include <string_view>

#include <grpcpp/support/byte_buffer.h>

namespace oip::grpc {

/// How the response travels: alone (ModelInfer), or as a ModelStreamInferResponse's
/// `infer_response` flagged `triton_final_response` (ModelStreamInfer), with the stream's
/// `error_message` beside it when that is not empty.
struct response_framing {
  bool in_stream = false;
  bool final_response = true;
  std::string_view error_message{};
};

/// The wire bytes of `response` with every output raw: those `encode_response` then protobuf's
/// serialization make, but for the order of map entries, which protobuf leaves open.
[[nodiscard]] status serialize_response(const inference_response& response, ::grpc::ByteBuffer& out,
                                        response_framing framing = {});

}  // namespace oip::grpc
