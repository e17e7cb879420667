// libFuzzer target: the gRPC codecs, both directions. Byte 0 picks the message, the rest is its
// protobuf encoding:
//   even: a ModelInferRequest, decoded as a server does; whatever decodes is answered (identity
//         outputs, raw and typed) and re-encoded as a client would, and both must decode again;
//         what the server's wire reader reads, protobuf's parse and decode_request must read the
//         same way;
//   odd:  a ModelInferResponse, decoded as a client does.
// A crash, a leak, or a decoded message that its own encoding cannot reproduce is a finding.

#include "request_readers.hpp"

#include <oip/grpc/codec.hpp>

#include <cstdint>

#include <google/protobuf/stubs/logging.h>

namespace {

void check_request(inference::ModelInferRequest& message, const oip::limits& bounds) {
  oip::result<oip::inference_request> request = oip::grpc::decode_request(message, bounds);
  if (!request) return;
  for (const auto form : {oip::grpc::contents_form::typed, oip::grpc::contents_form::raw}) {
    inference::ModelInferRequest again;
    if (oip::grpc::encode_request(*request, "fuzz", "", form, again).ok()) {
      oip::result<oip::inference_request> round = oip::grpc::decode_request(again, bounds);
      if (!round || round->inputs.size() != request->inputs.size()) __builtin_trap();
    }
    oip::inference_response response;
    response.model_name = "fuzz";
    response.id = request->id;
    response.parameters = request->parameters;
    response.outputs = request->inputs;
    inference::ModelInferResponse reply;
    if (oip::grpc::encode_response(response, reply, form).ok()) {
      oip::result<oip::inference_response> back = oip::grpc::decode_response(reply, bounds);
      if (!back || back->outputs.size() != response.outputs.size()) __builtin_trap();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  // protobuf logs every string field that is not UTF-8; the fuzzer makes many.
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  oip::limits bounds;
  bounds.max_elements = 1U << 20U;
  bounds.max_body_bytes = 1U << 22U;
  const auto* bytes = reinterpret_cast<const char*>(data + 1);
  const auto length = static_cast<int>(size - 1);
  if (data[0] % 2 == 0) {
    if (!oip_test::compare_request_readers({bytes, size - 1}, bounds).disagreement.empty()) {
      __builtin_trap();
    }
    inference::ModelInferRequest message;
    if (message.ParseFromArray(bytes, length)) check_request(message, bounds);
  } else {
    inference::ModelInferResponse message;
    if (message.ParseFromArray(bytes, length)) {
      oip::result<oip::inference_response> response = oip::grpc::decode_response(message, bounds);
      static_cast<void>(response);
    }
  }
  return 0;
}
