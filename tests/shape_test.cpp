#include <oip/shape.hpp>

#include <cstdint>
#include <iterator>
#include <span>
#include <sstream>
#include <stdexcept>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

namespace {

std::vector<std::int64_t> as_vector(const oip::shape_type& s) { return {s.begin(), s.end()}; }

// 1, 2, ..., n
oip::shape_type counting_shape(std::int64_t n) {
  oip::shape_type s;
  for (std::int64_t d = 1; d <= n; ++d) s.push_back(d);
  return s;
}

}  // namespace

TEST_CASE("a shape holds its dimensions inline up to its inline capacity, then on the heap") {
  constexpr auto inline_dims = static_cast<std::int64_t>(oip::shape_type::inline_capacity);
  oip::shape_type s = counting_shape(inline_dims);
  CHECK(s.capacity() == oip::shape_type::inline_capacity);
  const std::int64_t* inline_data = s.data();
  s.push_back(inline_dims + 1);
  CHECK(s.data() != inline_data);
  CHECK(s.capacity() > oip::shape_type::inline_capacity);
  CHECK(s.size() == oip::shape_type::inline_capacity + 1);
  CHECK(s == counting_shape(inline_dims + 1));
  for (std::int64_t d = inline_dims + 2; d <= 40; ++d) s.push_back(d);
  CHECK(s == counting_shape(40));
}

TEST_CASE("a shape is built like a std::vector") {
  CHECK(as_vector(oip::shape_type{}) == std::vector<std::int64_t>{});
  CHECK(as_vector(oip::shape_type{0}) == std::vector<std::int64_t>{0});  // one dimension of 0
  CHECK(as_vector(oip::shape_type{1, 16}) == std::vector<std::int64_t>{1, 16});
  CHECK(as_vector(oip::shape_type(3)) == std::vector<std::int64_t>{0, 0, 0});
  CHECK(as_vector(oip::shape_type(2, -1)) == std::vector<std::int64_t>{-1, -1});
  const std::vector<std::int64_t> dims{4, 5, 6, 7, 8, 9, 10, 11};
  CHECK(as_vector(oip::shape_type(dims)) == dims);
  CHECK(as_vector(oip::shape_type(std::span<const std::int64_t>(dims).first(2))) ==
        std::vector<std::int64_t>{4, 5});
  const std::vector<int> narrower{2, 3};
  CHECK(as_vector(oip::shape_type(narrower.begin(), narrower.end())) ==
        std::vector<std::int64_t>{2, 3});
  std::istringstream text("7 8 9");
  CHECK(as_vector(oip::shape_type(std::istream_iterator<std::int64_t>(text),
                                  std::istream_iterator<std::int64_t>())) ==
        std::vector<std::int64_t>{7, 8, 9});
}

TEST_CASE("copies and moves of a shape, inline and on the heap") {
  for (const std::int64_t n : {std::int64_t{0}, std::int64_t{3}, std::int64_t{20}}) {
    CAPTURE(n);
    const oip::shape_type original = counting_shape(n);
    oip::shape_type copy = original;
    CHECK(copy == original);
    if (n > 0) {
      copy[0] = 100;
      CHECK(original[0] == 1);  // the copy owns its dimensions
    }

    oip::shape_type source = counting_shape(n);
    const std::int64_t* heap_data = n > 6 ? source.data() : nullptr;
    oip::shape_type moved = std::move(source);
    CHECK(moved == original);
    CHECK(source.empty());  // NOLINT(bugprone-use-after-move): a moved-from shape is empty
    if (heap_data != nullptr) CHECK(moved.data() == heap_data);  // taken, not copied

    oip::shape_type assigned{9, 9, 9, 9, 9, 9, 9, 9, 9};
    assigned = original;
    CHECK(assigned == original);
    oip::shape_type move_assigned{1};
    move_assigned = std::move(copy);
    CHECK(move_assigned.size() == original.size());
    const oip::shape_type& same = assigned;
    assigned = same;  // assigned to itself
    CHECK(assigned == original);
  }
}

TEST_CASE("inserting, erasing and resizing a shape") {
  oip::shape_type s{1, 16};
  CHECK(*s.insert(s.begin(), 8) == 8);
  CHECK(as_vector(s) == std::vector<std::int64_t>{8, 1, 16});
  s.insert(s.begin() + 1, 3);
  CHECK(as_vector(s) == std::vector<std::int64_t>{8, 3, 1, 16});
  s.insert(s.end(), 5);
  CHECK(as_vector(s) == std::vector<std::int64_t>{8, 3, 1, 16, 5});
  const std::vector<std::int64_t> more{20, 21, 22, 23};
  s.insert(s.begin() + 2, more.begin(), more.end());  // past the inline capacity
  CHECK(as_vector(s) == std::vector<std::int64_t>{8, 3, 20, 21, 22, 23, 1, 16, 5});
  s.insert(s.begin(), s.begin() + 7, s.end());  // a range of the shape itself, which grows
  CHECK(as_vector(s) == std::vector<std::int64_t>{16, 5, 8, 3, 20, 21, 22, 23, 1, 16, 5});
  s.erase(s.begin());
  s.erase(s.begin());
  CHECK(*s.erase(s.begin()) == 3);
  s.erase(s.end() - 1);
  CHECK(as_vector(s) == std::vector<std::int64_t>{3, 20, 21, 22, 23, 1, 16});
  s.pop_back();
  s.resize(2);
  CHECK(as_vector(s) == std::vector<std::int64_t>{3, 20});
  s.resize(4, -1);
  CHECK(as_vector(s) == std::vector<std::int64_t>{3, 20, -1, -1});
  CHECK(s.front() == 3);
  CHECK(s.back() == -1);
  CHECK(as_vector(oip::shape_type(s.rbegin(), s.rend())) ==
        std::vector<std::int64_t>{-1, -1, 20, 3});
  CHECK(s.at(1) == 20);
  CHECK_THROWS_AS(static_cast<void>(s.at(4)), std::out_of_range);
  s.clear();
  CHECK(s.empty());
  s = {2, 2};
  CHECK(as_vector(s) == std::vector<std::int64_t>{2, 2});
}

TEST_CASE("a shape is a span of its dimensions and compares by them") {
  const oip::shape_type s{2, 3, 4};
  const std::span<const std::int64_t> dims = s;
  CHECK(dims.data() == s.data());
  CHECK(dims.size() == 3);
  CHECK(s == oip::shape_type{2, 3, 4});
  CHECK(s != oip::shape_type{2, 3});
  CHECK(s != oip::shape_type{2, 3, 5});
  CHECK(counting_shape(10) == counting_shape(10));  // heap against heap
}
