// Every request and response example of the protocol documents (../shared/spec/), kept verbatim in
// tests/data/spec/<file>-<example>.txt. Well-formed examples decode to the expected tensors and
// re-encode to an equivalent document (binary parts byte for byte, placeholders filled in). The
// faulty ones (docs/spec-errata.md) are negative tests; their corrected readings
// (<example>.fixed.txt) decode.

#include "test_support.hpp"

#include <oip/json.hpp>

#include <cstdint>
#include <string>

#include <doctest/doctest.h>

namespace {

using oip::testing::check_same_tensors;
using oip::testing::strings_of;
using oip::testing::values_of;

// An HTTP message of the documents: headers, a JSON body (or none), then placeholders such as
// "<16 bytes of data for input0 tensor>" that stand for binary data.
struct spec_message {
  bool has_header_length = false;
  bool raw = false;  // Inference-Header-Content-Length: 0
  std::string json;
  std::string binary;
  std::vector<std::string> binary_parts;

  [[nodiscard]] oip::buffer body() const { return oip::buffer::from_string(json + binary); }
  [[nodiscard]] std::optional<std::size_t> header_length() const {
    if (!has_header_length) return std::nullopt;
    return raw ? 0 : json.size();
  }
};

spec_message load(const std::string& name) {
  const std::string text =
      oip::testing::read_file(std::string(OIP_TEST_DATA_DIR) + "/spec/" + name);
  spec_message m;
  std::istringstream lines(text);
  std::string line;
  bool in_json = false;
  std::uint8_t fill = 1;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    if (!in_json && line.rfind(oip::header_length_field, 0) == 0) {
      m.has_header_length = true;
      m.raw = line.substr(line.find(':') + 1) == " 0";
    } else if (!in_json && line == "{") {
      in_json = true;
      m.json += line + "\n";
    } else if (line.front() == '<' && line.find(" bytes of data for ") != std::string::npos) {
      // "<16 bytes of data for input0 tensor>"
      in_json = false;
      std::string part(std::stoul(line.substr(1)), '\0');
      for (char& c : part) c = static_cast<char>(fill++ * 37);
      m.binary += part;
      m.binary_parts.push_back(part);
    } else if (in_json) {
      m.json += line + "\n";
    }
  }
  return m;
}

oip::inference_request decode_request(const spec_message& m) {
  oip::result<oip::inference_request> r = oip::decode_request(m.body(), m.header_length());
  REQUIRE_MESSAGE(r.ok(), r.error().message());
  return std::move(*r);
}

oip::inference_response decode_response(const spec_message& m) {
  oip::result<oip::inference_response> r = oip::decode_response(m.body(), m.header_length());
  REQUIRE_MESSAGE(r.ok(), r.error().message());
  return std::move(*r);
}

// Re-encodes a decoded request as the example sent it (binary inputs where it used them) and
// checks that it decodes to the same request, with the binary part byte for byte.
void check_request_round_trip(const spec_message& m, const oip::inference_request& request) {
  oip::result<oip::encoded_body> encoded =
      oip::encode_request(request, {.binary_inputs = !m.binary.empty()});
  REQUIRE(encoded.ok());
  const std::string flat = encoded->flatten();
  CHECK(flat.substr(encoded->header_length()) == m.binary);
  oip::result<oip::inference_request> again = oip::decode_request(
      oip::buffer::from_string(flat),
      encoded->uses_binary ? std::optional<std::size_t>{encoded->header_length()} : std::nullopt);
  REQUIRE_MESSAGE(again.ok(), again.error().message());
  CHECK(again->id == request.id);
  CHECK(again->parameters == request.parameters);
  CHECK(again->outputs == request.outputs);
  check_same_tensors(again->inputs, request.inputs);
}

void check_response_round_trip(const spec_message& m, const oip::inference_response& response) {
  // Outputs that arrived as binary go back as binary.
  oip::response_format format;
  std::size_t binary_index = 0;
  for (const oip::tensor& t : response.outputs) {
    const bool binary = binary_index < m.binary_parts.size() &&
                        t.data().as_string_view() == m.binary_parts[binary_index];
    if (binary) ++binary_index;
    format.binary_outputs.emplace_back(t.name(), binary);
  }
  oip::result<oip::encoded_body> encoded = oip::encode_response(response, format);
  REQUIRE(encoded.ok());
  const std::string flat = encoded->flatten();
  CHECK(flat.substr(encoded->header_length()) == m.binary);
  oip::result<oip::inference_response> again = oip::decode_response(
      oip::buffer::from_string(flat),
      encoded->uses_binary ? std::optional<std::size_t>{encoded->header_length()} : std::nullopt);
  REQUIRE_MESSAGE(again.ok(), again.error().message());
  CHECK(again->id == response.id);
  check_same_tensors(again->outputs, response.outputs);
}

void check_rejected(const oip::status& s, const std::string& expected_message) {
  CHECK(s.code() == oip::errc::invalid_argument);
  CHECK(s.http_status() == 400);
  CHECK_MESSAGE(s.message().find(expected_message) != std::string::npos, s.message());
}

}  // namespace

TEST_CASE("003-E1: JSON request (as printed, BOOL [3] has one value)") {
  const spec_message original = load("003-E1.txt");
  oip::result<oip::inference_request> r = oip::decode_request(original.body(), std::nullopt);
  REQUIRE_FALSE(r.ok());
  check_rejected(r.error(),
                 "unable to parse 'data' for input 'input1': shape [3] expects 3 "
                 "elements, got 1");

  const spec_message fixed = load("003-E1.fixed.txt");
  const oip::inference_request request = decode_request(fixed);
  CHECK(request.id == "42");
  REQUIRE(request.inputs.size() == 2);
  CHECK(request.inputs[0].name() == "input0");
  CHECK(request.inputs[0].type() == oip::datatype::uint32);
  CHECK(request.inputs[0].shape() == oip::shape_type{2, 2});
  CHECK(values_of<std::uint32_t>(request.inputs[0]) == std::vector<std::uint32_t>{1, 2, 3, 4});
  CHECK(values_of<bool>(request.inputs[1]) == std::vector<bool>{true, false, true});
  REQUIRE(request.outputs.size() == 1);
  CHECK(request.outputs[0].name == "output0");
  check_request_round_trip(fixed, request);
}

TEST_CASE("003-E2: JSON response (as printed, a comma is missing)") {
  const spec_message original = load("003-E2.txt");
  oip::result<oip::inference_response> r = oip::decode_response(original.body(), std::nullopt);
  REQUIRE_FALSE(r.ok());
  check_rejected(r.error(), "failed to parse the response JSON buffer");

  const spec_message fixed = load("003-E2.fixed.txt");
  const oip::inference_response response = decode_response(fixed);
  CHECK(response.id == "42");
  REQUIRE(response.outputs.size() == 1);
  CHECK(response.outputs[0].type() == oip::datatype::fp32);
  CHECK(response.outputs[0].shape() == oip::shape_type{3, 2});
  CHECK(values_of<float>(response.outputs[0]) ==
        std::vector<float>{1.0F, 1.1F, 2.0F, 2.1F, 3.0F, 3.1F});
  check_response_round_trip(fixed, response);
}

TEST_CASE("000-E1: binary request, inputs are views into the body") {
  const spec_message m = load("000-E1.txt");
  const oip::buffer body = m.body();
  oip::result<oip::inference_request> r = oip::decode_request(body, m.header_length());
  REQUIRE_MESSAGE(r.ok(), r.error().message());
  REQUIRE(r->inputs.size() == 2);
  CHECK(r->inputs[0].type() == oip::datatype::uint32);
  CHECK(r->inputs[0].data().data() == body.data() + m.json.size());
  CHECK(r->inputs[1].data().data() == body.data() + m.json.size() + 16);
  CHECK(r->inputs[1].type() == oip::datatype::boolean);
  CHECK(r->inputs[0].parameters().empty());  // binary_data_size is consumed by the framing
  oip::result<oip::response_format> format = oip::response_format::from_request(*r);
  REQUIRE(format.ok());
  CHECK(format->is_binary("output0"));
  check_request_round_trip(m, *r);
}

TEST_CASE("000-E2: binary response") {
  const spec_message m = load("000-E2.txt");
  const oip::inference_response response = decode_response(m);
  REQUIRE(response.outputs.size() == 1);
  CHECK(response.outputs[0].shape() == oip::shape_type{3, 2});
  CHECK(response.outputs[0].data().as_string_view() == m.binary);
  check_response_round_trip(m, response);
}

TEST_CASE("000-E3: raw binary request") {
  const spec_message m = load("000-E3.txt");
  CHECK(m.header_length() == std::optional<std::size_t>{0});
  CHECK(m.json.empty());
  const oip::buffer body = m.body();
  oip::result<oip::inference_request> r = oip::decode_raw_request(
      body, {.name = "INPUT0", .type = oip::datatype::fp32, .shape = {-1}, .batching = false});
  REQUIRE(r.ok());
  CHECK(r->inputs[0].shape() == oip::shape_type{4});
  CHECK(r->inputs[0].data().data() == body.data());
  oip::result<oip::response_format> format = oip::response_format::from_request(*r);
  REQUIRE(format.ok());
  CHECK(format->is_binary("output0"));  // a raw request gets every output in binary
}

TEST_CASE("000-E4: response to the raw request") {
  const spec_message m = load("000-E4.txt");
  const oip::inference_response response = decode_response(m);
  REQUIRE(response.outputs.size() == 2);
  CHECK(response.outputs[1].data().as_string_view() == m.binary_parts[1]);
  check_response_round_trip(m, response);
}

TEST_CASE("001-E1: mixed request (as printed, FP16 [2,2] announced as 16 bytes)") {
  const spec_message original = load("001-E1.txt");
  oip::result<oip::inference_request> r =
      oip::decode_request(original.body(), original.header_length());
  REQUIRE_FALSE(r.ok());
  check_rejected(r.error(), "input byte size mismatch for input 'input0'. Expected 8, got 16");

  const spec_message fixed = load("001-E1.fixed.txt");
  const oip::inference_request request = decode_request(fixed);
  REQUIRE(request.inputs.size() == 3);
  CHECK(request.inputs[0].type() == oip::datatype::fp16);
  CHECK(request.inputs[0].data().as_string_view() == fixed.binary_parts[0]);
  CHECK(values_of<std::uint32_t>(request.inputs[1]) == std::vector<std::uint32_t>{1, 2, 3, 4});
  CHECK(request.inputs[2].data().as_string_view() == fixed.binary_parts[1]);
  oip::result<oip::response_format> format = oip::response_format::from_request(request);
  REQUIRE(format.ok());
  CHECK(format->is_binary("output0"));
  CHECK_FALSE(format->is_binary("output1"));
  // Re-encoding sends every input binary: check that it reads back the same.
  oip::result<oip::encoded_body> encoded = oip::encode_request(request, {.binary_inputs = true});
  REQUIRE(encoded.ok());
  oip::result<oip::inference_request> again =
      oip::decode_request(oip::buffer::from_string(encoded->flatten()), encoded->header_length());
  REQUIRE(again.ok());
  check_same_tensors(again->inputs, request.inputs);
}

TEST_CASE("001-E2: mixed response (as printed, FP16 [3,2] announced as 16 bytes)") {
  const spec_message original = load("001-E2.txt");
  oip::result<oip::inference_response> r =
      oip::decode_response(original.body(), original.header_length());
  REQUIRE_FALSE(r.ok());
  check_rejected(r.error(), "output byte size mismatch for output 'output0'. Expected 12, got 16");

  const spec_message fixed = load("001-E2.fixed.txt");
  const oip::inference_response response = decode_response(fixed);
  REQUIRE(response.outputs.size() == 2);
  CHECK(values_of<float>(response.outputs[1]) ==
        std::vector<float>{1.203F, 5.403F, 3.434F, 34.234F});
  check_response_round_trip(fixed, response);
}

TEST_CASE("001-E3: JSON request asking for binary outputs") {
  const spec_message m = load("001-E3.txt");
  const oip::inference_request request = decode_request(m);  // "model_name" is ignored
  CHECK(*request.parameters.get<bool>("binary_data_output"));
  CHECK(values_of<float>(request.inputs[0]) == std::vector<float>{32.045F, 399.043F});
  oip::result<oip::response_format> format = oip::response_format::from_request(request);
  REQUIRE(format.ok());
  CHECK(format->is_binary("anything"));
  check_request_round_trip(m, request);
}

TEST_CASE("001-E4: binary response (as printed, sizes announced wrong)") {
  const spec_message original = load("001-E4.txt");
  oip::result<oip::inference_response> r =
      oip::decode_response(original.body(), original.header_length());
  REQUIRE_FALSE(r.ok());
  check_rejected(r.error(),
                 "output byte size mismatch for output 'output_tensor0'. Expected 12, "
                 "got 16");
  const spec_message fixed = load("001-E4.fixed.txt");
  const oip::inference_response response = decode_response(fixed);
  REQUIRE(response.outputs.size() == 2);
  check_response_round_trip(fixed, response);
}

TEST_CASE("002-E1 and 002-E2: sequence requests (as printed, commas wrong)") {
  for (const char* name : {"002-E1.txt", "002-E2.txt"}) {
    CAPTURE(name);
    const spec_message original = load(name);
    oip::result<oip::inference_request> r = oip::decode_request(original.body(), std::nullopt);
    REQUIRE_FALSE(r.ok());
    check_rejected(r.error(), "failed to parse the request JSON buffer");
  }
  const oip::inference_request numeric = decode_request(load("002-E1.fixed.txt"));
  CHECK(*numeric.parameters.get<std::int64_t>("sequence_id") == 42);
  check_request_round_trip(load("002-E1.fixed.txt"), numeric);
  const oip::inference_request text = decode_request(load("002-E2.fixed.txt"));
  CHECK(*text.parameters.get<std::string>("sequence_id") == "e333c95a-07fc-42d2-ab16-033b1a566ed5");
  check_request_round_trip(load("002-E2.fixed.txt"), text);
}

TEST_CASE("004-E1: classification request") {
  const spec_message m = load("004-E1.txt");
  const oip::inference_request request = decode_request(m);
  REQUIRE(request.outputs.size() == 1);
  CHECK(*request.outputs[0].parameters.get<std::int64_t>("classification") == 2);
  check_request_round_trip(m, request);
}

TEST_CASE("004-E2 and 004-E3: classification responses (as printed, comma missing, STRING)") {
  for (const char* name : {"004-E2.txt", "004-E3.txt"}) {
    CAPTURE(name);
    const spec_message original = load(name);
    CHECK_FALSE(oip::decode_response(original.body(), std::nullopt).ok());
  }
  // With only the comma restored, "STRING" is still refused: the datatype is BYTES.
  std::string comma_only = load("004-E2.txt").json;
  comma_only.replace(comma_only.find("\"42\""), 4, "\"42\",");
  oip::result<oip::inference_response> string_type =
      oip::decode_response(oip::buffer::from_string(comma_only), std::nullopt);
  REQUIRE_FALSE(string_type.ok());
  check_rejected(string_type.error(), "invalid datatype 'STRING' for output 'output0'");

  const oip::inference_response plain = decode_response(load("004-E2.fixed.txt"));
  CHECK(strings_of(plain.outputs[0]) == std::vector<std::string>{"3.3:1", "2.4:3"});
  check_response_round_trip(load("004-E2.fixed.txt"), plain);
  const oip::inference_response labelled = decode_response(load("004-E3.fixed.txt"));
  CHECK(strings_of(labelled.outputs[0]) ==
        std::vector<std::string>{"3.3:1:index_1_label", "2.4:3:index_3_label"});
}
