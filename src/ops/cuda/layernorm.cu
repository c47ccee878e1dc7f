// LayerNorm forward (optionally fused with the residual add that precedes it in a GPT block) and
// a one-pass backward. bf16 data, fp32 statistics; C must be a multiple of 8 (16-byte packs).
//
// Forward: one warp per row; the row is read three times (sum, centred variance, output), the
// second and third from L1/L2. Backward: the row groups of row_groups.cuh, each thread owning 8
// columns, so dout and inp are read once: per row its group's reduction gives the two row means (of
// w*dy and of w*dy*xhat), then dinp += ... and the thread's dweight/dbias registers accumulate.

#include "row_groups.cuh"

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

__global__ void __launch_bounds__(1024)
    ln_bwd_kernel(bf* dinp, float* partial, const bf* dout, const bf* inp, const bf* w, const float* mean,
                  const float* rstd, int64_t rows, int C, int64_t rows_per_chunk, int G, int R) {
  __shared__ float sh[kMaxRowGroups * 2 * 32];
  extern __shared__ float buf[];
  const int g = static_cast<int>(threadIdx.x) / G;
  const int c0 = (static_cast<int>(threadIdx.x) - g * G) * 8;
  const bool active = c0 < C;
  float wv[8] = {}, acc[16] = {};  // acc: this thread's dweight sums, then its dbias sums
  if (active) {
    Bf8 p = *reinterpret_cast<const Bf8*>(w + c0);
#pragma unroll
    for (int k = 0; k < 8; ++k) wv[k] = __bfloat162float(p.v[k]);
  }
  const int64_t r0 = blockIdx.x * rows_per_chunk, r1 = min(rows, r0 + rows_per_chunk);
  for (int64_t rb = r0; rb < r1; rb += R) {
    const int64_t r = rb + g;
    const bool live = active && r < r1;
    float xn[8] = {}, dn[8] = {}, sums[2] = {0.f, 0.f}, rs = 0.f;
    Bf8 old{};
    if (live) {
      const float m = mean[r];
      rs = rstd[r];
      // dinp's old values are loaded with the inputs, before the row sums (one memory wait per row).
      Bf8 px = *reinterpret_cast<const Bf8*>(inp + r * C + c0), pd = *reinterpret_cast<const Bf8*>(dout + r * C + c0);
      old = *reinterpret_cast<const Bf8*>(dinp + r * C + c0);
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        float dy = __bfloat162float(pd.v[k]);
        xn[k] = (__bfloat162float(px.v[k]) - m) * rs;
        dn[k] = wv[k] * dy;
        sums[0] += dn[k];
        sums[1] += dn[k] * xn[k];
        acc[k] += dy * xn[k];
        acc[8 + k] += dy;
      }
    }
    group_sum(sums, sh, g, G / 32);
    if (live) {
      const float a = sums[0] / C, b = sums[1] / C;
      Bf8 o;
#pragma unroll
      for (int k = 0; k < 8; ++k)
        o.v[k] = __float2bfloat16_rn(__bfloat162float(old.v[k]) + (dn[k] - a - xn[k] * b) * rs);
      *reinterpret_cast<Bf8*>(dinp + r * C + c0) = o;
    }
  }
  combine_groups(acc, buf, g, R, G);
  if (g == 0 && active) {
    float* pw = partial + static_cast<int64_t>(blockIdx.x) * 2 * C;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      pw[c0 + k] = acc[k];
      pw[C + c0 + k] = acc[8 + k];
    }
  }
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
  const RowGroupShape g = row_group_shape(rows, C);
  float* partial = static_cast<float*>(scratch.get(static_cast<size_t>(g.chunks) * 2 * C * sizeof(float)));
  ln_bwd_kernel<<<static_cast<unsigned>(g.chunks), g.groups * g.group_threads,
                  g.combine_bytes(16), s>>>(
      as_bf(dinp), partial, as_bf(dout), as_bf(inp), as_bf(weight), mean, rstd, rows, static_cast<int>(C),
      g.rows_per_chunk, static_cast<int>(g.group_threads), static_cast<int>(g.groups));
  launch_check("ln_bwd_kernel");
  if (dweight) column_sum(s, dweight, partial, g.chunks, 2 * C, C);
  if (dbias) column_sum(s, dbias, partial + C, g.chunks, 2 * C, C);
}

}  // namespace mpitron::cuda
