// Classification: top N per row or over the whole tensor, every numeric datatype, ties lower index
// first, NaN last, clamping, labels, shortest values.

#include <oip/classification.hpp>
#include <oip/float16.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include <doctest/doctest.h>

namespace {

template <class T>
oip::tensor make(const std::vector<T>& values, oip::shape_type shape) {
  oip::result<oip::tensor> t =
      oip::tensor::from_values<T>("scores", std::move(shape), std::span<const T>(values));
  REQUIRE(t.ok());
  return std::move(*t);
}

std::vector<std::string> strings(const oip::tensor& t) {
  std::vector<std::string> out;
  for (std::string_view s : t.strings()) out.emplace_back(s);
  return out;
}

std::vector<std::uint64_t> top(const oip::tensor& t, std::size_t n, bool batched = false) {
  const oip::classification_rows rows =
      batched ? oip::classification_rows::batch_rows : oip::classification_rows::whole_tensor;
  oip::result<std::vector<std::uint64_t>> r = oip::top_classes(t, n, rows);
  REQUIRE(r.ok());
  // The overload that writes to the caller's storage gives the same indices and writes no more.
  constexpr std::uint64_t untouched = 0xDEADBEEF;
  std::vector<std::uint64_t> into(r->size() + 1, untouched);
  oip::result<std::size_t> written = oip::top_classes(t, n, rows, into);
  REQUIRE(written.ok());
  CHECK(*written == r->size());
  CHECK(std::equal(r->begin(), r->end(), into.begin()));
  CHECK(into.back() == untouched);
  return *r;
}

// Any value of T from random bits: every pattern of the floating types, NaNs included.
template <class T>
T random_value(std::mt19937_64& rng) {
  const std::uint64_t bits = rng();
  if constexpr (std::is_same_v<T, oip::half> || std::is_same_v<T, oip::bfloat16>) {
    return T{static_cast<std::uint16_t>(bits)};
  } else if constexpr (std::is_same_v<T, float>) {
    return std::bit_cast<float>(static_cast<std::uint32_t>(bits));
  } else if constexpr (std::is_same_v<T, double>) {
    return std::bit_cast<double>(bits);
  } else {
    return static_cast<T>(bits);
  }
}

template <class T>
double as_double(T v) {
  if constexpr (std::is_same_v<T, oip::half> || std::is_same_v<T, oip::bfloat16>) {
    return static_cast<double>(oip::to_float(v));
  } else {
    return static_cast<double>(v);
  }
}

// Rows of every length up to past the sampled prefix, of random bit patterns, of few distinct
// values (ties), and of patterns with a few NaNs, against a stable sort that puts NaN last.
template <class T>
void check_against_sort(std::mt19937_64& rng) {
  for (int trial = 0; trial < 150; ++trial) {
    const std::size_t size = 1 + rng() % (trial % 25 == 0 ? 20000 : 2100);
    std::vector<T> values(size);
    const T few[3] = {random_value<T>(rng), random_value<T>(rng), random_value<T>(rng)};
    for (T& v : values) v = trial % 2 == 0 ? random_value<T>(rng) : few[rng() % 3];
    std::vector<std::uint64_t> order(size);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](std::uint64_t a, std::uint64_t b) {
      if constexpr (std::is_integral_v<T>) {
        return values[a] > values[b];
      } else {
        const double x = as_double(values[a]);
        const double y = as_double(values[b]);
        return !std::isnan(x) && (std::isnan(y) || x > y);
      }
    });
    const std::size_t n = 1 + rng() % 20;
    order.resize(std::min(n, size));
    CHECK(top(make<T>(values, {static_cast<std::int64_t>(size)}), n) == order);
  }
}

}  // namespace

TEST_CASE("the spec's example: values in shortest form, index, label") {
  const oip::tensor scores = make<float>({1.1F, 3.3F, 2.2F}, {3});
  const std::vector<std::string> labels{"cat", "dog", "bird"};
  oip::result<oip::tensor> classes =
      oip::classify(scores, 2, oip::classification_rows::whole_tensor, labels);
  REQUIRE(classes.ok());
  CHECK(classes->type() == oip::datatype::bytes);
  CHECK(classes->name() == "scores");
  CHECK(classes->shape() == oip::shape_type{2});
  CHECK(strings(*classes) == std::vector<std::string>{"3.3:1:dog", "2.2:2:bird"});
  // Without labels, or past the end of the label list, there is no third field.
  oip::result<oip::tensor> unlabelled =
      oip::classify(scores, 1, oip::classification_rows::whole_tensor);
  REQUIRE(unlabelled.ok());
  CHECK(strings(*unlabelled) == std::vector<std::string>{"3.3:1"});
  oip::result<oip::tensor> short_labels = oip::classify(
      scores, 3, oip::classification_rows::whole_tensor, std::vector<std::string>{"cat"});
  REQUIRE(short_labels.ok());
  CHECK(strings(*short_labels) == std::vector<std::string>{"3.3:1", "2.2:2", "1.1:0:cat"});
}

TEST_CASE("batched: top N per row, shape [batch, N]") {
  const oip::tensor scores = make<std::int32_t>({1, 9, 5, 7, 3, 2}, {2, 3});
  oip::result<oip::tensor> classes = oip::classify(scores, 2, oip::classification_rows::batch_rows);
  REQUIRE(classes.ok());
  CHECK(classes->shape() == oip::shape_type{2, 2});
  CHECK(strings(*classes) == std::vector<std::string>{"9:1", "5:2", "7:0", "3:1"});
  // Unbatched, the same tensor is one row of six.
  CHECK(top(scores, 2) == std::vector<std::uint64_t>{1, 3});
}

TEST_CASE("ties go to the lower index; N is clamped; N = 0 gives an empty result") {
  const oip::tensor flat = make<float>({2, 5, 5, 1, 5}, {5});
  CHECK(top(flat, 3) == std::vector<std::uint64_t>{1, 2, 4});
  CHECK(top(flat, 99) == std::vector<std::uint64_t>{1, 2, 4, 0, 3});
  oip::result<oip::tensor> none = oip::classify(flat, 0, oip::classification_rows::whole_tensor);
  REQUIRE(none.ok());
  CHECK(none->shape() == oip::shape_type{0});
  // Ties across block boundaries of the fast path too.
  std::vector<float> many(1000, 1.0F);
  many[700] = 2.0F;
  CHECK(top(make<float>(many, {1000}), 3) == std::vector<std::uint64_t>{700, 0, 1});
}

TEST_CASE("NaN ranks below every number; infinities are numbers") {
  const float nan = std::nanf("");
  const oip::tensor t = make<float>({nan, -INFINITY, 1.0F, nan, INFINITY}, {5});
  CHECK(top(t, 5) == std::vector<std::uint64_t>{4, 2, 1, 0, 3});
  oip::result<oip::tensor> classes = oip::classify(t, 2, oip::classification_rows::whole_tensor);
  REQUIRE(classes.ok());
  CHECK(strings(*classes) == std::vector<std::string>{"Infinity:4", "1:2"});
}

TEST_CASE("every integer and floating datatype") {
  CHECK(strings(*oip::classify(make<std::uint8_t>({1, 200, 3}, {3}), 1,
                               oip::classification_rows::whole_tensor)) ==
        std::vector<std::string>{"200:1"});
  CHECK(strings(*oip::classify(make<std::int8_t>({-1, -128, 3}, {3}), 2,
                               oip::classification_rows::whole_tensor)) ==
        std::vector<std::string>{"3:2", "-1:0"});
  CHECK(strings(*oip::classify(make<std::uint16_t>({1, 60000}, {2}), 1,
                               oip::classification_rows::whole_tensor)) ==
        std::vector<std::string>{"60000:1"});
  CHECK(strings(*oip::classify(make<std::int16_t>({-5, -4}, {2}), 1,
                               oip::classification_rows::whole_tensor)) ==
        std::vector<std::string>{"-4:1"});
  CHECK(strings(*oip::classify(make<std::uint32_t>({4000000000U, 1}, {2}), 1,
                               oip::classification_rows::whole_tensor)) ==
        std::vector<std::string>{"4000000000:0"});
  CHECK(strings(*oip::classify(make<std::uint64_t>({1, 18446744073709551615ULL}, {2}), 1,
                               oip::classification_rows::whole_tensor)) ==
        std::vector<std::string>{"18446744073709551615:1"});
  CHECK(strings(*oip::classify(make<std::int64_t>({-9223372036854775807LL - 1, 0}, {2}), 2,
                               oip::classification_rows::whole_tensor)) ==
        std::vector<std::string>{"0:1", "-9223372036854775808:0"});
  CHECK(strings(*oip::classify(make<double>({0.1, 0.30000000000000004}, {2}), 1,
                               oip::classification_rows::whole_tensor)) ==
        std::vector<std::string>{"0.30000000000000004:1"});
  CHECK(strings(*oip::classify(make<oip::half>({oip::half{0x3C00}, oip::half{0x3E66}}, {2}), 1,
                               oip::classification_rows::whole_tensor)) ==
        std::vector<std::string>{"1.6:1"});
  CHECK(strings(*oip::classify(
            make<oip::bfloat16>({oip::bfloat16{0x3F80}, oip::bfloat16{0x4049}}, {2}), 1,
            oip::classification_rows::whole_tensor)) == std::vector<std::string>{"3.14:1"});
}

TEST_CASE("BYTES and BOOL outputs cannot be classified: 400") {
  const oip::tensor words =
      *oip::tensor::from_strings("words", {1}, std::vector<std::string_view>{"a"});
  oip::result<oip::tensor> r = oip::classify(words, 1, oip::classification_rows::whole_tensor);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().http_status() == 400);
  CHECK(r.error().message().find("'words'") != std::string::npos);
  CHECK(r.error().message().find("BYTES") != std::string::npos);
  const bool bits[2] = {true, false};
  const oip::tensor flags =
      *oip::tensor::from_values<bool>("flags", {2}, std::span<const bool>(bits));
  CHECK(oip::classify(flags, 1, oip::classification_rows::whole_tensor).error().http_status() ==
        400);
}

TEST_CASE("top classes into the caller's storage: room for fewer than needed is a 400") {
  std::vector<float> values(1000);
  std::iota(values.begin(), values.end(), 0.0F);
  const oip::tensor scores = make<float>(values, {1000});  // the FP32 kernel's path
  std::array<std::uint64_t, 5> five{};
  oip::result<std::size_t> written =
      oip::top_classes(scores, 5, oip::classification_rows::whole_tensor, five);
  REQUIRE(written.ok());
  CHECK(five == std::array<std::uint64_t, 5>{999, 998, 997, 996, 995});
  oip::result<std::size_t> short_of_one = oip::top_classes(
      scores, 5, oip::classification_rows::whole_tensor, std::span<std::uint64_t>(five).first(4));
  REQUIRE_FALSE(short_of_one.ok());
  CHECK(short_of_one.error().http_status() == 400);
  CHECK(short_of_one.error().message() ==
        "4 indices do not fit the top classes of output 'scores': 5 are needed");

  const oip::tensor batch = make<std::int32_t>({1, 2, 3, 6, 5, 4}, {2, 3});  // the general path
  std::array<std::uint64_t, 4> four{};
  written = oip::top_classes(batch, 2, oip::classification_rows::batch_rows, four);
  REQUIRE(written.ok());
  CHECK(*written == 4);
  CHECK(four == std::array<std::uint64_t, 4>{2, 1, 0, 1});
  CHECK(oip::top_classes(batch, 2, oip::classification_rows::batch_rows,
                         std::span<std::uint64_t>(four).first(3))
            .error()
            .http_status() == 400);
}

TEST_CASE("the fast path agrees with a full sort on random data of every size") {
  std::mt19937 rng{42};
  std::uniform_int_distribution<int> small{0, 50};  // many ties
  // 40000 runs past the prefix that gives the first bound.
  for (std::size_t size : {1U, 7U, 63U, 64U, 65U, 130U, 1000U, 4099U, 40000U}) {
    std::vector<float> values(size);
    for (float& v : values) v = static_cast<float>(small(rng));
    std::vector<std::uint64_t> order(size);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](std::uint64_t a, std::uint64_t b) { return values[a] > values[b]; });
    for (std::size_t n : {1U, 5U, 64U}) {
      const std::size_t k = std::min(n, size);
      const std::vector<std::uint64_t> expected(order.begin(),
                                                order.begin() + static_cast<long>(k));
      CHECK(top(make<float>(values, {static_cast<std::int64_t>(size)}), n) == expected);
      // A batch of one row, the shape a batching classifier returns, gives the same classes.
      CHECK(top(make<float>(values, {1, static_cast<std::int64_t>(size)}), n, true) == expected);
    }
  }
}

TEST_CASE("every datatype agrees with a full sort on random rows, NaNs and ties included") {
  std::mt19937_64 rng{2026};
  check_against_sort<float>(rng);
  check_against_sort<double>(rng);
  check_against_sort<oip::half>(rng);
  check_against_sort<oip::bfloat16>(rng);
  check_against_sort<std::int8_t>(rng);
  check_against_sort<std::uint8_t>(rng);
  check_against_sort<std::int16_t>(rng);
  check_against_sort<std::uint16_t>(rng);
  check_against_sort<std::int32_t>(rng);
  check_against_sort<std::uint32_t>(rng);
  check_against_sort<std::int64_t>(rng);
  check_against_sort<std::uint64_t>(rng);
}

TEST_CASE("FP16 and BF16 rows: converted a chunk at a time, merged in order, ties included") {
  std::mt19937 rng{16};
  std::normal_distribution<float> normal{0.0F, 1.0F};
  // Around the 2,048-value chunks, and the short remainder that joins the last chunk.
  for (std::size_t size : {64U, 100U, 2047U, 2048U, 2111U, 2112U, 4096U, 5000U, 20000U}) {
    for (int kind = 0; kind < 3; ++kind) {
      std::vector<float> floats(size);
      for (float& f : floats) {
        f = kind == 1 ? static_cast<float>(rng() % 3) : normal(rng);
        if (kind == 2 && rng() % 100 == 0) f = std::nanf("");
      }
      std::vector<oip::half> halves(size);
      std::vector<oip::bfloat16> bfloats(size);
      for (std::size_t i = 0; i < size; ++i) {
        halves[i] = oip::to_half(floats[i]);
        bfloats[i] = oip::to_bfloat16(floats[i]);
      }
      const auto expected = [&](const auto& values, std::size_t n) {
        std::vector<std::uint64_t> order(size);
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](std::uint64_t a, std::uint64_t b) {
          const float x = oip::to_float(values[a]);
          const float y = oip::to_float(values[b]);
          return !std::isnan(x) && (std::isnan(y) || x > y);
        });
        order.resize(std::min(n, size));
        return order;
      };
      for (std::size_t n : {1U, 5U, 16U}) {
        const auto shape = oip::shape_type{static_cast<std::int64_t>(size)};
        CHECK(top(make<oip::half>(halves, shape), n) == expected(halves, n));
        CHECK(top(make<oip::bfloat16>(bfloats, shape), n) == expected(bfloats, n));
      }
    }
  }
}

TEST_CASE("FP32 fast path: a NaN never hides the numbers beside it") {
  // The best value of the row sits in one lane of a 64-value block with a NaN 16 places on: the
  // block's maximum must still see it, whether the NaN is quiet or signalling.
  for (const std::uint32_t nan_bits : {0x7FC00000U, 0xFFC00000U, 0x7F800001U, 0xFF800001U}) {
    const auto nan = std::bit_cast<float>(nan_bits);
    std::vector<float> row(1000);
    for (std::size_t i = 0; i < row.size(); ++i) row[i] = 1.0F + static_cast<float>(i) * 1e-3F;
    for (std::size_t i = 0; i < 64; ++i) row[i] = -1.0F;
    row[0] = 5.0F;
    row[16] = nan;
    CHECK(top(make<float>(row, {1000}), 1) == std::vector<std::uint64_t>{0});
    CHECK(top(make<float>(row, {1000}), 2) == std::vector<std::uint64_t>{0, 999});
  }
  // Random rows with a few NaNs of every kind, against a full sort that puts NaN last.
  std::mt19937 rng{7};
  std::normal_distribution<float> normal{0.0F, 1.0F};
  const std::array<std::uint32_t, 4> nans{0x7FC00000U, 0xFFC00000U, 0x7F800001U, 0xFF800001U};
  for (int trial = 0; trial < 300; ++trial) {
    const std::size_t size = trial % 50 == 0 ? 20000 : 64 + rng() % 2000;
    std::vector<float> values(size);
    for (float& v : values) {
      v = rng() % 25 == 0 ? std::bit_cast<float>(nans[rng() % nans.size()]) : normal(rng);
    }
    std::vector<std::uint64_t> order(size);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](std::uint64_t a, std::uint64_t b) {
      return !std::isnan(values[a]) && (std::isnan(values[b]) || values[a] > values[b]);
    });
    for (std::size_t n : {1U, 5U, 16U}) {
      const std::vector<std::uint64_t> expected(order.begin(),
                                                order.begin() + static_cast<long>(n));
      CHECK(top(make<float>(values, {static_cast<std::int64_t>(size)}), n) == expected);
    }
  }
}

TEST_CASE("FP32 fast path: signed zeros, infinities, negative rows, best values late in the row") {
  std::vector<float> zeros(200, 0.0F);
  zeros[10] = -0.0F;  // equal to +0: ties keep index order
  CHECK(top(make<float>(zeros, {200}), 3) == std::vector<std::uint64_t>{0, 1, 2});
  std::vector<float> infinite(300, -INFINITY);
  infinite[299] = INFINITY;
  infinite[150] = INFINITY;
  CHECK(top(make<float>(infinite, {300}), 4) == std::vector<std::uint64_t>{150, 299, 0, 1});
  std::vector<float> negative(1000);
  for (std::size_t i = 0; i < negative.size(); ++i) negative[i] = -1.0F - static_cast<float>(i);
  CHECK(top(make<float>(negative, {1000}), 2) == std::vector<std::uint64_t>{0, 1});
  std::vector<float> rising(50000);
  for (std::size_t i = 0; i < rising.size(); ++i) rising[i] = static_cast<float>(i) * 0.5F;
  CHECK(top(make<float>(rising, {50000}), 3) == std::vector<std::uint64_t>{49999, 49998, 49997});
  std::vector<float> denormal(100, 0.0F);
  denormal[70] = std::numeric_limits<float>::denorm_min();
  CHECK(top(make<float>(denormal, {100}), 2) == std::vector<std::uint64_t>{70, 0});
}

TEST_CASE(
    "long rows: NaN fills the top only when numbers run out; every type takes the fast path") {
  std::vector<float> mostly_nan(100, std::nanf(""));
  mostly_nan[40] = -1.0F;
  mostly_nan[90] = 7.0F;
  CHECK(top(make<float>(mostly_nan, {100}), 4) == std::vector<std::uint64_t>{90, 40, 0, 1});
  std::vector<float> some_nan(300, 0.5F);
  some_nan[3] = std::nanf("");
  some_nan[250] = 2.0F;
  CHECK(top(make<float>(some_nan, {300}), 3) == std::vector<std::uint64_t>{250, 0, 1});

  std::vector<std::int8_t> bytes(200);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::int8_t>(i % 50 - 25);
  CHECK(top(make<std::int8_t>(bytes, {200}), 3) == std::vector<std::uint64_t>{49, 99, 149});
  std::vector<std::uint64_t> wide(150, 1);
  wide[149] = 18446744073709551615ULL;
  wide[0] = 18446744073709551614ULL;
  CHECK(top(make<std::uint64_t>(wide, {150}), 2) == std::vector<std::uint64_t>{149, 0});
  std::vector<double> doubles(500, -1e300);
  doubles[77] = -std::numeric_limits<double>::infinity();
  doubles[499] = 1e-300;
  CHECK(top(make<double>(doubles, {500}), 2) == std::vector<std::uint64_t>{499, 0});
}

TEST_CASE("classes ranked elsewhere give the same classification as the whole output") {
  std::mt19937_64 rng{77};
  const std::vector<std::string> labels{"zero", "one", "two"};
  for (int trial = 0; trial < 40; ++trial) {
    const bool batched = trial % 2 == 0;
    const std::size_t rows = batched ? 1 + rng() % 4 : 1;
    const std::size_t columns = 1 + rng() % 300;
    std::vector<float> values(rows * columns);
    const float few[3] = {random_value<float>(rng), 0.25F, std::nanf("")};
    for (float& v : values) v = trial % 3 == 0 ? few[rng() % 3] : random_value<float>(rng);
    const oip::shape_type shape = batched ? oip::shape_type{static_cast<std::int64_t>(rows),
                                                            static_cast<std::int64_t>(columns)}
                                          : oip::shape_type{static_cast<std::int64_t>(columns)};
    const oip::tensor output = make<float>(values, shape);
    const oip::classification_rows layout =
        batched ? oip::classification_rows::batch_rows : oip::classification_rows::whole_tensor;
    const std::size_t n = 1 + rng() % 12;
    const std::vector<std::uint64_t> at = top(output, n, batched);
    const std::size_t k = at.size() / rows;
    std::vector<float> best;
    for (std::size_t i = 0; i < at.size(); ++i) best.push_back(values[(i / k) * columns + at[i]]);
    const oip::shape_type best_shape =
        batched ? oip::shape_type{static_cast<std::int64_t>(rows), static_cast<std::int64_t>(k)}
                : oip::shape_type{static_cast<std::int64_t>(k)};
    oip::result<oip::tensor> whole = oip::classify(output, n, layout, labels);
    oip::result<oip::tensor> ranked =
        oip::classification_of_ranked(make<float>(best, best_shape), at, layout, labels);
    REQUIRE(whole.ok());
    REQUIRE(ranked.ok());
    CHECK(ranked->name() == whole->name());
    CHECK(ranked->shape() == whole->shape());
    CHECK(strings(*ranked) == strings(*whole));
  }
}

TEST_CASE("ranked classes that do not match their indices are the model's mistake: 500") {
  const std::vector<float> best{3.0F, 2.0F};
  const std::vector<std::uint64_t> one_index{4};
  oip::result<oip::tensor> r = oip::classification_of_ranked(
      make<float>(best, {2}), one_index, oip::classification_rows::whole_tensor);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().http_status() == 500);
  const std::vector<std::uint64_t> two{4, 1};
  oip::result<oip::tensor> unbatched_shape = oip::classification_of_ranked(
      make<float>(best, {2}), two, oip::classification_rows::batch_rows);
  CHECK_FALSE(unbatched_shape.ok());
  const std::vector<std::uint8_t> flags{1, 0};
  oip::result<oip::tensor> flags_ranked = oip::classification_of_ranked(
      *oip::tensor::make("B", oip::datatype::boolean, {2},
                         *oip::buffer::copy_of(std::as_bytes(std::span{flags}))),
      two, oip::classification_rows::whole_tensor);
  REQUIRE_FALSE(flags_ranked.ok());
  CHECK(flags_ranked.error().http_status() == 400);
}
