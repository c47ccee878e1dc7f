// Causal multi-head attention on the fused QKV layout, one (batch, head) per OpenMP task,
// every product a register-blocked small GEMM (small_gemm.hpp) over blocks of query rows that
// stop at the causal diagonal. P = softmax(Q K^T / sqrt(hd)) is kept for the backward:
//   dP = dO V^T,  dS = P * (dP - rowsum(P * dP)),  dQ = s dS K,  dK = s dS^T Q,  dV = P^T dO.
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "kernels.hpp"
#include "small_gemm.hpp"
#include "vmath.hpp"

namespace mpitron::cpu {

namespace {
constexpr int kRowBlock = 48;  // query rows per block (multiple of the 6-row micro-tile)
}

size_t attention_scratch_floats(int T, int hd, bool backward) {
  size_t t = static_cast<size_t>(T);
  return static_cast<size_t>(hd) * t + (backward ? t * t : 0) + 16;
}

void attention_forward(float* out, float* att, const float* qkv, int B, int T, int H, int hd, float* scratch) {
  const int64_t C = static_cast<int64_t>(H) * hd, C3 = 3 * C;
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  const size_t per_thread = attention_scratch_floats(T, hd, false);
#pragma omp parallel
  {
    float* Kt = scratch + per_thread * omp_get_thread_num();
#pragma omp for schedule(dynamic, 1)
    for (int bh = 0; bh < B * H; ++bh) {
      int b = bh / H, h = bh % H;
      const float* q = qkv + static_cast<int64_t>(b) * T * C3 + static_cast<int64_t>(h) * hd;
      const float* k = q + C;
      const float* v = q + 2 * C;
      float* P = att + static_cast<int64_t>(bh) * T * T;
      float* o = out + static_cast<int64_t>(b) * T * C + static_cast<int64_t>(h) * hd;
      transpose(k, T, hd, C3, Kt, T);
      for (int i0 = 0; i0 < T; i0 += kRowBlock) {
        int mb = std::min(kRowBlock, T - i0), n = i0 + mb;
        small_gemm(mb, n, hd, q + i0 * C3, C3, Kt, T, P + static_cast<int64_t>(i0) * T, T, scale, false);
        for (int i = i0; i < n; ++i) {
          float* p = P + static_cast<int64_t>(i) * T;
          float mx = max_n(p, i + 1);
          float sum = exp_shift_n(p, p, i + 1, mx, 1.f);
          float inv = 1.f / sum;
#pragma omp simd
          for (int j = 0; j <= i; ++j) p[j] *= inv;
          std::fill(p + i + 1, p + T, 0.f);
        }
        small_gemm(mb, hd, n, P + static_cast<int64_t>(i0) * T, T, v, C3, o + i0 * C, C, 1.f, false);
      }
    }
  }
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, int B, int T, int H,
                        int hd, float* scratch) {
  const int64_t C = static_cast<int64_t>(H) * hd, C3 = 3 * C, TT = static_cast<int64_t>(T) * T;
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  const size_t per_thread = attention_scratch_floats(T, hd, true);
#pragma omp parallel
  {
    float* Vt = scratch + per_thread * omp_get_thread_num();
    float* dS = Vt + static_cast<int64_t>(hd) * T;
#pragma omp for schedule(dynamic, 1)
    for (int bh = 0; bh < B * H; ++bh) {
      int b = bh / H, h = bh % H;
      const int64_t qoff = static_cast<int64_t>(b) * T * C3 + static_cast<int64_t>(h) * hd;
      const float *q = qkv + qoff, *k = q + C, *v = q + 2 * C;
      float *dq = dqkv + qoff, *dk = dq + C, *dv = dq + 2 * C;
      const float* P = att + static_cast<int64_t>(bh) * TT;
      const float* dO = dout + static_cast<int64_t>(b) * T * C + static_cast<int64_t>(h) * hd;
      transpose(v, T, hd, C3, Vt, T);
      for (int i0 = 0; i0 < T; i0 += kRowBlock) {
        int mb = std::min(kRowBlock, T - i0), n = i0 + mb;
        small_gemm(mb, n, hd, dO + i0 * C, C, Vt, T, dS + static_cast<int64_t>(i0) * T, T, 1.f, false);
        for (int i = i0; i < n; ++i) {
          float* d = dS + static_cast<int64_t>(i) * T;
          const float* p = P + static_cast<int64_t>(i) * T;
          float s = 0.f;
#pragma omp simd reduction(+ : s)
          for (int j = 0; j <= i; ++j) s += p[j] * d[j];
#pragma omp simd
          for (int j = 0; j <= i; ++j) d[j] = p[j] * (d[j] - s) * scale;
          std::fill(d + i + 1, d + T, 0.f);
        }
        small_gemm(mb, hd, n, dS + static_cast<int64_t>(i0) * T, T, k, C3, dq + i0 * C3, C3, 1.f, false);
      }
      // dK = dS^T Q and dV = P^T dO read dS and P transposed (rows t >= j0 only: causal).
      for (int j0 = 0; j0 < T; j0 += kRowBlock) {
        int mb = std::min(kRowBlock, T - j0);
        int64_t off = static_cast<int64_t>(j0) * T + j0;
        small_gemm<true>(mb, hd, T - j0, dS + off, T, q + j0 * C3, C3, dk + j0 * C3, C3, 1.f, false);
        small_gemm<true>(mb, hd, T - j0, P + off, T, dO + j0 * C, C, dv + j0 * C3, C3, 1.f, false);
      }
    }
  }
}

}  // namespace mpitron::cpu
