// Round-trip properties: random tensors of every datatype and random shapes (0-sized dimensions
// included) go through JSON and through binary, as requests and as responses, and come back
// bit-identical (NaN payloads aside: JSON has one NaN).

#include "test_support.hpp"

#include <oip/json.hpp>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <doctest/doctest.h>

namespace {

using oip::datatype;

bool is_nan(datatype type, const std::byte* at) {
  switch (type) {
    case datatype::fp16: {
      std::uint16_t h;
      std::memcpy(&h, at, 2);
      return (h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0;
    }
    case datatype::bf16: {
      std::uint16_t b;
      std::memcpy(&b, at, 2);
      return (b & 0x7F80) == 0x7F80 && (b & 0x7F) != 0;
    }
    case datatype::fp32: {
      float f;
      std::memcpy(&f, at, 4);
      return std::isnan(f);
    }
    case datatype::fp64: {
      double d;
      std::memcpy(&d, at, 8);
      return std::isnan(d);
    }
    default: return false;
  }
}

void check_bits_equal(const oip::tensor& expected, const oip::tensor& actual) {
  CAPTURE(std::string(oip::to_string(expected.type())));
  CHECK(actual.name() == expected.name());
  CHECK(actual.type() == expected.type());
  CHECK(actual.shape() == expected.shape());
  REQUIRE(actual.data().size() == expected.data().size());
  if (oip::is_bytes(expected.type())) {
    CHECK(actual.data().as_string_view() == expected.data().as_string_view());
    return;
  }
  const std::size_t size = oip::element_size(expected.type());
  for (std::size_t i = 0; i < expected.element_count(); ++i) {
    const std::byte* a = expected.data().data() + i * size;
    const std::byte* b = actual.data().data() + i * size;
    if (is_nan(expected.type(), a) && is_nan(actual.type(), b)) continue;
    if (std::memcmp(a, b, size) != 0) {
      FAIL_CHECK("element ", i, " differs");
      return;
    }
  }
}

struct generator {
  std::mt19937_64 rng{20261122};

  oip::shape_type shape() {
    oip::shape_type s(rng() % 4);
    for (std::int64_t& d : s) d = static_cast<std::int64_t>(rng() % 5);  // 0..4, zeros included
    return s;
  }

  std::string utf8_string() {
    static const std::vector<std::string> pieces{
        "a", "Z", " ", "\"", "\\", "\n", std::string(1, '\0'), "\x1f", "é", "€", "😀", "/", "\t"};
    std::string s;
    for (std::size_t n = rng() % 6; n > 0; --n) s += pieces[rng() % pieces.size()];
    return s;
  }

  std::string any_bytes() {
    std::string s(rng() % 6, '\0');
    for (char& c : s) c = static_cast<char>(rng());
    return s;
  }

  // JSON can carry BOOL only as 0/1 and BYTES only as UTF-8; binary carries anything.
  oip::tensor make(datatype type, bool json_safe) {
    const oip::shape_type s = shape();
    const std::uint64_t count = *oip::element_count(s);
    if (oip::is_bytes(type)) {
      std::vector<std::string> strings(count);
      for (std::string& str : strings) str = json_safe ? utf8_string() : any_bytes();
      const std::vector<std::string_view> views(strings.begin(), strings.end());
      return *oip::tensor::from_strings("T", s, views);
    }
    const std::size_t size = oip::element_size(type);
    oip::result<oip::mutable_buffer> bytes = oip::mutable_buffer::allocate(count * size);
    REQUIRE(bytes.ok());
    for (std::size_t i = 0; i < count * size; ++i) bytes->data()[i] = static_cast<std::byte>(rng());
    if (type == datatype::boolean && json_safe) {
      for (std::size_t i = 0; i < count; ++i) bytes->data()[i] = static_cast<std::byte>(rng() & 1U);
    }
    return *oip::tensor::make("T", type, s, oip::buffer{std::move(*bytes)});
  }
};

void check_request_trip(const oip::tensor& t, bool binary) {
  oip::inference_request request;
  request.inputs = {t};
  oip::result<oip::encoded_body> encoded =
      oip::encode_request(request, {.binary_inputs = binary, .half_precision_as_json = true});
  REQUIRE_MESSAGE(encoded.ok(), encoded.error().message());
  oip::result<oip::inference_request> back = oip::decode_request(
      oip::buffer::from_string(encoded->flatten()),
      binary ? std::optional<std::size_t>{encoded->header_length()} : std::nullopt);
  REQUIRE_MESSAGE(back.ok(), back.error().message(), "\n", encoded->json);
  check_bits_equal(t, back->inputs.at(0));
}

void check_response_trip(const oip::tensor& t, bool binary) {
  oip::inference_response response;
  response.model_name = "m";
  response.outputs = {t};
  oip::response_format format;
  format.binary_by_default = binary;
  oip::result<oip::encoded_body> encoded = oip::encode_response(response, format);
  REQUIRE_MESSAGE(encoded.ok(), encoded.error().message());
  oip::result<oip::inference_response> back = oip::decode_response(
      oip::buffer::from_string(encoded->flatten()),
      binary ? std::optional<std::size_t>{encoded->header_length()} : std::nullopt);
  REQUIRE_MESSAGE(back.ok(), back.error().message(), "\n", encoded->json);
  check_bits_equal(t, back->outputs.at(0));
}

}  // namespace

TEST_CASE("random tensors of every datatype survive JSON and binary, both directions") {
  generator gen;
  for (datatype type : oip::all_datatypes) {
    CAPTURE(std::string(oip::to_string(type)));
    for (int i = 0; i < 150; ++i) {
      check_request_trip(gen.make(type, true), false);
      check_response_trip(gen.make(type, true), false);
      check_request_trip(gen.make(type, false), true);
      check_response_trip(gen.make(type, false), true);
    }
  }
}

TEST_CASE("special floating values survive JSON") {
  const std::vector<float> f{0.0F,   -0.0F,         INFINITY,        -INFINITY,
                             1e-45F, 3.4028235e38F, 1.17549435e-38F, 0.1F};
  const std::vector<double> d{-0.0, 5e-324, 1.7976931348623157e308, 0.1, 1.0 / 3};
  check_request_trip(*oip::tensor::from_values<float>("f", {8}, f), false);
  check_response_trip(*oip::tensor::from_values<double>("d", {5}, d), false);
}
