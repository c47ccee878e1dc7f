// LayerNorm forward (optionally fused with the residual add that precedes it in a GPT block) and
// a one-pass backward. bf16 data, fp32 statistics; C must be a multiple of 8 (16-byte packs).
//
// Forward: one warp per row; the row is read three times (sum, centred variance, output), the
// second and third from L1/L2. Backward: one block per chunk of rows, each thread owning 8
// columns for the whole chunk, so dout and inp are read once: per row a block reduction gives
// the two row means (of w*dy and of w*dy*xhat), then dinp += ... and the thread's dweight/dbias
// registers accumulate. Per-chunk partials are summed in chunk order by a second kernel: the
// result does not depend on scheduling (no float atomics).
#include <algorithm>

#include "common.cuh"

namespace mpitron::cuda {
namespace {

constexpr unsigned kFwdThreads = 256;  // 8 rows per block

__global__ void ln_fwd_kernel(bf* residual, bf* out, float* mean, float* rstd, const bf* a, const bf* b, const bf* w,
                              const bf* bias, int64_t rows, int C) {
  int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const bf* x = a + row * C;
  if (residual) {
    const bf* y = b + row * C;
    bf* r = residual + row * C;
    for (int c = lane * 8; c < C; c += 256) {
      Bf8 p = *reinterpret_cast<const Bf8*>(x + c), q = *reinterpret_cast<const Bf8*>(y + c), o;
#pragma unroll
      for (int k = 0; k < 8; ++k) o.v[k] = __float2bfloat16_rn(__bfloat162float(p.v[k]) + __bfloat162float(q.v[k]));
      *reinterpret_cast<Bf8*>(r + c) = o;
    }
    x = r;  // normalise the rounded residual, as the next layer will see it
  }
  float s = 0.f;
  for (int c = lane * 8; c < C; c += 256) {
    Bf8 p = *reinterpret_cast<const Bf8*>(x + c);
#pragma unroll
    for (int k = 0; k < 8; ++k) s += __bfloat162float(p.v[k]);
  }
  float m = warp_sum(s) / C;
  float v = 0.f;
  for (int c = lane * 8; c < C; c += 256) {
    Bf8 p = *reinterpret_cast<const Bf8*>(x + c);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      float d = __bfloat162float(p.v[k]) - m;
      v += d * d;
    }
  }
  float rs = rsqrtf(warp_sum(v) / C + 1e-5f);
  bf* o = out + row * C;
  for (int c = lane * 8; c < C; c += 256) {
    Bf8 p = *reinterpret_cast<const Bf8*>(x + c), pw = *reinterpret_cast<const Bf8*>(w + c),
        pb = *reinterpret_cast<const Bf8*>(bias + c), y;
#pragma unroll
    for (int k = 0; k < 8; ++k)
      y.v[k] = __float2bfloat16_rn((__bfloat162float(p.v[k]) - m) * rs * __bfloat162float(pw.v[k]) +
                                   __bfloat162float(pb.v[k]));
    *reinterpret_cast<Bf8*>(o + c) = y;
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = rs;
  }
}

__global__ void ln_bwd_kernel(bf* dinp, float* partial, const bf* dout, const bf* inp, const bf* w, const float* mean,
                              const float* rstd, int64_t rows, int C, int64_t rows_per_chunk) {
  __shared__ float sh[2][32];
  const int c0 = threadIdx.x * 8;
  const bool active = c0 < C;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  float wv[8], dw[8] = {}, db[8] = {};
  if (active) {
    Bf8 p = *reinterpret_cast<const Bf8*>(w + c0);
#pragma unroll
    for (int k = 0; k < 8; ++k) wv[k] = __bfloat162float(p.v[k]);
  }
  const int64_t r0 = blockIdx.x * rows_per_chunk, r1 = min(rows, r0 + rows_per_chunk);
  for (int64_t r = r0; r < r1; ++r) {
    float xn[8] = {}, dn[8] = {}, sa = 0.f, sb = 0.f;
    const float m = mean[r], rs = rstd[r];
    if (active) {
      Bf8 px = *reinterpret_cast<const Bf8*>(inp + r * C + c0), pd = *reinterpret_cast<const Bf8*>(dout + r * C + c0);
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        float dy = __bfloat162float(pd.v[k]);
        xn[k] = (__bfloat162float(px.v[k]) - m) * rs;
        dn[k] = wv[k] * dy;
        sa += dn[k];
        sb += dn[k] * xn[k];
        dw[k] += dy * xn[k];
        db[k] += dy;
      }
    }
    sa = warp_sum(sa);
    sb = warp_sum(sb);
    __syncthreads();  // the previous row's readers are done with sh
    if (lane == 0) {
      sh[0][warp] = sa;
      sh[1][warp] = sb;
    }
    __syncthreads();
    sa = lane < nw ? sh[0][lane] : 0.f;
    sb = lane < nw ? sh[1][lane] : 0.f;
    const float a = warp_sum(sa) / C, b = warp_sum(sb) / C;
    if (active) {
      bf* dx = dinp + r * C + c0;
      Bf8 old = *reinterpret_cast<const Bf8*>(dx), o;
#pragma unroll
      for (int k = 0; k < 8; ++k)
        o.v[k] = __float2bfloat16_rn(__bfloat162float(old.v[k]) + (dn[k] - a - xn[k] * b) * rs);
      *reinterpret_cast<Bf8*>(dx) = o;
    }
  }
  if (active) {
    float* pw = partial + static_cast<int64_t>(blockIdx.x) * 2 * C;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      pw[c0 + k] = dw[k];
      pw[C + c0 + k] = db[k];
    }
  }
}

__global__ void ln_bwd_finish_kernel(float* dweight, float* dbias, const float* partial, int chunks, int C) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float sw = 0.f, sb = 0.f;
  for (int i = 0; i < chunks; ++i) {
    sw += partial[static_cast<int64_t>(i) * 2 * C + c];
    sb += partial[static_cast<int64_t>(i) * 2 * C + C + c];
  }
  if (dweight) dweight[c] += sw;
  if (dbias) dbias[c] += sb;
}

}  // namespace

void layernorm_forward(cudaStream_t s, bf16* residual, bf16* out, float* mean, float* rstd, const bf16* a,
                       const bf16* b, const bf16* weight, const bf16* bias, int64_t rows, int64_t C) {
  if (rows <= 0) return;
  require_packable(C, "layernorm_forward", {residual, out, a, residual ? b : nullptr, weight, bias});
  unsigned rows_per_block = kFwdThreads / 32;
  unsigned blocks = static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block);
  ln_fwd_kernel<<<blocks, kFwdThreads, 0, s>>>(residual ? as_bf(residual) : nullptr, as_bf(out), mean, rstd, as_bf(a),
                                               residual ? as_bf(b) : nullptr, as_bf(weight), as_bf(bias), rows,
                                               static_cast<int>(C));
  launch_check("ln_fwd_kernel");
}

void layernorm_backward(cudaStream_t s, Scratch& scratch, bf16* dinp, float* dweight, float* dbias, const bf16* dout,
                        const bf16* inp, const bf16* weight, const float* mean, const float* rstd, int64_t rows,
                        int64_t C) {
  if (rows <= 0) return;
  require_packable(C, "layernorm_backward", {dinp, dout, inp, weight});
  if (C / 8 > 1024) throw_error("layernorm_backward: C = " + std::to_string(C) + " is above the 8192 this kernel handles");
  unsigned threads = static_cast<unsigned>((C / 8 + 31) / 32 * 32);
  int64_t chunks = std::min<int64_t>(rows, 2 * static_cast<int64_t>(sm_count()));
  int64_t rows_per_chunk = (rows + chunks - 1) / chunks;
  chunks = (rows + rows_per_chunk - 1) / rows_per_chunk;
  float* partial = static_cast<float*>(scratch.get(static_cast<size_t>(chunks) * 2 * C * sizeof(float)));
  ln_bwd_kernel<<<static_cast<unsigned>(chunks), threads, 0, s>>>(as_bf(dinp), partial, as_bf(dout), as_bf(inp),
                                                                  as_bf(weight), mean, rstd, rows, static_cast<int>(C),
                                                                  rows_per_chunk);
  launch_check("ln_bwd_kernel");
  if (dweight || dbias) {
    ln_bwd_finish_kernel<<<static_cast<unsigned>((C + 255) / 256), 256, 0, s>>>(dweight, dbias, partial,
                                                                                static_cast<int>(chunks),
                                                                                static_cast<int>(C));
    launch_check("ln_bwd_finish_kernel");
  }
}

}  // namespace mpitron::cuda
