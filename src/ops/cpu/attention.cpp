// Causal multi-head attention on the fused QKV layout, one (batch, head) per OpenMP task,
// every product a register-blocked small GEMM (small_gemm.hpp) over blocks of query rows that
// stop at the causal diagonal. P = softmax(Q K^T / sqrt(hd)) is kept for the backward:
//   dP = dO V^T,  dS = P * (dP - rowsum(P * dP)),  dQ = s dS K,  dK = s dS^T Q,  dV = P^T dO.
// Grouped-query attention: H query heads share KV key/value heads in groups of H / KV (query
// head h reads kv head h / (H / KV)); the backward runs one task per (batch, kv head) and sums
// its group's dK, dV in order (deterministic). KV = H is plain multi-head attention.
// Document masking (doc_start): row i sees keys [doc_start[i], i]; a block of query rows starts its
// products at its rows' first document start, so key blocks no row of it sees are skipped.
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "kernels.hpp"
#include "small_gemm.hpp"
#include "vmath.hpp"

namespace mpitron::cpu::MPITRON_CPU_ISA {

namespace {
constexpr int kRowBlock = 48;  // query rows per block (multiple of the 6-row micro-tile)
}

size_t attention_scratch_floats(int T, int hd, bool backward) {
  size_t t = static_cast<size_t>(T);
  return static_cast<size_t>(hd) * t + (backward ? t * t : 0) + 16;
}

namespace {
// The first key any of rows [i0, i0 + mb) of sequence b sees (0 without document masking).
int first_key(const int32_t* doc_start, int b, int T, int i0, int mb) {
  if (!doc_start) return 0;
  const int32_t* d = doc_start + static_cast<int64_t>(b) * T;
  return *std::min_element(d + i0, d + i0 + mb);
}
}  // namespace

void attention_forward(float* out, float* att, const float* qkv, int B, int T, int H, int hd, float* scratch,
                       int KV, const int32_t* doc_start) {
  const int64_t C = static_cast<int64_t>(H) * hd, Ckv = static_cast<int64_t>(KV) * hd, C3 = C + 2 * Ckv;
  const int group = H / KV;
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  const size_t per_thread = attention_scratch_floats(T, hd, false);
#pragma omp parallel
  {
    float* Kt = scratch + per_thread * omp_get_thread_num();
#pragma omp for schedule(dynamic, 1)
    for (int bh = 0; bh < B * H; ++bh) {
      int b = bh / H, h = bh % H;
      const float* row = qkv + static_cast<int64_t>(b) * T * C3;
      const float* q = row + static_cast<int64_t>(h) * hd;
      const float* k = row + C + static_cast<int64_t>(h / group) * hd;
      const float* v = row + C + Ckv + static_cast<int64_t>(h / group) * hd;
      float* P = att + static_cast<int64_t>(bh) * T * T;
      float* o = out + static_cast<int64_t>(b) * T * C + static_cast<int64_t>(h) * hd;
      transpose(k, T, hd, C3, Kt, T);
      for (int i0 = 0; i0 < T; i0 += kRowBlock) {
        const int mb = std::min(kRowBlock, T - i0), n = i0 + mb, lo = first_key(doc_start, b, T, i0, mb);
        small_gemm(mb, n - lo, hd, q + i0 * C3, C3, Kt + lo, T, P + static_cast<int64_t>(i0) * T + lo, T, scale, false);
        for (int i = i0; i < n; ++i) {
          float* p = P + static_cast<int64_t>(i) * T;
          const int d = doc_start ? doc_start[static_cast<int64_t>(b) * T + i] : 0;
          std::fill(p, p + d, 0.f);
          float mx = max_n(p + d, i + 1 - d);
          float sum = exp_shift_n(p + d, p + d, i + 1 - d, mx, 1.f);
          float inv = 1.f / sum;
#pragma omp simd
          for (int j = d; j <= i; ++j) p[j] *= inv;
          std::fill(p + i + 1, p + T, 0.f);
        }
        small_gemm(mb, hd, n - lo, P + static_cast<int64_t>(i0) * T + lo, T, v + static_cast<int64_t>(lo) * C3, C3,
                   o + i0 * C, C, 1.f, false);
      }
    }
  }
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, int B, int T, int H,
                        int hd, float* scratch, int KV, const int32_t* doc_start) {
  const int64_t C = static_cast<int64_t>(H) * hd, Ckv = static_cast<int64_t>(KV) * hd, C3 = C + 2 * Ckv;
  const int64_t TT = static_cast<int64_t>(T) * T;
  const int group = H / KV;
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  const size_t per_thread = attention_scratch_floats(T, hd, true);
#pragma omp parallel
  {
    float* Vt = scratch + per_thread * omp_get_thread_num();
    float* dS = Vt + static_cast<int64_t>(hd) * T;
#pragma omp for schedule(dynamic, 1)
    for (int bk = 0; bk < B * KV; ++bk) {
      const int b = bk / KV, kh = bk % KV;
      const int64_t rowoff = static_cast<int64_t>(b) * T * C3;
      const int64_t koff = rowoff + C + static_cast<int64_t>(kh) * hd, voff = koff + Ckv;
      const float *k = qkv + koff, *v = qkv + voff;
      float *dk = dqkv + koff, *dv = dqkv + voff;
      transpose(v, T, hd, C3, Vt, T);
      for (int g = 0; g < group; ++g) {  // the group's query heads, in order; dK, dV summed over them
        const int h = kh * group + g, bh = b * H + h;
        const int64_t qoff = rowoff + static_cast<int64_t>(h) * hd;
        const float* q = qkv + qoff;
        float* dq = dqkv + qoff;
        const float* P = att + static_cast<int64_t>(bh) * TT;
        const float* dO = dout + static_cast<int64_t>(b) * T * C + static_cast<int64_t>(h) * hd;
        for (int i0 = 0; i0 < T; i0 += kRowBlock) {
          const int mb = std::min(kRowBlock, T - i0), n = i0 + mb, lo = first_key(doc_start, b, T, i0, mb);
          small_gemm(mb, n - lo, hd, dO + i0 * C, C, Vt + lo, T, dS + static_cast<int64_t>(i0) * T + lo, T, 1.f, false);
          for (int i = i0; i < n; ++i) {
            float* d = dS + static_cast<int64_t>(i) * T;
            const float* p = P + static_cast<int64_t>(i) * T;
            const int d0 = doc_start ? doc_start[static_cast<int64_t>(b) * T + i] : 0;
            std::fill(d, d + d0, 0.f);  // dK, dV below read whole columns
            float s = 0.f;
#pragma omp simd reduction(+ : s)
            for (int j = d0; j <= i; ++j) s += p[j] * d[j];
#pragma omp simd
            for (int j = d0; j <= i; ++j) d[j] = p[j] * (d[j] - s) * scale;
            std::fill(d + i + 1, d + T, 0.f);
          }
          small_gemm(mb, hd, n - lo, dS + static_cast<int64_t>(i0) * T + lo, T, k + static_cast<int64_t>(lo) * C3, C3,
                     dq + i0 * C3, C3, 1.f, false);
        }
        // dK = dS^T Q and dV = P^T dO read dS and P transposed (rows t >= j0 only: causal; with
        // documents only up to the last query whose document starts at or before the block's
        // last key: document starts do not decrease along a sequence).
        for (int j0 = 0; j0 < T; j0 += kRowBlock) {
          int mb = std::min(kRowBlock, T - j0), end = T;
          if (doc_start) {
            const int32_t* d = doc_start + static_cast<int64_t>(b) * T;
            end = static_cast<int>(std::upper_bound(d + j0, d + T, j0 + mb - 1) - d);
          }
          int64_t off = static_cast<int64_t>(j0) * T + j0;
          small_gemm<true>(mb, hd, end - j0, dS + off, T, q + j0 * C3, C3, dk + j0 * C3, C3, 1.f, g > 0);
          small_gemm<true>(mb, hd, end - j0, P + off, T, dO + j0 * C, C, dv + j0 * C3, C3, 1.f, g > 0);
        }
      }
    }
  }
}

}  // namespace mpitron::cpu::MPITRON_CPU_ISA
