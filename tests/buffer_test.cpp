#include <oip/buffer.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <doctest/doctest.h>

namespace {
std::span<const std::byte> bytes_of(const std::string& s) {
  return std::as_bytes(std::span{s.data(), s.size()});
}
}  // namespace

TEST_CASE("mutable_buffer allocates aligned storage with zeroed padding") {
  oip::result<oip::mutable_buffer> b = oip::mutable_buffer::allocate(100, 64);
  REQUIRE(b.ok());
  CHECK(b->size() == 100);
  CHECK(b->padding() == 64);
  CHECK(reinterpret_cast<std::uintptr_t>(b->data()) % oip::buffer_alignment == 0);
  for (std::size_t i = 0; i < 64; ++i) CHECK(b->data()[100 + i] == std::byte{0});

  oip::result<oip::mutable_buffer> empty = oip::mutable_buffer::allocate(0);
  REQUIRE(empty.ok());
  CHECK(empty->empty());
  CHECK(empty->data() != nullptr);
}

TEST_CASE("allocation failure is an error, not an exception") {
  oip::result<oip::mutable_buffer> huge = oip::mutable_buffer::allocate(SIZE_MAX / 2);
  REQUIRE_FALSE(huge.ok());
  // Out of memory is the server's state, not the request's fault: a 503 that may pass.
  CHECK(huge.error().code() == oip::errc::unavailable);
  oip::result<oip::mutable_buffer> wraps = oip::mutable_buffer::allocate(SIZE_MAX, 2);
  REQUIRE_FALSE(wraps.ok());
  CHECK(wraps.error().code() == oip::errc::internal);
}

TEST_CASE("allocate never hands out what the memory held before (CVE-2024-0103's class)") {
  // Blocks below malloc's mmap threshold come back from its free lists with their old bytes.
  constexpr std::size_t size = 4096;
  for (int round = 0; round < 8; ++round) {
    {
      oip::result<oip::mutable_buffer> used = oip::mutable_buffer::allocate_for_overwrite(size);
      REQUIRE(used);
      std::memset(used->data(), 0xAB, size);
    }
    oip::result<oip::mutable_buffer> fresh = oip::mutable_buffer::allocate(size);
    REQUIRE(fresh);
    CHECK(std::all_of(fresh->data(), fresh->data() + size,
                      [](std::byte b) { return b == std::byte{0}; }));
  }
}

TEST_CASE("freezing a mutable buffer keeps its bytes in place") {
  oip::result<oip::mutable_buffer> m = oip::mutable_buffer::allocate(4, 8);
  REQUIRE(m.ok());
  std::byte* where = m->data();
  m->data()[0] = std::byte{42};
  oip::buffer frozen = std::move(*m);
  CHECK(frozen.data() == where);
  CHECK(frozen.size() == 4);
  CHECK(frozen.padding() == 8);
  CHECK(frozen.data()[0] == std::byte{42});
}

TEST_CASE("slices are zero-copy views that keep the storage alive") {
  bool destroyed = false;
  oip::buffer slice;
  {
    auto body = std::shared_ptr<std::string>(new std::string("header|0123456789"),
                                             [&destroyed](std::string* s) {
                                               destroyed = true;
                                               delete s;
                                             });
    const oip::buffer whole = oip::buffer::view(bytes_of(*body), body);
    oip::result<oip::buffer> part = whole.slice(7, 4);
    REQUIRE(part.ok());
    CHECK(part->data() == whole.data() + 7);
    CHECK(part->as_string_view() == "0123");
    CHECK(part->padding() == 6);  // the rest of the body stays readable
    CHECK(part->shares_storage_with(whole));
    slice = *part;
  }
  CHECK_FALSE(destroyed);
  CHECK(slice.as_string_view() == "0123");
  slice = oip::buffer{};
  CHECK(destroyed);
}

TEST_CASE("slices outside the buffer are errors") {
  const oip::buffer b = oip::buffer::from_string("abcdef");
  CHECK(b.slice(6, 0).ok());
  CHECK(b.slice(0, 6).ok());
  for (auto [offset, length] :
       {std::pair<std::size_t, std::size_t>{0, 7}, {7, 0}, {3, 4}, {SIZE_MAX, 2}, {2, SIZE_MAX}}) {
    oip::result<oip::buffer> s = b.slice(offset, length);
    REQUIRE_FALSE(s.ok());
    CHECK(s.error().code() == oip::errc::invalid_argument);
  }
  CHECK(b.slice(3, 4).error().message() ==
        "slice of 4 bytes at offset 3 is outside a buffer of 6 bytes");
}

TEST_CASE("from_string takes the string's bytes without copying") {
  std::string s(1000, 'x');
  const char* where = s.data();
  const oip::buffer b = oip::buffer::from_string(std::move(s));
  CHECK(reinterpret_cast<const char*>(b.data()) == where);
  CHECK(b.size() == 1000);
}

TEST_CASE("copy_of copies into an aligned allocation") {
  const std::string s = "hello";
  oip::result<oip::buffer> b = oip::buffer::copy_of(bytes_of(s));
  REQUIRE(b.ok());
  CHECK(b->as_string_view() == "hello");
  CHECK(reinterpret_cast<const char*>(b->data()) != s.data());
  CHECK(b->is_aligned(oip::buffer_alignment));
  const oip::buffer other = oip::buffer::from_string("x");
  CHECK_FALSE(b->shares_storage_with(other));
}

TEST_CASE("typed loads read unaligned bytes safely") {
  std::vector<std::byte> raw(1 + 3 * sizeof(double));
  const double values[3] = {1.5, -2.25, 1e300};
  std::memcpy(raw.data() + 1, values, sizeof(values));
  const oip::buffer b = oip::buffer::unowned(std::span{raw}.subspan(1));
  CHECK_FALSE(b.is_aligned(alignof(double)));
  CHECK(b.load<double>(0) == 1.5);
  CHECK(b.load<double>(1) == -2.25);
  CHECK(b.load<double>(2) == 1e300);
  CHECK_FALSE(b.shares_storage_with(b));  // unowned: nothing shared
}
