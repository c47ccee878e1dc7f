// <immintrin.h> for the AVX-512 kernels. GCC 12 reports -Wmaybe-uninitialized inside its own
// AVX-512 intrinsics (their _mm512_undefined_ps passthrough; GCC bug 105593, fixed in 13) once
// they are inlined into OpenMP regions; the pragma covers only the header's lines.
#pragma once
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
