#include <oip/datatype.hpp>
#include <oip/float16.hpp>

#include <string>

#include <doctest/doctest.h>

using oip::datatype;

TEST_CASE("the spec's datatype table, plus BF16") {
  struct row {
    const char* name;
    datatype type;
    std::size_t size;
  };
  const row table[] = {
      {"BOOL", datatype::boolean, 1},  {"UINT8", datatype::uint8, 1},
      {"UINT16", datatype::uint16, 2}, {"UINT32", datatype::uint32, 4},
      {"UINT64", datatype::uint64, 8}, {"INT8", datatype::int8, 1},
      {"INT16", datatype::int16, 2},   {"INT32", datatype::int32, 4},
      {"INT64", datatype::int64, 8},   {"FP16", datatype::fp16, 2},
      {"BF16", datatype::bf16, 2},     {"FP32", datatype::fp32, 4},
      {"FP64", datatype::fp64, 8},     {"BYTES", datatype::bytes, 0},
  };
  CHECK(std::size(table) == oip::all_datatypes.size());
  for (const row& r : table) {
    CAPTURE(r.name);
    CHECK(oip::to_string(r.type) == r.name);
    CHECK(oip::element_size(r.type) == r.size);
    oip::result<datatype> parsed = oip::parse_datatype(r.name);
    REQUIRE(parsed.ok());
    CHECK(*parsed == r.type);
    oip::result<datatype> from_config = oip::parse_config_name(oip::config_name(r.type));
    REQUIRE(from_config.ok());
    CHECK(*from_config == r.type);
  }
  CHECK(oip::config_name(datatype::bytes) == "TYPE_STRING");
  CHECK(oip::config_name(datatype::fp32) == "TYPE_FP32");
}

TEST_CASE("unknown datatype names are errors, never a default") {
  for (const char* name : {"", "fp32", "FLOAT32", "STRING", "INT128", "FP32 ", "BOOLEAN"}) {
    CAPTURE(name);
    oip::result<datatype> parsed = oip::parse_datatype(name);
    REQUIRE_FALSE(parsed.ok());
    CHECK(parsed.error().code() == oip::errc::invalid_argument);
    CHECK(parsed.error().message() == "invalid datatype: '" + std::string(name) + "'");
  }
  CHECK_FALSE(oip::parse_config_name("TYPE_BYTES").ok());
}

TEST_CASE("classification of datatypes") {
  CHECK(oip::is_numeric(datatype::fp16));
  CHECK(oip::is_numeric(datatype::uint64));
  CHECK_FALSE(oip::is_numeric(datatype::boolean));
  CHECK_FALSE(oip::is_numeric(datatype::bytes));
  CHECK(oip::is_floating(datatype::bf16));
  CHECK_FALSE(oip::is_floating(datatype::int8));
  CHECK(oip::is_signed_integer(datatype::int64));
  CHECK_FALSE(oip::is_signed_integer(datatype::uint64));
  CHECK(oip::is_unsigned_integer(datatype::uint8));
  CHECK(oip::is_bool(datatype::boolean));
  CHECK(oip::is_bytes(datatype::bytes));
  int numeric = 0;
  for (datatype t : oip::all_datatypes) numeric += oip::is_numeric(t) ? 1 : 0;
  CHECK(numeric == 12);
}

TEST_CASE("C++ element types map to datatypes") {
  static_assert(oip::datatype_of<float> == datatype::fp32);
  static_assert(oip::datatype_of<double> == datatype::fp64);
  static_assert(oip::datatype_of<oip::half> == datatype::fp16);
  static_assert(oip::datatype_of<oip::bfloat16> == datatype::bf16);
  static_assert(oip::datatype_of<bool> == datatype::boolean);
  static_assert(oip::datatype_of<std::int8_t> == datatype::int8);
  static_assert(oip::datatype_of<std::uint64_t> == datatype::uint64);
  static_assert(!oip::has_datatype<char>);
  static_assert(!oip::has_datatype<long double>);
  CHECK(oip::element_size(oip::datatype_of<std::int16_t>) == sizeof(std::int16_t));
}
