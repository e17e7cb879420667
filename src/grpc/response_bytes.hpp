#pragma once
// A ModelInferResponse's wire bytes made without copying its tensors: the raw contents of a
// large output go to grpc++ as a slice that shares the output's buffer, so that the bytes pass
// from the model to the socket untouched (grpc++ writes each slice as it is).

#include <oip/grpc/grpc_service.pb.h>
#include <oip/infer.hpp>
#include <oip/status.hpp>

#include <grpcpp/support/byte_buffer.h>

namespace oip::grpc {

/// `encode_response` without the raw contents: the outputs' names, datatypes, shapes and
/// parameters (codec.cpp).
[[nodiscard]] status encode_response_without_raw_contents(const inference_response& response,
                                                          inference::ModelInferResponse& out);

/// How the response travels: alone (ModelInfer), or as a ModelStreamInferResponse's
/// `infer_response` flagged `triton_final_response` (ModelStreamInfer).
struct response_framing {
  bool in_stream = false;
  bool final_response = true;
};

/// The wire bytes of `response` with every output raw, as `encode_response` then serializing
/// would make them (the raw contents after the other fields, which protobuf reads alike).
[[nodiscard]] status serialize_response(const inference_response& response, ::grpc::ByteBuffer& out,
                                        response_framing framing = {});

}  // namespace oip::grpc
