// CudaDevice's FP8 linear GEMMs (cuda_device.hpp, train.precision = "fp8"; the recipe in
// fp8_recipe.hpp, its CPU twin cpu_fp8_linear.cpp). Hopper's FP8 GEMM reads both operands with the
// contracted dimension contiguous: the forward (over K) takes the input and the weight as they are,
// the input gradient (over N) the weight's transposed copy, the weight gradient (over the rows) the
// transposed copies of the output gradient and of the input. One GEMM's codes at a time live in
// GpuFp8Bufs, sized for the largest linear.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>

#include "mpitron/model/cuda/cuda_device.hpp"

namespace mpitron {
namespace {

int idx(Fp8Operand k) { return static_cast<int>(k); }

// x [rows, cols] cast as operand k into q and/or its transposed copy qt; its 1 / scale lands in
// fp8.scalars[3 + k].
const float* cast_operand(CudaDevice& d, Fp8Recipe& r, Fp8Operand k, const bf16* x, int64_t rows, int64_t cols,
                          uint8_t* q, uint8_t* qt) {
  float* amax = d.fp8.scalars + idx(k);
  float* scale_inv = d.fp8.scalars + kFp8Operands + idx(k);
  d.ops.fp8_amax(amax, x, rows * cols);
  r.group_amax_inplace(amax);
  Fp8DeviceStats* stats = r.counting() ? d.fp8.stats + idx(k) : nullptr;
  d.ops.fp8_cast(q, qt, scale_inv, amax, x, rows, cols, fp8_format_for(k), stats);
  r.count_cast(k, rows * cols);
  return scale_inv;
}

// An FP8 GEMM operand: its codes, its kind (the format) and its 1 / scale.
struct Operand {
  const uint8_t* codes;
  Fp8Operand kind;
  const float* scale_inv;
};
// a [M, K] b [N, K]^T, the output left to the caller.
Fp8Gemm gemm_of(int64_t M, int64_t K, int64_t N, Operand a, Operand b) {
  Fp8Gemm g;
  g.M = M, g.K = K, g.N = N;
  g.a = a.codes, g.a_format = fp8_format_for(a.kind), g.a_scale_inv = a.scale_inv;
  g.b = b.codes, g.b_format = fp8_format_for(b.kind), g.b_scale_inv = b.scale_inv;
  return g;
}

}  // namespace

void CudaDevice::fp8_matmul_forward(Fp8Recipe& r, bf16* out, const bf16* inp, const bf16* w, const bf16* b, int64_t M,
                                    int64_t K, int64_t N, bf16* gelu_pre) {
  check(fp8.scalars != nullptr, "CudaDevice: FP8 linears without their buffers (the model was built without fp8)");
  const float* si = cast_operand(*this, r, Fp8Operand::activation, inp, M, K, fp8.act, nullptr);
  const float* sw = cast_operand(*this, r, Fp8Operand::weight, w, N, K, fp8.weight, nullptr);
  Fp8Gemm g = gemm_of(M, K, N, {fp8.act, Fp8Operand::activation, si}, {fp8.weight, Fp8Operand::weight, sw});
  g.out = gelu_pre ? gelu_pre : out, g.bias = b;
  ops.fp8_gemm(g);
  if (gelu_pre) ops.gelu_forward(out, gelu_pre, static_cast<size_t>(M * N));
}

void CudaDevice::fp8_matmul_backward(Fp8Recipe& r, bf16* dinp, float* dw, float* db, const bf16* dout,
                                     const bf16* inp, const bf16* w, int64_t M, int64_t K, int64_t N,
                                     const bf16* gelu_pre) {
  check(fp8.scalars != nullptr, "CudaDevice: FP8 linears without their buffers (the model was built without fp8)");
  const float* sd = nullptr;
  if (dinp || dw)
    sd = cast_operand(*this, r, Fp8Operand::gradient, dout, M, N, dinp ? fp8.grad : nullptr, dw ? fp8.grad_t : nullptr);
  if (dinp) {  // dinp [M, K] = dout [M, N] (W^T [K, N])^T
    const float* sw = cast_operand(*this, r, Fp8Operand::weight, w, N, K, nullptr, fp8.weight);
    Fp8Gemm g = gemm_of(M, N, K, {fp8.grad, Fp8Operand::gradient, sd}, {fp8.weight, Fp8Operand::weight, sw});
    g.out = dinp;
    ops.fp8_gemm(g);
    if (gelu_pre) ops.gelu_backward(dinp, gelu_pre, dinp, static_cast<size_t>(M * K));
  }
  if (dw) {  // dw [N, K] += dout^T [N, M] (inp^T [K, M])^T
    const float* si = cast_operand(*this, r, Fp8Operand::activation, inp, M, K, nullptr, fp8.act);
    Fp8Gemm g = gemm_of(N, M, K, {fp8.grad_t, Fp8Operand::gradient, sd}, {fp8.act, Fp8Operand::activation, si});
    g.acc = dw;
    ops.fp8_gemm(g);
  }
  if (db) ops.matmul_backward(nullptr, nullptr, db, dout, inp, w, M, K, N, false, nullptr);
}

Fp8Stats CudaDevice::take_fp8_stats(Fp8Recipe& r) {
  Fp8Stats s = r.take_stats();
  if (!fp8.stats) return s;
  Fp8DeviceStats d[kFp8Operands];
  cuda::cuda_check(cudaMemcpyAsync(d, fp8.stats, sizeof d, cudaMemcpyDeviceToHost, ops.stream()),
                   "cudaMemcpyAsync(FP8 statistics)");
  cuda::cuda_check(cudaMemsetAsync(fp8.stats, 0, sizeof d, ops.stream()), "cudaMemsetAsync(FP8 statistics)");
  cuda::cuda_check(cudaStreamSynchronize(ops.stream()), "cudaStreamSynchronize(FP8 statistics)");
  for (int k = 0; k < kFp8Operands; ++k) {
    float amax = 0.f;
    static_assert(sizeof amax == sizeof d[k].amax_bits);
    std::memcpy(&amax, &d[k].amax_bits, sizeof amax);
    s[k].amax = std::max(s[k].amax, static_cast<double>(amax));
    s[k].saturated += static_cast<int64_t>(d[k].saturated);
    s[k].underflowed += static_cast<int64_t>(d[k].underflowed);
  }
  return s;
}

}  // namespace mpitron
