// The floor of gRPC on this machine: a bare grpc++ callback server that answers ModelInfer and
// ModelStreamInfer with a canned reply (no parsing, no model), and ModelMetadata, ModelConfig and
// the health RPCs with canned replies too (perf_analyzer asks for them before it starts). What
// oip's gRPC server does beyond it is the protocol's work: scripts/bench-grpc runs both under the
// same load and prints the ratio.
//
//   grpc_floor serve PORT MODEL [ELEMENTS]    serves the canned replies of MODEL
//   grpc_floor request MODEL [ELEMENTS] [N]   writes N framed ModelInferRequests to stdout (an
//                                             h2load body: one for a unary call, N for a stream)
//
// MODEL is `simple` (two INT32 [1,16] inputs, their sum and difference out) or `identity_fp32`
// (one FP32 [1,ELEMENTS] input, echoed), with every tensor as raw bytes, as Triton's clients
// send them. The canned reply is what oip-serve answers to the request, byte for byte in size.
// Like oip's server, it turns off abseil's mutex deadlock detection, which Debian's abseil leaves
// on.

#include <oip/grpc/grpc_service.grpc.pb.h>

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include <grpcpp/grpcpp.h>

#include <absl/synchronization/mutex.h>

namespace {

using svc = inference::GRPCInferenceService;
using ::grpc::ByteBuffer;
using ::grpc::CallbackServerContext;
using ::grpc::ServerUnaryReactor;

struct tensor_shape {
  std::string name;
  std::string datatype;
  std::int64_t elements = 0;
};

// The model's inputs and outputs, each [1, elements].
struct model_shape {
  std::vector<tensor_shape> inputs;
  std::vector<tensor_shape> outputs;
};

bool shape_of(std::string_view model, std::int64_t elements, model_shape& out) {
  if (model == "simple") {
    out.inputs = {{"INPUT0", "INT32", 16}, {"INPUT1", "INT32", 16}};
    out.outputs = {{"OUTPUT0", "INT32", 16}, {"OUTPUT1", "INT32", 16}};
    return true;
  }
  if (model == "identity_fp32") {
    out.inputs = {{"INPUT0", "FP32", elements}};
    out.outputs = {{"OUTPUT0", "FP32", elements}};
    return true;
  }
  return false;
}

std::string raw_bytes(std::int64_t elements) {
  return std::string(static_cast<std::size_t>(elements) * 4, '\x01');
}

ByteBuffer serialized(const google::protobuf::MessageLite& message) {
  const std::string bytes = message.SerializeAsString();
  ::grpc::Slice slice{bytes};
  return ByteBuffer{&slice, 1};
}

struct canned_replies {
  ByteBuffer infer;
  ByteBuffer stream_infer;
  ByteBuffer metadata;
  ByteBuffer config;
  ByteBuffer live;
  ByteBuffer ready;
};

canned_replies make_replies(const std::string& model, const model_shape& shape) {
  inference::ModelInferResponse infer;
  infer.set_model_name(model);
  infer.set_model_version("1");
  for (const tensor_shape& t : shape.outputs) {
    auto* out = infer.add_outputs();
    out->set_name(t.name);
    out->set_datatype(t.datatype);
    out->add_shape(1);
    out->add_shape(t.elements);
    infer.add_raw_output_contents(raw_bytes(t.elements));
  }
  inference::ModelStreamInferResponse stream;
  *stream.mutable_infer_response() = infer;
  // As oip (and Triton) flag every response on a stream.
  (*stream.mutable_infer_response()->mutable_parameters())["triton_final_response"].set_bool_param(
      true);

  inference::ModelMetadataResponse metadata;
  metadata.set_name(model);
  metadata.add_versions("1");
  metadata.set_platform("oip");
  inference::ModelConfigResponse config;
  config.mutable_config()->set_name(model);
  config.mutable_config()->set_platform("oip");
  for (const tensor_shape& t : shape.inputs) {
    auto* in = metadata.add_inputs();
    in->set_name(t.name);
    in->set_datatype(t.datatype);
    in->add_shape(-1);
    in->add_shape(-1);
    auto* input = config.mutable_config()->add_input();
    input->set_name(t.name);
    input->set_data_type(t.datatype == "INT32" ? inference::TYPE_INT32 : inference::TYPE_FP32);
    input->add_dims(-1);
    input->add_dims(-1);
  }
  for (const tensor_shape& t : shape.outputs) {
    auto* out = metadata.add_outputs();
    out->set_name(t.name);
    out->set_datatype(t.datatype);
    out->add_shape(-1);
    out->add_shape(-1);
  }
  inference::ServerLiveResponse live;
  live.set_live(true);
  inference::ServerReadyResponse ready;
  ready.set_ready(true);
  return {serialized(infer),  serialized(stream), serialized(metadata),
          serialized(config), serialized(live),   serialized(ready)};
}

using floor_base = svc::WithRawCallbackMethod_ServerLive<svc::WithRawCallbackMethod_ServerReady<
    svc::WithRawCallbackMethod_ModelReady<svc::WithRawCallbackMethod_ModelMetadata<
        svc::WithRawCallbackMethod_ModelConfig<svc::WithRawCallbackMethod_ModelInfer<
            svc::WithRawCallbackMethod_ModelStreamInfer<svc::Service>>>>>>>;

// Reads each request of a stream and answers it with the canned reply, one write at a time.
class echo_stream final : public ::grpc::ServerBidiReactor<ByteBuffer, ByteBuffer> {
 public:
  explicit echo_stream(const ByteBuffer& reply) : reply_{reply} { StartRead(&request_); }
  void OnReadDone(bool ok) override {
    if (!ok) return Finish(::grpc::Status::OK);
    out_ = reply_;
    StartWrite(&out_);
  }
  void OnWriteDone(bool ok) override {
    if (!ok) return Finish(::grpc::Status::CANCELLED);
    StartRead(&request_);
  }
  void OnDone() override { delete this; }

 private:
  const ByteBuffer& reply_;
  ByteBuffer request_;
  ByteBuffer out_;
};

class floor_service final : public floor_base {
 public:
  explicit floor_service(canned_replies replies) : replies_{std::move(replies)} {}

  ServerUnaryReactor* ServerLive(CallbackServerContext* context, const ByteBuffer*,
                                 ByteBuffer* out) override {
    return answer(context, replies_.live, out);
  }
  ServerUnaryReactor* ServerReady(CallbackServerContext* context, const ByteBuffer*,
                                  ByteBuffer* out) override {
    return answer(context, replies_.ready, out);
  }
  ServerUnaryReactor* ModelReady(CallbackServerContext* context, const ByteBuffer*,
                                 ByteBuffer* out) override {
    return answer(context, replies_.ready, out);
  }
  ServerUnaryReactor* ModelMetadata(CallbackServerContext* context, const ByteBuffer*,
                                    ByteBuffer* out) override {
    return answer(context, replies_.metadata, out);
  }
  ServerUnaryReactor* ModelConfig(CallbackServerContext* context, const ByteBuffer*,
                                  ByteBuffer* out) override {
    return answer(context, replies_.config, out);
  }
  ServerUnaryReactor* ModelInfer(CallbackServerContext* context, const ByteBuffer*,
                                 ByteBuffer* out) override {
    return answer(context, replies_.infer, out);
  }
  ::grpc::ServerBidiReactor<ByteBuffer, ByteBuffer>* ModelStreamInfer(
      CallbackServerContext*) override {
    return new echo_stream{replies_.stream_infer};
  }

 private:
  static ServerUnaryReactor* answer(CallbackServerContext* context, const ByteBuffer& reply,
                                    ByteBuffer* out) {
    *out = reply;  // shares the canned slices: no copy of the bytes
    ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(::grpc::Status::OK);
    return reactor;
  }

  canned_replies replies_;
};

// A gRPC message frame: a compression flag, the length (big-endian), the message.
void write_framed(const std::string& message) {
  const auto length = static_cast<std::uint32_t>(message.size());
  const char header[5] = {0, static_cast<char>(length >> 24U), static_cast<char>(length >> 16U),
                          static_cast<char>(length >> 8U), static_cast<char>(length)};
  std::fwrite(header, 1, sizeof header, stdout);
  std::fwrite(message.data(), 1, message.size(), stdout);
}

std::int64_t number(const char* text, std::int64_t fallback) {
  if (text == nullptr) return fallback;
  std::int64_t n = 0;
  const std::string_view s{text};
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (ec != std::errc{} || end != s.data() + s.size() || n <= 0) return -1;
  return n;
}

int usage() {
  std::cerr << "usage: grpc_floor serve PORT MODEL [ELEMENTS] | request MODEL [ELEMENTS] [N]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<const char*> args(argv + 1, argv + argc);
  const auto arg = [&](std::size_t i) { return i < args.size() ? args[i] : nullptr; };
  if (args.empty()) return usage();
  const std::string_view mode = args[0];
  model_shape shape;
  if (mode == "request") {
    const std::int64_t elements = number(arg(2), 16);
    const std::int64_t count = number(arg(3), 1);
    if (arg(1) == nullptr || elements < 0 || count < 0 || !shape_of(arg(1), elements, shape)) {
      return usage();
    }
    inference::ModelInferRequest request;
    request.set_model_name(arg(1));
    for (const tensor_shape& t : shape.inputs) {
      auto* in = request.add_inputs();
      in->set_name(t.name);
      in->set_datatype(t.datatype);
      in->add_shape(1);
      in->add_shape(t.elements);
      request.add_raw_input_contents(raw_bytes(t.elements));
    }
    const std::string message = request.SerializeAsString();
    for (std::int64_t i = 0; i < count; ++i) write_framed(message);
    return std::fflush(stdout) == 0 ? 0 : 1;
  }
  if (mode != "serve" || arg(1) == nullptr || arg(2) == nullptr) return usage();
  const std::int64_t port = number(arg(1), 0);
  const std::int64_t elements = number(arg(3), 16);
  if (port < 0 || port > 65535 || elements < 0 || !shape_of(arg(2), elements, shape)) {
    return usage();
  }
  // As oip's server does (src/grpc/deadlock_detection.hpp): the floor is the best this machine's
  // grpc++ can do, and Debian's abseil otherwise checks every lock's order as a debug build does.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  floor_service service{make_replies(arg(2), shape)};
  ::grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:" + std::to_string(port),
                           ::grpc::InsecureServerCredentials());
  builder.RegisterService(&service);
  builder.SetMaxReceiveMessageSize(std::numeric_limits<int>::max());
  builder.SetMaxSendMessageSize(std::numeric_limits<int>::max());
  const std::unique_ptr<::grpc::Server> server = builder.BuildAndStart();
  if (!server) {
    std::cerr << "grpc_floor: cannot listen on port " << port << "\n";
    return 1;
  }
  std::cerr << "grpc_floor: serving " << arg(2) << " on 127.0.0.1:" << port << "\n";
  server->Wait();
  return 0;
}
