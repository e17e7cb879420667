#pragma once
// Compressed request bodies in tests: zlib's gzip (window bits 31) or zlib format (15).

#include <string>

#include <doctest/doctest.h>

#include <zlib.h>

namespace oip::testing {

inline std::string gzip(const std::string& text, int window_bits = 31) {
  z_stream s{};
  REQUIRE(deflateInit2(&s, Z_DEFAULT_COMPRESSION, Z_DEFLATED, window_bits, 8, Z_DEFAULT_STRATEGY) ==
          Z_OK);
  std::string out(deflateBound(&s, text.size()), '\0');
  s.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  s.avail_in = static_cast<uInt>(text.size());
  s.next_out = reinterpret_cast<Bytef*>(out.data());
  s.avail_out = static_cast<uInt>(out.size());
  REQUIRE(deflate(&s, Z_FINISH) == Z_STREAM_END);
  out.resize(s.total_out);
  deflateEnd(&s);
  return out;
}

}  // namespace oip::testing
