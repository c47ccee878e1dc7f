// One key/value block of blockwise (ring) attention, the per-step compute of context parallel
// (model/context_parallel/ring_attention.hpp), on register-blocked small GEMMs (small_gemm.hpp) as
// attention.cpp. Masking is by global position: key j is visible to query i when kpos[j] <= qpos[i]
// (and, with document masking, kpos[j] >= qstart[i], the first position of i's document). A block
// is two position-contiguous halves (the load-balanced chunks), so for a block of query rows only
// each half's leading keys up to the rows' last position are computed: the causally masked half
// of the work is skipped.
//   forward   S = s Q K^T, online softmax: m' = max(m, rowmax S), o = o e^(m - m') + e^(S - m') V,
//             l = l e^(m - m') + rowsum e^(S - m')
//   backward  P = e^(s Q K^T - lse), dP = dO V^T, dS = P (dP - D), dQ += s dS K, dK += s dS^T Q,
//             dV += P^T dO  (D = rowsum(dO * O) of the final output)
// One task per (sequence, head) forward, per (sequence, kv head) backward (its group's query heads
// in order: dK, dV deterministic).
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "kernels.hpp"
#include "small_gemm.hpp"
#include "vmath.hpp"

namespace mpitron::cpu::MPITRON_CPU_ISA {

namespace {

constexpr int kRows = 48;  // query rows per block (a multiple of the 6-row micro-tile)

// The two halves of a key block: [begin, begin + n) of columns whose positions are <= the last
// position of query rows [i0, i0 + rows) and >= their first document start (qstart: this
// sequence's [Tq] starts, nullptr: 0). Returns whether any column is visible.
struct Seg {
  int begin, n;
};
bool visible_segments(const int* qpos, const int32_t* qstart, int i0, int rows, const int* kpos, int Tk, Seg out[2]) {
  int last = qpos[i0], first = qstart ? qstart[i0] : 0;
  for (int i = i0; i < i0 + rows; ++i) last = std::max(last, qpos[i]);
  if (qstart)
    for (int i = i0; i < i0 + rows; ++i) first = std::min(first, static_cast<int>(qstart[i]));
  const int half = Tk / 2;
  for (int s = 0; s < 2; ++s) {
    int b = s * half;
    const int e = s == 0 ? half : Tk;
    while (b < e && kpos[b] < first) ++b;  // positions increase inside a half
    int n = 0;
    while (b + n < e && kpos[b + n] <= last) ++n;
    out[s] = {b, n};
  }
  return out[0].n + out[1].n > 0;
}

}  // namespace

size_t attention_block_scratch_floats(int Tk, int hd) {
  return 2 * static_cast<size_t>(hd) * Tk + 2 * static_cast<size_t>(kRows) * Tk + 16;
}

void attention_block_forward(float* o, float* m, float* l, const float* q, int64_t q_stride, const float* kv, int B,
                             int Tq, int Tk, int H, int KV, int hd, const int* qpos, const int* kpos,
                             const int32_t* qstart, float* scratch) {
  const int group = H / KV;
  const int64_t kv_row = 2 * int64_t{KV} * hd, o_row = int64_t{H} * hd;
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  const size_t per_thread = attention_block_scratch_floats(Tk, hd);
#pragma omp parallel
  {
    float* Kt = scratch + per_thread * omp_get_thread_num();
    float* S = Kt + static_cast<size_t>(hd) * Tk;
#pragma omp for schedule(dynamic, 1)
    for (int bh = 0; bh < B * H; ++bh) {
      const int b = bh / H, h = bh % H;
      const float* k = kv + int64_t{b} * Tk * kv_row + int64_t{h / group} * hd;
      const float* v = k + int64_t{KV} * hd;
      transpose(k, Tk, hd, kv_row, Kt, Tk);
      const int32_t* qs = qstart ? qstart + int64_t{b} * Tq : nullptr;
      for (int i0 = 0; i0 < Tq; i0 += kRows) {
        const int rows = std::min(kRows, Tq - i0);
        Seg seg[2];
        if (!visible_segments(qpos, qs, i0, rows, kpos, Tk, seg)) continue;
        const float* qi = q + (int64_t{b} * Tq + i0) * q_stride + int64_t{h} * hd;
        for (const Seg& g : seg)
          if (g.n) small_gemm(rows, g.n, hd, qi, q_stride, Kt + g.begin, Tk, S + g.begin, Tk, scale, false);
        for (int r = 0; r < rows; ++r) {
          float* s = S + int64_t{r} * Tk;
          const int qp = qpos[i0 + r], q0 = qs ? qs[i0 + r] : 0;
          float mx = -INFINITY;
          for (const Seg& g : seg)
            for (int j = g.begin; j < g.begin + g.n; ++j) {
              if (kpos[j] > qp || kpos[j] < q0) s[j] = -INFINITY;
              mx = std::max(mx, s[j]);
            }
          const int64_t st = (int64_t{b} * H + h) * Tq + i0 + r;
          float* orow = o + (int64_t{b} * Tq + i0 + r) * o_row + int64_t{h} * hd;
          if (mx == -INFINITY) {  // nothing visible in this block: exp(-inf) = 0 below, o and l unchanged
            for (const Seg& g : seg) std::fill(s + g.begin, s + g.begin + g.n, 0.f);
            continue;
          }
          const float m_new = std::max(m[st], mx), corr = std::exp(m[st] - m_new);
          float sum = 0;
          for (const Seg& g : seg) {
            sum += exp_shift_n(s + g.begin, s + g.begin, g.n, m_new, 1.f);  // masked -inf -> ~1e-38: zeroed
            for (int j = g.begin; j < g.begin + g.n; ++j)
              if (kpos[j] > qp || kpos[j] < q0) s[j] = 0.f;
          }
          l[st] = l[st] * corr + sum;
          m[st] = m_new;
#pragma omp simd
          for (int e = 0; e < hd; ++e) orow[e] *= corr;
        }
        float* oi = o + (int64_t{b} * Tq + i0) * o_row + int64_t{h} * hd;
        for (const Seg& g : seg)
          if (g.n) small_gemm(rows, hd, g.n, S + g.begin, Tk, v + int64_t{g.begin} * kv_row, kv_row, oi, o_row, 1.f, true);
      }
    }
  }
}

void attention_block_backward(float* dq, int64_t dq_stride, float* dkv, const float* q, int64_t q_stride,
                              const float* kv, const float* dout, const float* lse, const float* dsum, int B, int Tq,
                              int Tk, int H, int KV, int hd, const int* qpos, const int* kpos, const int32_t* qstart,
                              float* scratch) {
  const int group = H / KV;
  const int64_t kv_row = 2 * int64_t{KV} * hd, o_row = int64_t{H} * hd;
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  const size_t per_thread = attention_block_scratch_floats(Tk, hd);
#pragma omp parallel
  {
    float* Kt = scratch + per_thread * omp_get_thread_num();
    float* Vt = Kt + static_cast<size_t>(hd) * Tk;
    float* P = Vt + static_cast<size_t>(hd) * Tk;
    float* dS = P + static_cast<size_t>(kRows) * Tk;
#pragma omp for schedule(dynamic, 1)
    for (int bk = 0; bk < B * KV; ++bk) {
      const int b = bk / KV, kh = bk % KV;
      const float* k = kv + int64_t{b} * Tk * kv_row + int64_t{kh} * hd;
      const float* v = k + int64_t{KV} * hd;
      float* dk = dkv + int64_t{b} * Tk * kv_row + int64_t{kh} * hd;
      float* dv = dk + int64_t{KV} * hd;
      transpose(k, Tk, hd, kv_row, Kt, Tk);
      transpose(v, Tk, hd, kv_row, Vt, Tk);
      const int32_t* qs = qstart ? qstart + int64_t{b} * Tq : nullptr;
      for (int g = 0; g < group; ++g) {
        const int h = kh * group + g;
        for (int i0 = 0; i0 < Tq; i0 += kRows) {
          const int rows = std::min(kRows, Tq - i0);
          Seg seg[2];
          if (!visible_segments(qpos, qs, i0, rows, kpos, Tk, seg)) continue;
          const float* qi = q + (int64_t{b} * Tq + i0) * q_stride + int64_t{h} * hd;
          const float* doi = dout + (int64_t{b} * Tq + i0) * o_row + int64_t{h} * hd;
          for (const Seg& sg : seg)
            if (sg.n) {
              small_gemm(rows, sg.n, hd, qi, q_stride, Kt + sg.begin, Tk, P + sg.begin, Tk, scale, false);
              small_gemm(rows, sg.n, hd, doi, o_row, Vt + sg.begin, Tk, dS + sg.begin, Tk, 1.f, false);
            }
          for (int r = 0; r < rows; ++r) {
            const int64_t st = (int64_t{b} * H + h) * Tq + i0 + r;
            const int qp = qpos[i0 + r], q0 = qs ? qs[i0 + r] : 0;
            float *p = P + int64_t{r} * Tk, *ds = dS + int64_t{r} * Tk;
            for (const Seg& sg : seg) {
              exp_shift_n(p + sg.begin, p + sg.begin, sg.n, lse[st], 1.f);
              const float d = dsum[st];
#pragma omp simd
              for (int j = sg.begin; j < sg.begin + sg.n; ++j) {
                p[j] = kpos[j] > qp || kpos[j] < q0 ? 0.f : p[j];
                ds[j] = p[j] * (ds[j] - d) * scale;
              }
            }
          }
          float* dqi = dq + (int64_t{b} * Tq + i0) * dq_stride + int64_t{h} * hd;
          for (const Seg& sg : seg)
            if (sg.n) {
              small_gemm(rows, hd, sg.n, dS + sg.begin, Tk, k + int64_t{sg.begin} * kv_row, kv_row, dqi, dq_stride, 1.f,
                         true);
              small_gemm<true>(sg.n, hd, rows, dS + sg.begin, Tk, qi, q_stride, dk + int64_t{sg.begin} * kv_row, kv_row,
                               1.f, true);
              small_gemm<true>(sg.n, hd, rows, P + sg.begin, Tk, doi, o_row, dv + int64_t{sg.begin} * kv_row, kv_row, 1.f,
                               true);
            }
        }
      }
    }
  }
}

}  // namespace mpitron::cpu::MPITRON_CPU_ISA
