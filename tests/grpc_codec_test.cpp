#include "fuzz/request_readers.hpp"
#include "grpc/request_bytes.hpp"
#include "grpc/response_bytes.hpp"
#include "shm_object.hpp"
#include "test_support.hpp"

#include <oip/grpc/codec.hpp>
#include <oip/shared_memory.hpp>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

namespace {

using oip::datatype;
using oip::grpc::contents_form;

// A tensor of `type` with random values, shape [2, 3].
oip::tensor random_tensor(datatype type, std::mt19937& rng) {
  const oip::shape_type shape{2, 3};
  std::uniform_int_distribution<int> byte{0, 255};
  if (type == datatype::bytes) {
    std::vector<std::string> text{"a", "", std::string("\0x", 2), "\xff\xfe", "long text", "z"};
    std::vector<std::string_view> views(text.begin(), text.end());
    return *oip::tensor::from_strings("t", shape, views);
  }
  std::vector<std::byte> bytes(6 * oip::element_size(type));
  for (std::byte& b : bytes) b = static_cast<std::byte>(byte(rng));
  if (type == datatype::boolean) {
    for (std::byte& b : bytes) b = static_cast<std::byte>(std::to_integer<int>(b) & 1);
  }
  return *oip::tensor::make("t", type, shape, *oip::buffer::copy_of(bytes));
}

// Client encode, server decode.
oip::result<oip::inference_request> through_message(const oip::inference_request& request,
                                                    contents_form form) {
  inference::ModelInferRequest message;
  REQUIRE(oip::grpc::encode_request(request, "m", "", form, message).ok());
  return oip::grpc::decode_request(message);
}

oip::inference_request request_with(oip::tensor t) {
  oip::inference_request r;
  r.inputs.push_back(std::move(t));
  return r;
}

inference::ModelInferRequest one_input(const std::string& type, std::vector<std::int64_t> shape) {
  inference::ModelInferRequest message;
  message.set_model_name("simple");
  auto* input = message.add_inputs();
  input->set_name("INPUT0");
  input->set_datatype(type);
  for (std::int64_t d : shape) input->add_shape(d);
  return message;
}

std::string error_of(inference::ModelInferRequest& message) {
  oip::result<oip::inference_request> r = oip::grpc::decode_request(message);
  REQUIRE_FALSE(r);
  CHECK(r.error().grpc_status() == oip::grpc_code::invalid_argument);
  return r.error().message();
}

}  // namespace

TEST_CASE("an input in device memory is not encoded: the encoder reads inputs on the host") {
  const std::string bytes(16, '\0');  // stands in for device memory: nothing reads it
  oip::inference_request request;
  request.inputs.push_back(*oip::tensor::in_device_memory("x", oip::datatype::int32, {4},
                                                          oip::buffer::from_string(bytes), 0));
  inference::ModelInferRequest message;
  const oip::status s = oip::grpc::encode_request(request, "m", "", contents_form::raw, message);
  CHECK(s.http_status() == 400);
  CHECK(s.message() ==
        "input 'x' is in the memory of CUDA device 0; it must be in host memory here");
}

TEST_CASE("a sequence id sent as a negative int64_param is the uint64 it stands for") {
  // Triton's C++ client sends its uint64 sequence id in int64_param, so ids from 2^63 come
  // negative; Triton reads them back as unsigned.
  inference::ModelInferRequest message;
  message.set_model_name("m");
  (*message.mutable_parameters())["sequence_id"].set_int64_param(-2);
  oip::result<oip::inference_request> r = oip::grpc::decode_request(message);
  REQUIRE(r);
  const auto* id = r->parameters.get<std::uint64_t>("sequence_id");
  REQUIRE(id != nullptr);
  CHECK(*id == std::numeric_limits<std::uint64_t>::max() - 1);
  (*message.mutable_parameters())["sequence_id"].set_int64_param(5);
  CHECK(*oip::grpc::decode_request(message)->parameters.get<std::int64_t>("sequence_id") == 5);
}

TEST_CASE("every datatype survives a round trip, typed and raw, bit for bit") {
  std::mt19937 rng{17};
  for (datatype type :
       {datatype::boolean, datatype::uint8, datatype::uint16, datatype::uint32, datatype::uint64,
        datatype::int8, datatype::int16, datatype::int32, datatype::int64, datatype::fp16,
        datatype::bf16, datatype::fp32, datatype::fp64, datatype::bytes}) {
    CAPTURE(oip::to_string(type));
    const oip::tensor t = random_tensor(type, rng);
    for (const contents_form form : {contents_form::typed, contents_form::raw}) {
      oip::result<oip::inference_request> back = through_message(request_with(t), form);
      REQUIRE(back);
      REQUIRE(back->inputs.size() == 1);
      oip::testing::check_same_tensor(back->inputs[0], t);
    }
    // And a response, server to client.
    oip::inference_response response;
    response.model_name = "m";
    response.model_version = "1";
    response.id = "r";
    response.outputs.push_back(t);
    for (const contents_form form : {contents_form::typed, contents_form::raw}) {
      inference::ModelInferResponse message;
      REQUIRE(oip::grpc::encode_response(response, message, form).ok());
      const bool typed =
          form == contents_form::typed && type != datatype::fp16 && type != datatype::bf16;
      CHECK(message.raw_output_contents_size() == (typed ? 0 : 1));
      oip::result<oip::inference_response> back = oip::grpc::decode_response(message);
      REQUIRE(back);
      CHECK(back->id == "r");
      CHECK(back->model_version == "1");
      oip::testing::check_same_tensor(back->outputs[0], t);
    }
  }
}

TEST_CASE("NaN payloads and signed zeros pass through raw and typed contents unchanged") {
  const std::vector<float> values{std::nanf("0x123"), -0.0F, INFINITY, -INFINITY, 1e-45F, 3.5F};
  const oip::tensor t = *oip::tensor::from_values<float>("t", {6}, std::span<const float>(values));
  for (const contents_form form : {contents_form::typed, contents_form::raw}) {
    oip::result<oip::inference_request> back = through_message(request_with(t), form);
    REQUIRE(back);
    CHECK(back->inputs[0].data().as_string_view() == t.data().as_string_view());
  }
}

TEST_CASE("raw bytes move into the tensor without a copy") {
  inference::ModelInferRequest message = one_input("FP32", {1, 1024});
  std::string* raw = message.add_raw_input_contents();
  raw->assign(4096, '\x01');
  const char* bytes = raw->data();
  oip::result<oip::inference_request> r = oip::grpc::decode_request(message);
  REQUIRE(r);
  CHECK(reinterpret_cast<const char*>(r->inputs[0].data().data()) == bytes);
}

TEST_CASE("a client reads outputs that the server wrote to shared memory, raw or typed") {
  oip::testing::shm_object object{"grpc_response", 64};
  object.put(16, std::vector<float>{1.5F, -2.0F});
  oip::shared_memory_registry mine;
  REQUIRE(mine.register_region("r", object.key(), 0, 64).ok());
  const oip::shared_memory_outputs placed{&mine, {{"Y", {"r", 16, 32}}}};
  for (const bool raw : {false, true}) {
    CAPTURE(raw);
    // What the server answers: name, datatype and shape, and an empty raw entry when raw.
    inference::ModelInferResponse message;
    message.set_model_name("m");
    auto* y = message.add_outputs();
    y->set_name("Y");
    y->set_datatype("FP32");
    y->add_shape(2);
    auto* z = message.add_outputs();
    z->set_name("Z");
    z->set_datatype("INT32");
    z->add_shape(1);
    if (raw) {
      message.add_raw_output_contents();
      message.add_raw_output_contents()->assign("\x07\0\0\0", 4);
    } else {
      z->mutable_contents()->add_int_contents(7);
    }
    inference::ModelInferResponse unplaced = message;
    oip::result<oip::inference_response> r = oip::grpc::decode_response(message, {}, &placed);
    REQUIRE_MESSAGE(r, r.error().message());
    CHECK(oip::testing::values_of<float>(r->outputs[0]) == std::vector<float>{1.5F, -2.0F});
    CHECK(oip::testing::values_of<std::int32_t>(r->outputs[1]) == std::vector<std::int32_t>{7});
    // Without the client's places, Y has no data.
    const oip::result<oip::inference_response> refused = oip::grpc::decode_response(unplaced);
    REQUIRE_FALSE(refused);
    CHECK(refused.error().code() == oip::errc::invalid_argument);
  }
  inference::ModelInferResponse too_big;
  auto* y = too_big.add_outputs();
  y->set_name("Y");
  y->set_datatype("FP32");
  y->add_shape(9);
  const oip::result<oip::inference_response> r = oip::grpc::decode_response(too_big, {}, &placed);
  REQUIRE_FALSE(r);
  CHECK(
      r.error().message() ==
      "output 'Y' of shape [9] does not fit in the 32 bytes asked for in shared memory region 'r'");
}

TEST_CASE("a model load's parameters, both directions: files as bytes, what cannot go refused") {
  oip::parameters load;
  load.set("config", std::string{R"({"max_batch_size":2})"});
  load.set("file:1/w.bin", std::string("\0\x01", 2));
  load.set("retries", std::uint64_t{3});
  load.set("strict", true);
  inference::RepositoryModelLoadRequest message;
  REQUIRE(oip::grpc::encode_load_parameters(load, *message.mutable_parameters()).ok());
  CHECK(message.parameters().at("config").has_string_param());
  CHECK(message.parameters().at("file:1/w.bin").bytes_param() == std::string("\0\x01", 2));
  CHECK(message.parameters().at("retries").int64_param() == 3);
  const oip::result<oip::parameters> back = oip::grpc::decode_load_parameters(message.parameters());
  REQUIRE(back);
  CHECK(*back->find("config") == *load.find("config"));
  CHECK(*back->find("file:1/w.bin") == *load.find("file:1/w.bin"));
  CHECK(*back->find("retries") == oip::parameter_value{std::int64_t{3}});
  CHECK(*back->find("strict") == oip::parameter_value{true});
  for (const oip::parameter_value& refused :
       {oip::parameter_value{0.5}, oip::parameter_value{std::uint64_t{1} << 63U}}) {
    oip::parameters odd;
    odd.set("x", refused);
    inference::RepositoryModelLoadRequest out;
    const oip::status s = oip::grpc::encode_load_parameters(odd, *out.mutable_parameters());
    CHECK(s.code() == oip::errc::invalid_argument);
    CHECK(s.message() ==
          "parameter 'x' of a model load request must be a bool, an integer up to "
          "9223372036854775807 or a string");
  }
}

TEST_CASE("parameters of every kind, request and tensor level, both directions") {
  oip::inference_request request;
  request.id = "42";
  request.parameters.set("flag", true);
  request.parameters.set("count", std::int64_t{-7});
  request.parameters.set("big", std::uint64_t{18446744073709551615ULL});
  request.parameters.set("ratio", 0.25);
  request.parameters.set("sequence_id", std::string{"abc"});
  oip::tensor t =
      *oip::tensor::from_values<std::int32_t>("INPUT0", {1}, std::vector<std::int32_t>{3});
  t.parameters().set("note", std::string{"x"});
  request.inputs.push_back(t);
  oip::requested_output out{"OUTPUT0", {}};
  out.parameters.set("classification", std::int64_t{3});
  request.outputs.push_back(out);
  oip::result<oip::inference_request> back = through_message(request, contents_form::raw);
  REQUIRE(back);
  CHECK(back->id == "42");
  CHECK(*back->parameters.get<bool>("flag"));
  CHECK(*back->parameters.get<std::int64_t>("count") == -7);
  CHECK(*back->parameters.get<std::uint64_t>("big") == 18446744073709551615ULL);
  CHECK(*back->parameters.get<double>("ratio") == 0.25);
  CHECK(*back->parameters.get<std::string>("sequence_id") == "abc");
  CHECK(*back->inputs[0].parameters().get<std::string>("note") == "x");
  REQUIRE(back->outputs.size() == 1);
  CHECK(*back->outputs[0].parameters.get<std::int64_t>("classification") == 3);

  // What Triton's gRPC frontend takes: uint64_param only for `priority`; a sequence id above
  // INT64_MAX as the negative int64 its own clients send, read back as the uint64.
  oip::inference_request for_triton;
  for_triton.parameters.set("sequence_id", std::uint64_t{18446744073709551614ULL});
  for_triton.parameters.set("timeout", std::uint64_t{5});
  for_triton.parameters.set("priority", std::uint64_t{2});
  inference::ModelInferRequest message;
  REQUIRE(oip::grpc::encode_request(for_triton, "m", "", contents_form::typed, message).ok());
  CHECK(message.parameters().at("sequence_id").int64_param() == -2);
  CHECK(message.parameters().at("timeout").int64_param() == 5);
  CHECK(message.parameters().at("priority").uint64_param() == 2);
  CHECK(*oip::grpc::decode_request(message)->parameters.get<std::uint64_t>("sequence_id") ==
        18446744073709551614ULL);

  inference::ModelInferRequest empty_value = one_input("INT32", {0});
  (*empty_value.mutable_parameters())["nothing"];  // no oneof member set
  CHECK(error_of(empty_value) == "parameter 'nothing' of the request has no value");
}

TEST_CASE("bad requests: a 400 with the tensor named and what was expected") {
  SUBCASE("contents and raw data together") {
    inference::ModelInferRequest m = one_input("INT32", {2});
    m.mutable_inputs(0)->mutable_contents()->add_int_contents(1);
    m.mutable_inputs(0)->mutable_contents()->add_int_contents(2);
    m.add_raw_input_contents()->assign(8, '\0');
    CHECK(error_of(m) ==
          "contents field must not be specified when using raw_input_contents for 'INPUT0' for "
          "model 'simple'");
  }
  SUBCASE("raw contents are one per input or none") {
    inference::ModelInferRequest m = one_input("INT32", {2});
    m.add_raw_input_contents()->assign(8, '\0');
    m.add_raw_input_contents()->assign(8, '\0');
    CHECK(error_of(m) == "expected 1 raw_input_contents, one for each input, got 2");
  }
  SUBCASE("no data at all") {
    inference::ModelInferRequest m = one_input("INT32", {2});
    CHECK(error_of(m) ==
          "unable to find data for input tensor 'INPUT0' for model 'simple' in the request: "
          "expected 2 elements in 'int_contents' or raw_input_contents");
  }
  SUBCASE("data in the wrong typed field") {
    inference::ModelInferRequest m = one_input("INT32", {1});
    m.mutable_inputs(0)->mutable_contents()->add_fp32_contents(1.0F);
    CHECK(error_of(m) ==
          "unexpected explicit tensor data for input tensor 'INPUT0' for model 'simple' of type "
          "'INT32': the data is in 'fp32_contents', expected 'int_contents'");
  }
  SUBCASE("element count does not match the shape") {
    inference::ModelInferRequest m = one_input("INT64", {3});
    m.mutable_inputs(0)->mutable_contents()->add_int64_contents(1);
    CHECK(error_of(m) ==
          "unexpected number of elements in 'int64_contents' for input 'INPUT0' for model "
          "'simple': shape [3] expects 3, got 1");
  }
  SUBCASE("integers beyond their datatype are refused, never wrapped") {
    inference::ModelInferRequest m = one_input("INT8", {2});
    m.mutable_inputs(0)->mutable_contents()->add_int_contents(5);
    m.mutable_inputs(0)->mutable_contents()->add_int_contents(300);
    CHECK(error_of(m) == "input 'INPUT0': element 1 is 300, out of range for INT8 [-128, 127]");
    inference::ModelInferRequest u = one_input("UINT16", {1});
    u.mutable_inputs(0)->mutable_contents()->add_uint_contents(70000);
    CHECK(error_of(u) == "input 'INPUT0': element 0 is 70000, out of range for UINT16 [0, 65535]");
  }
  SUBCASE("FP16 and BF16 have no typed contents") {
    inference::ModelInferRequest m = one_input("FP16", {1});
    m.mutable_inputs(0)->mutable_contents()->add_fp32_contents(1.0F);
    CHECK(error_of(m) ==
          "input 'INPUT0' for model 'simple' is FP16, which has no typed contents: send it in "
          "raw_input_contents");
  }
  SUBCASE("raw bytes that do not match the shape") {
    inference::ModelInferRequest m = one_input("FP32", {4});
    m.add_raw_input_contents()->assign(12, '\0');
    CHECK(error_of(m) ==
          "unexpected total byte size 12 for tensor 'INPUT0', expecting 16 for model 'simple'");
  }
  SUBCASE("malformed BYTES raw data") {
    inference::ModelInferRequest m = one_input("BYTES", {1});
    m.add_raw_input_contents()->assign("\x09\0\0\0ab", 6);
    CHECK(error_of(m).find("tensor 'INPUT0'") != std::string::npos);
  }
  SUBCASE("datatype, shape and names") {
    inference::ModelInferRequest m = one_input("FLOAT", {1});
    CHECK(error_of(m) == "invalid datatype 'FLOAT' for input 'INPUT0'");
    inference::ModelInferRequest n = one_input("INT32", {-2});
    CHECK(error_of(n).rfind("unable to parse 'shape' for input 'INPUT0'", 0) == 0);
    inference::ModelInferRequest twice = one_input("INT32", {0});
    *twice.add_inputs() = twice.inputs(0);
    CHECK(error_of(twice) == "duplicate input name 'INPUT0'");
    inference::ModelInferRequest outputs = one_input("INT32", {0});
    outputs.add_outputs()->set_name("OUTPUT0");
    outputs.add_outputs()->set_name("OUTPUT0");
    CHECK(error_of(outputs) == "duplicate requested output name 'OUTPUT0'");
  }
  SUBCASE("a shape whose element count overflows fails before any allocation") {
    inference::ModelInferRequest m = one_input("INT32", {4294967296, 4294967296});
    m.mutable_inputs(0)->mutable_contents()->add_int_contents(1);
    CHECK(error_of(m).rfind("unable to parse 'shape' for input 'INPUT0'", 0) == 0);
  }
  SUBCASE("more elements than the limit: 413") {
    inference::ModelInferRequest m = one_input("INT32", {1000});
    oip::limits bounds;
    bounds.max_elements = 10;
    oip::result<oip::inference_request> r = oip::grpc::decode_request(m, bounds);
    REQUIRE_FALSE(r);
    CHECK(r.error().http_status() == 413);
    CHECK(r.error().grpc_status() == oip::grpc_code::resource_exhausted);
  }
}

TEST_CASE("requests of very many names: all decoded, a duplicate found wherever it stands") {
  // The names are compared as a sorted set, not each against every earlier one, so these sizes
  // decode at once; pairwise checks would take seconds of a server's CPU for a request this size.
  constexpr int many = 50'000;
  inference::ModelInferRequest m = one_input("INT32", {0});
  m.set_id(std::string(1000, 'r'));  // an id is echoed, never limited (Triton sets no limit)
  for (int i = 1; i < many; ++i) {
    auto* input = m.add_inputs();
    input->set_name("IN" + std::to_string(i));
    input->set_datatype("INT32");
    input->add_shape(0);
    m.add_outputs()->set_name("OUT" + std::to_string(i));
    (*m.mutable_parameters())["p" + std::to_string(i)].set_int64_param(i);
  }
  oip::result<oip::inference_request> r = oip::grpc::decode_request(m);
  REQUIRE(r);
  CHECK(r->id == std::string(1000, 'r'));
  CHECK(r->inputs.size() == static_cast<std::size_t>(many));
  CHECK(r->outputs.size() == static_cast<std::size_t>(many - 1));
  CHECK(r->parameters.size() == static_cast<std::size_t>(many - 1));
  REQUIRE(r->parameters.get<std::int64_t>("p4242") != nullptr);
  CHECK(*r->parameters.get<std::int64_t>("p4242") == 4242);

  m.mutable_inputs(many - 1)->set_name("IN7");
  CHECK(error_of(m) == "duplicate input name 'IN7'");
  m.mutable_inputs(many - 1)->set_name("LAST");
  m.add_outputs()->set_name("OUT1");
  CHECK(error_of(m) == "duplicate requested output name 'OUT1'");
}

TEST_CASE("trace settings: each level that is on is one value of trace_level, as in Triton") {
  const auto levels = [](oip::trace_level level) {
    oip::trace_settings settings;
    settings.level = level;
    inference::TraceSettingResponse out;
    oip::grpc::encode_trace_settings(settings, out);
    const auto& values = out.settings().at("trace_level").value();
    return std::vector<std::string>(values.begin(), values.end());
  };
  CHECK(levels(oip::trace_level::off) == std::vector<std::string>{"OFF"});
  CHECK(levels(oip::trace_level::tensors) == std::vector<std::string>{"TENSORS"});
  CHECK(levels(oip::trace_level::timestamps | oip::trace_level::tensors) ==
        std::vector<std::string>{"TIMESTAMPS", "TENSORS"});
}

namespace {

std::string deterministic(const google::protobuf::Message& message) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream{&out};
    google::protobuf::io::CodedOutputStream coded{&stream};
    coded.SetSerializationDeterministic(true);
    REQUIRE(message.SerializeToCodedStream(&coded));
  }
  return out;
}

oip::buffer zeros(std::size_t size) { return oip::buffer::from_string(std::string(size, '\0')); }

// What protobuf reads from the server's bytes for `response`, as deterministic bytes (map
// entries sorted), with what a stream adds (its flag and error message) taken off and checked.
std::string as_read_by_protobuf(const oip::inference_response& response,
                                oip::grpc::response_framing framing) {
  grpc::ByteBuffer bytes;
  REQUIRE(oip::grpc::serialize_response(response, bytes, framing).ok());
  std::vector<grpc::Slice> slices;
  REQUIRE(bytes.Dump(&slices).ok());
  std::string wire;
  for (const grpc::Slice& s : slices)
    wire.append(reinterpret_cast<const char*>(s.begin()), s.size());
  inference::ModelInferResponse read;
  if (framing.in_stream) {
    inference::ModelStreamInferResponse stream;
    REQUIRE(stream.ParseFromString(wire));
    CHECK(stream.error_message() == framing.error_message);
    read = stream.infer_response();
    const auto flag = read.parameters().find("triton_final_response");
    REQUIRE(flag != read.parameters().end());
    CHECK(flag->second.bool_param() == framing.final_response);
    read.mutable_parameters()->erase("triton_final_response");
  } else {
    REQUIRE(read.ParseFromString(wire));
  }
  return deterministic(read);
}

std::string what_encode_response_makes(oip::inference_response response) {
  response.parameters.erase("triton_final_response");
  inference::ModelInferResponse message;
  REQUIRE(oip::grpc::encode_response(response, message, contents_form::raw).ok());
  return deterministic(message);
}

}  // namespace

TEST_CASE("the server's response bytes are what protobuf makes of the same response") {
  std::mt19937 rng{7};
  oip::inference_response full;
  full.model_name = "model";
  full.model_version = "3";
  full.id = "request-1";
  full.parameters.set("flag", false);
  full.parameters.set("count", std::int64_t{-5});
  full.parameters.set("big", std::uint64_t{1} << 63U);
  full.parameters.set("ratio", -0.25);
  full.parameters.set("empty", std::string{});
  full.parameters.set("text", std::string(300, 'x'));  // a length of two varint bytes
  for (const datatype type :
       {datatype::fp32, datatype::int64, datatype::bytes, datatype::boolean}) {
    const oip::tensor t = random_tensor(type, rng);
    full.outputs.push_back(
        *oip::tensor::make(fmt::format("OUT_{}", oip::to_string(type)), type, t.shape(), t.data()));
  }
  full.outputs[0].parameters().set("binary_data_size", std::int64_t{24});
  full.outputs[1].parameters().set("note", std::string{"tensor level"});
  // A scalar, an empty tensor, an output in shared memory and one shared with grpc++ as a slice.
  full.outputs.push_back(*oip::tensor::make("SCALAR", datatype::int32, {}, zeros(4)));
  full.outputs.push_back(*oip::tensor::make("EMPTY", datatype::fp32, {0, 3}, oip::buffer{}));
  oip::tensor placed = *oip::tensor::make("PLACED", datatype::fp32, {2}, zeros(8));
  placed.parameters().set("shared_memory_region", std::string{"r"});
  full.outputs.push_back(std::move(placed));
  full.shared_memory_outputs.push_back("PLACED");
  full.outputs.push_back(*oip::tensor::make("LARGE", datatype::uint8, {40000}, zeros(40000)));

  oip::inference_response bare;  // nothing but the model's name
  bare.model_name = "m";
  oip::inference_response flagged = full;  // a model's own flag, which the stream's replaces
  flagged.parameters.set("triton_final_response", std::string{"mine"});

  for (const oip::inference_response* response : {&full, &bare, &flagged}) {
    CAPTURE(response->outputs.size());
    if (response != &flagged) {
      CHECK(as_read_by_protobuf(*response, {}) == what_encode_response_makes(*response));
    }
    for (const bool final_response : {false, true}) {
      for (const std::string_view error : {"", "the model failed"}) {
        CHECK(as_read_by_protobuf(
                  *response,
                  {.in_stream = true, .final_response = final_response, .error_message = error}) ==
              what_encode_response_makes(*response));
      }
    }
  }
}

// --- the server's reader of request bytes
// ----------------------------------------------------------

namespace {

// Protobuf's wire format written by hand, for what protobuf's serializer never writes.
struct wire_bytes {
  std::string bytes;

  wire_bytes& varint(std::uint64_t value) {
    for (; value >= 0x80U; value >>= 7U)
      bytes.push_back(static_cast<char>((value & 0x7FU) | 0x80U));
    bytes.push_back(static_cast<char>(value));
    return *this;
  }
  wire_bytes& tag(int field, int type) {
    return varint((static_cast<std::uint64_t>(field) << 3U) | static_cast<std::uint64_t>(type));
  }
  wire_bytes& number(int field, std::uint64_t value) { return tag(field, 0).varint(value); }
  wire_bytes& field(int field, std::string_view value) {
    tag(field, 2).varint(value.size());
    bytes.append(value);
    return *this;
  }
};

std::string serialized(const inference::ModelInferRequest& message) {
  std::string out;
  REQUIRE(message.SerializeToString(&out));
  return out;
}

oip::limits fuzz_bounds() {
  oip::limits bounds;
  bounds.max_elements = 1U << 20U;
  return bounds;
}

// Whether the wire reader reads `bytes` (and, when it does, reads what protobuf's path reads).
bool read_from_wire(std::string_view bytes, const oip::limits& bounds = fuzz_bounds()) {
  const oip_test::readers_outcome outcome = oip_test::compare_request_readers(bytes, bounds);
  CHECK_MESSAGE(outcome.disagreement.empty(), outcome.disagreement);
  return outcome.read_from_wire;
}

}  // namespace

TEST_CASE("the wire reader reads what clients send, as protobuf and decode_request read it") {
  std::mt19937 rng{11};
  oip::inference_request request;
  request.id = "request-7";
  for (const datatype type :
       {datatype::boolean, datatype::uint8, datatype::int16, datatype::int32, datatype::int64,
        datatype::fp16, datatype::bf16, datatype::fp32, datatype::fp64, datatype::bytes}) {
    const oip::tensor t = random_tensor(type, rng);
    request.inputs.push_back(
        *oip::tensor::make(fmt::format("IN_{}", oip::to_string(type)), type, t.shape(), t.data()));
  }
  request.inputs.push_back(*oip::tensor::make("EMPTY", datatype::fp32, {0, 4}, oip::buffer{}));
  request.parameters.set("sequence_id", std::int64_t{-3});  // Triton's client, above INT64_MAX
  request.parameters.set("sequence_start", true);
  request.parameters.set("priority", std::uint64_t{2});
  request.parameters.set("ratio", -0.5);
  request.parameters.set("note", std::string{"caf\xC3\xA9"});
  request.parameters.set("triton_enable_empty_final_response", true);
  request.outputs.push_back({"OUT0", {}});
  oip::requested_output classes{"OUT1", {}};
  classes.parameters.set("classification", std::int64_t{3});
  request.outputs.push_back(std::move(classes));

  inference::ModelInferRequest message;
  REQUIRE(oip::grpc::encode_request(request, "model", "2", contents_form::raw, message).ok());
  const std::string bytes = serialized(message);
  CHECK(read_from_wire(bytes));

  const std::optional<oip::grpc::request_fields> read =
      oip::grpc::read_request_bytes(bytes, fuzz_bounds());
  REQUIRE(read);
  CHECK(read->model_name == "model");
  CHECK(read->model_version == "2");
  CHECK(read->id == "request-7");
  REQUIRE(read->request.parameters.get<std::uint64_t>("sequence_id") != nullptr);
  CHECK(*read->request.parameters.get<std::uint64_t>("sequence_id") ==
        std::numeric_limits<std::uint64_t>::max() - 2);
  REQUIRE(read->request.inputs.size() == request.inputs.size());
  for (const oip::tensor& input : read->request.inputs) {
    CHECK(input.data().is_aligned(64));  // each input's bytes start a cache line of their own
  }

  SUBCASE("a bare request: a model name and nothing else") {
    inference::ModelInferRequest bare;
    bare.set_model_name("m");
    CHECK(read_from_wire(serialized(bare)));
  }
  SUBCASE("the bytes as one grpc++ slice are read; in several, they are protobuf's") {
    const grpc::Slice whole{bytes.data(), bytes.size()};
    CHECK(oip::grpc::read_request_bytes(grpc::ByteBuffer{&whole, 1}, fuzz_bounds()));
    const std::array<grpc::Slice, 2> halves{
        grpc::Slice{bytes.data(), bytes.size() / 2},
        grpc::Slice{bytes.data() + bytes.size() / 2, bytes.size() - bytes.size() / 2}};
    CHECK_FALSE(oip::grpc::read_request_bytes(grpc::ByteBuffer{halves.data(), 2}, fuzz_bounds()));
  }
}

TEST_CASE(
    "the wire reader reads what protobuf accepts in the forms its serializer does not write") {
  const std::string shape_of_two = wire_bytes{}.varint(2).bytes;
  const std::string input =
      wire_bytes{}.field(1, "IN").field(2, "INT32").field(3, shape_of_two).bytes;
  const std::string eight_bytes(8, '\x01');
  SUBCASE("unknown fields of every wire type, skipped") {
    wire_bytes message;
    message.field(1, "m").number(99, 5).field(5, input).field(7, eight_bytes);
    message.tag(100, 1).bytes.append(8, 'x');  // fixed64
    message.tag(101, 5).bytes.append(4, 'y');  // fixed32
    message.field(102, "anything");
    CHECK(read_from_wire(message.bytes));
  }
  SUBCASE("the raw contents before the inputs, and a string field twice (the last counts)") {
    CHECK(read_from_wire(
        wire_bytes{}.field(7, eight_bytes).field(1, "first").field(5, input).field(1, "m").bytes));
  }
  SUBCASE("a shape unpacked, one field per dimension") {
    const std::string unpacked =
        wire_bytes{}.field(1, "IN").field(2, "INT32").number(3, 1).number(3, 2).bytes;
    CHECK(
        read_from_wire(wire_bytes{}.field(1, "m").field(5, unpacked).field(7, eight_bytes).bytes));
  }
  SUBCASE("a bool parameter whose varint is neither 0 nor 1 is true") {
    const std::string value = wire_bytes{}.number(1, 7).bytes;
    const std::string entry = wire_bytes{}.field(1, "flag").field(2, value).bytes;
    const std::string message = wire_bytes{}.field(1, "m").field(4, entry).bytes;
    CHECK(read_from_wire(message));
    CHECK(*oip::grpc::read_request_bytes(message, fuzz_bounds())
               ->request.parameters.get<bool>("flag"));
  }
}

TEST_CASE("the wire reader leaves to protobuf what it does not read, and every refusal") {
  inference::ModelInferRequest good = one_input("INT32", {1, 2});
  good.add_raw_input_contents(std::string(8, '\0'));
  REQUIRE(read_from_wire(serialized(good)));
  inference::ModelInferRequest message = good;

  SUBCASE("typed contents") {
    message.clear_raw_input_contents();
    message.mutable_inputs(0)->mutable_contents()->add_int_contents(1);
    message.mutable_inputs(0)->mutable_contents()->add_int_contents(2);
  }
  SUBCASE("an input in shared memory") {
    message.clear_raw_input_contents();
    (*message.mutable_inputs(0)->mutable_parameters())["shared_memory_region"].set_string_param(
        "r");
  }
  SUBCASE("a raw entry too many, or too few") {
    SUBCASE("too many") { message.add_raw_input_contents("x"); }
    SUBCASE("none") { message.clear_raw_input_contents(); }
  }
  SUBCASE("raw bytes that do not match the shape") {
    message.set_raw_input_contents(0, std::string(7, '\0'));
  }
  SUBCASE("two inputs of one name") {
    *message.add_inputs() = message.inputs(0);
    message.add_raw_input_contents(std::string(8, '\0'));
  }
  SUBCASE("two requested outputs of one name") {
    message.add_outputs()->set_name("OUT");
    message.add_outputs()->set_name("OUT");
  }
  SUBCASE("an unknown datatype, a negative dimension") {
    SUBCASE("datatype") { message.mutable_inputs(0)->set_datatype("INT33"); }
    SUBCASE("dimension") {
      message.mutable_inputs(0)->set_shape(0, -1);
      message.mutable_inputs(0)->set_shape(1, -2);
    }
  }
  SUBCASE("a parameter without a value, and a non-bool empty-final flag") {
    SUBCASE("no value") { (*message.mutable_parameters())["p"]; }
    SUBCASE("flag") {
      (*message.mutable_parameters())["triton_enable_empty_final_response"].set_int64_param(1);
    }
  }
  SUBCASE("more parameters than a few") {
    for (int i = 0; i < 17; ++i)
      (*message.mutable_parameters())[fmt::format("p{}", i)].set_bool_param(true);
  }
  std::string bytes = serialized(message);
  SUBCASE("a name that is not UTF-8") {
    bytes = serialized(good);
    const std::size_t at = bytes.find("INPUT0");
    REQUIRE(at != std::string::npos);
    bytes[at] = '\xC0';
  }
  SUBCASE("a group, which only protobuf reads") {
    bytes = serialized(good);
    wire_bytes group;
    group.tag(50, 3).number(1, 1).tag(50, 4);
    bytes += group.bytes;
  }
  SUBCASE("a known field of the wrong wire type") {
    bytes = serialized(good) + wire_bytes{}.number(1, 4).bytes;
  }
  SUBCASE("a tag in six bytes, which protobuf does not read") {
    bytes = serialized(good) + std::string{"\x8a\x8a\x8a\x8a\x8a\x00\x00", 7};
  }
  SUBCASE("a message cut short") {
    bytes = serialized(good).substr(0, serialized(good).size() - 3);
  }
  CHECK_FALSE(read_from_wire(bytes));
}

TEST_CASE(
    "the wire reader leaves an input above the element limit to protobuf's path, which refuses "
    "it") {
  inference::ModelInferRequest message = one_input("INT32", {1, 2});
  message.add_raw_input_contents(std::string(8, '\0'));
  oip::limits one = fuzz_bounds();
  REQUIRE(read_from_wire(serialized(message), one));
  one.max_elements = 1;
  CHECK_FALSE(read_from_wire(serialized(message), one));
  CHECK(oip::grpc::decode_request(message, one).error().code() == oip::errc::payload_too_large);
}

TEST_CASE("a model's dynamic batching, its priority levels among it, in its gRPC configuration") {
  oip::model_config config;
  config.name = "batched";
  config.max_batch_size = 8;
  config.dynamic_batching = true;
  config.batching.max_queue_delay = std::chrono::microseconds{250};
  config.batching.preferred_batch_sizes = {4, 8};
  config.batching.priority_levels = 3;
  config.batching.default_priority_level = 2;
  config.batching.default_queue_policy = {oip::queue_policy::timeout_action::delay,
                                          std::chrono::microseconds{900}, true, 5};
  config.batching.priority_queue_policy = {{1, {.max_queue_size = std::size_t{1} << 40}}};
  inference::ModelConfig message;
  oip::grpc::encode_model_config(config, message);
  REQUIRE(message.has_dynamic_batching());
  const inference::ModelDynamicBatching& batching = message.dynamic_batching();
  CHECK(batching.max_queue_delay_microseconds() == 250);
  REQUIRE(batching.preferred_batch_size_size() == 2);
  CHECK(batching.preferred_batch_size(1) == 8);
  CHECK(batching.priority_levels() == 3);
  CHECK(batching.default_priority_level() == 2);
  const inference::ModelQueuePolicy& by_default = batching.default_queue_policy();
  CHECK(by_default.timeout_action() == inference::ModelQueuePolicy::DELAY);
  CHECK(by_default.default_timeout_microseconds() == 900);
  CHECK(by_default.allow_timeout_override());
  CHECK(by_default.max_queue_size() == 5);
  REQUIRE(batching.priority_queue_policy().size() == 1);
  const inference::ModelQueuePolicy& first = batching.priority_queue_policy().at(1);
  CHECK(first.timeout_action() == inference::ModelQueuePolicy::REJECT);
  CHECK(first.max_queue_size() == 0xFFFFFFFFU);  // the most the field holds
}
