// The base64 decoder of `file:` load parameters (a private header of the codecs): its size
// arithmetic past 2 GiB, where Triton's overflowed (CVE-2024-53880), without allocating that much.

#include "codecs/detail/base64.hpp"

#include <cstddef>
#include <cstdint>
#include <limits>

#include <doctest/doctest.h>

TEST_CASE("decoded sizes are exact past 2 and 4 GiB and up to the largest size") {
  using oip::detail::base64_decoded_size;
  CHECK(base64_decoded_size(0) == std::size_t{0});
  CHECK(base64_decoded_size(4) == std::size_t{3});
  CHECK_FALSE(base64_decoded_size(5));
  // 2 GiB of base64 and more: a 32-bit count goes negative or wraps here.
  CHECK(base64_decoded_size(std::size_t{1} << 31U) == std::size_t{3} << 29U);
  CHECK(base64_decoded_size((std::size_t{1} << 32U) + 4) == (std::size_t{3} << 30U) + 3);
  CHECK(base64_decoded_size(std::size_t{12} << 30U) == std::size_t{9} << 30U);
  constexpr std::size_t largest = std::numeric_limits<std::size_t>::max() / 4 * 4;
  CHECK(base64_decoded_size(largest) == largest / 4 * 3);
  CHECK(*base64_decoded_size(largest) < largest);
}

TEST_CASE("decoding: padding, and anything else than standard base64 refused") {
  using oip::detail::from_base64;
  CHECK(from_base64("") == std::string{});
  CHECK(from_base64("b2lw") == std::string{"oip"});
  CHECK(from_base64("b2k=") == std::string{"oi"});
  CHECK(from_base64("bw==") == std::string{"o"});
  CHECK_FALSE(from_base64("b2l"));
  CHECK_FALSE(from_base64("b2l-"));
  CHECK_FALSE(from_base64("b=lw"));
}

TEST_CASE("line breaks, as libb64 writes them for Triton's C++ clients, are skipped") {
  using oip::detail::from_base64;
  // 64 bytes (a CUDA IPC handle) as libb64 writes them: 72 characters, a break, the rest, a break.
  std::string bytes(64, '\0');
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 7);
  std::string encoded;
  oip::detail::append_base64(encoded, reinterpret_cast<const unsigned char*>(bytes.data()),
                             bytes.size());
  REQUIRE(encoded.size() == 88);
  const std::string broken = encoded.substr(0, 72) + "\n" + encoded.substr(72) + "\n";
  CHECK(from_base64(broken) == bytes);
  CHECK(from_base64(encoded.substr(0, 72) + "\r\n" + encoded.substr(72)) == bytes);
  CHECK(from_base64(encoded.substr(0, 72) + " " + encoded.substr(72)) == std::nullopt);
}
