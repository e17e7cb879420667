// doctest's main for every test executable. A test run with OIP_SIMD=<path> (portable, avx2,
// avx512) is there to check that path's kernels: on a CPU without it, the run exits 77, which
// CTest reports as a skip, rather than passing on the narrower kernels.

#define DOCTEST_CONFIG_IMPLEMENT
#include <oip/float16.hpp>

#include <cstdio>
#include <cstdlib>
#include <string_view>

#include <doctest/doctest.h>

namespace {

std::string_view name_of(oip::detail::simd_path path) {
  switch (path) {
    case oip::detail::simd_path::portable: return "portable";
    case oip::detail::simd_path::avx2_f16c: return "avx2";
    case oip::detail::simd_path::avx512: return "avx512";
  }
  return "unknown";
}

}  // namespace

int main(int argc, char** argv) {
  if (const char* wanted = std::getenv("OIP_SIMD")) {  // NOLINT(concurrency-mt-unsafe)
    const std::string_view path = name_of(oip::detail::best_simd_path());
    if (path != wanted) {
      std::printf("skipped: OIP_SIMD=%s asks for kernels this CPU cannot run (its widest: %s)\n",
                  wanted, path.data());
      return 77;
    }
  }
  return doctest::Context(argc, argv).run();
}
