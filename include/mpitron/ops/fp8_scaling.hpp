// FP8 current (per-tensor) scaling, the recipe's cast (TransformerEngine's "current scaling"): a
// tensor's amax (largest magnitude, NaN-free tensors) gives its scale = max finite / amax, so the
// largest element lands on the format's largest finite value; each element is cast as
// fp8(x * scale) (core/fp8.hpp: nearest even, saturating) and read back as decode(q) * scale_inv,
// scale_inv = 1 / scale. amax 0 or not finite gives scale 1. The scale is an fp32 division, the
// products fp32: the CPU and the GPU (CudaOps::fp8_quantize) compute the same bytes.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "mpitron/core/fp8.hpp"

namespace mpitron {

MPITRON_FP8_HD float fp8_max_finite(Fp8Format f) { return f == Fp8Format::e4m3 ? kFp8E4m3Max : kFp8E5m2Max; }
MPITRON_FP8_HD float fp8_scale_for(Fp8Format f, float amax) {
  return amax > 0.f && amax <= 3.4e38f ? fp8_max_finite(f) / amax : 1.f;
}

// Where saturation begins (core/fp8.hpp: E4M3 464, E5M2 61440).
MPITRON_FP8_HD float fp8_saturation_threshold(Fp8Format f) {
  return f == Fp8Format::e4m3 ? kFp8E4m3Saturation : kFp8E5m2Saturation;
}

// What a cast did (the recipe's statistics): the amax, and how many elements saturated (past the
// threshold above: none under current scaling unless the amax came from elsewhere) or underflowed
// (a non-zero x that became zero).
struct Fp8CastStats {
  float amax = 0.f, scale = 1.f;
  int64_t saturated = 0, underflowed = 0;
};

// A cast's statistics kept on the GPU (CudaOps::fp8_cast adds to them; model/fp8_recipe.hpp's
// Fp8KindStats once downloaded): the largest amax as its float's bits (non-negative floats order
// as their bits), the saturated and underflowed elements.
struct Fp8DeviceStats {
  unsigned amax_bits = 0, pad = 0;
  unsigned long long saturated = 0, underflowed = 0;
};

// max |x[i]| (0 for n = 0).
float fp8_amax(const float* x, size_t n);
// q[i] = fp8(x[i] * scale) with the scale of x's own amax; returns the scale and the statistics.
Fp8CastStats fp8_quantize(Fp8Format f, const float* x, size_t n, uint8_t* q);
// x[i] <- decode(fp8(x[i] * scale)) * (1 / scale) in place: the CPU's emulation of an FP8 operand.
Fp8CastStats fp8_fake_quantize(Fp8Format f, float* x, size_t n);
// out[i] = decode(fp8(x[i] * scale)) with the scale of a given amax (a tensor split over ranks,
// tensor or context parallel, is scaled by the whole tensor's amax, the max of the ranks'
// fp8_amax): the code's value without the 1 / scale, what an FP8 GEMM multiplies (exact in bf16
// and fp32), its result then scaled by the operands' scale_inv. out may be x.
Fp8CastStats fp8_decode_quantized(Fp8Format f, const float* x, float* out, size_t n, float amax);

}  // namespace mpitron
