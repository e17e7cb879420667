// The bad-input catalogue: every class of malformed or inconsistent request gets a clear 4xx with
// a message that names the tensor and the expected and actual values. Never a crash, never a 5xx.

#include <oip/json.hpp>

#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <doctest/doctest.h>

namespace {

struct bad_case {
  const char* title;
  std::string json;
  std::string binary;  // bytes after the JSON (the header length is then the JSON's size)
  int status;          // expected HTTP status
  std::vector<std::string> mentions;  // substrings the message must contain
  oip::limits bounds{};
};

oip::limits with(std::size_t body, std::size_t json, std::uint64_t elements, std::size_t depth) {
  oip::limits l;
  l.max_body_bytes = body;
  l.max_json_bytes = json;
  l.max_elements = elements;
  l.max_json_depth = depth;
  return l;
}

std::string input(const std::string& fields) { return R"({"inputs":[{)" + fields + "}]}"; }
std::string tensor(const std::string& type, const std::string& shape, const std::string& data,
                   const std::string& name = "INPUT0") {
  return input(R"("name":")" + name + R"(","datatype":")" + type + R"(","shape":)" + shape +
               R"(,"data":)" + data);
}
std::string binary_tensor(const std::string& type, const std::string& shape,
                          const std::string& size, const std::string& name = "INPUT1") {
  return input(R"("name":")" + name + R"(","datatype":")" + type + R"(","shape":)" + shape +
               R"(,"parameters":{"binary_data_size":)" + size + "}");
}

const std::string parse_error = "failed to parse the request JSON buffer";

std::vector<bad_case> catalogue() {
  const oip::limits defaults;
  return {
      // Malformed JSON anywhere, with the offset.
      {"unclosed array", R"([1,2,})", "", 400, {parse_error, " at "}},
      {"bad literal", R"({"inputs":[],"x":tru})", "", 400, {parse_error}},
      {"bad escape", R"({"inputs":[],"x":"\q"})", "", 400, {parse_error}},
      {"leading zero", R"({"inputs":[],"x":01})", "", 400, {parse_error}},
      {"missing comma", R"({"inputs":[],"x":[1 2]})", "", 400, {parse_error}},
      {"trailing comma", R"({"inputs":[],})", "", 400, {parse_error}},
      {"field with no value", R"({"inputs":})", "", 400, {parse_error}},
      {"trailing content", R"({"inputs":[]} {})", "", 400, {parse_error, "at 14"}},
      {"empty body", "", "", 400, {parse_error}},
      {"truncated", R"({"inputs":[{"name":"a")", "", 400, {parse_error}},
      {"invalid UTF-8 in a string", "{\"inputs\":[],\"x\":\"\xff\"}", "", 400, {parse_error}},
      {"lone surrogate escape", R"({"inputs":[],"x":"\ud800"})", "", 400, {parse_error}},
      {"control character in a string", "{\"inputs\":[],\"x\":\"a\x01\"}", "", 400, {parse_error}},
      {"NaN outside tensor data", R"({"inputs":[],"x":NaN})", "", 400, {parse_error}},
      {"root is an array", R"([{"inputs":[]}])", "", 400, {"expected an object"}},
      {"bad number in data", tensor("FP32", "[2]", "[1.5,1.]"), "", 400, {parse_error}},
      {"bad number token in data", tensor("FP32", "[2]", "[1.5,+1]"), "", 400, {}},
      {"bad number in shape",
       input(R"("name":"x","datatype":"INT8","shape":[-01],"data":[])"),
       "",
       400,
       {}},
      // Duplicate keys, anywhere.
      {"duplicate top-level key",
       R"({"inputs":[],"inputs":[]})",
       "",
       400,
       {"duplicate key 'inputs'"}},
      {"duplicate tensor key",
       input(R"("name":"a","name":"b","datatype":"INT8","shape":[0],"data":[])"),
       "",
       400,
       {"duplicate key 'name'"}},
      {"duplicate parameter",
       R"({"parameters":{"p":1,"p":2},"inputs":[]})",
       "",
       400,
       {"duplicate key 'p'"}},
      {"duplicate nested unknown key",
       R"({"x":{"y":{"z":1,"z":1}},"inputs":[]})",
       "",
       400,
       {"duplicate key 'z'"}},
      // Structure.
      {"no inputs", R"({"id":"1"})", "", 400, {"no 'inputs'"}},
      {"inputs not an array", R"({"inputs":{}})", "", 400, {}},
      {"input not an object", R"({"inputs":[1]})", "", 400, {"input 0 is not an object"}},
      {"input without name",
       input(R"("datatype":"INT8","shape":[1],"data":[1])"),
       "",
       400,
       {"input 0 has no 'name'"}},
      {"input without datatype",
       input(R"("name":"x","shape":[1],"data":[1])"),
       "",
       400,
       {"has no 'datatype'"}},
      {"input without shape",
       input(R"("name":"x","datatype":"INT8","data":[1])"),
       "",
       400,
       {"has no 'shape'"}},
      {"name not a string",
       input(R"("name":5,"datatype":"INT8","shape":[1],"data":[1])"),
       "",
       400,
       {"'name'", "a string"}},
      {"id not a string", R"({"id":42,"inputs":[]})", "", 400, {"'id'", "a string"}},
      {"data not an array", tensor("INT8", "[1]", "1"), "", 400, {"INPUT0", "expected an array"}},
      {"output without name",
       R"({"inputs":[],"outputs":[{"parameters":{}}]})",
       "",
       400,
       {"output 0 has no 'name'"}},
      {"parameters not an object",
       R"({"parameters":[1],"inputs":[]})",
       "",
       400,
       {"'parameters'", "an object"}},
      {"parameter of invalid type",
       R"({"parameters":{"p":null},"inputs":[]})",
       "",
       400,
       {"parameter 'p' has invalid type"}},
      {"parameter array",
       R"({"parameters":{"p":[1]},"inputs":[]})",
       "",
       400,
       {"parameter 'p' has invalid type"}},
      // Datatypes and shapes.
      {"unknown datatype",
       tensor("FP8", "[1]", "[1]"),
       "",
       400,
       {"invalid datatype 'FP8'", "INPUT0"}},
      {"lower-case datatype", tensor("fp32", "[1]", "[1]"), "", 400, {"invalid datatype 'fp32'"}},
      {"negative dimension",
       tensor("INT8", "[2,-1]", "[1,2]"),
       "",
       400,
       {"INPUT0", "[2,-1]", "dimension -1"}},
      {"fractional dimension", tensor("INT8", "[1.5]", "[1]"), "", 400, {"INPUT0", "'shape'"}},
      {"shape not an array", tensor("INT8", "3", "[1,2,3]"), "", 400, {"INPUT0", "'shape'"}},
      {"element count overflows",
       tensor("INT32", "[4294967296,4294967296]", "[1,2,3]"),
       "",
       400,
       {"INPUT0", "[4294967296,4294967296]", "overflows"}},
      {"byte size overflows",
       binary_tensor("FP64", "[4611686018427387904]", "8"),
       std::string(8, 'x'),
       413,
       {"INPUT1", "4611686018427387904"}},
      // Element counts and values.
      {"too few elements",
       tensor("INT32", "[2,2]", "[1,2,3]"),
       "",
       400,
       {"INPUT0", "[2,2]", "expects 4", "got 3"}},
      {"too many elements",
       tensor("INT32", "[2]", "[[1,2],[3]]"),
       "",
       400,
       {"INPUT0", "expects 2", "got 3"}},
      {"too many BYTES elements",
       tensor("BYTES", "[1]", R"(["a","b"])"),
       "",
       400,
       {"INPUT0", "expects 1", "got 2"}},
      {"INT8 out of range",
       tensor("INT8", "[2]", "[1,-129]"),
       "",
       400,
       {"INPUT0", "element 1", "-129", "[-128, 127]"}},
      {"UINT8 out of range",
       tensor("UINT8", "[1]", "[256]"),
       "",
       400,
       {"INPUT0", "256", "[0, 255]"}},
      {"INT16 out of range",
       tensor("INT16", "[1]", "[32768]"),
       "",
       400,
       {"INPUT0", "32768", "[-32768, 32767]"}},
      {"UINT32 negative",
       tensor("UINT32", "[1]", "[-5]"),
       "",
       400,
       {"INPUT0", "-5", "[0, 4294967295]"}},
      {"INT64 out of range",
       tensor("INT64", "[1]", "[9223372036854775808]"),
       "",
       400,
       {"INPUT0", "9223372036854775808"}},
      {"UINT64 out of range",
       tensor("UINT64", "[1]", "[18446744073709551616]"),
       "",
       400,
       {"INPUT0", "18446744073709551616"}},
      {"float for an integer type",
       tensor("INT32", "[1]", "[1.0]"),
       "",
       400,
       {"INPUT0", "1.0", "a signed integer for INT32"}},
      {"exponent for an integer type",
       tensor("UINT8", "[1]", "[1e2]"),
       "",
       400,
       {"INPUT0", "1e2", "an unsigned integer"}},
      {"string for a number",
       tensor("FP32", "[1]", R"(["1"])"),
       "",
       400,
       {"INPUT0", "\"1\"", "a number for FP32"}},
      {"bool for a number",
       tensor("FP64", "[1]", "[true]"),
       "",
       400,
       {"INPUT0", "true", "a number for FP64"}},
      {"null for a number",
       tensor("FP16", "[1]", "[null]"),
       "",
       400,
       {"INPUT0", "null", "a number for FP16"}},
      {"number for BOOL", tensor("BOOL", "[1]", "[0]"), "", 400, {"INPUT0", "0", "true or false"}},
      {"number for BYTES",
       tensor("BYTES", "[1]", "[7]"),
       "",
       400,
       {"INPUT0", "7", "a string for BYTES"}},
      {"object in data", tensor("INT8", "[1]", R"([{"a":1}])"), "", 400, {"INPUT0"}},
      // Duplicate names.
      {"duplicate input",
       R"({"inputs":[{"name":"a","datatype":"INT8","shape":[0],"data":[]},{"name":"a","datatype":"INT8","shape":[0],"data":[]}]})",
       "",
       400,
       {"input 'a' already exists in request"}},
      {"duplicate requested output",
       R"({"inputs":[],"outputs":[{"name":"o"},{"name":"o"}]})",
       "",
       400,
       {"output 'o' already exists in request"}},
      // data and binary_data_size.
      {"both data and binary_data_size",
       input(
           R"("name":"x","datatype":"INT8","shape":[1],"data":[1],"parameters":{"binary_data_size":1})"),
       "x",
       400,
       {"'x'", "set 'data' 'binary_data_size'"}},
      {"neither data nor binary_data_size",
       input(R"("name":"x","datatype":"INT8","shape":[1])"),
       "",
       400,
       {"'x'", "no field is set"}},
      // Binary framing.
      {"binary_data_size negative",
       binary_tensor("INT8", "[1]", "-1"),
       "x",
       400,
       {"INPUT1", "binary_data_size"}},
      {"binary_data_size fractional",
       binary_tensor("INT8", "[1]", "1.5"),
       "x",
       400,
       {"INPUT1", "binary_data_size"}},
      {"binary_data_size a string",
       binary_tensor("INT8", "[1]", "\"1\""),
       "x",
       400,
       {"INPUT1", "binary_data_size"}},
      {"binary_data_size larger than what remains",
       binary_tensor("INT32", "[16]", "64"),
       std::string(60, 'x'),
       400,
       {"INPUT1", "expecting 4 additional bytes"}},
      {"binary_data_size different from the shape",
       binary_tensor("INT32", "[16]", "60"),
       std::string(60, 'x'),
       400,
       {"INPUT1", "Expected 64, got 60"}},
      {"leftover bytes",
       binary_tensor("INT8", "[2]", "2"),
       "xyz",
       400,
       {"unexpected additional input data", "1 bytes"}},
      {"binary data without any binary input",
       tensor("INT8", "[1]", "[1]"),
       "x",
       400,
       {"unexpected additional input data"}},
      {"BYTES truncated prefix",
       binary_tensor("BYTES", "[2]", "7"),
       std::string("\x01\x00\x00\x00z\x01\x00", 7),
       400,
       {"INPUT1", "element 1", "truncated"}},
      {"BYTES length past the end",
       binary_tensor("BYTES", "[1]", "6"),
       std::string("\x09\x00\x00\x00zz", 6),
       400,
       {"INPUT1", "length 9", "2 bytes remain"}},
      {"BYTES count mismatch",
       binary_tensor("BYTES", "[3]", "8"),
       std::string("\x00\x00\x00\x00\x00\x00\x00\x00", 8),
       400,
       {"INPUT1", "expecting 3, got 2"}},
      // Limits.
      {"body above the limit",
       R"({"inputs":[]})",
       "",
       413,
       {"13 bytes", "limit of 12"},
       with(12, 100, 100, 10)},
      {"JSON above the limit",
       R"({"inputs":[]})",
       "",
       413,
       {"13 bytes", "limit of 10"},
       with(100, 10, 100, 10)},
      {"too many elements",
       tensor("INT8", "[5]", "[1,2,3,4,5]"),
       "",
       413,
       {"INPUT0", "5 elements", "limit of 4"},
       with(1000, 1000, 4, 10)},
      {"byte size past 2^64 under a host's element limit",
       binary_tensor("INT64", "[2305843009213693952]", "8"),
       std::string(8, '\0'),
       400,
       {"INPUT1", "overflows"},
       with(1000, 1000, std::numeric_limits<std::uint64_t>::max(), 10)},
      {"too deep",
       R"({"inputs":[],"x":[[[[1]]]]})",
       "",
       400,
       {"nesting deeper than 3"},
       with(1000, 1000, 100, 3)},
      {"too deep data",
       tensor("INT8", "[1]", "[[[[[1]]]]]"),
       "",
       400,
       {"nesting deeper than 4"},
       with(1000, 1000, 100, 4)},
      {"shape beyond memory",
       binary_tensor("UINT8", "[1099511627776]", "1"),
       "x",
       413,
       {"INPUT1", "1099511627776 elements"},
       defaults},
  };
}

}  // namespace

TEST_CASE("bad-input catalogue") {
  const std::vector<bad_case> cases = catalogue();
  CHECK(cases.size() >= 50);
  for (const bad_case& c : cases) {
    CAPTURE(std::string(c.title));
    const std::string body = c.json + c.binary;
    const std::optional<std::size_t> header_length =
        c.binary.empty() ? std::nullopt : std::optional<std::size_t>{c.json.size()};
    oip::result<oip::inference_request> r =
        oip::decode_request(oip::buffer::from_string(body), header_length, c.bounds);
    REQUIRE_FALSE(r.ok());
    CAPTURE(r.error().message());
    CHECK(r.error().http_status() == c.status);
    CHECK(r.error().http_status() / 100 == 4);
    for (const std::string& mention : c.mentions) {
      CHECK_MESSAGE(r.error().message().find(mention) != std::string::npos, "missing: ", mention);
    }
    // The error renders as the protocol's error object.
    CHECK(r.error().to_json().rfind("{\"error\":\"", 0) == 0);
  }
}

TEST_CASE("header length values") {
  for (const char* value : {"-1", "abc", "", "1e3", "20"}) {
    CAPTURE(value);
    oip::result<std::size_t> r = oip::parse_header_length(value, 10);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().http_status() == 400);
    CHECK(r.error().message().find(std::string("got: ") + value) != std::string::npos);
  }
}
