#include <oip/parameters.hpp>

#include <cstdint>
#include <limits>
#include <string>

#include <doctest/doctest.h>

TEST_CASE("parameters keep their JSON types and insertion order") {
  oip::parameters p;
  CHECK(p.try_add("sequence_id", std::int64_t{42}));
  CHECK(p.try_add("big", std::numeric_limits<std::uint64_t>::max()));
  CHECK(p.try_add("ratio", 1.5));
  CHECK(p.try_add("sequence_start", true));
  CHECK(p.try_add("tag", std::string("a")));
  CHECK(p.size() == 5);

  REQUIRE(p.get<std::int64_t>("sequence_id") != nullptr);
  CHECK(*p.get<std::int64_t>("sequence_id") == 42);
  CHECK(p.get<double>("sequence_id") == nullptr);  // an integer is not a double
  CHECK(*p.get<std::uint64_t>("big") == std::numeric_limits<std::uint64_t>::max());
  CHECK(*p.get<double>("ratio") == 1.5);
  CHECK(*p.get<bool>("sequence_start"));
  CHECK(*p.get<std::string>("tag") == "a");
  CHECK(p.find("missing") == nullptr);

  std::string order;
  for (const auto& [name, value] : p) order += name + ",";
  CHECK(order == "sequence_id,big,ratio,sequence_start,tag,");
}

TEST_CASE("duplicates are refused by try_add and replaced in place by set") {
  oip::parameters p;
  CHECK(p.try_add("a", std::int64_t{1}));
  CHECK(p.try_add("b", std::int64_t{2}));
  CHECK_FALSE(p.try_add("a", std::int64_t{3}));
  CHECK(*p.get<std::int64_t>("a") == 1);
  p.set("a", std::string("x"));
  CHECK(p.begin()->first == "a");
  CHECK(*p.get<std::string>("a") == "x");
  CHECK(p.erase("a"));
  CHECK_FALSE(p.erase("a"));
  CHECK(p.size() == 1);
}
