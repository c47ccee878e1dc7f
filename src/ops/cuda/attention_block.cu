// One key/value block of ring attention (context parallel,
// model/context_parallel/ring_attention.hpp) on the GPU: the same contract as the CPU's
// Ops::attention_block_* (src/ops/cpu/attention_block.cpp), with bf16 queries, blocks and dout and
// fp32 accumulators. Masking by global position (key j visible to query i when kpos[j] <= qpos[i],
// and with document masking kpos[j] >= qstart[b, i], the first position of i's document: the keys
// of other documents are skipped, no score is computed for them); grouped-query attention (query
// head h reads kv head h / (H / KV)).
//
// Simple kernels (CUDA cores, one warp per row, the head dimension over the lanes, <= 8 elements
// a lane: hd <= 256), written for correctness first: each score is one warp reduction.
//   forward   one warp per (b, h, query i): online softmax over the block's visible keys into the
//             running max m, sum l and the unnormalised output o (fp32).
//   backward  dq: one warp per (b, h, query i); dk, dv: one warp per (b, kv head, key j), summing
//             over the group's query heads and the visible queries in order (no atomics:
//             deterministic). Both recompute P = exp(s q.k - lse) (flash attention's backward).
// A tensor-core version (cuDNN's SDPA with per-block masks, or cuBLAS GEMMs on the two
// position-contiguous halves, as the CPU does) is the next step once a GPU has measured these.
#include <cmath>

#include "common.cuh"

namespace mpitron::cuda {
namespace {

constexpr int kPerLane = 8;  // hd <= 256

__device__ __forceinline__ float f(bf x) { return __bfloat162float(x); }

// Row st = (b H + h) Tq + i of the [B, H, Tq] statistics; its output / dq row [B*Tq, H hd].
struct RowIdx {
  int b, h, i;
  __device__ RowIdx(int64_t st, int H, int Tq)
      : b(static_cast<int>(st / Tq / H)), h(static_cast<int>(st / Tq % H)), i(static_cast<int>(st % Tq)) {}
};

__global__ void block_fwd_kernel(float* o, float* m, float* l, const bf* q, int64_t q_stride, const bf* kv, int B,
                                 int Tq, int Tk, int H, int KV, int hd, const int32_t* qpos, const int32_t* kpos,
                                 const int32_t* qstart, float scale, bool first) {
  const int64_t st = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (st >= static_cast<int64_t>(B) * H * Tq) return;
  const RowIdx r(st, H, Tq);
  const int64_t kv_row = 2LL * KV * hd;
  const bf* qi = q + (static_cast<int64_t>(r.b) * Tq + r.i) * q_stride + static_cast<int64_t>(r.h) * hd;
  float* oi = o + (static_cast<int64_t>(r.b) * Tq + r.i) * H * hd + static_cast<int64_t>(r.h) * hd;
  const bf* kb = kv + static_cast<int64_t>(r.b) * Tk * kv_row + static_cast<int64_t>(r.h / (H / KV)) * hd;
  float qr[kPerLane], acc[kPerLane];
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    const int e = lane + 32 * k;
    qr[k] = e < hd ? f(qi[e]) * scale : 0.f;
    acc[k] = e < hd && !first ? oi[e] : 0.f;
  }
  float mx = first ? -INFINITY : m[st], sum = first ? 0.f : l[st];
  const int qp = qpos[r.i], qs = qstart ? qstart[static_cast<int64_t>(r.b) * Tq + r.i] : 0;
  for (int j = 0; j < Tk; ++j) {
    if (kpos[j] > qp || kpos[j] < qs) continue;  // the same for the whole warp
    const bf *kj = kb + j * kv_row, *vj = kj + static_cast<int64_t>(KV) * hd;
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int e = lane + 32 * k;
      if (e < hd) s += qr[k] * f(kj[e]);
    }
    s = warp_sum(s);  // every lane the same value (xor butterfly): the branch below is uniform
    if (s > mx) {
      const float c = expf(mx - s);  // 0 for the first visible key (mx = -inf)
      sum *= c;
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) acc[k] *= c;
      mx = s;
    }
    const float p = expf(s - mx);
    sum += p;
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int e = lane + 32 * k;
      if (e < hd) acc[k] += p * f(vj[e]);
    }
  }
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    const int e = lane + 32 * k;
    if (e < hd) oi[e] = acc[k];
  }
  if (lane == 0) m[st] = mx, l[st] = sum;
}

// out = o / l (bf16), lse = m + log l; one thread per output element.
__global__ void block_finish_kernel(bf* out, float* lse, const float* o, const float* m, const float* l, int B, int T,
                                    int H, int hd) {
  const int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (idx >= static_cast<int64_t>(B) * T * H * hd) return;
  const int e = static_cast<int>(idx % hd), h = static_cast<int>(idx / hd % H);
  const int64_t bt = idx / (static_cast<int64_t>(H) * hd);
  const int64_t st = (bt / T * H + h) * T + bt % T;
  out[idx] = __float2bfloat16_rn(o[idx] / l[st]);  // l > 0: a query always sees itself
  if (e == 0) lse[st] = m[st] + logf(l[st]);
}

// D[st] = rowsum(dout * out) of one (b, h, t); one warp per row.
__global__ void block_dsum_kernel(float* dsum, const bf* dout, const bf* out, int B, int T, int H, int hd) {
  const int64_t st = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (st >= static_cast<int64_t>(B) * H * T) return;
  const RowIdx r(st, H, T);
  const int64_t at = (static_cast<int64_t>(r.b) * T + r.i) * H * hd + static_cast<int64_t>(r.h) * hd;
  float s = 0.f;
  for (int e = lane; e < hd; e += 32) s += f(dout[at + e]) * f(out[at + e]);
  s = warp_sum(s);
  if (lane == 0) dsum[st] = s;
}

__global__ void block_bwd_dq_kernel(float* dq, const bf* q, int64_t q_stride, const bf* kv, const bf* dout,
                                    const float* lse, const float* dsum, int B, int Tq, int Tk, int H, int KV, int hd,
                                    const int32_t* qpos, const int32_t* kpos, const int32_t* qstart, float scale) {
  const int64_t st = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (st >= static_cast<int64_t>(B) * H * Tq) return;
  const RowIdx r(st, H, Tq);
  const int64_t kv_row = 2LL * KV * hd, row = static_cast<int64_t>(r.b) * Tq + r.i;
  const bf* qi = q + row * q_stride + static_cast<int64_t>(r.h) * hd;
  const bf* doi = dout + row * H * hd + static_cast<int64_t>(r.h) * hd;
  float* dqi = dq + row * H * hd + static_cast<int64_t>(r.h) * hd;
  const bf* kb = kv + static_cast<int64_t>(r.b) * Tk * kv_row + static_cast<int64_t>(r.h / (H / KV)) * hd;
  float qr[kPerLane], dor[kPerLane], acc[kPerLane];
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    const int e = lane + 32 * k;
    qr[k] = e < hd ? f(qi[e]) * scale : 0.f;
    dor[k] = e < hd ? f(doi[e]) : 0.f;
    acc[k] = 0.f;
  }
  const float L = lse[st], D = dsum[st];
  const int qp = qpos[r.i], qs = qstart ? qstart[row] : 0;
  for (int j = 0; j < Tk; ++j) {
    if (kpos[j] > qp || kpos[j] < qs) continue;
    const bf *kj = kb + j * kv_row, *vj = kj + static_cast<int64_t>(KV) * hd;
    float s = 0.f, dp = 0.f;
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int e = lane + 32 * k;
      if (e < hd) s += qr[k] * f(kj[e]), dp += dor[k] * f(vj[e]);
    }
    s = warp_sum(s), dp = warp_sum(dp);
    const float ds = expf(s - L) * (dp - D) * scale;
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int e = lane + 32 * k;
      if (e < hd) acc[k] += ds * f(kj[e]);
    }
  }
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    const int e = lane + 32 * k;
    if (e < hd) dqi[e] += acc[k];
  }
}

// One warp per (b, kv head kh, key j): dk += sum ds q, dv += sum p dout over the group's heads
// and the queries that see key j, in order.
__global__ void block_bwd_dkv_kernel(float* dkv, const bf* q, int64_t q_stride, const bf* kv, const bf* dout,
                                     const float* lse, const float* dsum, int B, int Tq, int Tk, int H, int KV, int hd,
                                     const int32_t* qpos, const int32_t* kpos, const int32_t* qstart,
                                     float scale) {
  const int64_t w = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;  // (b KV + kh) Tk + j
  const int lane = threadIdx.x & 31;
  if (w >= static_cast<int64_t>(B) * KV * Tk) return;
  const int j = static_cast<int>(w % Tk), kh = static_cast<int>(w / Tk % KV), b = static_cast<int>(w / Tk / KV);
  const int group = H / KV;
  const int64_t kv_row = 2LL * KV * hd;
  const bf* kj = kv + (static_cast<int64_t>(b) * Tk + j) * kv_row + static_cast<int64_t>(kh) * hd;
  const bf* vj = kj + static_cast<int64_t>(KV) * hd;
  float kr[kPerLane], vr[kPerLane], dk[kPerLane], dv[kPerLane];
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    const int e = lane + 32 * k;
    kr[k] = e < hd ? f(kj[e]) * scale : 0.f;
    vr[k] = e < hd ? f(vj[e]) : 0.f;
    dk[k] = dv[k] = 0.f;
  }
  const int kp = kpos[j];
  for (int g = 0; g < group; ++g) {
    const int h = kh * group + g;
    for (int i = 0; i < Tq; ++i) {
      const int64_t row = static_cast<int64_t>(b) * Tq + i;
      if (kp > qpos[i] || (qstart && kp < qstart[row])) continue;
      const int64_t st = (static_cast<int64_t>(b) * H + h) * Tq + i;
      const bf* qi = q + row * q_stride + static_cast<int64_t>(h) * hd;
      const bf* doi = dout + row * H * hd + static_cast<int64_t>(h) * hd;
      float s = 0.f, dp = 0.f;
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) {
        const int e = lane + 32 * k;
        if (e < hd) s += kr[k] * f(qi[e]), dp += vr[k] * f(doi[e]);
      }
      s = warp_sum(s), dp = warp_sum(dp);
      const float p = expf(s - lse[st]), ds = p * (dp - dsum[st]) * scale;
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) {
        const int e = lane + 32 * k;
        if (e < hd) dk[k] += ds * f(qi[e]), dv[k] += p * f(doi[e]);
      }
    }
  }
  float* dkj = dkv + (static_cast<int64_t>(b) * Tk + j) * kv_row + static_cast<int64_t>(kh) * hd;
  float* dvj = dkj + static_cast<int64_t>(KV) * hd;
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    const int e = lane + 32 * k;
    if (e < hd) dkj[e] += dk[k], dvj[e] += dv[k];
  }
}

// dqkv[rows, (H + 2 KV) hd] = [dq (rows x H hd) | dkv (rows x 2 KV hd)] in bf16.
__global__ void block_grads_kernel(bf* dqkv, const float* dq, const float* dkv, int64_t rows, int64_t qw, int64_t kvw) {
  const int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x, w = qw + kvw;
  if (idx >= rows * w) return;
  const int64_t r = idx / w, c = idx % w;
  dqkv[idx] = __float2bfloat16_rn(c < qw ? dq[r * qw + c] : dkv[r * kvw + c - qw]);
}

unsigned warps_blocks(int64_t warps) { return static_cast<unsigned>((warps + 7) / 8); }  // 8 warps a block
unsigned elem_blocks(int64_t n) { return static_cast<unsigned>((n + 255) / 256); }

void check_shape(int H, int KV, int hd, const char* what) {
  if (hd > 32 * kPerLane || KV <= 0 || H % KV != 0)
    throw_error(std::string(what) + ": needs head_dim <= " + std::to_string(32 * kPerLane) +
                " and kv heads dividing the query heads (hd " + std::to_string(hd) + ", H " + std::to_string(H) +
                ", KV " + std::to_string(KV) + ")");
}

}  // namespace

void attention_block_forward(cudaStream_t s, float* o, float* m, float* l, const bf16* q, int64_t q_stride,
                             const bf16* kv, int B, int Tq, int Tk, int H, int KV, int hd, const int32_t* qpos,
                             const int32_t* kpos, const int32_t* qstart, bool first) {
  check_shape(H, KV, hd, "attention_block_forward");
  const int64_t rows = static_cast<int64_t>(B) * H * Tq;
  if (rows == 0) return;
  block_fwd_kernel<<<warps_blocks(rows), 256, 0, s>>>(o, m, l, as_bf(q), q_stride, as_bf(kv), B, Tq, Tk, H, KV, hd,
                                                      qpos, kpos, qstart, 1.f / std::sqrt(static_cast<float>(hd)),
                                                      first);
  launch_check("block_fwd_kernel");
}

void attention_block_finish(cudaStream_t s, bf16* out, float* lse, const float* o, const float* m, const float* l,
                            int B, int T, int H, int hd) {
  const int64_t n = static_cast<int64_t>(B) * T * H * hd;
  if (n == 0) return;
  block_finish_kernel<<<elem_blocks(n), 256, 0, s>>>(as_bf(out), lse, o, m, l, B, T, H, hd);
  launch_check("block_finish_kernel");
}

void attention_block_dsum(cudaStream_t s, float* dsum, const bf16* dout, const bf16* out, int B, int T, int H,
                          int hd) {
  const int64_t rows = static_cast<int64_t>(B) * H * T;
  if (rows == 0) return;
  block_dsum_kernel<<<warps_blocks(rows), 256, 0, s>>>(dsum, as_bf(dout), as_bf(out), B, T, H, hd);
  launch_check("block_dsum_kernel");
}

void attention_block_backward(cudaStream_t s, float* dq, float* dkv, const bf16* q, int64_t q_stride, const bf16* kv,
                              const bf16* dout, const float* lse, const float* dsum, int B, int Tq, int Tk, int H,
                              int KV, int hd, const int32_t* qpos, const int32_t* kpos, const int32_t* qstart) {
  check_shape(H, KV, hd, "attention_block_backward");
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  const int64_t qrows = static_cast<int64_t>(B) * H * Tq, krows = static_cast<int64_t>(B) * KV * Tk;
  if (qrows == 0 || krows == 0) return;
  block_bwd_dq_kernel<<<warps_blocks(qrows), 256, 0, s>>>(dq, as_bf(q), q_stride, as_bf(kv), as_bf(dout), lse, dsum, B,
                                                          Tq, Tk, H, KV, hd, qpos, kpos, qstart, scale);
  launch_check("block_bwd_dq_kernel");
  block_bwd_dkv_kernel<<<warps_blocks(krows), 256, 0, s>>>(dkv, as_bf(q), q_stride, as_bf(kv), as_bf(dout), lse, dsum,
                                                           B, Tq, Tk, H, KV, hd, qpos, kpos, qstart, scale);
  launch_check("block_bwd_dkv_kernel");
}

void attention_block_grads(cudaStream_t s, bf16* dqkv, const float* dq, const float* dkv, int64_t rows, int H, int KV,
                           int hd) {
  const int64_t qw = static_cast<int64_t>(H) * hd, kvw = 2LL * KV * hd;
  if (rows == 0) return;
  block_grads_kernel<<<elem_blocks(rows * (qw + kvw)), 256, 0, s>>>(as_bf(dqkv), dq, dkv, rows, qw, kvw);
  launch_check("block_grads_kernel");
}

}  // namespace mpitron::cuda
