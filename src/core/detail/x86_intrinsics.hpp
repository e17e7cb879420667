#pragma once
// Internal: the x86 intrinsics of the vector kernels (float16.cpp, the classification kernels).

#if defined(__x86_64__)
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12 warns inside its own AVX-512 intrinsics (_mm512_undefined_* at -O1 and -O2): a false
// positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>
#endif
