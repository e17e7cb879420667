// libFuzzer target: gRPC ModelStreamInfer against a real oip::grpc::server on loopback. An input
// is a series of messages, each a 2-byte little-endian length and a ModelInferRequest's protobuf
// encoding; those that parse are written on one stream (each asking for the empty final
// response), then the writes end and every reply is read. The models: a bounded decoupled one
// (`fuzz_stream`), one that answers once (`fuzz_once`), and whatever names no model. A crash, a
// stream that does not end within 10 s or ends with an error, or a count of final replies other
// than the requests written (every request, refused or not, ends with exactly one) is a finding.

#include "stream_model.hpp"

#include <oip/executor.hpp>
#include <oip/grpc/grpc_service.grpc.pb.h>
#include <oip/grpc/server.hpp>
#include <oip/inference_service.hpp>
#include <oip/log.hpp>
#include <oip/repository.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include <google/protobuf/stubs/logging.h>
#include <grpcpp/grpcpp.h>

namespace {

struct served {
  served() {
    oip::set_log_level(oip::log_level::error);
    static_cast<void>(models.add(std::make_shared<oip_fuzz::stream_model>()));
    oip::model_config once;
    once.name = "fuzz_once";
    once.inputs = {{"IN", oip::datatype::int32, {-1}, {}}};
    once.outputs = {{"IN", oip::datatype::int32, {-1}, {}}};
    static_cast<void>(models.add(oip::make_model(once, [](const oip::inference_request& r) {
      return oip::result<oip::model_output>{oip::model_output{{r.inputs.at(0)}, {}}};
    })));
    oip::server_options options;
    options.bounds.max_body_bytes = 1U << 20U;
    options.bounds.max_elements = 1U << 16U;
    service = std::make_unique<oip::inference_service>(models, workers, options);
    grpc = std::make_unique<oip::grpc::server>(*service, oip::grpc::server_options{"127.0.0.1", 0});
    const oip::result<std::uint16_t> port = grpc->start();
    if (!port) return;
    stub = inference::GRPCInferenceService::NewStub(::grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(*port), ::grpc::InsecureChannelCredentials()));
  }
  oip::model_repository models;
  oip::executor workers{oip::executor_options{2, 256}};
  std::unique_ptr<oip::inference_service> service;
  std::unique_ptr<oip::grpc::server> grpc;
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub;
};

served& server() {
  static served* const instance = new served;  // lives for the whole run, like a server
  return *instance;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  // protobuf logs every string field that is not UTF-8; the fuzzer makes many.
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  served& s = server();
  if (!s.stub) __builtin_trap();
  ::grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds{10});
  auto stream = s.stub->ModelStreamInfer(&context);
  std::size_t written = 0;
  for (std::size_t at = 0; at + 2 <= size && written < 64;) {
    const std::size_t length = data[at] | (static_cast<std::size_t>(data[at + 1]) << 8U);
    at += 2;
    if (length > size - at) break;
    inference::ModelInferRequest request;
    const bool parsed = request.ParseFromArray(data + at, static_cast<int>(length));
    at += length;
    if (!parsed) continue;
    (*request.mutable_parameters())["triton_enable_empty_final_response"].set_bool_param(true);
    if (!stream->Write(request)) break;
    ++written;
  }
  stream->WritesDone();
  std::size_t finals = 0;
  inference::ModelStreamInferResponse reply;
  while (stream->Read(&reply)) {
    const auto& parameters = reply.infer_response().parameters();
    if (const auto flag = parameters.find("triton_final_response");
        flag != parameters.end() && flag->second.bool_param()) {
      ++finals;
    }
  }
  const ::grpc::Status end = stream->Finish();
  if (!end.ok()) {
    std::fprintf(stderr, "grpc_stream_fuzzer: the stream ended with %d: %s\n",
                 static_cast<int>(end.error_code()), end.error_message().c_str());
    __builtin_trap();
  }
  if (finals != written) {
    std::fprintf(stderr, "grpc_stream_fuzzer: %zu requests written, %zu final replies\n", written,
                 finals);
    __builtin_trap();
  }
  return 0;
}
