// The JSON codecs: every datatype decoded exactly, parameters typed, encoding shortest and ordered,
// metadata and health objects both ways.

#include "test_support.hpp"

#include <oip/json.hpp>

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <doctest/doctest.h>

using oip::datatype;
using oip::testing::body_of;
using oip::testing::strings_of;
using oip::testing::values_of;

namespace {

oip::inference_request decode(const std::string& json) {
  oip::result<oip::inference_request> r = oip::decode_request(body_of(json), std::nullopt);
  REQUIRE_MESSAGE(r.ok(), r.error().message());
  return std::move(*r);
}

oip::tensor decode_one(const std::string& type, const std::string& shape, const std::string& data) {
  oip::inference_request r = decode(R"({"inputs":[{"name":"x","shape":)" + shape +
                                    R"(,"datatype":")" + type + R"(","data":)" + data + "}]}");
  REQUIRE(r.inputs.size() == 1);
  return r.inputs[0];
}

oip::status decode_error(const std::string& json) {
  oip::result<oip::inference_request> r = oip::decode_request(body_of(json), std::nullopt);
  REQUIRE_FALSE(r.ok());
  return r.error();
}

std::string encode_outputs(const std::vector<oip::tensor>& outputs,
                           const oip::response_format& format = {}) {
  oip::inference_response response;
  response.model_name = "m";
  response.outputs = outputs;
  oip::result<oip::encoded_body> body = oip::encode_response(response, format);
  REQUIRE_MESSAGE(body.ok(), body.error().message());
  return body->json;
}

std::uint32_t bits(float f) { return std::bit_cast<std::uint32_t>(f); }

}  // namespace

TEST_CASE("request fields: id, parameters, inputs, outputs") {
  const oip::inference_request r = decode(
      R"({"id":"r1","parameters":{"i":-3,"u":18446744073709551615,"d":1.5,"b":true,"s":"x",)"
      R"("big":1e400,"whole":2.0},"inputs":[],"outputs":[{"name":"o","parameters":{"binary_data":true}}]})");
  CHECK(r.id == "r1");
  CHECK(*r.parameters.get<std::int64_t>("i") == -3);
  CHECK(*r.parameters.get<std::uint64_t>("u") == std::numeric_limits<std::uint64_t>::max());
  CHECK(*r.parameters.get<double>("d") == 1.5);
  CHECK(*r.parameters.get<double>("whole") == 2.0);  // 2.0 stays a double
  CHECK(std::isinf(*r.parameters.get<double>("big")));
  // Non-finite parameters are written as tokens and read back.
  const oip::inference_request special =
      decode(R"({"parameters":{"n":-Infinity,"p":Infinity,"q":NaN},"inputs":[]})");
  CHECK(*special.parameters.get<double>("n") == -INFINITY);
  CHECK(*special.parameters.get<double>("p") == INFINITY);
  CHECK(std::isnan(*special.parameters.get<double>("q")));
  CHECK(*r.parameters.get<bool>("b"));
  CHECK(*r.parameters.get<std::string>("s") == "x");
  REQUIRE(r.outputs.size() == 1);
  CHECK(*r.outputs[0].parameters.get<bool>("binary_data"));
  CHECK_FALSE(decode(R"({"inputs":[]})").id.has_value());
}

TEST_CASE("double parameters are written so that they read back as doubles, sign included") {
  oip::inference_request request;
  request.parameters.set("whole", 2.0);
  request.parameters.set("negative_zero", -0.0);
  request.parameters.set("count", std::int64_t{2});
  oip::result<oip::encoded_body> body = oip::encode_request(request, {});
  REQUIRE(body.ok());
  CHECK(body->json.find(R"("whole":2.0)") != std::string::npos);
  CHECK(body->json.find(R"("negative_zero":-0.0)") != std::string::npos);
  CHECK(body->json.find(R"("count":2})") != std::string::npos);
  const oip::inference_request back = decode(body->json);
  CHECK(*back.parameters.get<double>("whole") == 2.0);
  CHECK(std::signbit(*back.parameters.get<double>("negative_zero")));
  CHECK(*back.parameters.get<std::int64_t>("count") == 2);
}

TEST_CASE("integers are range-checked for their datatype, never narrowed") {
  CHECK(values_of<std::int8_t>(decode_one("INT8", "[2]", "[-128,127]")) ==
        std::vector<std::int8_t>{-128, 127});
  CHECK(values_of<std::uint8_t>(decode_one("UINT8", "[1]", "[255]")) ==
        std::vector<std::uint8_t>{255});
  CHECK(values_of<std::int64_t>(
            decode_one("INT64", "[2]", "[-9223372036854775808,9223372036854775807]")) ==
        std::vector<std::int64_t>{std::numeric_limits<std::int64_t>::min(),
                                  std::numeric_limits<std::int64_t>::max()});
  CHECK(values_of<std::uint64_t>(decode_one("UINT64", "[1]", "[18446744073709551615]")) ==
        std::vector<std::uint64_t>{std::numeric_limits<std::uint64_t>::max()});
  CHECK(values_of<std::int16_t>(decode_one("INT16", "[1]", "[-0]")) ==
        std::vector<std::int16_t>{0});

  CHECK(decode_error(R"({"inputs":[{"name":"x","shape":[1],"datatype":"INT8","data":[128]}]})")
            .message() ==
        "unable to parse 'data' for input 'x': element 0 is 128, out of range for "
        "INT8 [-128, 127]");
  CHECK(decode_error(R"({"inputs":[{"name":"x","shape":[1],"datatype":"UINT16","data":[-1]}]})")
            .message() ==
        "unable to parse 'data' for input 'x': element 0 is -1, out of range for "
        "UINT16 [0, 65535]");
  CHECK(decode_error(R"({"inputs":[{"name":"x","shape":[1],"datatype":"INT32","data":[1.0]}]})")
            .message() ==
        "unable to parse 'data' for input 'x': element 0 is 1.0, expected a signed "
        "integer for INT32");
  CHECK(decode_error(R"({"inputs":[{"name":"x","shape":[1],"datatype":"UINT64","data":[1e3]}]})")
            .message() ==
        "unable to parse 'data' for input 'x': element 0 is 1e3, expected an "
        "unsigned integer for UINT64");
}

namespace {

__extension__ using int128 = __int128;  // wide enough for every integer datatype and beyond

// An integer token's value by a reference reader (JSON's integer grammar, 128-bit arithmetic), or
// nothing for a token that is no JSON integer.
std::optional<int128> reference_integer(const std::string& token) {
  std::size_t at = token.size() > 0 && token[0] == '-' ? 1 : 0;
  const std::size_t digits = token.size() - at;
  if (digits == 0 || digits > 30 || (token[at] == '0' && digits > 1)) return std::nullopt;
  int128 value = 0;
  for (; at < token.size(); ++at) {
    if (token[at] < '0' || token[at] > '9') return std::nullopt;
    value = value * 10 + (token[at] - '0');
  }
  return token[0] == '-' ? -value : value;
}

template <class T>
void check_integer_tokens(const std::string& type, const std::vector<std::string>& tokens) {
  for (const std::string& token : tokens) {
    const std::optional<int128> expected = reference_integer(token);
    const bool fits = expected && *expected >= std::numeric_limits<T>::min() &&
                      *expected <= std::numeric_limits<T>::max();
    // Alone, between neighbours, with whitespace around, and nested.
    struct form {
      std::string shape;
      std::string before;
      std::string after;
      std::size_t index = 0;  // of the token among the elements
    };
    for (const form& f : {form{"[1]", "[", "]", 0}, form{"[3]", "[7,", ",7]", 1},
                          form{"[2]", "[ ", " ,\n7]", 0}, form{"[2,1]", "[[7],[", "\t]]", 1}}) {
      std::string data = f.before;
      data += token;
      data += f.after;
      std::string json = R"({"inputs":[{"name":"x","shape":)";
      json += f.shape;
      json += R"(,"datatype":")";
      json += type;
      json += R"(","data":)";
      json += data;
      json += "}]}";
      oip::result<oip::inference_request> r = oip::decode_request(body_of(json), std::nullopt);
      INFO(type, " ", data);
      REQUIRE(r.ok() == fits);
      if (!fits) {
        CHECK(r.error().code() == oip::errc::invalid_argument);
        continue;
      }
      const std::vector<T> values = values_of<T>(r->inputs.at(0));
      CHECK(static_cast<int128>(values.at(f.index)) == *expected);
    }
  }
}

}  // namespace

TEST_CASE("integer data: exactly the integers that fit the datatype, from any token") {
  std::vector<std::string> tokens{"0",   "-0",  "00", "01",  "-01", "-",  "+1", "1.0", "1e2",
                                  "1E2", "0x1", "1-", "--1", "1a",  "1.", ".1", "-.5", "true"};
  const auto add_around = [&tokens](int128 centre) {
    for (int delta = -2; delta <= 2; ++delta) {
      int128 v = centre + delta;
      const bool negative = v < 0;
      std::string digits;
      if (v == 0) digits = "0";
      for (; v != 0; v /= 10)
        digits.insert(digits.begin(), static_cast<char>('0' + (negative ? -(v % 10) : v % 10)));
      tokens.push_back((negative ? "-" : "") + digits);
    }
  };
  int128 power = 1;
  for (int i = 0; i <= 22; ++i, power *= 10) {
    add_around(power);
    add_around(-power);
  }
  for (const int128 limit :
       {int128{127}, int128{255}, int128{32767}, int128{65535}, int128{2147483647},
        int128{4294967295}, int128{std::numeric_limits<std::int64_t>::max()},
        int128{std::numeric_limits<std::uint64_t>::max()}}) {
    add_around(limit);
    add_around(-limit - 1);
  }
  std::mt19937_64 rng{7};
  for (int i = 0; i < 200; ++i) {
    const std::uint64_t bits = rng() >> (rng() % 64);
    add_around(i % 2 == 0 ? int128{bits} : -int128{bits});
  }
  check_integer_tokens<std::int8_t>("INT8", tokens);
  check_integer_tokens<std::int16_t>("INT16", tokens);
  check_integer_tokens<std::int32_t>("INT32", tokens);
  check_integer_tokens<std::int64_t>("INT64", tokens);
  check_integer_tokens<std::uint8_t>("UINT8", tokens);
  check_integer_tokens<std::uint16_t>("UINT16", tokens);
  check_integer_tokens<std::uint32_t>("UINT32", tokens);
  check_integer_tokens<std::uint64_t>("UINT64", tokens);
}

TEST_CASE("FP32 is rounded once, straight from the decimal") {
  // Through double this would round twice and give 0x1.000004p+0.
  const oip::tensor t =
      decode_one("FP32", "[3]", "[1.000000178813934326171874999999, 0.1, 3.4028235e38]");
  CHECK(bits(t.at<float>(0)) == bits(0x1.000002p+0F));
  CHECK(t.at<float>(1) == 0.1F);
  CHECK(t.at<float>(2) == std::numeric_limits<float>::max());
  // Out of range: correctly rounded to infinity and to zero.
  const oip::tensor extremes = decode_one("FP32", "[3]", "[1e39, -1e-50, 1e-46]");
  CHECK(std::isinf(extremes.at<float>(0)));
  CHECK(bits(extremes.at<float>(1)) == 0x80000000U);
  CHECK(extremes.at<float>(2) == 0.0F);
}

TEST_CASE("FP64 is correctly rounded") {
  const oip::tensor t = decode_one("FP64", "[2]", "[0.1, 2.2250738585072014e-308]");
  CHECK(t.at<double>(0) == 0.1);
  CHECK(t.at<double>(1) == std::numeric_limits<double>::min());
}

TEST_CASE("a fraction of more than 19 digits after '0.' is read exactly") {
  // simdjson before 3.6.3 wraps its digit accumulator on these unnoticed (simdjson#2093):
  // "0.95000000000000000000" read as 0.0277.
  const std::vector<std::string> tokens{"0.95000000000000000000", "-0.1000000000000000000001",
                                        "0.0022153854370117187500000000000000000001",
                                        "0.00221538543701171875000"};
  std::string data = "[";
  for (const std::string& t : tokens) data += (data.size() > 1 ? "," : "") + t;
  data += "]";
  const std::string shape = "[" + std::to_string(tokens.size()) + "]";
  const oip::tensor fp32 = decode_one("FP32", shape, data);
  const oip::tensor fp64 = decode_one("FP64", shape, data);
  const oip::tensor fp16 = decode_one("FP16", shape, data);
  const oip::tensor bf16 = decode_one("BF16", shape, data);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    CAPTURE(tokens[i]);
    const double exact = std::strtod(tokens[i].c_str(), nullptr);
    CHECK(fp64.at<double>(i) == exact);
    CHECK(fp32.at<float>(i) == std::strtof(tokens[i].c_str(), nullptr));
    // None of these lies halfway between two 16-bit values: rounding the double is exact.
    CHECK(fp16.at<oip::half>(i) == oip::to_half(static_cast<float>(exact)));
    CHECK(bf16.at<oip::bfloat16>(i) == oip::to_bfloat16(static_cast<float>(exact)));
  }
}

TEST_CASE("FP16 and BF16 from JSON numbers, rounded to nearest even once") {
  const oip::tensor h = decode_one("FP16", "[4]", "[0.1, 65504, 65520, 1e-8]");
  CHECK(h.at<oip::half>(0).bits == 0x2E66);
  CHECK(h.at<oip::half>(1).bits == 0x7BFF);
  CHECK(h.at<oip::half>(2).bits == 0x7C00);  // halfway to 65536: ties to even, infinity
  CHECK(h.at<oip::half>(3).bits == 0x0000);
  // 2049 is exactly halfway between 2048 and 2050 (ties to even: 2048); a decimal a hair above it
  // must round up even though its nearest double is 2049 itself.
  const oip::tensor ties = decode_one("FP16", "[3]", "[2049, 2049.0000000000000000001, 2051]");
  CHECK(oip::to_float(ties.at<oip::half>(0)) == 2048.0F);
  CHECK(oip::to_float(ties.at<oip::half>(1)) == 2050.0F);
  CHECK(oip::to_float(ties.at<oip::half>(2)) == 2052.0F);
  const oip::tensor b = decode_one("BF16", "[3]", "[1, 1.00390625, 1.0039062500000000000001]");
  CHECK(b.at<oip::bfloat16>(0).bits == 0x3F80);
  CHECK(b.at<oip::bfloat16>(1).bits == 0x3F80);  // the tie, to even
  CHECK(b.at<oip::bfloat16>(2).bits == 0x3F81);
}

TEST_CASE("NaN and infinities: tokens in, tokens (or null) out") {
  const oip::tensor t = decode_one("FP32", "[3]", "[NaN, Infinity, -Infinity]");
  CHECK(std::isnan(t.at<float>(0)));
  CHECK(t.at<float>(1) == INFINITY);
  CHECK(t.at<float>(2) == -INFINITY);
  CHECK(encode_outputs({t}).find(R"("data":[NaN,Infinity,-Infinity])") != std::string::npos);
  oip::response_format as_null;
  as_null.non_finite_as_null = true;
  CHECK(encode_outputs({t}, as_null).find(R"("data":[null,null,null])") != std::string::npos);
  // Not JSON: other spellings are refused.
  CHECK(decode_error(R"({"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[nan]}]})")
            .http_status() == 400);
  CHECK(decode_error(R"({"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[inf]}]})")
            .http_status() == 400);
}

TEST_CASE("BOOL from true and false only") {
  CHECK(values_of<bool>(decode_one("BOOL", "[2]", "[true,false]")) ==
        std::vector<bool>{true, false});
  CHECK(decode_error(R"({"inputs":[{"name":"x","shape":[1],"datatype":"BOOL","data":[1]}]})")
            .message() ==
        "unable to parse 'data' for input 'x': element 0 is 1, expected true or "
        "false for BOOL");
}

TEST_CASE("BYTES from strings, every escape byte-exact") {
  const oip::tensor t = decode_one(
      "BYTES", "[5]", R"(["a\u0000b", "\"\\\/\b\f\n\r\t", "\u00e9\u20ac", "\ud83d\ude00", ""])");
  CHECK(strings_of(t) == std::vector<std::string>{std::string("a\0b", 3), "\"\\/\b\f\n\r\t",
                                                  "\xc3\xa9\xe2\x82\xac", "\xf0\x9f\x98\x80", ""});
  // And back out as JSON: the NUL survives as \u0000.
  CHECK(encode_outputs({t}).find(R"(["a\u0000b","\"\\/\b\f\n\r\t","é€","😀",""])") !=
        std::string::npos);
}

TEST_CASE("BYTES that are not UTF-8 cannot be written as JSON: an error, never altered") {
  const std::vector<std::string_view> elements{"ok", "\xff\xfe"};
  oip::result<oip::tensor> t = oip::tensor::from_strings("OUTPUT0", {2}, elements);
  REQUIRE(t.ok());
  oip::inference_response response;
  response.outputs = {*t};
  oip::result<oip::encoded_body> json = oip::encode_response(response);
  REQUIRE_FALSE(json.ok());
  CHECK(json.error().message() ==
        "output 'OUTPUT0' element 1 is not valid UTF-8 (byte 0) and "
        "cannot be written as a JSON string: ask for it as binary data");
  oip::response_format binary;
  binary.binary_by_default = true;
  CHECK(oip::encode_response(response, binary).ok());
}

TEST_CASE("data may be nested at any depth; leaves are taken in row-major order") {
  CHECK(values_of<std::int32_t>(decode_one("INT32", "[2,2]", "[[1,2],[3,4]]")) ==
        std::vector<std::int32_t>{1, 2, 3, 4});
  CHECK(values_of<std::int32_t>(decode_one("INT32", "[2,2]", "[1,2,3,4]")) ==
        std::vector<std::int32_t>{1, 2, 3, 4});
  // As in Triton, the nesting need not follow the shape: only the leaf count must match.
  CHECK(values_of<std::int32_t>(decode_one("INT32", "[4]", "[[1,[2]],[[3],4]]")) ==
        std::vector<std::int32_t>{1, 2, 3, 4});
  CHECK(values_of<std::int32_t>(decode_one("INT32", "[0,3]", "[]")).empty());
}

TEST_CASE("data before datatype and shape is decoded all the same") {
  const oip::inference_request r =
      decode(R"({"inputs":[{"data":[[1.5,2],[3,4]],"name":"x","shape":[2,2],"datatype":"FP32"}]})");
  CHECK(values_of<float>(r.inputs[0]) == std::vector<float>{1.5F, 2.F, 3.F, 4.F});
  CHECK(decode_error(R"({"inputs":[{"data":[1,2,}],"name":"x","shape":[2],"datatype":"INT32"}]})")
            .message()
            .find("failed to parse the request JSON buffer") == 0);
  CHECK(decode_error(R"({"inputs":[{"data":[1,"a"],"name":"x","shape":[2],"datatype":"INT32"}]})")
            .message() ==
        "unable to parse 'data' for input 'x': element 1 is \"a\", expected a "
        "signed integer for INT32");
}

TEST_CASE("unknown keys are accepted and validated") {
  CHECK(decode(R"({"model_name":"m","extra":{"a":[1,{"b":null}],"c":"\u00e9"},"inputs":[]})")
            .inputs.empty());
  CHECK(decode_error(R"({"extra":{"a":tru},"inputs":[]})").http_status() == 400);
  CHECK(decode_error(R"({"extra":{"a":1,"a":2},"inputs":[]})").message() ==
        "failed to parse the request JSON buffer: duplicate key 'a'");
}

TEST_CASE("keys and strings mean the same with or without escapes") {
  // Plain keys and strings are read in place, escaped ones unescaped: both spellings meet.
  const oip::inference_request r = decode(
      R"({"inputs":[{"na\u006de":"IN\u0050UT0","shape":[1],"d\u0061tatype":"INT32","data":[7]}],)"
      R"("i\u0064":"r\"1"})");
  REQUIRE(r.inputs.size() == 1);
  CHECK(r.inputs[0].name() == "INPUT0");
  CHECK(r.inputs[0].type() == datatype::int32);
  CHECK(r.id == "r\"1");
  CHECK(decode_error(R"({"inputs":[],"in\u0070uts":[]})").message() ==
        "failed to parse the request JSON buffer: duplicate key 'inputs'");
  CHECK(decode_error(R"({"inputs":[{"name":"x","na\u006de":"y","shape":[1],"datatype":"INT32",)"
                     R"("data":[1]}]})")
            .message() == "failed to parse the request JSON buffer: duplicate key 'name'");
  // A raw control character is not JSON, in a key or in a value.
  CHECK(decode_error("{\"inputs\":[],\"a\x01\":1}").http_status() == 400);
  CHECK(decode_error("{\"inputs\":[],\"id\":\"a\x1f\"}").http_status() == 400);
}

TEST_CASE("strings of every length, with an escape or a control character at every place") {
  // The scan for a string's end reads 16 bytes at a time: each length around those steps, each
  // place of the stop inside them, and strings that end the document.
  for (std::size_t length = 0; length <= 40; ++length) {
    const std::string plain(length, 'n');
    const oip::inference_request r = decode(R"({"inputs":[],"id":")" + plain + R"("})");
    CHECK(r.id == plain);
    for (std::size_t at = 0; at < length; ++at) {
      CAPTURE(length);
      CAPTURE(at);
      std::string escaped = plain;
      escaped.replace(at, 1, R"(\")");
      std::string expected = plain;
      expected[at] = '"';
      CHECK(decode(R"({"inputs":[{"name":")" + escaped +
                   R"(","shape":[1],"datatype":"INT8","data":[1]}]})")
                .inputs.at(0)
                .name() == expected);
      std::string with_control = plain;
      with_control[at] = '\x1f';
      CHECK(decode_error(R"({"inputs":[],"id":")" + with_control + R"("})").http_status() == 400);
      // Unterminated: the document ends inside the string.
      CHECK(decode_error(R"({"inputs":[],"id":")" + plain.substr(0, at)).http_status() == 400);
    }
  }
}

// decode_request reads the usual form of a request (known keys, no escapes, datatype and shape
// before data) with a direct reader and leaves everything else to the general one. An unknown key
// first sends any document to the general reader: both must decode the same, or refuse alike.
// `json` (an object) with an unknown key first, which sends it to the general reader.
std::string with_unknown_first_key(const std::string& json) {
  REQUIRE(json.front() == '{');
  const bool empty_object = json.find_first_not_of(" \t\r\n", 1) == json.find('}', 1);
  return R"({"oip-general":0)" + std::string{empty_object ? "" : ","} + json.substr(1);
}

void check_both_readers_agree(const std::string& json, std::string binary = {},
                              const oip::limits& bounds = {}) {
  CAPTURE(json);
  const std::string general = with_unknown_first_key(json);
  const auto decode_with = [&](const std::string& text) {
    return oip::decode_request(
        body_of(text + binary),
        binary.empty() ? std::nullopt : std::optional<std::size_t>{text.size()}, bounds);
  };
  const oip::result<oip::inference_request> usual = decode_with(json);
  const oip::result<oip::inference_request> reference = decode_with(general);
  REQUIRE(usual.ok() == reference.ok());
  if (!usual.ok()) {
    CHECK(usual.error().code() == reference.error().code());
    return;
  }
  CHECK(usual->id == reference->id);
  CHECK(usual->parameters == reference->parameters);
  CHECK(usual->outputs == reference->outputs);
  oip::testing::check_same_tensors(usual->inputs, reference->inputs);
}

TEST_CASE("the usual form and the general reader decode alike") {
  const std::string int32 = R"("name":"INPUT0","shape":[1,4],"datatype":"INT32")";
  for (
      const std::string& json : std::vector<std::string>{
          // accepted in the usual form
          R"({"inputs":[{)" + int32 + R"(,"data":[1,2,3,4]}]})",
          R"({"id":"r-1","inputs":[{)" + int32 +
              R"(,"data":[[1,2],[3,4]]}],"outputs":[{"name":"A"},)"
              R"({"name":"B","parameters":{"binary_data":true,"classification":3}}]})",
          R"({"parameters":{"i":-5,"u":18446744073709551615,"d":1.5,"s":"x","b":false,"n":-Infinity},)"
          R"("inputs":[{"datatype":"FP32","shape":[2],"name":"f","parameters":{"p":1},)"
          R"("data":[0.1,1e-3]}]})",
          R"({"inputs":[{"name":"s","shape":[2],"datatype":"BYTES","data":["a\n\u0000","é"]}]})",
          R"({"inputs":[{"name":"b","shape":[3],"datatype":"BOOL","data":[true,false,true]},)"
          R"({"name":"h","shape":[1],"datatype":"FP16","data":[0.333]},)"
          R"({"name":"u","shape":[2],"datatype":"UINT64","data":[0,18446744073709551615]},)"
          R"({"name":"e","shape":[0,3],"datatype":"FP64","data":[]}]})",
          R"({"inputs":[]})",
          R"({ "inputs" : [ { "name" : "x" , "shape" : [ 1 ] , "datatype" : "INT8" , "data" : [ -128 ] } ] } )",
          // left to the general reader, accepted
          R"({"inputs":[{"name":"x","data":[1],"shape":[1],"datatype":"INT32"}]})",
          R"({"inputs":[{"n\u0061me":"x","shape":[1],"datatype":"INT32","data":[1]}]})",
          R"({"inputs":[{"name":"\u0078","shape":[1],"datatype":"INT32","data":[1]}]})",
          R"({"inputs":[{"name":"x","shape":[1],"datatype":"INT32","data":[1],"extra":[1]}]})",
          R"({"inputs":[{"name":"x","shape":[1],"datatype":"UINT8","data":[-0]}]})",
          // a product that overflows before a zero dimension: no elements
          R"({"inputs":[{"name":"z","shape":[4294967296,4294967296,0],"datatype":"INT32","data":[]}]})",
          // refused by both
          R"({"inputs":[{"name":"z","shape":[4294967296,4294967296,-1],"datatype":"INT32","data":[]}]})",
          R"({"inputs":[{"name":"z","shape":[4294967296,4294967296],"datatype":"INT32","data":[]}]})",
          R"({})",
          R"({"inputs":[{)" + int32 + R"(,"data":[1,2,3]}]})",
          R"({"inputs":[{)" + int32 + R"(,"data":[1,2,3,4,5]}]})",
          R"({"inputs":[{)" + int32 + R"(,"data":[1,2,3,4.0]}]})",
          R"({"inputs":[{)" + int32 + R"(,"data":[1,2,3,2147483648]}]})",
          R"({"inputs":[{)" + int32 + R"(,"data":[1,2,3,4]},{)" + int32 + R"(,"data":[1,2,3,4]}]})",
          R"({"inputs":[{)" + int32 +
              R"(,"data":[1,2,3,4]}],"outputs":[{"name":"A"},{"name":"A"}]})",
          R"({"inputs":[{)" + int32 + R"(,"data":[1,2,3,4]}],"inputs":[]})",
          R"({"inputs":[{)" + int32 + R"(,"shape":[4],"data":[1,2,3,4]}]})",
          R"({"inputs":[{"name":"x","shape":[-1],"datatype":"INT32","data":[1]}]})",
          R"({"inputs":[{"name":"x","shape":[1],"datatype":"INT31","data":[1]}]})",
          R"({"inputs":[{"name":"x","shape":[1],"datatype":"INT32"}]})",
          R"({"inputs":[{"shape":[1],"datatype":"INT32","data":[1]}]})",
          R"({"inputs":[{"name":"x","shape":[1],"datatype":"INT32","data":[1],)"
          R"("parameters":{"binary_data_size":4}}]})",
          R"({"inputs":[{"name":"x","shape":[1],"datatype":"INT32","data":[tru]}]})",
          R"({"inputs":[{"name":"x","shape":[1],"datatype":"INT32","data":[1]}]} [])",
          R"({"inputs":[{"name":"x","shape":[1],"datatype":"INT32","data":[1]}],"id":5})",
          R"({"inputs":[{"name":"x","shape":[1],"datatype":"BYTES","data":[1]}]})",
          R"({"inputs":[{"name":"x","shape":[1],"datatype":"BOOL","data":[1]}]})",
          "{\"inputs\":[{\"name\":\"x\x01\",\"shape\":[1],\"datatype\":\"INT32\",\"data\":[1]}]}",
      }) {
    check_both_readers_agree(json);
  }
  const oip::result<oip::inference_request> no_elements = oip::decode_request(
      body_of(R"({"inputs":[{"name":"z","shape":[4294967296,4294967296,0],"datatype":"INT32",)"
              R"("data":[]}]})"),
      std::nullopt);
  REQUIRE(no_elements.ok());
  CHECK(no_elements->inputs[0].element_count() == 0);
  CHECK(no_elements->inputs[0].data().size() == 0);

  // Integer data at the edges of each type's range and of the JSON number grammar.
  for (const auto& [type, data] : std::vector<std::pair<std::string, std::string>>{
           {"INT32", "[1,-2,3,-4]"},
           {"INT32", "[ 1 ,\n-2\t,3\r, -4 ]"},
           {"INT32", "[1,2,[3,4]]"},
           {"INT32", "[[1,2],[3,4]]"},
           {"INT32", "[1,2,3]"},
           {"INT32", "[1,2,3,4,5]"},
           {"INT32", "[1,2,3,4,]"},
           {"INT32", "[,1,2,3,4]"},
           {"INT32", "[1,2,3 4]"},
           {"INT32", "[1,2,3,04]"},
           {"INT32", "[1,2,3,-]"},
           {"INT32", "[1,2,3,+4]"},
           {"INT32", "[1,2,3,4.0]"},
           {"INT32", "[1,2,3,4e0]"},
           {"INT32", "[1,2,3,-0]"},
           {"INT32", "[1,2,3,2147483647]"},
           {"INT32", "[1,2,3,-2147483648]"},
           {"INT32", "[1,2,3,-2147483649]"},
           {"INT32", "[1,2,3,\"4\"]"},
           {"INT32", "[1,2,3,true]"},
           {"INT32", "[1,2,3,null]"},
           {"INT64", "[9223372036854775807,-9223372036854775808,0,1]"},
           {"INT64", "[9223372036854775808,0,0,1]"},
           {"INT64", "[1000000000000000000,-1000000000000000000,0,1]"},
           {"INT64", "[10000000000000000000,0,0,1]"},
           {"UINT64", "[18446744073709551615,9999999999999999999,0,1]"},
           {"UINT64", "[18446744073709551616,0,0,1]"},
           {"UINT8", "[255,0,-0,1]"},
           {"UINT8", "[256,0,0,1]"},
           {"UINT8", "[-1,0,0,1]"},
           {"INT8", "[127,-128,0,1]"},
           {"INT8", "[128,0,0,1]"},
           {"INT8", "[-129,0,0,1]"},
           {"UINT16", "[65535,0,0,1]"},
           {"INT16", "[-32768,32767,0,1]"},
           {"UINT32", "[4294967295,4294967296,0,1]"},
       }) {
    check_both_readers_agree(R"({"inputs":[{"name":"x","shape":[4],"datatype":")" + type +
                             R"(","data":)" + data + "}]}");
  }
  check_both_readers_agree(R"({"inputs":[{"name":"x","shape":[0],"datatype":"INT32","data":[]}]})");
  check_both_readers_agree(R"({"inputs":[{"name":"x","shape":[1],"datatype":"INT32","data":[]}]})");
  check_both_readers_agree(
      R"({"inputs":[{"name":"x","shape":[0],"datatype":"INT32","data":[1]}]})");
  check_both_readers_agree(
      R"({"inputs":[{"name":"x","shape":[0],"datatype":"INT32","data":[ ]}]})");
  CHECK(values_of<std::int64_t>(
            decode_one("INT64", "[3]", "[9223372036854775807,-9223372036854775808,-0]")) ==
        std::vector<std::int64_t>{std::numeric_limits<std::int64_t>::max(),
                                  std::numeric_limits<std::int64_t>::min(), 0});
  CHECK(values_of<std::uint8_t>(decode_one("UINT8", "[2]", "[ 255 , -0 ]")) ==
        std::vector<std::uint8_t>{255, 0});

  // Binary data: placed in input order, sizes checked, nothing left over.
  const std::string two_binary =
      R"({"inputs":[{"name":"a","shape":[2],"datatype":"INT16","parameters":{"binary_data_size":4}},)"
      R"({"name":"b","shape":[1],"datatype":"BYTES","parameters":{"binary_data_size":6}}]})";
  check_both_readers_agree(two_binary, std::string("\x01\x00\x02\x00\x02\x00\x00\x00hi", 10));
  check_both_readers_agree(two_binary, std::string("\x01\x00\x02\x00\x02\x00\x00\x00hi!", 11));
  check_both_readers_agree(two_binary, std::string("\x01\x00\x02\x00\x02\x00\x00\x00h", 9));
  check_both_readers_agree(two_binary, std::string("\x01\x00\x02\x00\x05\x00\x00\x00hi", 10));

  // Limits apply to both.
  oip::limits shallow;
  shallow.max_json_depth = 2;
  check_both_readers_agree(R"({"inputs":[{)" + int32 + R"(,"data":[1,2,3,4]}]})", {}, shallow);
  oip::limits few;
  few.max_elements = 3;
  check_both_readers_agree(R"({"inputs":[{)" + int32 + R"(,"data":[1,2,3,4]}]})", {}, few);
}

// decode_response reads the usual form of a response the same way: the general reader, sent there
// by an unknown first key, must decode alike, or refuse alike.
void check_both_response_readers_agree(const std::string& json, const std::string& binary = {}) {
  CAPTURE(json);
  const std::string general = with_unknown_first_key(json);
  const auto decode_with = [&](const std::string& text) {
    return oip::decode_response(
        body_of(text + binary),
        binary.empty() ? std::nullopt : std::optional<std::size_t>{text.size()});
  };
  const oip::result<oip::inference_response> usual = decode_with(json);
  const oip::result<oip::inference_response> reference = decode_with(general);
  REQUIRE(usual.ok() == reference.ok());
  if (!usual.ok()) {
    CHECK(usual.error().code() == reference.error().code());
    CHECK(usual.error().message() == reference.error().message());
    return;
  }
  CHECK(usual->id == reference->id);
  CHECK(usual->model_name == reference->model_name);
  CHECK(usual->model_version == reference->model_version);
  CHECK(usual->parameters == reference->parameters);
  oip::testing::check_same_tensors(usual->outputs, reference->outputs);
}

TEST_CASE("the usual form of a response and the general reader decode alike") {
  const std::string out = R"("name":"OUTPUT0","datatype":"INT32","shape":[1,4])";
  const std::string four(16, '\x01');
  for (const auto& [json, binary] : std::vector<std::pair<std::string, std::string>>{
           // accepted in the usual form
           {R"({"model_name":"simple","model_version":"1","outputs":[{)" + out +
                R"(,"data":[1,2,3,4]}]})",
            ""},
           {R"({"id":"r","model_name":"m","model_version":"","parameters":{"p":1,"s":"x"},)"
            R"("outputs":[{)" +
                out +
                R"(,"parameters":{"binary_data_size":16}},{"name":"B","datatype":"BYTES",)"
                R"("shape":[2],"data":["a","é"]}]})",
            four},
           {R"({"model_name":"m","outputs":[]})", ""},
           {R"({"model_name":"m"})", ""},
           {R"({"outputs":[{"name":"f","datatype":"FP16","shape":[1],"data":[0.333]},)"
            R"({"name":"e","datatype":"FP64","shape":[0,3],"data":[]}]})",
            ""},
           // left to the general reader
           {R"({"outputs":[{"name":"x","data":[1],"shape":[1],"datatype":"INT32"}]})", ""},
           {R"({"model_name":"simple","outputs":[]})", ""},
           {R"({"outputs":[{)" + out + R"(,"data":[1,2,3,4],"extra":{}}]})", ""},
           // refused by both
           {R"({"outputs":[{)" + out + R"(,"data":[1,2,3]}]})", ""},
           {R"({"outputs":[{)" + out + R"(,"data":[1,2,3,4]},{)" + out + R"(,"data":[1,2,3,4]}]})",
            ""},
           {R"({"outputs":[{)" + out + R"(,"parameters":{"binary_data_size":12}}]})", four},
           {R"({"outputs":[{)" + out + R"(,"parameters":{"binary_data_size":16}}]})", four + "x"},
           {R"({"outputs":[{)" + out + R"(}]})", ""},
           {R"({"outputs":[{)" + out +
                R"(,"data":[1,2,3,4],"parameters":{"binary_data_size":16}}]})",
            four},
           {R"({"model_name":5,"outputs":[]})", ""},
           {R"({"outputs":[]} [])", ""},
           {R"({"outputs":[],"outputs":[]})", ""},
       }) {
    check_both_response_readers_agree(json, binary);
  }
}

TEST_CASE("responses encode in the protocol's order, shortest numbers") {
  std::vector<float> values{0.1F, 1.0F, -2.5F, 1e-7F, 3.4028235e38F};
  oip::result<oip::tensor> t = oip::tensor::from_values<float>("OUTPUT0", {5}, values);
  REQUIRE(t.ok());
  oip::inference_response response;
  response.id = "7";
  response.model_name = "simple";
  response.model_version = "1";
  response.parameters.set("sequence_id", std::int64_t{3});
  response.outputs = {*t};
  oip::result<oip::encoded_body> body = oip::encode_response(response);
  REQUIRE(body.ok());
  CHECK(body->json ==
        R"({"id":"7","model_name":"simple","model_version":"1","parameters":{"sequence_id":3},)"
        R"("outputs":[{"name":"OUTPUT0","datatype":"FP32","shape":[5],)"
        R"("data":[0.1,1,-2.5,1e-07,3.4028235e+38]}]})");
  CHECK_FALSE(body->uses_binary);
  CHECK(body->content_type() == "application/json");
}

// The text of one encoded tensor's "data" array.
template <class T>
std::string encoded_data(const std::vector<T>& values) {
  const auto count = static_cast<std::int64_t>(values.size());
  oip::result<oip::tensor> t = oip::tensor::from_values<T>("y", {count}, values);
  REQUIRE(t.ok());
  oip::inference_response response;
  response.model_name = "m";
  response.outputs = {*t};
  oip::result<oip::encoded_body> body = oip::encode_response(response);
  REQUIRE(body.ok());
  const std::string_view json = body->json;
  const std::size_t begin = json.find(R"("data":[)") + 8;
  const std::size_t end = json.find(']', begin);
  REQUIRE(end != std::string_view::npos);
  return std::string{json.substr(begin, end - begin)};
}

// Compares the encoder's text of every value with std::to_chars's (its shortest round trip).
template <class T>
void check_written_as_to_chars(const std::vector<T>& values) {
  const std::string encoded = encoded_data(values);
  std::size_t at = 0;
  std::size_t mismatches = 0;
  for (const T v : values) {
    const std::size_t comma = std::min(encoded.find(',', at), encoded.size());
    char expected[64];
    const std::string_view want(
        expected, std::to_chars(expected, expected + sizeof expected, v).ptr - expected);
    const std::string_view got = std::string_view(encoded).substr(at, comma - at);
    if (got != want && ++mismatches <= 5) CHECK(got == want);
    at = comma + 1;
  }
  CHECK(mismatches == 0);
}

template <class T, class Bits>
std::vector<T> finite_values_from_bits(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng{seed};
  std::vector<T> values;
  while (values.size() < n) {
    const T v = std::bit_cast<T>(static_cast<Bits>(rng()));
    if (std::isfinite(v)) values.push_back(v);
  }
  // Around every power of ten the notation may switch between fixed and scientific.
  for (int e = std::numeric_limits<T>::min_exponent10; e <= std::numeric_limits<T>::max_exponent10;
       ++e) {
    const T p = static_cast<T>(std::pow(10.0L, e));
    for (const T v : {p, std::nextafter(p, T{0}), std::nextafter(p, T{10} * p), T{1.5} * p}) {
      if (std::isfinite(v)) values.push_back(v);
    }
  }
  for (const T v :
       {std::numeric_limits<T>::denorm_min(), std::numeric_limits<T>::min(),
        std::numeric_limits<T>::max(), std::numeric_limits<T>::lowest(), T{0}, -T{0}, T{1}, T{-1},
        static_cast<T>(0.1), static_cast<T>(123456789.0), static_cast<T>(1e16)}) {
    values.push_back(v);
  }
  return values;
}

TEST_CASE("FP32 and FP64 data are written exactly as std::to_chars writes them") {
  // The encoder finds the digits with fmt's Dragonbox rather than to_chars (it is faster), so
  // every kind of value is compared: random bit patterns (subnormals included) and the values
  // around each power of ten.
  check_written_as_to_chars(finite_values_from_bits<float, std::uint32_t>(200'000, 1));
  check_written_as_to_chars(finite_values_from_bits<double, std::uint64_t>(200'000, 2));
  std::mt19937 rng{3};
  std::normal_distribution<float> normal;
  std::vector<float> scores(100'000);
  for (float& v : scores) v = normal(rng);
  check_written_as_to_chars(scores);
}

TEST_CASE("FP16 and BF16 encode as the shortest decimal of their own type") {
  const std::vector<oip::half> h{oip::to_half(0.1F), oip::to_half(65504.F), oip::half{0x0001},
                                 oip::to_half(2048.F)};
  const std::vector<oip::bfloat16> b{oip::to_bfloat16(0.1F), oip::to_bfloat16(3.0F)};
  const std::string json = encode_outputs({*oip::tensor::from_values<oip::half>("h", {4}, h),
                                           *oip::tensor::from_values<oip::bfloat16>("b", {2}, b)});
  CHECK(json.find(R"("data":[0.1,6.55e+04,6e-08,2048])") != std::string::npos);
  CHECK(json.find(R"("data":[0.1,3])") != std::string::npos);
  // Negative values are their magnitude's text after a '-' (the texts come from a table of the
  // non-negative values).
  const std::vector<oip::half> negative{oip::to_half(-0.1F), oip::half{0x8000}, oip::half{0xFBFF},
                                        oip::half{0x8001}};
  const std::vector<oip::bfloat16> negative_b{oip::to_bfloat16(-0.1F), oip::bfloat16{0x8000}};
  const std::string negative_json =
      encode_outputs({*oip::tensor::from_values<oip::half>("h", {4}, negative),
                      *oip::tensor::from_values<oip::bfloat16>("b", {2}, negative_b)});
  CHECK(negative_json.find(R"("data":[-0.1,-0,-6.55e+04,-6e-08])") != std::string::npos);
  CHECK(negative_json.find(R"("data":[-0.1,-0])") != std::string::npos);
  // Every half survives the trip through its decimal.
  std::vector<oip::half> all;
  for (std::uint32_t i = 0; i < 65536; ++i) {
    if ((i & 0x7C00) != 0x7C00) all.push_back(oip::half{static_cast<std::uint16_t>(i)});
  }
  oip::result<oip::tensor> every =
      oip::tensor::from_values<oip::half>("h", {static_cast<std::int64_t>(all.size())}, all);
  REQUIRE(every.ok());
  oip::inference_request request;
  request.inputs = {*every};
  oip::result<oip::encoded_body> body =
      oip::encode_request(request, {.half_precision_as_json = true});
  REQUIRE(body.ok());
  oip::result<oip::inference_request> back = oip::decode_request(body_of(body->json), std::nullopt);
  REQUIRE(back.ok());
  CHECK(back->inputs[0].data().as_string_view() == every->data().as_string_view());

  // By default a client sends them as binary data, which Triton needs (it refuses them in JSON),
  // and the other inputs in JSON.
  const std::vector<std::int32_t> small{1, 2};
  request.inputs.push_back(*oip::tensor::from_values<std::int32_t>("i", {2}, small));
  oip::result<oip::encoded_body> mixed = oip::encode_request(request);
  REQUIRE(mixed.ok());
  CHECK(mixed->json.find(R"("binary_data_size":)") != std::string::npos);
  CHECK(mixed->json.find(R"("data":[1,2])") != std::string::npos);
  back = oip::decode_request(oip::buffer::from_string(mixed->flatten()), mixed->header_length());
  REQUIRE(back.ok());
  CHECK(back->inputs[0].data().as_string_view() == every->data().as_string_view());
  CHECK(back->inputs[1].at<std::int32_t>(1) == 2);
}

TEST_CASE("metadata, health and error objects, both directions") {
  const oip::server_metadata server{"oip", "0.1.0", {"binary_tensor_data", "classification"}};
  CHECK(oip::encode(server) ==
        R"({"name":"oip","version":"0.1.0","extensions":["binary_tensor_data","classification"]})");
  CHECK(*oip::decode_server_metadata(oip::encode(server)) == server);

  oip::model_metadata model;
  model.name = "simple";
  model.versions = {"1"};
  model.platform = "oip";
  model.inputs = {{"INPUT0", datatype::int32, {-1, 16}, {}}};
  model.outputs = {{"OUTPUT0", datatype::int32, {-1, 16}, {}}};
  model.properties.set("max_batch_size", std::int64_t{8});
  const std::string json = oip::encode(model);
  CHECK(json == R"({"name":"simple","versions":["1"],"platform":"oip","inputs":[{"name":"INPUT0",)"
                R"("datatype":"INT32","shape":[-1,16]}],"outputs":[{"name":"OUTPUT0","datatype":)"
                R"("INT32","shape":[-1,16]}],"properties":{"max_batch_size":8}})");
  CHECK(*oip::decode_model_metadata(json) == model);
  CHECK_FALSE(
      oip::decode_model_metadata(R"({"name":"m","inputs":[{"name":"a","datatype":"INT32"}]})")
          .ok());

  CHECK(oip::encode(oip::server_live{true}) == R"({"live":true})");
  CHECK(oip::encode(oip::server_ready{false}) == R"({"ready":false})");
  CHECK(oip::encode(oip::model_ready{"simple", true}) == R"({"name":"simple","ready":true})");
  CHECK(oip::decode_server_live(R"({"live":true})")->live);
  CHECK_FALSE(oip::decode_server_ready(R"({"ready":false})")->ready);
  // The spec's server-ready example writes "live": that is not a ready response.
  CHECK_FALSE(oip::decode_server_ready(R"({"live":true})").ok());
  const oip::result<oip::model_ready> ready =
      oip::decode_model_ready(R"({"name":"m","ready":true})");
  CHECK(ready->name == "m");
  CHECK(ready->ready);
  // Triton's health replies have no body: the status says it.
  CHECK(oip::decode_server_live("", 200)->live);
  CHECK_FALSE(oip::decode_server_ready("", 400)->ready);
  CHECK(oip::decode_model_ready("", 200)->ready);
  CHECK_FALSE(oip::decode_server_live("").ok());  // no status to read it from
  CHECK(oip::decode_server_ready(R"({"ready":true})", 200)->ready);
  const oip::status no_body = oip::decode_error("", 400);
  CHECK(no_body.code() == oip::errc::invalid_argument);
  CHECK(no_body.message() == "HTTP 400 with no body");
  // A body that is not the protocol's error object keeps its start, printable and bounded.
  const oip::status page =
      oip::decode_error("<html>\r\n  <h1>502 Bad\x01Gateway</h1>\n</html>\n", 502);
  CHECK(page.code() == oip::errc::internal);
  CHECK(page.message() ==
        "HTTP 502 with a body that is not the protocol's error object: "
        "'<html> <h1>502 Bad?Gateway</h1> </html>'");
  const oip::status other_json =
      oip::decode_error(R"({"detail":"Model with name m does not exist."})", 404);
  CHECK(other_json.code() == oip::errc::not_found);
  CHECK(other_json.message().find(R"('{"detail":"Model with name m does not exist."}')") !=
        std::string::npos);
  const oip::status long_body = oip::decode_error(std::string(1000, 'x'), 500);
  CHECK(long_body.message().size() < 300);
  CHECK(long_body.message().find(std::string(200, 'x') + "...'") != std::string::npos);

  for (const bool only_ready : {false, true}) {
    const std::string body = oip::encode(oip::repository_index_request{only_ready});
    CHECK(body == (only_ready ? R"({"ready":true})" : "{}"));
    CHECK(oip::decode_repository_index_request(body)->ready == only_ready);
  }
  CHECK_FALSE(oip::decode_repository_index_request("")->ready);
  const oip::result<oip::repository_index_request> not_bool =
      oip::decode_repository_index_request(R"({"ready":"true"})");
  REQUIRE_FALSE(not_bool.ok());
  CHECK(not_bool.error().code() == oip::errc::invalid_argument);
  CHECK(not_bool.error().message().find("'ready'") != std::string::npos);

  // A model load's parameters, both ways; a file's base64 content decodes to its bytes.
  oip::parameters load;
  load.set("config", std::string{R"({"max_batch_size":2})"});
  load.set("retries", std::int64_t{3});
  CHECK(*oip::encode_repository_load_request(load) ==
        R"({"parameters":{"config":"{\"max_batch_size\":2}","retries":3}})");
  CHECK(*oip::decode_repository_load_request(*oip::encode_repository_load_request(load)) == load);
  CHECK(*oip::encode_repository_load_request({}) == "{}");
  // Files go as base64 and come back as the same bytes, whatever they hold.
  for (const std::string& bytes :
       {std::string{}, std::string{"a"}, std::string{"ab"}, std::string{"abc"},
        std::string{"\0\xff\0", 3}, std::string{"model\x80\x81 bytes\n"}}) {
    oip::parameters files = load;
    files.set("file:1/model.onnx", bytes);
    const oip::result<std::string> body = oip::encode_repository_load_request(files);
    REQUIRE(body);
    CHECK(*oip::decode_repository_load_request(*body) == files);
  }
  oip::parameters abcd;
  abcd.set("file:1/m", std::string{"abcd"});
  CHECK(*oip::encode_repository_load_request(abcd) == R"({"parameters":{"file:1/m":"YWJjZA=="}})");
  oip::parameters not_bytes;
  not_bytes.set("file:1/m", std::int64_t{5});
  CHECK(oip::encode_repository_load_request(not_bytes).error().http_status() == 400);
  CHECK(oip::decode_repository_load_request(" ")->empty());
  for (const auto& [base64, bytes] :
       std::vector<std::pair<std::string, std::string>>{{"", ""},
                                                        {"YQ==", "a"},
                                                        {"YWI=", "ab"},
                                                        {"YWJj", "abc"},
                                                        {"AP8A", std::string("\0\xff\0", 3)}}) {
    CAPTURE(base64);
    const oip::result<oip::parameters> file =
        oip::decode_repository_load_request(R"({"parameters":{"file:m.bin":")" + base64 + "\"}}");
    REQUIRE(file);
    CHECK(*file->find("file:m.bin") == oip::parameter_value{bytes});
  }
  for (const char* bad : {"YQ=", "Y===", "YQ=a", "Y!==", "=YQ="}) {
    CAPTURE(bad);
    const oip::result<oip::parameters> file = oip::decode_repository_load_request(
        R"({"parameters":{"file:m.bin":")" + std::string{bad} + "\"}}");
    REQUIRE_FALSE(file);
    CHECK(file.error().message() ==
          "unable to parse parameter 'file:m.bin' of the model load request: expected its content "
          "in base64");
  }

  const oip::status error =
      oip::decode_error(R"({"error":"Request for unknown model: 'x' is not found"})", 404);
  CHECK(error.code() == oip::errc::not_found);
  CHECK(error.message() == "Request for unknown model: 'x' is not found");
  CHECK(oip::decode_error("<html>", 503).code() == oip::errc::unavailable);
}

TEST_CASE("a client's decoding errors say what the reply most likely needs") {
  const oip::result<oip::inference_response> no_data = oip::decode_response(
      oip::buffer::from_string(
          R"({"model_name":"m","outputs":[{"name":"o","datatype":"INT32","shape":[1]}]})"),
      std::nullopt);
  REQUIRE_FALSE(no_data);
  CHECK(no_data.error().message().ends_with(
      "(an output written to shared memory is read with the client's shared_memory_outputs)"));
  const oip::result<oip::inference_response> not_utf8 = oip::decode_response(
      oip::buffer::from_string("{\"model_name\":\"m\",\"outputs\":[{\"name\":\"o\","
                               "\"datatype\":\"BYTES\",\"shape\":[1],\"data\":[\"\xff\"]}]}"),
      std::nullopt);
  REQUIRE_FALSE(not_utf8);
  CHECK(not_utf8.error().message().ends_with(
      "(a BYTES output that is not UTF-8 must be asked for as binary data)"));
}

TEST_CASE("client side: requests encode, responses decode, with the same library") {
  const std::vector<std::int32_t> v(16, 2);
  oip::inference_request request;
  request.id = "c1";
  request.inputs = {*oip::tensor::from_values<std::int32_t>("INPUT0", {1, 16}, v)};
  request.outputs = {{"OUTPUT0", {}}};
  request.outputs[0].parameters.set("binary_data", true);
  oip::result<oip::encoded_body> json = oip::encode_request(request);
  REQUIRE(json.ok());
  CHECK(json->json.find(
            R"("inputs":[{"name":"INPUT0","datatype":"INT32","shape":[1,16],"data":[2,2,)") !=
        std::string::npos);
  oip::result<oip::encoded_body> binary = oip::encode_request(request, {.binary_inputs = true});
  REQUIRE(binary.ok());
  CHECK(binary->uses_binary);
  CHECK(binary->content_type() == "application/octet-stream");
  REQUIRE(binary->binary.size() == 1);
  CHECK(binary->binary[0].data() == request.inputs[0].data().data());  // not copied
  CHECK(binary->json.find(R"("parameters":{"binary_data_size":64})") != std::string::npos);
  CHECK(binary->size() == binary->json.size() + 64);

  // Triton reads the request-level `binary_data_output` only for outputs not listed: a client
  // spells it out on each listed output that does not say for itself.
  request.parameters.set("binary_data_output", true);
  request.outputs.push_back({"OUTPUT1", {}});
  request.outputs.push_back({"OUTPUT2", {}});
  request.outputs[2].parameters.set("binary_data", false);
  oip::result<oip::encoded_body> all_binary = oip::encode_request(request);
  REQUIRE(all_binary.ok());
  CHECK(all_binary->json.find(R"("outputs":[{"name":"OUTPUT0","parameters":{"binary_data":true}},)"
                              R"({"name":"OUTPUT1","parameters":{"binary_data":true}},)"
                              R"({"name":"OUTPUT2","parameters":{"binary_data":false}}])") !=
        std::string::npos);
}

TEST_CASE("requests of many tensors: all read, a duplicate name found wherever it stands") {
  // More inputs and requested outputs than the usual reader checks pairwise go to the general
  // reader, whose names are checked as a sorted set.
  const auto request_of = [](int count, const std::string& last_name) {
    std::string json = R"({"inputs":[)";
    std::string outputs;
    for (int i = 0; i < count; ++i) {
      const std::string name = i + 1 == count ? last_name : "IN" + std::to_string(i);
      const std::string comma = i == 0 ? "" : ",";
      json += comma + R"({"name":")" + name + R"(","shape":[1],"datatype":"INT32","data":[)" +
              std::to_string(i) + "]}";
      outputs += comma + R"({"name":"OUT)" + std::to_string(i) + R"("})";
    }
    return json + R"(],"outputs":[)" + outputs + "]}";
  };
  for (const int count : {15, 16, 17, 40, 5000}) {
    CAPTURE(count);
    const oip::inference_request r = decode(request_of(count, "LAST"));
    REQUIRE(r.inputs.size() == static_cast<std::size_t>(count));
    CHECK(r.outputs.size() == static_cast<std::size_t>(count));
    CHECK(r.inputs.back().name() == "LAST");
    CHECK(values_of<std::int32_t>(r.inputs.back()) == std::vector<std::int32_t>{count - 1});
    CHECK(decode_error(request_of(count, "IN3")).message() ==
          "input 'IN3' already exists in request");
  }
}

TEST_CASE("a reply's JSON text stops at its bound with a 400 that asks for binary data") {
  oip::inference_response response;
  response.model_name = "m";
  const std::vector<float> values(100'000, 0.5F);
  response.outputs.push_back(*oip::tensor::from_values<float>("Y", {100'000}, values));
  const std::string word(100, 'w');
  const std::vector<std::string_view> words(1000, word);
  response.outputs.push_back(*oip::tensor::from_strings("S", {1000}, words));
  oip::response_format format;
  const oip::result<oip::encoded_body> whole = oip::encode_response(response, format);
  REQUIRE(whole);
  const std::size_t size = whole->json.size();
  format.max_json_bytes = size;  // exactly enough
  const oip::result<oip::encoded_body> fits = oip::encode_response(response, format);
  REQUIRE(fits);
  CHECK(fits->json == whole->json);
  // A string's growth at most (twice what it holds), and a block's room.
  CHECK(fits->json.capacity() <= 2 * size + 4096 * 16);
  for (const std::size_t bound : {std::size_t{1000}, size / 2, size - 1}) {
    CAPTURE(bound);
    format.max_json_bytes = bound;
    const oip::result<oip::encoded_body> refused = oip::encode_response(response, format);
    REQUIRE_FALSE(refused);
    CHECK(refused.error().code() == oip::errc::invalid_argument);
    CHECK(refused.error().message() ==
          "the JSON reply of model 'm' would be larger than " + std::to_string(bound) +
              " bytes, this request's bound: ask for its outputs as binary data "
              "(binary_data_output, or binary_data on each output)");
  }
  // The same outputs as binary data are not bounded: the bound is on the text only.
  format.max_json_bytes = 1000;
  format.binary_by_default = true;
  CHECK(oip::encode_response(response, format));
}

TEST_CASE(
    "the bound on a JSON reply: 64x the request's wire bytes, 1 MiB at least, or the host's") {
  oip::limits bounds;
  CHECK(bounds.json_response_bound(100) == std::size_t{1} << 20U);
  CHECK(bounds.json_response_bound(std::size_t{1} << 20U) == std::size_t{64} << 20U);
  CHECK(bounds.json_response_bound(std::numeric_limits<std::size_t>::max()) ==
        std::numeric_limits<std::size_t>::max());
  bounds.max_response_bytes = 5000;
  CHECK(bounds.json_response_bound(1) == 5000);
  CHECK(bounds.json_response_bound(std::size_t{1} << 30U) == 5000);
}

TEST_CASE(
    "a client reads the repository index and the shared-memory status as servers write them") {
  const std::vector<oip::model_index_entry> index{{"simple", 1, "READY", ""},
                                                  {"loadable", 0, "UNAVAILABLE", "unloaded"}};
  const oip::result<std::vector<oip::model_index_entry>> read =
      oip::decode_repository_index(oip::encode(index));
  REQUIRE(read.ok());
  REQUIRE(read->size() == 2);
  CHECK(read->at(0).name == "simple");
  CHECK(read->at(0).version == 1);
  CHECK(read->at(1).version == 0);
  CHECK(read->at(1).reason == "unloaded");
  CHECK(oip::decode_repository_index("[]")->empty());

  const std::vector<oip::shared_memory_region> regions{{"a", "/key_a", 8, 64}, {"b", "/b", 0, 1}};
  const oip::result<std::vector<oip::shared_memory_region>> listed =
      oip::decode_shared_memory_status(oip::encode(regions));
  REQUIRE(listed.ok());
  CHECK(*listed == regions);

  // Not an array of objects, a row without its required fields, a version that is no number.
  for (const std::string_view bad :
       {"", "{}", "[1]", "[", R"([{"version":"1"}])", R"([{"name":"m","version":"x"}])",
        R"([{"name":"m","version":-1}])", R"([], "a": [{"name":"m"}])"}) {
    CAPTURE(bad);
    CHECK(oip::decode_repository_index(bad).error().code() == oip::errc::invalid_argument);
  }
  for (const std::string_view bad : {"", "{}", "[1]", R"([{"name":"r","key":"k"}])",
                                     R"([{"byte_size":4}])", R"([{"name":"r","byte_size":-4}])"}) {
    CAPTURE(bad);
    CHECK(oip::decode_shared_memory_status(bad).error().code() == oip::errc::invalid_argument);
  }
}

TEST_CASE("a trace settings change is written as Triton's clients write it") {
  oip::trace_settings_change change;
  change.settings.push_back({"trace_level", std::vector<std::string>{"TIMESTAMPS", "TENSORS"}});
  change.settings.push_back({"trace_rate", std::vector<std::string>{"10"}});
  change.settings.push_back({"trace_count", std::nullopt});
  const std::string text = oip::encode(change);
  CHECK(text == R"({"trace_level":["TIMESTAMPS","TENSORS"],"trace_rate":"10","trace_count":null})");
  const oip::result<oip::trace_settings_change> back = oip::decode_trace_settings_change(text);
  REQUIRE(back.ok());
  CHECK(back->settings == change.settings);
}
