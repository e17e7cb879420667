#include <oip/json.hpp>
#include <oip/tensor.hpp>

#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <doctest/doctest.h>

using oip::datatype;
using oip::errc;

namespace {
oip::buffer bytes_buffer(std::string s) { return oip::buffer::from_string(std::move(s)); }

std::string le32(std::uint32_t n) {
  std::string out(4, '\0');
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return out;
}
}  // namespace

TEST_CASE("element count and byte size") {
  const std::vector<std::int64_t> scalar{};
  CHECK(*oip::element_count(scalar) == 1);
  CHECK(*oip::element_count(std::vector<std::int64_t>{1, 16}) == 16);
  CHECK(*oip::element_count(std::vector<std::int64_t>{3, 0, 5}) == 0);
  CHECK(*oip::byte_size(datatype::fp32, std::vector<std::int64_t>{2, 2}) == 16);
  CHECK(*oip::byte_size(datatype::fp16, std::vector<std::int64_t>{3, 2}) == 12);
  CHECK(*oip::byte_size(datatype::boolean, std::vector<std::int64_t>{3}) == 3);
}

TEST_CASE("shape arithmetic detects negative dimensions and overflow") {
  const std::vector<std::int64_t> negative{2, -1};
  oip::result<std::uint64_t> n = oip::element_count(negative);
  REQUIRE_FALSE(n.ok());
  CHECK(n.error().code() == errc::invalid_argument);
  CHECK(n.error().message() == "invalid shape [2,-1]: dimension -1 is negative");

  // 2^32 * 2^32 wraps to exactly 0 in 64 bits: still an overflow.
  const std::vector<std::int64_t> wraps{4294967296, 4294967296};
  oip::result<std::uint64_t> w = oip::element_count(wraps);
  REQUIRE_FALSE(w.ok());
  CHECK(w.error().message() == "invalid shape [4294967296,4294967296]: element count overflows");

  const std::vector<std::int64_t> big{std::numeric_limits<std::int64_t>::max(), 3};
  CHECK_FALSE(oip::element_count(big).ok());
  // A zero dimension anywhere makes the product 0, even after an overflow.
  const std::vector<std::int64_t> zero_after{std::numeric_limits<std::int64_t>::max(), 4, 0};
  CHECK(*oip::element_count(zero_after) == 0);

  // Element count fits, byte size does not.
  const std::vector<std::int64_t> bytes_overflow{std::int64_t{1} << 62};
  oip::result<std::uint64_t> b = oip::byte_size(datatype::fp64, bytes_overflow);
  REQUIRE_FALSE(b.ok());
  CHECK(b.error().message() ==
        "invalid shape [4611686018427387904]: byte size of 4611686018427387904 elements of FP64 "
        "overflows");
  CHECK_FALSE(oip::byte_size(datatype::bytes, std::vector<std::int64_t>{1}).ok());
}

TEST_CASE("a shape of [4294967296, 4294967296] with three elements fails before any allocation") {
  oip::result<oip::tensor> t =
      oip::tensor::make("INPUT0", datatype::int32, {4294967296, 4294967296}, bytes_buffer("abc"));
  REQUIRE_FALSE(t.ok());
  CHECK(t.error().code() == errc::invalid_argument);
  CHECK(t.error().message() ==
        "tensor 'INPUT0': invalid shape [4294967296,4294967296]: element count overflows");
}

TEST_CASE("tensor::make checks the byte size against the shape") {
  std::string sixteen(16, '\0');
  oip::result<oip::tensor> ok =
      oip::tensor::make("x", datatype::fp32, {2, 2}, bytes_buffer(sixteen));
  REQUIRE(ok.ok());
  CHECK(ok->element_count() == 4);
  CHECK(ok->name() == "x");
  CHECK(ok->type() == datatype::fp32);
  CHECK(ok->shape() == oip::shape_type{2, 2});

  oip::result<oip::tensor> bad =
      oip::tensor::make("INPUT1", datatype::fp32, {2, 2}, bytes_buffer(std::string(32, '\0')));
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message() == "unexpected total byte size 32 for tensor 'INPUT1', expecting 16");

  oip::result<oip::tensor> negative =
      oip::tensor::make("INPUT1", datatype::fp32, {-2, 2}, bytes_buffer(""));
  REQUIRE_FALSE(negative.ok());
  CHECK(negative.error().message() ==
        "tensor 'INPUT1': invalid shape [-2,2]: dimension -2 is negative");
}

TEST_CASE("a tensor in device memory: fixed-size only, checked as make checks, its device named") {
  // Host bytes stand in for the device's: nothing here reads them.
  const std::string sixteen(16, '\0');
  oip::result<oip::tensor> on =
      oip::tensor::in_device_memory("x", datatype::int32, {4}, bytes_buffer(sixteen), 1);
  REQUIRE(on.ok());
  CHECK(on->device() == 1);
  CHECK_FALSE(on->in_host_memory());
  CHECK(on->data().size() == 16);
  const oip::tensor copied = *on;
  CHECK(copied.device() == 1);

  const oip::result<oip::tensor> host =
      oip::tensor::make("x", datatype::int32, {4}, bytes_buffer(sixteen));
  REQUIRE(host.ok());
  CHECK(host->device() == -1);
  CHECK(host->in_host_memory());

  CHECK(oip::tensor::in_device_memory("x", datatype::int32, {5}, bytes_buffer(sixteen), 0)
            .error()
            .message() == "unexpected total byte size 16 for tensor 'x', expecting 20");
  CHECK(oip::tensor::in_device_memory("s", datatype::bytes, {1}, bytes_buffer(sixteen), 0)
            .error()
            .message() == "tensor 's': BYTES data cannot stay in device memory");
  oip::inference_request request;
  request.inputs.push_back(*on);
  const oip::result<oip::encoded_body> encoded = oip::encode_request(request, {});
  REQUIRE_FALSE(encoded);
  CHECK(encoded.error().message() ==
        "input 'x' is in the memory of CUDA device 1; it must be in host memory here");
  CHECK(oip::tensor::in_device_memory("x", datatype::int32, {4}, bytes_buffer(sixteen), -1)
            .error()
            .message() == "tensor 'x': no CUDA device -1");
}

TEST_CASE("tensor views its buffer without copying") {
  const oip::buffer body = bytes_buffer(std::string(1 + 8, '\x01'));
  oip::result<oip::buffer> slice = body.slice(1, 8);
  REQUIRE(slice.ok());
  oip::result<oip::tensor> t = oip::tensor::make("x", datatype::int16, {4}, *slice);
  REQUIRE(t.ok());
  CHECK(t->data().data() == body.data() + 1);
  CHECK(t->at<std::int16_t>(3) == 0x0101);  // unaligned read
  const oip::tensor copy = *t;
  CHECK(copy.data().data() == t->data().data());
}

TEST_CASE("from_values copies typed values; at<T> reads them back") {
  const std::vector<std::int32_t> v{1, -2, 3, 2147483647};
  oip::result<oip::tensor> t = oip::tensor::from_values<std::int32_t>("INPUT0", {1, 4}, v);
  REQUIRE(t.ok());
  CHECK(t->type() == datatype::int32);
  CHECK(t->at<std::int32_t>(1) == -2);
  CHECK(t->at<std::int32_t>(3) == 2147483647);

  oip::result<oip::tensor> mismatch = oip::tensor::from_values<std::int32_t>("INPUT0", {1, 5}, v);
  REQUIRE_FALSE(mismatch.ok());
  CHECK(mismatch.error().message() ==
        "unexpected total byte size 16 for tensor 'INPUT0', expecting 20");

  const std::vector<oip::half> h{oip::to_half(1.5F), oip::to_half(-0.0F)};
  oip::result<oip::tensor> ht = oip::tensor::from_values<oip::half>("h", {2}, h);
  REQUIRE(ht.ok());
  CHECK(ht->type() == datatype::fp16);
  CHECK(oip::to_float(ht->at<oip::half>(0)) == 1.5F);
}

TEST_CASE("BOOL elements read any non-zero byte as true") {
  oip::result<oip::tensor> t =
      oip::tensor::make("b", datatype::boolean, {3}, bytes_buffer(std::string("\x00\x01\x02", 3)));
  REQUIRE(t.ok());
  CHECK_FALSE(t->at<bool>(0));
  CHECK(t->at<bool>(1));
  CHECK(t->at<bool>(2));
}

TEST_CASE("BYTES tensors: building, iterating, NUL bytes survive") {
  const std::string with_nul("a\0b", 3);
  const std::vector<std::string_view> elements{"hello", "", with_nul, "\xff\xfe"};
  oip::result<oip::tensor> t = oip::tensor::from_strings("INPUT0", {2, 2}, elements);
  REQUIRE(t.ok());
  CHECK(t->type() == datatype::bytes);
  CHECK(t->data().size() == 4 * 4 + 5 + 0 + 3 + 2);
  CHECK(t->data().as_string_view().substr(0, 9) == le32(5) + "hello");
  std::vector<std::string_view> back(t->strings().begin(), t->strings().end());
  CHECK(back == elements);

  oip::result<oip::tensor> wrong_count = oip::tensor::from_strings("INPUT0", {3}, elements);
  REQUIRE_FALSE(wrong_count.ok());
  CHECK(wrong_count.error().message() ==
        "unexpected number of BYTES elements for tensor 'INPUT0': expecting 3, got 4");
}

TEST_CASE("malformed BYTES buffers are errors") {
  SUBCASE("truncated length prefix") {
    const std::string data = le32(1) + "x" + std::string("\x02\x00", 2);
    oip::result<oip::tensor> t = oip::tensor::make("in", datatype::bytes, {2}, bytes_buffer(data));
    REQUIRE_FALSE(t.ok());
    CHECK(t.error().code() == errc::invalid_argument);
    CHECK(t.error().message() ==
          "malformed BYTES data for tensor 'in': element 1 has a truncated 4-byte length prefix (2 "
          "bytes left at offset 5)");
  }
  SUBCASE("length past the end") {
    const std::string data = le32(10) + "short";
    oip::result<oip::tensor> t = oip::tensor::make("in", datatype::bytes, {1}, bytes_buffer(data));
    REQUIRE_FALSE(t.ok());
    CHECK(t.error().message() ==
          "malformed BYTES data for tensor 'in': element 0 has length 10 but only 5 bytes remain");
  }
  SUBCASE("huge length does not wrap") {
    const std::string data = le32(0xFFFFFFFF) + "x";
    CHECK_FALSE(oip::tensor::make("in", datatype::bytes, {1}, bytes_buffer(data)).ok());
  }
  SUBCASE("element count mismatch") {
    const std::string data = le32(1) + "x" + le32(0);
    oip::result<oip::tensor> t = oip::tensor::make("in", datatype::bytes, {3}, bytes_buffer(data));
    REQUIRE_FALSE(t.ok());
    CHECK(t.error().message() ==
          "unexpected number of BYTES elements for tensor 'in': expecting 3, got 2");
  }
  SUBCASE("empty buffer, empty shape product") {
    CHECK(oip::tensor::make("in", datatype::bytes, {0}, bytes_buffer("")).ok());
    CHECK_FALSE(oip::tensor::make("in", datatype::bytes, {1}, bytes_buffer("")).ok());
  }
}

TEST_CASE("bytes_elements_extent measures the first elements and ignores what follows") {
  const std::string data = le32(1) + "x" + le32(0) + le32(3) + "abc" + "trailing";
  const auto bytes = std::as_bytes(std::span(data.data(), data.size()));
  CHECK(*oip::bytes_elements_extent(bytes, 0, "t") == 0);
  CHECK(*oip::bytes_elements_extent(bytes, 1, "t") == 5);
  CHECK(*oip::bytes_elements_extent(bytes, 3, "t") == 16);
  // The fourth "element" is the trailing text, whose prefix claims far more than remains.
  const oip::result<std::size_t> past = oip::bytes_elements_extent(bytes, 4, "t");
  REQUIRE_FALSE(past);
  CHECK(past.error().message() ==
        "malformed BYTES data for t: element 3 has length 1767993972 but only 4 bytes remain");
  const oip::result<std::size_t> short_of = oip::bytes_elements_extent(bytes.first(16), 4, "t");
  REQUIRE_FALSE(short_of);
  CHECK(short_of.error().message() ==
        "unexpected number of BYTES elements for t: expecting 4, got 3");
}

TEST_CASE("tensor parameters") {
  oip::result<oip::tensor> t = oip::tensor::from_strings("x", {0}, {});
  REQUIRE(t.ok());
  t->parameters().set("binary_data", true);
  CHECK(*t->parameters().get<bool>("binary_data"));
}

TEST_CASE("shapes print as Triton prints them") {
  CHECK(oip::to_string(std::vector<std::int64_t>{1, 16}) == "[1,16]");
  CHECK(oip::to_string(std::vector<std::int64_t>{}) == "[]");
}
