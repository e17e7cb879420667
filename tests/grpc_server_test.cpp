#include "fake_device_memory.hpp"
#include "serving_support.hpp"
#include "shm_object.hpp"
#include "trace_support.hpp"
#include "wait.hpp"

#include <oip/grpc/codec.hpp>
#include <oip/grpc/grpc_service.grpc.pb.h>
#include <oip/grpc/server.hpp>
#include <oip/inference_service.hpp>
#include <oip/log.hpp>

#include <any>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <doctest/doctest.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <absl/synchronization/mutex.h>
#include <unistd.h>

using namespace std::chrono_literals;
using oip::grpc::contents_form;

namespace {

// INPUT INT32 [1] → OUTPUT: the sequence's running sum.
std::shared_ptr<oip::model> make_accumulator() {
  oip::model_config c;
  c.name = "accumulator";
  c.inputs = {{"INPUT", oip::datatype::int32, {1}, {}}};
  c.outputs = {{"OUTPUT", oip::datatype::int32, {1}, {}}};
  c.sequence_batching = true;
  c.sequence.start_input = "START";
  struct accumulator : oip::model {
    explicit accumulator(oip::model_config config) : config_{std::move(config)} {}
    [[nodiscard]] const oip::model_config& config() const noexcept override { return config_; }
    void execute(oip::inference_call call) override {
      std::any& state = *call.sequence()->state;
      if (!state.has_value()) state = std::int32_t{0};
      auto& sum = std::any_cast<std::int32_t&>(state);
      sum += call.request().inputs[0].at<std::int32_t>(0);
      const std::int32_t out = sum;
      call.finish(oip::model_output{{*oip::tensor::from_values<std::int32_t>(
                                        "OUTPUT", {1}, std::span<const std::int32_t>(&out, 1))},
                                    {}});
    }
    oip::model_config config_;
  };
  return std::make_shared<accumulator>(std::move(c));
}

struct fixture {
  oip::model_repository models;
  oip::executor workers{oip::executor_options{4, 1024}};
  oip::inference_service service{models, workers, oip::testing::with_model_control()};
  std::shared_ptr<oip::testing::waiter> waiter = std::make_shared<oip::testing::waiter>();
  oip::grpc::server server{service, {"127.0.0.1", 0}};
  std::shared_ptr<::grpc::Channel> channel;
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub;

  fixture() {
    REQUIRE(models.add(oip::testing::make_simple()).ok());
    REQUIRE(models.add(make_accumulator()).ok());
    REQUIRE(models.add(waiter).ok());
    CHECK(server.port() == 0);
    oip::result<std::uint16_t> port = server.start();
    REQUIRE(port);
    CHECK(server.port() == *port);
    channel = ::grpc::CreateChannel("127.0.0.1:" + std::to_string(*port),
                                    ::grpc::InsecureChannelCredentials());
    stub = inference::GRPCInferenceService::NewStub(channel);
  }
};

inference::ModelInferRequest simple_request(contents_form form) {
  oip::inference_request r;
  r.id = "7";
  std::vector<std::int32_t> a(16);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<std::int32_t>(i);
  const std::vector<std::int32_t> b(16, 2);
  r.inputs.push_back(*oip::tensor::from_values<std::int32_t>("INPUT0", {1, 16}, a));
  r.inputs.push_back(*oip::tensor::from_values<std::int32_t>("INPUT1", {1, 16}, b));
  inference::ModelInferRequest message;
  REQUIRE(oip::grpc::encode_request(r, "simple", "", form, message).ok());
  return message;
}

// A request "slow" that the waiter holds until its timeout, then fails.
inference::ModelInferRequest held_request(std::int64_t timeout_us) {
  oip::inference_request held;
  held.id = "slow";
  const std::int32_t one = 1;
  held.inputs.push_back(
      *oip::tensor::from_values<std::int32_t>("IN", {1}, std::span<const std::int32_t>(&one, 1)));
  inference::ModelInferRequest message;
  REQUIRE(oip::grpc::encode_request(held, "waiter", "1", contents_form::typed, message).ok());
  (*message.mutable_parameters())["timeout"].set_int64_param(timeout_us);
  return message;
}

inference::ModelInferRequest accumulate(std::uint64_t id, std::int32_t value, bool start, bool end,
                                        std::string request_id) {
  oip::inference_request r;
  r.id = std::move(request_id);
  r.parameters.set("sequence_id", static_cast<std::int64_t>(id));
  r.parameters.set("sequence_start", start);
  r.parameters.set("sequence_end", end);
  r.inputs.push_back(*oip::tensor::from_values<std::int32_t>(
      "INPUT", {1}, std::span<const std::int32_t>(&value, 1)));
  inference::ModelInferRequest message;
  REQUIRE(oip::grpc::encode_request(r, "accumulator", "", contents_form::typed, message).ok());
  return message;
}

// A gRPC server for `service` on a port of its own, and a stub that calls it.
struct served_over_grpc {
  oip::grpc::server server;
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub;

  explicit served_over_grpc(oip::inference_service& service) : server{service, {"127.0.0.1", 0}} {
    const oip::result<std::uint16_t> port = server.start();
    REQUIRE(port);
    stub = inference::GRPCInferenceService::NewStub(::grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(*port), ::grpc::InsecureChannelCredentials()));
  }
};

// A request to `model` of one INT32 [1] input "IN", 1, as raw contents.
inference::ModelInferRequest one_in(const std::string& model) {
  oip::inference_request one;
  const std::int32_t value = 1;
  one.inputs.push_back(
      *oip::tensor::from_values<std::int32_t>("IN", {1}, std::span<const std::int32_t>(&value, 1)));
  inference::ModelInferRequest message;
  REQUIRE(oip::grpc::encode_request(one, model, "", contents_form::raw, message).ok());
  return message;
}

}  // namespace

TEST_CASE("replies carry raw contents, one per output, whatever form the request used") {
  fixture f;
  for (const contents_form form : {contents_form::typed, contents_form::raw}) {
    ::grpc::ClientContext context;
    inference::ModelInferResponse response;
    const ::grpc::Status s = f.stub->ModelInfer(&context, simple_request(form), &response);
    REQUIRE(s.ok());
    CHECK(response.id() == "7");
    CHECK(response.model_name() == "simple");
    CHECK(response.model_version() == "1");
    // As Triton's server: its clients read raw_output_contents[i] for output i.
    REQUIRE(response.raw_output_contents_size() == 2);
    CHECK(response.raw_output_contents(0).size() == 16 * sizeof(std::int32_t));
    CHECK_FALSE(response.outputs(0).has_contents());
    oip::result<oip::inference_response> decoded = oip::grpc::decode_response(response);
    REQUIRE(decoded);
    CHECK(decoded->outputs[0].at<std::int32_t>(5) == 7);
    CHECK(decoded->outputs[1].at<std::int32_t>(5) == 3);
    CHECK(*decoded->parameters.get<std::string>("computed_by") == "simple");
  }
}

TEST_CASE("errors carry the status mapping's gRPC code") {
  fixture f;
  inference::ModelInferRequest unknown = simple_request(contents_form::raw);
  unknown.set_model_name("missing");
  ::grpc::ClientContext c1;
  inference::ModelInferResponse r1;
  ::grpc::Status s = f.stub->ModelInfer(&c1, unknown, &r1);
  CHECK(s.error_code() == ::grpc::StatusCode::NOT_FOUND);
  CHECK(s.error_message() == "Request for unknown model: 'missing' is not found");

  inference::ModelInferRequest both = simple_request(contents_form::raw);
  both.mutable_inputs(0)->mutable_contents()->add_int_contents(1);
  ::grpc::ClientContext c2;
  inference::ModelInferResponse r2;
  s = f.stub->ModelInfer(&c2, both, &r2);
  CHECK(s.error_code() == ::grpc::StatusCode::INVALID_ARGUMENT);

  // A message repeating a long client string is cut, so that its trailer stays within what the
  // client accepts: the client sees the status, not RESOURCE_EXHAUSTED.
  inference::ModelInferRequest long_name = simple_request(contents_form::raw);
  long_name.mutable_inputs(0)->set_name(std::string(20'000, 'm') + "\u00e9");
  ::grpc::ClientContext c4;
  inference::ModelInferResponse r4;
  s = f.stub->ModelInfer(&c4, long_name, &r4);
  CHECK(s.error_code() == ::grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(s.error_message().rfind("unexpected inference input 'mmmm", 0) == 0);
  CHECK(s.error_message().size() == 2048 + 3);
  CHECK(s.error_message().ends_with("mmm..."));

  ::grpc::ClientContext c3;
  inference::ModelReadyRequest ready;
  ready.set_name("missing");
  inference::ModelReadyResponse ready_response;
  REQUIRE(f.stub->ModelReady(&c3, ready, &ready_response).ok());
  CHECK_FALSE(ready_response.ready());
}

// Field `number` set to bytes that are not valid UTF-8, where the message declares a string:
// protobuf writes unknown fields as they are, and the server's parser then meets them as that
// string field.
template <class Message>
void set_invalid_utf8(Message& message, int number) {
  message.GetReflection()->MutableUnknownFields(&message)->AddLengthDelimited(number, "ab\xff\xfe");
}

TEST_CASE("a message protobuf cannot parse is INVALID_ARGUMENT; a stream answers it and goes on") {
  fixture f;
  const std::string invalid_infer =
      "the request is not a valid inference.ModelInferRequest message: protobuf cannot parse it "
      "(a malformed field, or a string field that is not valid UTF-8)";

  inference::ModelInferRequest bad_name = simple_request(contents_form::raw);
  bad_name.clear_model_name();
  set_invalid_utf8(bad_name, 1);  // model_name
  ::grpc::ClientContext c1;
  inference::ModelInferResponse r1;
  ::grpc::Status s = f.stub->ModelInfer(&c1, bad_name, &r1);
  CHECK(s.error_code() == ::grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(s.error_message() == invalid_infer);

  inference::ModelMetadataRequest metadata;
  set_invalid_utf8(metadata, 1);  // name
  ::grpc::ClientContext c2;
  inference::ModelMetadataResponse r2;
  s = f.stub->ModelMetadata(&c2, metadata, &r2);
  CHECK(s.error_code() == ::grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(s.error_message().find("inference.ModelMetadataRequest") != std::string::npos);

  // A message cut short in the middle of a field, sent as bytes.
  std::string truncated;
  REQUIRE(simple_request(contents_form::raw).SerializeToString(&truncated));
  truncated.resize(truncated.size() - 3);
  ::grpc::Slice slice{truncated};
  const ::grpc::ByteBuffer request_bytes{&slice, 1};
  ::grpc::ByteBuffer reply_bytes;
  ::grpc::GenericStub generic{f.channel};
  ::grpc::ClientContext c3;
  std::promise<::grpc::Status> done;
  generic.UnaryCall(&c3, "/inference.GRPCInferenceService/ModelInfer", ::grpc::StubOptions{},
                    &request_bytes, &reply_bytes,
                    [&done](::grpc::Status st) { done.set_value(st); });
  s = done.get_future().get();
  CHECK(s.error_code() == ::grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(s.error_message() == invalid_infer);

  // On a stream: an error reply, and the requests after it are answered.
  ::grpc::ClientContext c4;
  auto stream = f.stub->ModelStreamInfer(&c4);
  REQUIRE(stream->Write(bad_name));
  REQUIRE(stream->Write(simple_request(contents_form::raw)));
  stream->WritesDone();
  inference::ModelStreamInferResponse reply;
  REQUIRE(stream->Read(&reply));
  CHECK(reply.error_message() == invalid_infer);
  REQUIRE(stream->Read(&reply));
  CHECK(reply.error_message().empty());
  CHECK(reply.infer_response().id() == "7");
  CHECK(reply.infer_response().raw_output_contents_size() == 2);
  CHECK_FALSE(stream->Read(&reply));
  CHECK(stream->Finish().ok());
}

TEST_CASE("an error that quotes bytes that are not UTF-8 reaches the client readable") {
  // A model whose error quotes a client's bytes as they are, as the reference models quote a
  // BYTES element: a stray byte, and a character cut in two.
  oip::model_config c;
  c.name = "quoter";
  c.inputs = {{"IN", oip::datatype::int32, {1}, {}}};
  c.outputs = {{"OUT", oip::datatype::int32, {1}, {}}};
  fixture f;
  REQUIRE(f.models
              .add(oip::make_model(c,
                                   [](const oip::inference_request&) {
                                     return oip::result<oip::model_output>{oip::status{
                                         oip::errc::invalid_argument,
                                         "input 'IN' holds 'ab\xff\xfe', or '\xe2\x82'"}};
                                   }))
              .ok());
  oip::inference_request r;
  r.inputs.push_back(*oip::tensor::from_values<std::int32_t>("IN", {1}, std::vector{1}));
  inference::ModelInferRequest quoted;
  REQUIRE(oip::grpc::encode_request(r, "quoter", "", contents_form::raw, quoted).ok());
  const std::string readable = "input 'IN' holds 'ab\uFFFD\uFFFD', or '\uFFFD\uFFFD'";

  ::grpc::ClientContext unary;
  inference::ModelInferResponse unary_reply;
  const ::grpc::Status s = f.stub->ModelInfer(&unary, quoted, &unary_reply);
  CHECK(s.error_code() == ::grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(s.error_message() == readable);

  // On a stream, the error reply parses (a protobuf string field must be UTF-8), and the stream
  // goes on.
  ::grpc::ClientContext context;
  auto stream = f.stub->ModelStreamInfer(&context);
  REQUIRE(stream->Write(quoted));
  REQUIRE(stream->Write(simple_request(contents_form::raw)));
  stream->WritesDone();
  inference::ModelStreamInferResponse reply;
  REQUIRE(stream->Read(&reply));
  CHECK(reply.error_message() == readable);
  REQUIRE(stream->Read(&reply));
  CHECK(reply.error_message().empty());
  CHECK(reply.infer_response().raw_output_contents_size() == 2);
  CHECK_FALSE(stream->Read(&reply));
  CHECK(stream->Finish().ok());
}

TEST_CASE("a bad model name is INVALID_ARGUMENT in one wording on every RPC that names a model") {
  fixture f;
  const std::string why =
      "invalid model name: a model name is 1 to 255 bytes, not '.' or '..', without '/', '\\', "
      "NUL or other control characters";
  for (const std::string& bad :
       {std::string{".."}, std::string{"."}, std::string{"../simple"}, std::string{"a\\b"},
        std::string("a\0b", 3), std::string{"a\nb"}, std::string(256, 'm')}) {
    CAPTURE(bad);
    // Calls `rpc` with `request` and checks the refusal.
    const auto refuses = [&](auto rpc, const auto& request, auto response) {
      ::grpc::ClientContext context;
      const ::grpc::Status s = ((*f.stub).*rpc)(&context, request, &response);
      CHECK(s.error_code() == ::grpc::StatusCode::INVALID_ARGUMENT);
      CHECK(s.error_message() == why);
    };
    using stub = inference::GRPCInferenceService::Stub;
    inference::ModelInferRequest infer = simple_request(contents_form::raw);
    infer.set_model_name(bad);
    refuses(&stub::ModelInfer, infer, inference::ModelInferResponse{});
    inference::ModelReadyRequest ready;
    ready.set_name(bad);
    refuses(&stub::ModelReady, ready, inference::ModelReadyResponse{});
    inference::ModelMetadataRequest metadata;
    metadata.set_name(bad);
    refuses(&stub::ModelMetadata, metadata, inference::ModelMetadataResponse{});
    inference::ModelConfigRequest config;
    config.set_name(bad);
    refuses(&stub::ModelConfig, config, inference::ModelConfigResponse{});
    inference::ModelStatisticsRequest statistics;
    statistics.set_name(bad);
    refuses(&stub::ModelStatistics, statistics, inference::ModelStatisticsResponse{});
    inference::RepositoryModelLoadRequest load;
    load.set_model_name(bad);
    refuses(&stub::RepositoryModelLoad, load, inference::RepositoryModelLoadResponse{});
    inference::RepositoryModelUnloadRequest unload;
    unload.set_model_name(bad);
    refuses(&stub::RepositoryModelUnload, unload, inference::RepositoryModelUnloadResponse{});
    inference::TraceSettingRequest trace;
    trace.set_model_name(bad);
    refuses(&stub::TraceSetting, trace, inference::TraceSettingResponse{});
  }
}

TEST_CASE("model control off: loads and unloads are FAILED_PRECONDITION, the index answers") {
  oip::model_repository models;
  oip::executor workers{oip::executor_options{1, 8}};
  oip::inference_service service{models, workers};  // model_control_mode::none by default
  REQUIRE(models.add(oip::testing::make_simple()).ok());
  oip::grpc::server server{service, {"127.0.0.1", 0}};
  const oip::result<std::uint16_t> port = server.start();
  REQUIRE(port);
  const auto stub = inference::GRPCInferenceService::NewStub(::grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(*port), ::grpc::InsecureChannelCredentials()));
  const std::string refused = "explicit model load / unload is not allowed if polling is enabled";
  inference::RepositoryModelUnloadRequest unload;
  unload.set_model_name("simple");
  ::grpc::ClientContext c1;
  inference::RepositoryModelUnloadResponse r1;
  const ::grpc::Status unloaded = stub->RepositoryModelUnload(&c1, unload, &r1);
  CHECK(unloaded.error_code() == ::grpc::StatusCode::FAILED_PRECONDITION);
  CHECK(unloaded.error_message() == refused);
  inference::RepositoryModelLoadRequest load;
  load.set_model_name("simple");
  ::grpc::ClientContext c2;
  inference::RepositoryModelLoadResponse r2;
  const ::grpc::Status loaded = stub->RepositoryModelLoad(&c2, load, &r2);
  CHECK(loaded.error_code() == ::grpc::StatusCode::FAILED_PRECONDITION);
  CHECK(loaded.error_message() == refused);
  ::grpc::ClientContext c3;
  inference::RepositoryIndexResponse index;
  REQUIRE(stub->RepositoryIndex(&c3, inference::RepositoryIndexRequest{}, &index).ok());
  REQUIRE(index.models_size() == 1);
  CHECK(index.models(0).state() == "READY");
  server.stop();
}

TEST_CASE("a stream answers in the order of its requests; a model's replies say they are final") {
  fixture f;
  // A request that the waiter holds until its timeout (0.3 s), then fails; one that the simple
  // model answers at once; one refused as it arrives. The replies come back in that order.
  const inference::ModelInferRequest slow = held_request(300'000);
  inference::ModelInferRequest lost = simple_request(contents_form::typed);
  lost.set_model_name("nope");
  lost.set_id("lost");

  ::grpc::ClientContext context;
  auto stream = f.stub->ModelStreamInfer(&context);
  REQUIRE(stream->Write(slow));
  REQUIRE(stream->Write(simple_request(contents_form::typed)));
  REQUIRE(stream->Write(lost));
  stream->WritesDone();
  const auto final_flag = [](const inference::ModelInferResponse& r) {
    const auto found = r.parameters().find("triton_final_response");
    return found != r.parameters().end() && found->second.bool_param();
  };
  inference::ModelStreamInferResponse reply;
  REQUIRE(stream->Read(&reply));
  CHECK(reply.infer_response().id() == "slow");
  CHECK(reply.error_message() == "cancelled while running");
  CHECK(reply.infer_response().model_name() == "waiter");
  CHECK(reply.infer_response().model_version() == "1");
  CHECK(final_flag(reply.infer_response()));
  REQUIRE(stream->Read(&reply));
  CHECK(reply.infer_response().id() == "7");
  CHECK(reply.error_message().empty());
  CHECK(reply.infer_response().outputs_size() == 2);
  CHECK(final_flag(reply.infer_response()));
  REQUIRE(stream->Read(&reply));
  CHECK(reply.infer_response().id() == "lost");
  CHECK(reply.error_message() == "Request for unknown model: 'nope' is not found");
  CHECK_FALSE(stream->Read(&reply));
  CHECK(stream->Finish().ok());

  // The flag that asks for an empty final reply is a bool, in Triton's words otherwise.
  inference::ModelInferRequest flagged = simple_request(contents_form::typed);
  (*flagged.mutable_parameters())["triton_enable_empty_final_response"].set_int64_param(1);
  ::grpc::ClientContext unary;
  inference::ModelInferResponse refused;
  const ::grpc::Status s = f.stub->ModelInfer(&unary, flagged, &refused);
  CHECK(s.error_code() == ::grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(s.error_message() ==
        "invalid value type for 'triton_enable_empty_final_response' parameter, expected "
        "bool_param.");
  // Of the names Triton reserves, a client sends only that one.
  inference::ModelInferRequest reserved = simple_request(contents_form::typed);
  (*reserved.mutable_parameters())["triton_mine"].set_bool_param(true);
  ::grpc::ClientContext reserved_call;
  const ::grpc::Status r = f.stub->ModelInfer(&reserved_call, reserved, &refused);
  CHECK(r.error_code() == ::grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(r.error_message().starts_with(
      "parameter keys starting with 'triton_' are reserved for Triton usage."));
}

TEST_CASE("a model run inline answers on gRPC's threads: unary, and streamed in request order") {
  fixture f;
  REQUIRE(f.models.add(oip::testing::make_inline_simple("simple_inline")).ok());
  inference::ModelInferRequest request = simple_request(contents_form::raw);
  request.set_model_name("simple_inline");
  for (int round = 0; round < 3; ++round) {
    ::grpc::ClientContext context;
    inference::ModelInferResponse response;
    REQUIRE(f.stub->ModelInfer(&context, request, &response).ok());
    oip::result<oip::inference_response> decoded = oip::grpc::decode_response(response);
    REQUIRE(decoded);
    CHECK(decoded->outputs[0].at<std::int32_t>(5) == 7);
  }

  // The inline replies are ready at once but wait for the held request before them.
  const inference::ModelInferRequest slow = held_request(200'000);
  ::grpc::ClientContext context;
  auto stream = f.stub->ModelStreamInfer(&context);
  REQUIRE(stream->Write(slow));
  for (int i = 0; i < 3; ++i) {
    request.set_id("inline " + std::to_string(i));
    REQUIRE(stream->Write(request));
  }
  stream->WritesDone();
  inference::ModelStreamInferResponse reply;
  REQUIRE(stream->Read(&reply));
  CHECK(reply.infer_response().id() == "slow");
  for (int i = 0; i < 3; ++i) {
    REQUIRE(stream->Read(&reply));
    CHECK(reply.infer_response().id() == "inline " + std::to_string(i));
    CHECK(reply.error_message().empty());
  }
  CHECK_FALSE(stream->Read(&reply));
  CHECK(stream->Finish().ok());
}

TEST_CASE("large outputs reach the client whole beside small ones, unary and streamed") {
  fixture f;
  // FP32 [n] in; out the input itself (large: its buffer goes to the socket as it is), its first
  // four elements, and, between them, an output the request puts in nothing.
  oip::model_config c;
  c.name = "split";
  c.inputs = {{"IN", oip::datatype::fp32, {-1}, {}}};
  c.outputs = {{"WHOLE", oip::datatype::fp32, {-1}, {}},
               {"NONE", oip::datatype::fp32, {0}, {}},
               {"HEAD", oip::datatype::fp32, {4}, {}}};
  REQUIRE(f.models
              .add(oip::make_model(
                  c,
                  [](const oip::inference_request& r) -> oip::result<oip::model_output> {
                    const oip::tensor& in = r.inputs[0];
                    oip::result<oip::tensor> whole =
                        oip::tensor::make("WHOLE", in.type(), in.shape(), in.data());
                    oip::result<oip::tensor> none =
                        oip::tensor::make("NONE", in.type(), {0}, oip::buffer{});
                    oip::result<oip::tensor> head =
                        oip::tensor::make("HEAD", in.type(), {4}, *in.data().slice(0, 16));
                    if (!whole || !none || !head) return oip::status{oip::errc::internal, "make"};
                    return oip::model_output{{*whole, *none, *head}, {}};
                  }))
              .ok());
  constexpr std::size_t elements = std::size_t{1} << 18U;  // 1 MiB
  std::vector<float> values(elements);
  for (std::size_t i = 0; i < elements; ++i) values[i] = static_cast<float>(i % 10007) * 0.5F;
  oip::inference_request r;
  r.id = "big";
  r.inputs.push_back(*oip::tensor::from_values<float>("IN", {static_cast<std::int64_t>(elements)},
                                                      std::span<const float>(values)));
  inference::ModelInferRequest request;
  REQUIRE(oip::grpc::encode_request(r, "split", "", contents_form::raw, request).ok());
  const std::string& sent = request.raw_input_contents(0);
  const auto check_reply = [&](const inference::ModelInferResponse& response) {
    CHECK(response.id() == "big");
    REQUIRE(response.outputs_size() == 3);
    CHECK(response.outputs(0).name() == "WHOLE");
    CHECK(response.outputs(0).shape(0) == static_cast<std::int64_t>(elements));
    REQUIRE(response.raw_output_contents_size() == 3);
    CHECK(response.raw_output_contents(0) == sent);
    CHECK(response.raw_output_contents(1).empty());
    CHECK(response.raw_output_contents(2) == sent.substr(0, 16));
  };
  for (int round = 0; round < 2; ++round) {
    ::grpc::ClientContext context;
    inference::ModelInferResponse response;
    REQUIRE(f.stub->ModelInfer(&context, request, &response).ok());
    check_reply(response);
  }
  ::grpc::ClientContext context;
  auto stream = f.stub->ModelStreamInfer(&context);
  REQUIRE(stream->Write(request));
  REQUIRE(stream->Write(request));
  stream->WritesDone();
  for (int i = 0; i < 2; ++i) {
    inference::ModelStreamInferResponse reply;
    REQUIRE(stream->Read(&reply));
    CHECK(reply.error_message().empty());
    check_reply(reply.infer_response());
    const auto flag = reply.infer_response().parameters().find("triton_final_response");
    REQUIRE(flag != reply.infer_response().parameters().end());
    CHECK(flag->second.bool_param());
  }
  CHECK(stream->Finish().ok());
}

TEST_CASE("a stream keeps a sequence in order and stays open after an error") {
  fixture f;
  ::grpc::ClientContext context;
  auto stream = f.stub->ModelStreamInfer(&context);
  constexpr int steps = 40;
  for (int i = 0; i < steps; ++i) {
    REQUIRE(stream->Write(accumulate(5, i, i == 0, i == steps - 1, std::to_string(i))));
    if (i == 10) {  // a request of an unknown sequence in the middle
      REQUIRE(stream->Write(accumulate(6, 1, false, false, "orphan")));
    }
  }
  stream->WritesDone();
  std::int32_t sum = 0;
  int next = 0;
  bool saw_error = false;
  inference::ModelStreamInferResponse reply;
  while (stream->Read(&reply)) {
    if (!reply.error_message().empty()) {
      CHECK(reply.infer_response().id() == "orphan");
      CHECK(reply.error_message() ==
            "inference request for sequence 6 to model 'accumulator' must specify the START flag "
            "on the first request of the sequence");
      saw_error = true;
      continue;
    }
    CHECK(reply.infer_response().id() == std::to_string(next));
    sum += next++;
    const std::string& raw = reply.infer_response().raw_output_contents(0);
    REQUIRE(raw.size() == sizeof(std::int32_t));
    std::int32_t got = 0;
    std::memcpy(&got, raw.data(), sizeof got);
    CHECK(got == sum);
  }
  CHECK(stream->Finish().ok());
  CHECK(next == steps);
  CHECK(saw_error);
}

TEST_CASE("a client deadline cancels the running model") {
  fixture f;
  oip::inference_request r;
  r.inputs.push_back(
      *oip::tensor::from_values<std::int32_t>("IN", {1}, std::vector<std::int32_t>{1}));
  inference::ModelInferRequest message;
  REQUIRE(oip::grpc::encode_request(r, "waiter", "", contents_form::raw, message).ok());
  ::grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + 300ms);
  inference::ModelInferResponse response;
  const auto began = std::chrono::steady_clock::now();
  const ::grpc::Status s = f.stub->ModelInfer(&context, message, &response);
  CHECK(s.error_code() == ::grpc::StatusCode::DEADLINE_EXCEEDED);
  CHECK(oip::testing::wait_until([&] { return f.waiter->saw_cancel.load(); }));
  CHECK(std::chrono::steady_clock::now() - began < 5s);
}

TEST_CASE("configuration, statistics, metadata and the repository over gRPC") {
  fixture f;
  {
    ::grpc::ClientContext context;
    inference::ModelConfigRequest request;
    request.set_name("accumulator");
    inference::ModelConfigResponse response;
    REQUIRE(f.stub->ModelConfig(&context, request, &response).ok());
    CHECK(response.config().has_sequence_batching());
    CHECK(response.config().sequence_batching().control_input(0).name() == "START");
    CHECK(response.config().input(0).data_type() == inference::TYPE_INT32);
    REQUIRE(response.config().instance_group_size() == 1);
    CHECK(response.config().instance_group(0).kind() == inference::ModelInstanceGroup::KIND_CPU);
    CHECK(response.config().instance_group(0).count() == 1);
  }
  {
    ::grpc::ClientContext context;
    inference::ModelInferResponse ignored;
    REQUIRE(f.stub->ModelInfer(&context, simple_request(contents_form::raw), &ignored).ok());
    ::grpc::ClientContext stats_context;
    inference::ModelStatisticsRequest request;
    request.set_name("simple");
    inference::ModelStatisticsResponse response;
    REQUIRE(f.stub->ModelStatistics(&stats_context, request, &response).ok());
    REQUIRE(response.model_stats_size() == 1);
    CHECK(response.model_stats(0).inference_count() == 1);
    CHECK(response.model_stats(0).inference_stats().success().count() == 1);
  }
  {
    ::grpc::ClientContext context;
    inference::ModelMetadataRequest request;
    request.set_name("simple");
    inference::ModelMetadataResponse response;
    REQUIRE(f.stub->ModelMetadata(&context, request, &response).ok());
    CHECK(response.inputs(0).shape(0) == -1);
    CHECK(response.inputs(0).shape(1) == 16);
  }
  {
    ::grpc::ClientContext context;
    inference::RepositoryModelUnloadRequest request;
    request.set_model_name("simple");
    inference::RepositoryModelUnloadResponse response;
    REQUIRE(f.stub->RepositoryModelUnload(&context, request, &response).ok());
    ::grpc::ClientContext index_context;
    inference::RepositoryIndexResponse index;
    REQUIRE(
        f.stub->RepositoryIndex(&index_context, inference::RepositoryIndexRequest{}, &index).ok());
    for (const auto& m : index.models()) CHECK(m.name() != "simple");
    ::grpc::ClientContext load_context;
    inference::RepositoryModelLoadRequest load;
    load.set_model_name("simple");
    inference::RepositoryModelLoadResponse loaded;
    const ::grpc::Status s = f.stub->RepositoryModelLoad(&load_context, load, &loaded);
    CHECK(s.error_code() == ::grpc::StatusCode::INVALID_ARGUMENT);  // no loader in this host

    // A loader that takes parameters gets the request's, a file's bytes as they came.
    struct recording_loader : oip::model_loader {
      std::vector<std::string> available() const override { return {"simple"}; }
      oip::result<std::shared_ptr<oip::model>> load(std::string_view /*name*/) override {
        return oip::testing::make_simple();
      }
      oip::result<std::shared_ptr<oip::model>> load_with(std::string_view name,
                                                         const oip::parameters& request) override {
        given = request;
        return load(name);
      }
      oip::parameters given;
    };
    auto recording = std::make_shared<recording_loader>();
    f.models.set_loader(recording);
    (*load.mutable_parameters())["config"].set_string_param("{}");
    (*load.mutable_parameters())["file:1/w.bin"].set_bytes_param(std::string("\0\x01", 2));
    ::grpc::ClientContext with_parameters;
    REQUIRE(f.stub->RepositoryModelLoad(&with_parameters, load, &loaded).ok());
    CHECK(*recording->given.find("config") == oip::parameter_value{std::string{"{}"}});
    CHECK(*recording->given.find("file:1/w.bin") == oip::parameter_value{std::string("\0\x01", 2)});
    (*load.mutable_parameters())["empty"];  // no value set
    ::grpc::ClientContext unset;
    const ::grpc::Status refused = f.stub->RepositoryModelLoad(&unset, load, &loaded);
    CHECK(refused.error_code() == ::grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(refused.error_message() == "parameter 'empty' of the model load request has no value");

    // One repository: a load or unload that names another is refused, in Triton's words.
    inference::RepositoryModelLoadRequest named;
    named.set_model_name("simple");
    named.set_repository_name("models");
    ::grpc::ClientContext named_load;
    const ::grpc::Status elsewhere = f.stub->RepositoryModelLoad(&named_load, named, &loaded);
    CHECK(elsewhere.error_code() == ::grpc::StatusCode::UNIMPLEMENTED);
    CHECK(elsewhere.error_message() == "'repository_name' specification is not supported");
    inference::RepositoryModelUnloadRequest named_unload;
    named_unload.set_model_name("simple");
    named_unload.set_repository_name("models");
    ::grpc::ClientContext unload_context;
    inference::RepositoryModelUnloadResponse unloaded;
    CHECK(f.stub->RepositoryModelUnload(&unload_context, named_unload, &unloaded).error_code() ==
          ::grpc::StatusCode::UNIMPLEMENTED);
    inference::RepositoryIndexRequest named_index;
    named_index.set_repository_name("models");
    ::grpc::ClientContext named_index_context;
    inference::RepositoryIndexResponse listed;
    CHECK(f.stub->RepositoryIndex(&named_index_context, named_index, &listed).error_code() ==
          ::grpc::StatusCode::UNIMPLEMENTED);
  }
}

TEST_CASE("stop with a request in flight waits for its model, then returns") {
  fixture f;
  oip::inference_request r;
  r.inputs.push_back(
      *oip::tensor::from_values<std::int32_t>("IN", {1}, std::vector<std::int32_t>{1}));
  inference::ModelInferRequest message;
  REQUIRE(oip::grpc::encode_request(r, "waiter", "", contents_form::raw, message).ok());
  std::thread client([&] {
    ::grpc::ClientContext context;
    inference::ModelInferResponse response;
    const ::grpc::Status s = f.stub->ModelInfer(&context, message, &response);
    CHECK_FALSE(s.ok());
  });
  REQUIRE(oip::testing::wait_until([&] { return f.waiter->started.load() != 0; }));
  const auto began = std::chrono::steady_clock::now();
  f.server.stop(100ms);
  CHECK(std::chrono::steady_clock::now() - began < 5s);
  CHECK(f.waiter->saw_cancel.load());
  client.join();
}

TEST_CASE("system shared memory over gRPC: register, infer through regions, status, unregister") {
  oip::testing::shm_object inputs{"grpc_inputs", 128};
  oip::testing::shm_object outputs{"grpc_outputs", 128};
  inputs.put(0, oip::testing::iota(0, 16));
  inputs.put(64, std::vector<std::int32_t>(16, 2));
  oip::model_repository models;
  oip::executor workers{oip::executor_options{2, 64}};
  oip::server_options options;
  options.shared_memory = true;
  oip::inference_service service{models, workers, options};
  REQUIRE(models.add(oip::testing::make_simple()).ok());
  oip::grpc::server server{service, {"127.0.0.1", 0}};
  oip::result<std::uint16_t> port = server.start();
  REQUIRE(port);
  auto stub = inference::GRPCInferenceService::NewStub(::grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(*port), ::grpc::InsecureChannelCredentials()));

  for (const auto& [name, object] : {std::pair{"in", &inputs}, std::pair{"out", &outputs}}) {
    ::grpc::ClientContext context;
    inference::SystemSharedMemoryRegisterRequest request;
    request.set_name(name);
    request.set_key(object->key());
    request.set_byte_size(128);
    inference::SystemSharedMemoryRegisterResponse response;
    REQUIRE(stub->SystemSharedMemoryRegister(&context, request, &response).ok());
  }

  // INPUT0 from the region and INPUT1 raw: the raw contents hold INPUT1 alone, as in Triton.
  inference::ModelInferRequest message;
  message.set_model_name("simple");
  for (const char* name : {"INPUT0", "INPUT1"}) {
    auto* input = message.add_inputs();
    input->set_name(name);
    input->set_datatype("INT32");
    input->add_shape(1);
    input->add_shape(16);
  }
  auto& params = *message.mutable_inputs(0)->mutable_parameters();
  params["shared_memory_region"].set_string_param("in");
  params["shared_memory_byte_size"].set_int64_param(64);
  const std::vector<std::int32_t> threes(16, 3);
  message.add_raw_input_contents()->assign(reinterpret_cast<const char*>(threes.data()), 64);
  auto* wanted = message.add_outputs();
  wanted->set_name("OUTPUT0");
  (*wanted->mutable_parameters())["shared_memory_region"].set_string_param("out");
  (*wanted->mutable_parameters())["shared_memory_offset"].set_int64_param(64);
  (*wanted->mutable_parameters())["shared_memory_byte_size"].set_int64_param(64);
  message.add_outputs()->set_name("OUTPUT1");

  ::grpc::ClientContext context;
  inference::ModelInferResponse response;
  const ::grpc::Status done = stub->ModelInfer(&context, message, &response);
  REQUIRE_MESSAGE(done.ok(), done.error_message());
  REQUIRE(response.outputs_size() == 2);
  CHECK(response.outputs(0).name() == "OUTPUT0");
  CHECK(response.outputs(0).shape_size() == 2);
  CHECK(response.outputs(0).parameters().empty());
  REQUIRE(response.raw_output_contents_size() == 2);
  CHECK(response.raw_output_contents(0).empty());  // its bytes are in the region
  CHECK(response.raw_output_contents(1).size() == 64);
  CHECK(outputs.get<std::int32_t>(64, 16) == oip::testing::iota(3, 16));

  {
    ::grpc::ClientContext status_context;
    inference::SystemSharedMemoryStatusRequest request;
    inference::SystemSharedMemoryStatusResponse regions;
    REQUIRE(stub->SystemSharedMemoryStatus(&status_context, request, &regions).ok());
    REQUIRE(regions.regions().size() == 2);
    CHECK(regions.regions().at("in").key() == inputs.key());
    CHECK(regions.regions().at("out").byte_size() == 128);
  }
  {
    // A byte size that does not match the tensor, and too many raw contents.
    inference::ModelInferRequest wrong = message;
    (*wrong.mutable_inputs(0)->mutable_parameters())["shared_memory_byte_size"].set_int64_param(60);
    ::grpc::ClientContext wrong_context;
    inference::ModelInferResponse ignored;
    const ::grpc::Status refused = stub->ModelInfer(&wrong_context, wrong, &ignored);
    CHECK(refused.error_code() == ::grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(refused.error_message() ==
          "input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 64, got 60");
    wrong = message;
    (*wrong.mutable_outputs(0)->mutable_parameters())["shared_memory_byte_size"].set_int64_param(
        32);
    ::grpc::ClientContext small_context;
    const ::grpc::Status too_small = stub->ModelInfer(&small_context, wrong, &ignored);
    CHECK(too_small.error_code() == ::grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(too_small.error_message() ==
          "shared memory size specified with the request for output 'OUTPUT0' (32 bytes) should "
          "be at least 64 bytes to hold the results");
    wrong = message;
    wrong.add_raw_input_contents()->assign(64, '\0');
    ::grpc::ClientContext extra_context;
    CHECK(stub->ModelInfer(&extra_context, wrong, &ignored).error_code() ==
          ::grpc::StatusCode::INVALID_ARGUMENT);
  }
  {
    ::grpc::ClientContext unregister_context;
    inference::SystemSharedMemoryUnregisterRequest request;  // no name: every region
    inference::SystemSharedMemoryUnregisterResponse ignored;
    REQUIRE(stub->SystemSharedMemoryUnregister(&unregister_context, request, &ignored).ok());
    ::grpc::ClientContext infer_context;
    inference::ModelInferResponse refused;
    const ::grpc::Status gone = stub->ModelInfer(&infer_context, message, &refused);
    CHECK(gone.error_code() == ::grpc::StatusCode::NOT_FOUND);
    CHECK(gone.error_message() == "Unable to find shared memory region: 'in'");
  }
  {
    ::grpc::ClientContext cuda_context;
    inference::CudaSharedMemoryUnregisterRequest request;
    inference::CudaSharedMemoryUnregisterResponse ignored;
    CHECK(stub->CudaSharedMemoryUnregister(&cuda_context, request, &ignored).ok());
  }
  server.stop();
}

TEST_CASE("CUDA shared memory over gRPC: register, infer through regions, status, unregister") {
  auto device = std::make_shared<oip::testing::fake_device_memory>();
  const std::string in_handle = device->allocate(128);
  const std::string out_handle = device->allocate(64);
  const std::vector<std::int32_t> a = oip::testing::iota(0, 16);
  const std::vector<std::int32_t> b(16, 2);
  std::memcpy(device->block(0).data(), a.data(), 64);
  std::memcpy(device->block(0).data() + 64, b.data(), 64);
  oip::model_repository models;
  oip::executor workers{oip::executor_options{2, 64}};
  oip::server_options options;
  options.shared_memory = true;
  options.device_memory = device;
  oip::inference_service service{models, workers, options};
  REQUIRE(models.add(oip::testing::make_simple()).ok());
  oip::grpc::server server{service, {"127.0.0.1", 0}};
  oip::result<std::uint16_t> port = server.start();
  REQUIRE(port);
  auto stub = inference::GRPCInferenceService::NewStub(::grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(*port), ::grpc::InsecureChannelCredentials()));

  for (const auto& [name, handle, size] :
       {std::tuple{"in", in_handle, 128}, std::tuple{"out", out_handle, 64}}) {
    ::grpc::ClientContext context;
    inference::CudaSharedMemoryRegisterRequest request;
    request.set_name(name);
    request.set_raw_handle(handle);
    request.set_device_id(0);
    request.set_byte_size(static_cast<std::uint64_t>(size));
    inference::CudaSharedMemoryRegisterResponse response;
    const ::grpc::Status registered = stub->CudaSharedMemoryRegister(&context, request, &response);
    REQUIRE_MESSAGE(registered.ok(), registered.error_message());
  }
  {
    ::grpc::ClientContext context;
    inference::CudaSharedMemoryRegisterRequest request;
    request.set_name("bad");
    request.set_raw_handle("short");
    request.set_byte_size(8);
    inference::CudaSharedMemoryRegisterResponse response;
    const ::grpc::Status refused = stub->CudaSharedMemoryRegister(&context, request, &response);
    CHECK(refused.error_code() == ::grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(refused.error_message() ==
          "failed to register CUDA shared memory region 'bad': failed to open CUDA IPC handle: "
          "invalid argument");
  }
  {
    ::grpc::ClientContext context;
    inference::CudaSharedMemoryStatusRequest request;
    inference::CudaSharedMemoryStatusResponse regions;
    REQUIRE(stub->CudaSharedMemoryStatus(&context, request, &regions).ok());
    REQUIRE(regions.regions().size() == 2);
    CHECK(regions.regions().at("in").byte_size() == 128);
    CHECK(regions.regions().at("out").device_id() == 0);
  }
  {
    oip::inference_request r;
    r.shared_memory_inputs.push_back(
        {0, "INPUT0", oip::datatype::int32, {1, 16}, {}, {"in", 0, 64}});
    r.shared_memory_inputs.push_back(
        {1, "INPUT1", oip::datatype::int32, {1, 16}, {}, {"in", 64, 64}});
    r.outputs.push_back({"OUTPUT0", {}});
    r.outputs.back().parameters.set("shared_memory_region", std::string{"out"});
    r.outputs.back().parameters.set("shared_memory_byte_size", std::int64_t{64});
    inference::ModelInferRequest message;
    REQUIRE(
        oip::grpc::encode_request(r, "simple", "", oip::grpc::contents_form::raw, message).ok());
    ::grpc::ClientContext context;
    inference::ModelInferResponse response;
    const ::grpc::Status answered = stub->ModelInfer(&context, message, &response);
    REQUIRE_MESSAGE(answered.ok(), answered.error_message());
    std::vector<std::int32_t> sums(16);
    std::memcpy(sums.data(), device->block(1).data(), 64);
    CHECK(sums == oip::testing::iota(2, 16));
  }
  {
    ::grpc::ClientContext context;
    inference::CudaSharedMemoryUnregisterRequest request;  // no name: every CUDA region
    inference::CudaSharedMemoryUnregisterResponse ignored;
    REQUIRE(stub->CudaSharedMemoryUnregister(&context, request, &ignored).ok());
    CHECK(device->closed == 2);
  }
  server.stop();
}

TEST_CASE("LogSettings over gRPC: read, change, and Triton's refusals") {
  struct restore {
    ~restore() { oip::set_log_settings({}); }
  } restore_defaults;
  fixture f;
  const auto call = [&](const inference::LogSettingsRequest& request,
                        inference::LogSettingsResponse& response) {
    ::grpc::ClientContext context;
    return f.stub->LogSettings(&context, request, &response);
  };
  {
    inference::LogSettingsResponse response;
    REQUIRE(call({}, response).ok());
    const auto& settings = response.settings();
    CHECK(settings.at("log_file").string_param().empty());
    CHECK_FALSE(settings.at("log_info").bool_param());
    CHECK(settings.at("log_warning").bool_param());
    CHECK(settings.at("log_error").bool_param());
    CHECK(settings.at("log_verbose_level").uint32_param() == 0);
    CHECK(settings.at("log_format").string_param() == "default");
  }
  {
    inference::LogSettingsRequest request;
    (*request.mutable_settings())["log_info"].set_bool_param(true);
    (*request.mutable_settings())["log_format"].set_string_param("ISO8601");
    (*request.mutable_settings())["something_else"].set_uint32_param(3);
    inference::LogSettingsResponse response;
    REQUIRE(call(request, response).ok());
    CHECK(response.settings().at("log_info").bool_param());
    CHECK(response.settings().at("log_format").string_param() == "ISO8601");
    CHECK(oip::current_log_settings() ==
          oip::log_settings{true, true, true, 0, oip::log_format::iso8601});
  }
  const auto refused = [&](const std::string& key,
                           const inference::LogSettingsRequest::SettingValue& value) {
    inference::LogSettingsRequest request;
    (*request.mutable_settings())[key] = value;
    inference::LogSettingsResponse response;
    return call(request, response);
  };
  inference::LogSettingsRequest::SettingValue number;
  number.set_uint32_param(1);
  inference::LogSettingsRequest::SettingValue flag;
  flag.set_bool_param(true);
  inference::LogSettingsRequest::SettingValue text;
  text.set_string_param("loud");
  ::grpc::Status s = refused("log_warning", number);
  CHECK(s.error_code() == ::grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(s.error_message() == "expect boolean for 'log_warning'");
  s = refused("log_verbose_level", flag);
  CHECK(s.error_code() == ::grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(s.error_message() == "expect uint32 for 'log_verbose_level'");
  s = refused("log_format", number);
  CHECK(s.error_message() == "expect string for 'log_format'");
  s = refused("log_format", text);
  CHECK(s.error_code() == ::grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(s.error_message() == "invalid argument for log_format, got: loud");
  s = refused("log_file", {});  // present, even with no value
  CHECK(s.error_code() == ::grpc::StatusCode::UNIMPLEMENTED);
  CHECK(s.error_message() == "log file location can not be updated through network protocol");
  CHECK(oip::current_log_settings() ==
        oip::log_settings{true, true, true, 0, oip::log_format::iso8601});
}

TEST_CASE("TraceSetting over gRPC: global and per model, cleared by an empty list, refusals") {
  fixture f;
  const auto call = [&](const inference::TraceSettingRequest& request,
                        inference::TraceSettingResponse& response) {
    ::grpc::ClientContext context;
    return f.stub->TraceSetting(&context, request, &response);
  };
  const auto value = [](const inference::TraceSettingResponse& response, const std::string& key) {
    const auto& values = response.settings().at(key).value();
    return std::vector<std::string>(values.begin(), values.end());
  };
  {
    inference::TraceSettingResponse response;
    REQUIRE(call({}, response).ok());
    CHECK(value(response, "trace_level") == std::vector<std::string>{"OFF"});
    CHECK(value(response, "trace_rate") == std::vector<std::string>{"1000"});
    CHECK(value(response, "trace_count") == std::vector<std::string>{"-1"});
    CHECK(value(response, "log_frequency") == std::vector<std::string>{"0"});
    CHECK(value(response, "trace_file") == std::vector<std::string>{""});
    CHECK(value(response, "trace_mode") == std::vector<std::string>{"triton"});
  }
  {
    inference::TraceSettingRequest request;
    request.set_model_name("simple");
    (*request.mutable_settings())["trace_rate"].add_value("9");
    inference::TraceSettingResponse response;
    REQUIRE(call(request, response).ok());
    CHECK(value(response, "trace_rate") == std::vector<std::string>{"9"});
    inference::TraceSettingResponse global;
    REQUIRE(call({}, global).ok());
    CHECK(value(global, "trace_rate") == std::vector<std::string>{"1000"});
    (*request.mutable_settings())["trace_rate"].clear_value();  // no values: cleared
    REQUIRE(call(request, response).ok());
    CHECK(value(response, "trace_rate") == std::vector<std::string>{"1000"});
  }
  const auto refused = [&](const std::string& model, const std::string& key,
                           std::vector<std::string> values) {
    inference::TraceSettingRequest request;
    request.set_model_name(model);
    auto& setting = (*request.mutable_settings())[key];
    for (std::string& v : values) setting.add_value(std::move(v));
    inference::TraceSettingResponse response;
    return call(request, response);
  };
  ::grpc::Status s = refused("", "trace_rate", {"1", "2"});
  CHECK(s.error_code() == ::grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(s.error_message() == "expect only 1 value for 'trace_rate'");
  s = refused("", "trace_level", {"TIMESTAMPS"});  // this host gave no trace file
  CHECK(s.error_code() == ::grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(s.error_message() ==
        "Attempting to set invalid trace setting :trace file name is not given");
  s = refused("", "trace_file", {"/tmp/elsewhere"});
  CHECK(s.error_code() == ::grpc::StatusCode::UNIMPLEMENTED);
  s = refused("nope", "trace_rate", {"1"});
  CHECK(s.error_code() == ::grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(s.error_message() == "Request for unknown model : nope");
}

TEST_CASE("a restricted RPC needs its metadata entry: PERMISSION_DENIED in Triton's words") {
  oip::model_repository models;
  REQUIRE(models.add(oip::testing::make_simple()).ok());
  oip::executor workers{oip::executor_options{2, 64}};
  oip::inference_service service{models, workers};
  oip::grpc::server_options options{"127.0.0.1", 0};
  REQUIRE(options.restricted_protocol
              .add(*oip::parse_api_restriction("inference,model-repository:triton-grpc-protocol-"
                                               "infer-key=secret",
                                               "grpc-restricted-protocol"),
                   "protocol")
              .ok());
  oip::grpc::server server{service, options};
  const oip::result<std::uint16_t> port = server.start();
  REQUIRE(port);
  auto stub = inference::GRPCInferenceService::NewStub(::grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(*port), ::grpc::InsecureChannelCredentials()));
  const std::string refusal =
      "This protocol is restricted, expecting header 'triton-grpc-protocol-infer-key'";
  {
    ::grpc::ClientContext context;
    inference::ModelInferResponse response;
    const ::grpc::Status s =
        stub->ModelInfer(&context, simple_request(contents_form::raw), &response);
    CHECK(s.error_code() == ::grpc::StatusCode::PERMISSION_DENIED);
    CHECK(s.error_message() == refusal);
  }
  {
    ::grpc::ClientContext context;
    context.AddMetadata("triton-grpc-protocol-infer-key", "wrong");
    inference::RepositoryIndexResponse response;
    const ::grpc::Status s = stub->RepositoryIndex(&context, {}, &response);
    CHECK(s.error_code() == ::grpc::StatusCode::PERMISSION_DENIED);
  }
  {
    ::grpc::ClientContext context;
    auto stream = stub->ModelStreamInfer(&context);
    stream->Write(simple_request(contents_form::raw));
    stream->WritesDone();
    inference::ModelStreamInferResponse response;
    CHECK_FALSE(stream->Read(&response));
    const ::grpc::Status s = stream->Finish();
    CHECK(s.error_code() == ::grpc::StatusCode::PERMISSION_DENIED);
    CHECK(s.error_message() == refusal);
  }
  {
    ::grpc::ClientContext context;
    context.AddMetadata("triton-grpc-protocol-infer-key", "secret");
    inference::ModelInferResponse response;
    CHECK(stub->ModelInfer(&context, simple_request(contents_form::raw), &response).ok());
    CHECK(response.outputs_size() == 2);
  }
  {
    ::grpc::ClientContext context;
    context.AddMetadata("triton-grpc-protocol-infer-key", "secret");
    inference::RepositoryIndexResponse response;
    CHECK(stub->RepositoryIndex(&context, {}, &response).ok());
    CHECK(response.models_size() == 1);
  }
  {
    ::grpc::ClientContext context;  // health is not restricted here
    inference::ServerLiveResponse response;
    CHECK(stub->ServerLive(&context, {}, &response).ok());
  }
  server.stop();
}

TEST_CASE("traced requests carry the server's wait/read and send timestamps, unary and streamed") {
  oip::testing::temporary_trace_file file;
  oip::server_options options;
  options.trace.file = file.path;
  options.trace.level = oip::trace_level::timestamps;
  options.trace.rate = 1;
  oip::model_repository models;
  REQUIRE(models.add(oip::testing::make_simple()).ok());
  oip::executor workers{oip::executor_options{2, 64}};
  oip::inference_service service{models, workers, options};
  oip::grpc::server server{service, {"127.0.0.1", 0}};
  const oip::result<std::uint16_t> port = server.start();
  REQUIRE(port);
  auto stub = inference::GRPCInferenceService::NewStub(::grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(*port), ::grpc::InsecureChannelCredentials()));
  const std::vector<std::string> expected{
      "GRPC_WAITREAD_START", "GRPC_WAITREAD_END", "REQUEST_START", "QUEUE_START",
      "COMPUTE_START",       "COMPUTE_END",       "REQUEST_END",   "INFER_RESPONSE_COMPLETE",
      "GRPC_SEND_START",     "GRPC_SEND_END"};
  // A trace is written once its reply has gone, which the client may see first.
  const auto names_after = [&](std::size_t count) {
    std::vector<std::string> names;
    for (int i = 0; i < 200 && names.size() < count; ++i) {
      names = oip::testing::timestamp_names(file.read(file.path));
      if (names.size() < count) std::this_thread::sleep_for(10ms);
    }
    return names;
  };
  {
    ::grpc::ClientContext context;
    inference::ModelInferResponse response;
    REQUIRE(stub->ModelInfer(&context, simple_request(contents_form::raw), &response).ok());
  }
  CHECK(names_after(expected.size()) == expected);
  {
    ::grpc::ClientContext context;
    auto stream = stub->ModelStreamInfer(&context);
    REQUIRE(stream->Write(simple_request(contents_form::typed)));
    inference::ModelStreamInferResponse response;
    REQUIRE(stream->Read(&response));
    CHECK(response.error_message().empty());
    stream->WritesDone();
    CHECK(stream->Finish().ok());
  }
  const std::vector<std::string> both = names_after(2 * expected.size());
  REQUIRE(both.size() == 2 * expected.size());
  CHECK(std::vector<std::string>(both.begin() + static_cast<std::ptrdiff_t>(expected.size()),
                                 both.end()) == expected);
}

TEST_CASE("a request with no inputs is answered raw, as Triton answers every request") {
  fixture f;
  oip::model_config config;
  config.name = "constant";
  config.outputs = {{"OUT", oip::datatype::int32, {2}, {}}};
  REQUIRE(f.models
              .add(oip::make_model(
                  config,
                  [](const oip::inference_request&) -> oip::result<oip::model_output> {
                    const std::vector<std::int32_t> values{4, 5};
                    return oip::model_output{
                        {*oip::tensor::from_values<std::int32_t>("OUT", {2}, values)}, {}};
                  }))
              .ok());
  inference::ModelInferRequest request;
  request.set_model_name("constant");
  ::grpc::ClientContext context;
  inference::ModelInferResponse response;
  REQUIRE(f.stub->ModelInfer(&context, request, &response).ok());
  REQUIRE(response.raw_output_contents_size() == 1);  // Triton's C++ client reads it unchecked
  CHECK(response.raw_output_contents(0).size() == 8);
  CHECK_FALSE(response.outputs(0).has_contents());
}

TEST_CASE("the port is the server's own unless reuse_port says otherwise; configure is called") {
  oip::model_repository models;
  oip::executor workers{oip::executor_options{1, 4}};
  oip::inference_service service{models, workers};
  bool configured = false;
  oip::grpc::server_options options{"127.0.0.1", 0};
  options.configure = [&configured](::grpc::ServerBuilder& builder) {
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 20'000);
    configured = true;
  };
  oip::grpc::server first{service, options};
  const oip::result<std::uint16_t> port = first.start();
  REQUIRE(port);
  CHECK(configured);

  oip::grpc::server second{service, {"127.0.0.1", *port}};
  const oip::result<std::uint16_t> refused = second.start();
  REQUIRE_FALSE(refused);
  CHECK(refused.error().message() ==
        "cannot listen for gRPC on 127.0.0.1:" + std::to_string(*port));
}

TEST_CASE("grpc.health.v1.Health/Check answers the server's readiness (Kubernetes' gRPC probes)") {
  oip::model_repository models;
  struct flaky : oip::testing::waiter {
    [[nodiscard]] bool ready() const noexcept override { return is_ready.load(); }
    std::atomic<bool> is_ready{true};
  };
  auto model = std::make_shared<flaky>();
  REQUIRE(models.add(model).ok());
  oip::executor workers{oip::executor_options{1, 4}};
  oip::inference_service service{models, workers};
  oip::grpc::server_options options{"127.0.0.1", 0};
  REQUIRE(options.restricted_protocol
              .add(*oip::parse_api_restriction("health:probe-key=yes", "grpc-restricted-protocol"),
                   "protocol")
              .ok());
  oip::grpc::server server{service, options};
  const oip::result<std::uint16_t> port = server.start();
  REQUIRE(port);
  ::grpc::GenericStub generic{::grpc::CreateChannel("127.0.0.1:" + std::to_string(*port),
                                                    ::grpc::InsecureChannelCredentials())};
  // The messages by hand, as a probe's wire bytes: HealthCheckRequest{service} is field 1, a
  // string; HealthCheckResponse{status} field 1, a varint (SERVING 1, NOT_SERVING 2).
  const auto call = [&](const std::string& method, const std::string& name, bool with_key,
                        std::string& reply) {
    ::grpc::ClientContext context;
    if (with_key) context.AddMetadata("probe-key", "yes");
    std::string request;
    if (!name.empty()) request = std::string{'\x0a', static_cast<char>(name.size())} + name;
    ::grpc::Slice slice{request};
    const ::grpc::ByteBuffer request_bytes{&slice, 1};
    ::grpc::ByteBuffer reply_bytes;
    std::promise<::grpc::Status> done;
    generic.UnaryCall(&context, method, ::grpc::StubOptions{}, &request_bytes, &reply_bytes,
                      [&done](::grpc::Status s) { done.set_value(s); });
    const ::grpc::Status s = done.get_future().get();
    std::vector<::grpc::Slice> slices;
    reply.clear();
    if (s.ok() && reply_bytes.Dump(&slices).ok()) {
      for (const ::grpc::Slice& part : slices) {
        reply.append(reinterpret_cast<const char*>(part.begin()), part.size());
      }
    }
    return s;
  };
  const std::string check = "/grpc.health.v1.Health/Check";
  const std::string serving{'\x08', '\x01'};
  const std::string not_serving{'\x08', '\x02'};
  std::string reply;
  REQUIRE(call(check, "", true, reply).ok());
  CHECK(reply == serving);
  REQUIRE(call(check, "inference.GRPCInferenceService", true, reply).ok());
  CHECK(reply == serving);
  model->is_ready = false;
  REQUIRE(call(check, "", true, reply).ok());
  CHECK(reply == not_serving);
  model->is_ready = true;
  service.begin_shutdown();  // NOT_SERVING as soon as a shutdown begins, with every model ready
  REQUIRE(call(check, "", true, reply).ok());
  CHECK(reply == not_serving);
  const ::grpc::Status refused = call(check, "", false, reply);
  CHECK(refused.error_code() == ::grpc::StatusCode::PERMISSION_DENIED);
  CHECK(refused.error_message() == "This protocol is restricted, expecting header 'probe-key'");
  CHECK(call("/grpc.health.v1.Health/Watch", "", true, reply).error_code() ==
        ::grpc::StatusCode::UNIMPLEMENTED);
  CHECK(call("/no.such.Service/Method", "", true, reply).error_code() ==
        ::grpc::StatusCode::UNIMPLEMENTED);
}

TEST_CASE("a message above the service's body limit is refused before it is read") {
  oip::model_repository models;
  REQUIRE(models.add(oip::testing::make_simple()).ok());
  oip::executor workers{oip::executor_options{1, 16}};
  oip::server_options options;
  options.bounds.max_body_bytes = 4096;
  oip::inference_service service{models, workers, options};
  const auto call_with_padding = [](std::uint16_t port, std::size_t padding) {
    auto stub = inference::GRPCInferenceService::NewStub(::grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(port), ::grpc::InsecureChannelCredentials()));
    inference::ModelInferRequest message = simple_request(contents_form::raw);
    (*message.mutable_parameters())["padding"].set_string_param(std::string(padding, 'x'));
    ::grpc::ClientContext context;
    inference::ModelInferResponse response;
    return stub->ModelInfer(&context, message, &response).error_code();
  };
  SUBCASE("unset: the body limit") {
    oip::grpc::server server{service, {"127.0.0.1", 0}};
    oip::result<std::uint16_t> port = server.start();
    REQUIRE(port);
    CHECK(call_with_padding(*port, 100) == ::grpc::StatusCode::OK);
    CHECK(call_with_padding(*port, 5000) == ::grpc::StatusCode::RESOURCE_EXHAUSTED);
  }
  SUBCASE("set: the host's own") {
    oip::grpc::server server{service,
                             {.address = "127.0.0.1", .port = 0, .max_message_bytes = 1 << 20}};
    oip::result<std::uint16_t> port = server.start();
    REQUIRE(port);
    CHECK(call_with_padding(*port, 5000) == ::grpc::StatusCode::OK);
  }
}

TEST_CASE(
    "the memory budget: a message that would pass it is UNAVAILABLE, one above it all "
    "RESOURCE_EXHAUSTED, unary or streamed") {
  oip::model_repository models;
  oip::executor workers{oip::executor_options{2, 64}};
  oip::server_options options;
  options.bounds.max_inflight_bytes = std::size_t{64} << 10U;
  oip::inference_service service{models, workers, options};
  REQUIRE(models.add(oip::testing::make_simple()).ok());
  // grpc's own quota (by default the budget) set well above it: the service's budget refuses.
  oip::grpc::server server{service,
                           {.address = "127.0.0.1", .port = 0, .memory_quota_bytes = 64 << 20}};
  oip::result<std::uint16_t> port = server.start();
  REQUIRE(port);
  auto stub = inference::GRPCInferenceService::NewStub(::grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(*port), ::grpc::InsecureChannelCredentials()));

  // The same request with 100 KiB of parameters (over the whole budget of 64 KiB: no retry can
  // pass it) and with 30 KiB (over what is left while 40 KiB are held elsewhere: a retry can).
  inference::ModelInferRequest small = simple_request(contents_form::raw);
  const auto padded = [&](std::size_t bytes) {
    inference::ModelInferRequest request = small;
    (*request.mutable_parameters())["padding"].set_string_param(std::string(bytes, 'x'));
    return request;
  };
  const inference::ModelInferRequest too_large = padded(std::size_t{100} << 10U);
  const inference::ModelInferRequest large = padded(std::size_t{30} << 10U);
  const auto infer = [&](const inference::ModelInferRequest& request) {
    ::grpc::ClientContext context;
    inference::ModelInferResponse response;
    return stub->ModelInfer(&context, request, &response);
  };
  {
    const ::grpc::Status s = infer(too_large);
    CHECK(s.error_code() == ::grpc::StatusCode::RESOURCE_EXHAUSTED);
    CHECK(s.error_message().find("above the 65536 bytes that the server holds in flight at most") !=
          std::string::npos);
  }
  oip::result<oip::memory_budget::lease> elsewhere = service.memory().reserve(40U << 10U);
  REQUIRE(elsewhere);
  {
    const ::grpc::Status s = infer(large);
    CHECK(s.error_code() == ::grpc::StatusCode::UNAVAILABLE);
    CHECK(s.error_message().find("limit of 65536 bytes; try again later") != std::string::npos);
  }
  CHECK(infer(small).ok());
  {
    ::grpc::ClientContext context;
    auto stream = stub->ModelStreamInfer(&context);
    REQUIRE(stream->Write(too_large));
    REQUIRE(stream->Write(large));
    REQUIRE(stream->Write(small));
    inference::ModelStreamInferResponse reply;
    REQUIRE(stream->Read(&reply));
    CHECK(reply.error_message().find("above the 65536 bytes") != std::string::npos);
    REQUIRE(stream->Read(&reply));
    CHECK(reply.error_message().find("try again later") != std::string::npos);
    REQUIRE(stream->Read(&reply));
    CHECK(reply.error_message().empty());
    CHECK(reply.infer_response().model_name() == "simple");
    stream->WritesDone();
    CHECK(stream->Finish().ok());
  }
  elsewhere->release();
  CHECK(infer(large).ok());
  CHECK(oip::testing::wait_until([&] { return service.memory().held() == 0; }));

  // With grpc's quota at its default, the budget, grpc itself refuses what passes it.
  oip::grpc::server bounded{service, {"127.0.0.1", 0}};
  oip::result<std::uint16_t> bounded_port = bounded.start();
  REQUIRE(bounded_port);
  auto bounded_stub = inference::GRPCInferenceService::NewStub(::grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(*bounded_port), ::grpc::InsecureChannelCredentials()));
  ::grpc::ClientContext refused;
  inference::ModelInferResponse nothing;
  CHECK(bounded_stub->ModelInfer(&refused, too_large, &nothing).error_code() ==
        ::grpc::StatusCode::RESOURCE_EXHAUSTED);
}

TEST_CASE("every RPC of each restricted category is refused without its entry, and only those") {
  struct rpc {
    const char* method;
    oip::api_category category;
  };
  using oip::api_category;
  const std::vector<rpc> rpcs = {
      {"/inference.GRPCInferenceService/ServerLive", api_category::health},
      {"/inference.GRPCInferenceService/ServerReady", api_category::health},
      {"/inference.GRPCInferenceService/ModelReady", api_category::health},
      {"/grpc.health.v1.Health/Check", api_category::health},
      {"/inference.GRPCInferenceService/ServerMetadata", api_category::metadata},
      {"/inference.GRPCInferenceService/ModelMetadata", api_category::metadata},
      {"/inference.GRPCInferenceService/ModelInfer", api_category::inference},
      {"/inference.GRPCInferenceService/ModelStreamInfer", api_category::inference},
      {"/inference.GRPCInferenceService/ModelConfig", api_category::model_config},
      {"/inference.GRPCInferenceService/ModelStatistics", api_category::statistics},
      {"/inference.GRPCInferenceService/RepositoryIndex", api_category::model_repository},
      {"/inference.GRPCInferenceService/RepositoryModelLoad", api_category::model_repository},
      {"/inference.GRPCInferenceService/RepositoryModelUnload", api_category::model_repository},
      {"/inference.GRPCInferenceService/SystemSharedMemoryStatus", api_category::shared_memory},
      {"/inference.GRPCInferenceService/SystemSharedMemoryRegister", api_category::shared_memory},
      {"/inference.GRPCInferenceService/SystemSharedMemoryUnregister", api_category::shared_memory},
      {"/inference.GRPCInferenceService/CudaSharedMemoryStatus", api_category::shared_memory},
      {"/inference.GRPCInferenceService/CudaSharedMemoryRegister", api_category::shared_memory},
      {"/inference.GRPCInferenceService/CudaSharedMemoryUnregister", api_category::shared_memory},
      {"/inference.GRPCInferenceService/LogSettings", api_category::logging},
      {"/inference.GRPCInferenceService/TraceSetting", api_category::trace},
  };
  oip::model_repository models;
  REQUIRE(models.add(oip::testing::make_simple()).ok());
  oip::executor workers{oip::executor_options{1, 16}};
  oip::inference_service service{models, workers};
  for (std::size_t c = 0; c < oip::api_category_count; ++c) {
    const auto restricted = static_cast<api_category>(c);
    CAPTURE(oip::to_string(restricted));
    oip::grpc::server_options options{"127.0.0.1", 0};
    REQUIRE(options.restricted_protocol.add({{restricted}, "key", "value"}, "protocol").ok());
    oip::grpc::server server{service, options};
    const oip::result<std::uint16_t> port = server.start();
    REQUIRE(port);
    ::grpc::GenericStub generic{::grpc::CreateChannel("127.0.0.1:" + std::to_string(*port),
                                                      ::grpc::InsecureChannelCredentials())};
    // An empty message (every field at its default) to each, as a unary call on the wire.
    const auto call = [&](const std::string& method, bool with_key) {
      ::grpc::ClientContext context;
      if (with_key) context.AddMetadata("key", "value");
      ::grpc::Slice nothing{std::string{}};
      const ::grpc::ByteBuffer request{&nothing, 1};
      ::grpc::ByteBuffer reply;
      std::promise<::grpc::Status> done;
      generic.UnaryCall(&context, method, ::grpc::StubOptions{}, &request, &reply,
                        [&done](::grpc::Status s) { done.set_value(s); });
      return done.get_future().get();
    };
    for (const rpc& r : rpcs) {
      CAPTURE(r.method);
      const ::grpc::Status without = call(r.method, false);
      CHECK((without.error_code() == ::grpc::StatusCode::PERMISSION_DENIED) ==
            (r.category == restricted));
      CHECK(call(r.method, true).error_code() != ::grpc::StatusCode::PERMISSION_DENIED);
    }
    server.stop(std::chrono::seconds{1});
  }
}

TEST_CASE("triton_grpc_error: a stream's first failed request ends it with its status") {
  fixture f;
  // A decoupled model that sends two responses, then fails.
  oip::model_config c;
  c.name = "twice_then_fail";
  c.decoupled = true;
  c.inputs = {{"IN", oip::datatype::int32, {1}, {}}};
  c.outputs = {{"OUT", oip::datatype::int32, {1}, {}}};
  REQUIRE(f.models
              .add(oip::make_model(c,
                                   [](oip::inference_call& call) -> oip::result<oip::model_output> {
                                     for (std::int32_t i = 0; i < 2; ++i) {
                                       const oip::status sent = call.send(oip::model_output{
                                           {*oip::tensor::from_values<std::int32_t>(
                                               "OUT", {1}, std::span<const std::int32_t>(&i, 1))},
                                           {}});
                                       if (!sent.ok()) return sent;
                                     }
                                     return oip::status{oip::errc::invalid_argument, "no third"};
                                   }))
              .ok());
  inference::ModelInferRequest missing = simple_request(contents_form::raw);
  missing.set_model_name("missing");

  SUBCASE("a request refused: the replies before it, then its status") {
    ::grpc::ClientContext context;
    context.AddMetadata("triton_grpc_error", "true");
    auto stream = f.stub->ModelStreamInfer(&context);
    REQUIRE(stream->Write(simple_request(contents_form::raw)));
    REQUIRE(stream->Write(missing));
    (void)stream->Write(simple_request(contents_form::raw));  // may find the stream ended
    stream->WritesDone();
    inference::ModelStreamInferResponse reply;
    REQUIRE(stream->Read(&reply));
    CHECK(reply.error_message().empty());
    CHECK(reply.infer_response().raw_output_contents_size() == 2);
    CHECK_FALSE(stream->Read(&reply));
    const ::grpc::Status s = stream->Finish();
    CHECK(s.error_code() == ::grpc::StatusCode::NOT_FOUND);
    CHECK(s.error_message() == "Request for unknown model: 'missing' is not found");
  }
  SUBCASE("a decoupled model that fails after two responses") {
    ::grpc::ClientContext context;
    context.AddMetadata("triton_grpc_error", "true");
    auto stream = f.stub->ModelStreamInfer(&context);
    REQUIRE(stream->Write(one_in("twice_then_fail")));
    stream->WritesDone();
    inference::ModelStreamInferResponse reply;
    for (int i = 0; i < 2; ++i) {
      REQUIRE(stream->Read(&reply));
      CHECK(reply.error_message().empty());
      CHECK(reply.infer_response().raw_output_contents_size() == 1);
    }
    CHECK_FALSE(stream->Read(&reply));
    const ::grpc::Status s = stream->Finish();
    CHECK(s.error_code() == ::grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(s.error_message() == "no third");
  }
  SUBCASE("without the metadata, or not \"true\", errors are replies and the stream goes on") {
    for (const bool other_value : {false, true}) {
      CAPTURE(other_value);
      ::grpc::ClientContext context;
      if (other_value) context.AddMetadata("triton_grpc_error", "false");
      auto stream = f.stub->ModelStreamInfer(&context);
      REQUIRE(stream->Write(missing));
      REQUIRE(stream->Write(simple_request(contents_form::raw)));
      stream->WritesDone();
      inference::ModelStreamInferResponse reply;
      REQUIRE(stream->Read(&reply));
      CHECK(reply.error_message() == "Request for unknown model: 'missing' is not found");
      REQUIRE(stream->Read(&reply));
      CHECK(reply.error_message().empty());
      CHECK_FALSE(stream->Read(&reply));
      CHECK(stream->Finish().ok());
    }
  }
}

TEST_CASE("a stream cancelled while replies are pending frees them all (CVE-2025-23322's class)") {
  oip::model_repository models;
  REQUIRE(models.add(oip::testing::make_simple()).ok());
  // A decoupled model that answers each request with 200 responses, as fast as it may.
  oip::model_config burst_config;
  burst_config.name = "burst";
  burst_config.decoupled = true;
  burst_config.inputs = {{"IN", oip::datatype::int32, {1}, {}}};
  burst_config.outputs = {{"OUT", oip::datatype::int32, {1}, {}}};
  REQUIRE(models
              .add(oip::make_model(burst_config,
                                   [](oip::inference_call& call) -> oip::result<oip::model_output> {
                                     for (std::int32_t i = 0; i < 200; ++i) {
                                       const oip::status sent = call.send(oip::model_output{
                                           {*oip::tensor::from_values<std::int32_t>(
                                               "OUT", {1}, std::span<const std::int32_t>(&i, 1))},
                                           {}});
                                       if (!sent.ok()) return sent;
                                     }
                                     return oip::status{oip::errc::unavailable, "not reached"};
                                   }))
              .ok());
  oip::executor workers{oip::executor_options{4, 256}};
  oip::inference_service service{models, workers};
  served_over_grpc served{service};
  auto& stub = served.stub;
  const inference::ModelInferRequest burst = one_in("burst");
  for (int round = 0; round < 20; ++round) {
    CAPTURE(round);
    ::grpc::ClientContext context;
    auto stream = stub->ModelStreamInfer(&context);
    for (int i = 0; i < 4; ++i) REQUIRE(stream->Write(burst));
    for (int i = 0; i < 8; ++i) REQUIRE(stream->Write(simple_request(contents_form::raw)));
    inference::ModelStreamInferResponse reply;
    REQUIRE(stream->Read(&reply));  // replies are flowing, most still to come
    context.TryCancel();
    while (stream->Read(&reply)) {
    }
    CHECK(stream->Finish().error_code() == ::grpc::StatusCode::CANCELLED);
  }
  // Every request ended and let go of its memory; the server goes on.
  CHECK(oip::testing::wait_until([&] { return service.memory().held() == 0; }));
  ::grpc::ClientContext context;
  inference::ModelInferResponse response;
  CHECK(stub->ModelInfer(&context, simple_request(contents_form::raw), &response).ok());
}

TEST_CASE("a stream stops reading while 1024 requests wait for their replies, then goes on") {
  fixture f;
  // The first request's model waits until the test lets it answer, and the replies of those
  // after it, answered at once, wait behind it. The stream reads 1,023 of them and no more,
  // however many the client sends, until the first reply is written; the replies waiting count
  // against the memory budget.
  std::atomic<bool> let_through{false};
  oip::model_config gate;
  gate.name = "gate";
  gate.inputs = {{"IN", oip::datatype::int32, {1}, {}}};
  gate.outputs = {{"OUT", oip::datatype::int32, {1}, {}}};
  REQUIRE(
      f.models
          .add(oip::make_model(
              gate,
              [&let_through](const oip::inference_request& r) -> oip::result<oip::model_output> {
                while (!let_through.load()) std::this_thread::sleep_for(1ms);
                const std::int32_t in = r.inputs.at(0).at<std::int32_t>(0);
                return oip::model_output{{*oip::tensor::from_values<std::int32_t>(
                                             "OUT", {1}, std::span<const std::int32_t>(&in, 1))},
                                         {}};
              }))
          .ok());
  inference::ModelInferRequest first = one_in("gate");
  first.set_id("slow");
  constexpr int sent = 1500;
  ::grpc::ClientContext context;
  auto stream = f.stub->ModelStreamInfer(&context);
  REQUIRE(stream->Write(first));
  auto writer = std::async(std::launch::async, [&] {
    const inference::ModelInferRequest quick = simple_request(contents_form::raw);
    for (int i = 0; i < sent; ++i) {
      if (!stream->Write(quick)) return false;
    }
    return stream->WritesDone();
  });
  const auto answered = [&]() -> std::uint64_t {
    const auto stats = f.service.statistics("simple", std::nullopt);
    return stats && !stats->empty() ? stats->front().inference_count : 0;
  };
  CHECK(oip::testing::wait_until([&] { return answered() >= 1023; }));
  std::this_thread::sleep_for(200ms);
  CHECK(answered() == 1023);
  // Each waiting reply holds its two 64-byte outputs at least.
  CHECK(f.service.memory().held() >= 1023 * 128);

  let_through.store(true);
  inference::ModelStreamInferResponse reply;
  REQUIRE(stream->Read(&reply));
  CHECK(reply.infer_response().id() == "slow");
  CHECK(reply.error_message().empty());
  int quick_replies = 0;
  int failed = 0;
  while (stream->Read(&reply)) {
    ++quick_replies;
    if (!reply.error_message().empty() || reply.infer_response().outputs_size() != 2) ++failed;
  }
  CHECK(quick_replies == sent);
  CHECK(failed == 0);
  CHECK(writer.get());
  CHECK(stream->Finish().ok());
  CHECK(answered() == sent);
  CHECK(oip::testing::wait_until([&] { return f.service.memory().held() == 0; }));
}

TEST_CASE("a stream whose client reads nothing frees the decoupled model's thread in time") {
  // A decoupled model that sends 1 MiB responses until a send fails, and says why.
  oip::model_config flood_config;
  flood_config.name = "flood";
  flood_config.decoupled = true;
  flood_config.inputs = {{"IN", oip::datatype::int32, {1}, {}}};
  flood_config.outputs = {{"OUT", oip::datatype::uint8, {-1}, {}}};
  std::promise<oip::status> stopped;
  oip::model_repository models;
  REQUIRE(models
              .add(oip::make_model(
                  flood_config,
                  [&stopped](oip::inference_call& call) -> oip::result<oip::model_output> {
                    const std::vector<std::uint8_t> block(std::size_t{1} << 20, 7);
                    for (int i = 0; i < 4096; ++i) {
                      oip::status sent = call.send(oip::model_output{
                          {*oip::tensor::from_values<std::uint8_t>(
                              "OUT", {static_cast<std::int64_t>(block.size())}, block)},
                          {}});
                      if (!sent.ok()) {
                        stopped.set_value(sent);
                        return sent;
                      }
                    }
                    stopped.set_value(oip::status{});
                    return oip::status{oip::errc::internal, "every send went through"};
                  }))
              .ok());
  oip::executor workers{oip::executor_options{2, 16}};
  oip::server_options options;
  options.bounds.max_unsent_responses = 2;
  options.bounds.max_unread_wait = 300ms;
  oip::inference_service service{models, workers, options};
  served_over_grpc served{service};
  const inference::ModelInferRequest request = one_in("flood");
  ::grpc::ClientContext context;
  auto stream = served.stub->ModelStreamInfer(&context);
  REQUIRE(stream->Write(request));
  // The client reads nothing: the transport's window fills, then two responses wait unwritten,
  // then the model's next send waits, and gives up once no response has been written for 300 ms.
  std::future<oip::status> why = stopped.get_future();
  REQUIRE(why.wait_for(20s) == std::future_status::ready);
  const oip::status sent = why.get();
  CHECK(sent.code() == oip::errc::unavailable);
  CHECK(sent.message().find("limits::max_unread_wait") != std::string::npos);

  // Reading now, the client gets what was sent, then the request's end with that error.
  stream->WritesDone();
  inference::ModelStreamInferResponse reply;
  int responses = 0;
  std::string error;
  while (stream->Read(&reply)) {
    if (!reply.error_message().empty()) {
      error = reply.error_message();
    } else {
      ++responses;
    }
  }
  CHECK(stream->Finish().ok());
  CHECK(responses >= 2);
  CHECK(responses < 4096);
  CHECK(error == sent.message());
  CHECK(oip::testing::wait_until([&] { return service.memory().held() == 0; }));
}

TEST_CASE("gRPC connection bounds: concurrent calls per connection, idle connections closed") {
  oip::model_repository models;
  REQUIRE(models.add(oip::testing::make_simple()).ok());
  oip::executor workers{oip::executor_options{2, 16}};
  oip::inference_service service{models, workers};
  oip::grpc::server server{service,
                           {.address = "127.0.0.1",
                            .port = 0,
                            .max_concurrent_streams = 1,
                            .max_connection_idle = std::chrono::milliseconds{300}}};
  const oip::result<std::uint16_t> port = server.start();
  REQUIRE(port);
  const auto channel = ::grpc::CreateChannel("127.0.0.1:" + std::to_string(*port),
                                             ::grpc::InsecureChannelCredentials());
  auto stub = inference::GRPCInferenceService::NewStub(channel);
  {
    // One stream open takes the connection's one call: another waits, here past its deadline.
    ::grpc::ClientContext streaming;
    auto stream = stub->ModelStreamInfer(&streaming);
    REQUIRE(stream->Write(simple_request(contents_form::raw)));
    inference::ModelStreamInferResponse reply;
    REQUIRE(stream->Read(&reply));
    ::grpc::ClientContext waiting;
    waiting.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds{300});
    inference::ModelInferResponse response;
    CHECK(stub->ModelInfer(&waiting, simple_request(contents_form::raw), &response).error_code() ==
          ::grpc::StatusCode::DEADLINE_EXCEEDED);
    stream->WritesDone();
    CHECK(stream->Finish().ok());
  }
  ::grpc::ClientContext after;
  inference::ModelInferResponse response;
  CHECK(stub->ModelInfer(&after, simple_request(contents_form::raw), &response).ok());
  // Without calls, the server closes the connection: the channel goes idle.
  CHECK(oip::testing::wait_until([&] { return channel->GetState(false) == GRPC_CHANNEL_IDLE; },
                                 std::chrono::seconds{10}));
}

namespace {

// Locks two fresh mutexes in one order, then in the other (one thread, so no deadlock), and
// returns what abseil wrote to stderr meanwhile: a report of a potential deadlock when its
// detection is on.
std::string what_abseil_says_of_a_lock_order_inversion() {
  std::FILE* captured = std::tmpfile();
  REQUIRE(captured != nullptr);
  std::fflush(stderr);
  const int saved = dup(STDERR_FILENO);
  dup2(fileno(captured), STDERR_FILENO);
  {
    absl::Mutex a;
    absl::Mutex b;
    a.Lock();
    b.Lock();
    b.Unlock();
    a.Unlock();
    b.Lock();
    a.Lock();
    a.Unlock();
    b.Unlock();
  }
  std::fflush(stderr);
  dup2(saved, STDERR_FILENO);
  close(saved);
  std::string said;
  std::rewind(captured);
  for (int c = std::fgetc(captured); c != EOF; c = std::fgetc(captured)) {
    said += static_cast<char>(c);
  }
  std::fclose(captured);
  return said;
}

}  // namespace

// Turning abseil's detection on while other threads hold mutexes that they locked with it off
// makes their unlocks abort ("thread releasing lock it does not hold"), and the servers of the
// tests before this one leave gRPC's threads running with it off: this test runs alone, in a
// process of its own (ctest's grpc_server_deadlock_detection, which sets the variable).
TEST_CASE("a started server turns off abseil's debug-build deadlock detection, unless kept" *
          doctest::skip(std::getenv("OIP_TEST_ALONE") == nullptr)) {
  for (const bool keep : {true, false}) {
    CAPTURE(keep);
    // Reported rather than fatal, so that a failure is a failed check.
    absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kReport);
    oip::model_repository models;
    oip::executor workers{oip::executor_options{1, 16}};
    oip::inference_service service{models, workers};
    oip::grpc::server server{
        service, {.address = "127.0.0.1", .port = 0, .keep_abseil_deadlock_detection = keep}};
    REQUIRE(server.start());
    const std::string said = what_abseil_says_of_a_lock_order_inversion();
    CHECK((said.find("Potential Mutex deadlock") != std::string::npos) == keep);
    server.stop(std::chrono::seconds{1});
  }
}
