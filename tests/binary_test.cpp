// The binary tensor data extension: framing, zero-copy placement, raw requests, response framing.

#include "test_support.hpp"

#include <oip/binary.hpp>
#include <oip/json.hpp>

#include <cstring>
#include <string>

#include <doctest/doctest.h>

using oip::datatype;

namespace {
std::string header(const std::string& inputs) { return R"({"inputs":[)" + inputs + "]}"; }

std::string binary_input(const std::string& name, const std::string& type, const std::string& shape,
                         std::size_t size) {
  return R"({"name":")" + name + R"(","datatype":")" + type + R"(","shape":)" + shape +
         R"(,"parameters":{"binary_data_size":)" + std::to_string(size) + "}}";
}
}  // namespace

TEST_CASE("Inference-Header-Content-Length is a decimal no larger than the body") {
  CHECK(*oip::parse_header_length("0", 10) == 0);
  CHECK(*oip::parse_header_length("10", 10) == 10);
  for (const char* bad : {"", "-1", "+1", "11", "1x", " 1", "0x10", "99999999999999999999999"}) {
    CAPTURE(bad);
    oip::result<std::size_t> r = oip::parse_header_length(bad, 10);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().http_status() == 400);
    CHECK(r.error().message() ==
          "inference header size should be in range (0, 10), got: " + std::string(bad));
  }
}

TEST_CASE("binary inputs are views into the body, in input order") {
  const std::string json = header(binary_input("a", "INT32", "[2]", 8) + "," +
                                  R"({"name":"j","datatype":"INT8","shape":[1],"data":[5]})" + "," +
                                  binary_input("b", "BYTES", "[2]", 9));
  std::string body = json;
  const std::int32_t a[2] = {7, -7};
  body.append(reinterpret_cast<const char*>(a), 8);
  body.append(std::string("\x01\x00\x00\x00x\x00\x00\x00\x00", 9));
  const oip::buffer buffer = oip::buffer::from_string(body);
  oip::result<oip::inference_request> r = oip::decode_request(buffer, json.size());
  REQUIRE_MESSAGE(r.ok(), r.error().message());
  REQUIRE(r->inputs.size() == 3);
  CHECK(r->inputs[0].data().data() == buffer.data() + json.size());
  CHECK(r->inputs[0].at<std::int32_t>(1) == -7);
  CHECK(r->inputs[1].at<std::int8_t>(0) == 5);
  CHECK(r->inputs[2].data().data() == buffer.data() + json.size() + 8);
  CHECK(oip::testing::strings_of(r->inputs[2]) == std::vector<std::string>{"x", ""});
}

TEST_CASE("binary framing errors name the tensor and the numbers") {
  const auto decode = [](const std::string& json, const std::string& binary) {
    return oip::decode_request(oip::buffer::from_string(json + binary), json.size(), {}, "simple");
  };
  SUBCASE("more than remains") {
    auto r = decode(header(binary_input("INPUT0", "INT32", "[16]", 64) + "," +
                           binary_input("INPUT1", "INT32", "[16]", 64)),
                    std::string(64, 'x'));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message() ==
          "unexpected size for input 'INPUT1', expecting 64 additional bytes for model 'simple'");
  }
  SUBCASE("leftover bytes") {
    auto r = decode(header(binary_input("INPUT0", "INT8", "[2]", 2)), "abc");
    REQUIRE_FALSE(r.ok());
    CHECK(
        r.error().message() ==
        "unexpected additional input data for model 'simple': 1 bytes after the last binary input");
  }
  SUBCASE("size different from the shape") {
    auto r = decode(header(binary_input("INPUT0", "FP16", "[2,2]", 16)), std::string(16, 'x'));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message() ==
          "input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 8, got 16");
  }
  SUBCASE("negative or non-integer size") {
    for (const char* size : {"-1", "1.5", "\"8\"", "true"}) {
      const std::string json =
          header(R"({"name":"x","datatype":"INT8","shape":[1],"parameters":{"binary_data_size":)" +
                 std::string(size) + "}}");
      auto r = decode(json, "x");
      REQUIRE_FALSE(r.ok());
      CHECK(r.error().message() ==
            "unable to parse 'binary_data_size' for input 'x': expected a "
            "non-negative integer");
    }
  }
  SUBCASE("malformed BYTES") {
    auto r =
        decode(header(binary_input("s", "BYTES", "[1]", 6)), std::string("\x05\x00\x00\x00xy", 6));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message() ==
          "malformed BYTES data for tensor 's': element 0 has length 5 but "
          "only 2 bytes remain for model 'simple'");
  }
  SUBCASE("header length past the body") {
    auto r = oip::decode_request(oip::buffer::from_string("{}"), 3);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message() == "inference header size should be in range (0, 2), got: 3");
  }
}

TEST_CASE("a 64 MiB binary input is placed without touching its bytes") {
  const std::string json = header(binary_input("big", "UINT8", "[67108864]", 67108864));
  oip::result<oip::mutable_buffer> body = oip::mutable_buffer::allocate(json.size() + 67108864);
  REQUIRE(body.ok());
  std::memcpy(body->data(), json.data(), json.size());
  const oip::buffer frozen = std::move(*body);
  oip::limits limits;
  limits.max_body_bytes = 128U << 20U;
  oip::result<oip::inference_request> r = oip::decode_request(frozen, json.size(), limits);
  REQUIRE(r.ok());
  CHECK(r->inputs[0].data().data() == frozen.data() + json.size());
  CHECK(r->inputs[0].data().shares_storage_with(frozen));
}

TEST_CASE("raw binary requests deduce the input from the model's metadata") {
  const oip::buffer sixteen = oip::buffer::from_string(std::string(16, '\1'));
  SUBCASE("one variable dimension") {
    auto r = oip::decode_raw_request(sixteen, {"INPUT0", datatype::fp32, {2, -1}, false});
    REQUIRE(r.ok());
    CHECK(r->inputs[0].shape() == oip::shape_type{2, 2});
    CHECK(r->inputs[0].data().data() == sixteen.data());
    CHECK(*r->parameters.get<bool>("binary_data_output"));
  }
  SUBCASE("batching models get a batch of one") {
    auto r = oip::decode_raw_request(sixteen, {"INPUT0", datatype::int32, {-1}, true});
    REQUIRE(r.ok());
    CHECK(r->inputs[0].shape() == oip::shape_type{1, 4});
  }
  SUBCASE("fixed shape") {
    CHECK(oip::decode_raw_request(sixteen, {"INPUT0", datatype::int32, {4}, false}).ok());
    auto r = oip::decode_raw_request(sixteen, {"INPUT0", datatype::int32, {5}, false});
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message() ==
          "raw input: unexpected total byte size 16 for tensor 'INPUT0', expecting 20");
  }
  SUBCASE("two variable dimensions") {
    auto r = oip::decode_raw_request(sixteen, {"INPUT0", datatype::int32, {-1, -1}, false});
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message() ==
          "The shape of the raw input 'INPUT0' can not be deduced because "
          "there are more than one variable-sized dimension");
  }
  SUBCASE("not a whole number of rows") {
    auto r = oip::decode_raw_request(sixteen, {"INPUT0", datatype::fp32, {-1, 3}, false});
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message() ==
          "unexpected size 16 for raw input 'INPUT0': not a whole number of "
          "12-byte rows of shape [-1,3]");
  }
  SUBCASE("BYTES needs shape [1]") {
    auto r = oip::decode_raw_request(sixteen, {"TEXT", datatype::bytes, {1}, true});
    REQUIRE(r.ok());
    CHECK(r->inputs[0].shape() == oip::shape_type{1, 1});
    CHECK(oip::testing::strings_of(r->inputs[0]) ==
          std::vector<std::string>{std::string(16, '\1')});
    auto bad = oip::decode_raw_request(sixteen, {"TEXT", datatype::bytes, {-1}, false});
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.error().message() ==
          "For BYTE datatype raw input 'TEXT', the model must have input shape [1]");
  }
  SUBCASE("a plain JSON decode refuses length 0") {
    CHECK_FALSE(oip::decode_request(sixteen, 0).ok());
  }
}

TEST_CASE("response framing: binary_data per output, else binary_data_output, else JSON") {
  oip::inference_request request;
  request.parameters.set("binary_data_output", true);
  request.outputs = {{"A", {}}, {"B", {}}};
  request.outputs[1].parameters.set("binary_data", false);
  oip::result<oip::response_format> format = oip::response_format::from_request(request);
  REQUIRE(format.ok());
  CHECK(format->is_binary("A"));
  CHECK_FALSE(format->is_binary("B"));
  CHECK(format->is_binary("C"));

  const std::vector<std::int16_t> a{1, 2};
  const std::vector<std::int16_t> b{3};
  oip::inference_response response;
  response.model_name = "m";
  response.outputs = {*oip::tensor::from_values<std::int16_t>("A", {2}, a),
                      *oip::tensor::from_values<std::int16_t>("B", {1}, b)};
  oip::result<oip::encoded_body> body = oip::encode_response(response, *format);
  REQUIRE(body.ok());
  CHECK(body->uses_binary);
  CHECK(body->content_type() == "application/octet-stream");
  CHECK(body->json == R"({"model_name":"m","outputs":[{"name":"A","datatype":"INT16","shape":[2],)"
                      R"("parameters":{"binary_data_size":4}},{"name":"B","datatype":"INT16",)"
                      R"("shape":[1],"data":[3]}]})");
  REQUIRE(body->binary.size() == 1);
  CHECK(body->binary[0].data() == response.outputs[0].data().data());  // scatter/gather, no copy
  CHECK(body->header_length() == body->json.size());

  oip::result<oip::inference_response> back =
      oip::decode_response(oip::buffer::from_string(body->flatten()), body->header_length());
  REQUIRE(back.ok());
  oip::testing::check_same_tensors(back->outputs, response.outputs);

  request.parameters.set("binary_data_output", std::string("yes"));
  oip::result<oip::response_format> bad = oip::response_format::from_request(request);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message() == "unable to parse 'binary_data_output': expected a boolean");
}
