// The LLaMA block's kernels, twins of src/ops/cpu/llama.cpp: RMSNorm (forward and a one-pass
// backward), rotary position embeddings and the SwiGLU gate. bf16 data, fp32 math and statistics.
//
// RMSNorm is laid out as LayerNorm (layernorm.cu): forward one warp per row; backward the row groups
// of row_groups.cuh, each thread owning 8 columns (dout and inp read once), one group reduction per
// row for <w dy, x>, dinp +=, dweight partials per chunk summed in a fixed order (deterministic, no
// float atomics). C must be a multiple of 8, <= 8192 backward.
//
// RoPE: one thread per (row, pair i), looping over the row's heads, so the angle is computed once per
// (position, frequency) and shared by every head. The angle is (pos0 + t) * inv_freq[i] in double
// (the host's table, rope_freqs.hpp: passed by value in the launch's arguments and staged in shared
// memory, so there is no device buffer to own) and its cosine and sine are taken in double (sincos),
// scaled and then rounded to fp32, exactly as the CPU op does: in fp32, an angle of ~8000 rad has an
// ulp of ~5e-4 rad and sinf / cosf of it would carry that error into every rotation at long positions.
// Double math on ~T * hd/2 values per call is negligible next to the bf16 traffic (and the pair data
// itself rotates in fp32).
#include <algorithm>

#include "row_groups.cuh"

namespace mpitron::cuda {
namespace {

constexpr unsigned kThreads = 256;

__device__ __forceinline__ float sigmoid(float g) { return 1.f / (1.f + expf(-g)); }

// ---- RMSNorm ----

__global__ void rms_fwd_kernel(bf* out, float* rstd, const bf* inp, const bf* w, int64_t rows, int C, float eps) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const bf* x = inp + row * C;
  float ss = 0.f;
  for (int c = lane * 8; c < C; c += 256) {
    Bf8 p = *reinterpret_cast<const Bf8*>(x + c);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      float v = __bfloat162float(p.v[k]);
      ss += v * v;
    }
  }
  const float rs = rsqrtf(warp_sum(ss) / C + eps);
  bf* o = out + row * C;
  for (int c = lane * 8; c < C; c += 256) {
    Bf8 p = *reinterpret_cast<const Bf8*>(x + c), pw = *reinterpret_cast<const Bf8*>(w + c), y;
#pragma unroll
    for (int k = 0; k < 8; ++k)
      y.v[k] = __float2bfloat16_rn(__bfloat162float(p.v[k]) * rs * __bfloat162float(pw.v[k]));
    *reinterpret_cast<Bf8*>(o + c) = y;
  }
  if (lane == 0) rstd[row] = rs;
}

// y = x r w, r = (mean(x^2) + eps)^-1/2: dx = r (w dy) - x r^3 <w dy, x> / C; dw = sum_rows dy x r.
// partial (nullptr: no dweight) gets this chunk's dw sums, [chunks, C].
__global__ void __launch_bounds__(1024)
    rms_bwd_kernel(bf* dinp, float* partial, const bf* dout, const bf* inp, const bf* w, const float* rstd, int64_t rows,
                   int C, int64_t rows_per_chunk, int G, int R) {
  __shared__ float sh[kMaxRowGroups * 32];
  extern __shared__ float buf[];
  const int g = static_cast<int>(threadIdx.x) / G;
  const int c0 = (static_cast<int>(threadIdx.x) - g * G) * 8;
  const bool active = c0 < C;
  float wv[8] = {}, dw[8] = {};
  if (active) {
    Bf8 p = *reinterpret_cast<const Bf8*>(w + c0);
#pragma unroll
    for (int k = 0; k < 8; ++k) wv[k] = __bfloat162float(p.v[k]);
  }
  const int64_t r0 = blockIdx.x * rows_per_chunk, r1 = min(rows, r0 + rows_per_chunk);
  for (int64_t rb = r0; rb < r1; rb += R) {
    const int64_t r = rb + g;
    const bool live = active && r < r1;
    float x[8] = {}, dn[8] = {}, dot[1] = {0.f}, rs = 0.f;
    Bf8 old{};
    if (live) {
      rs = rstd[r];
      // dinp's old values are loaded with the inputs, before the row sum (one memory wait per row).
      Bf8 px = *reinterpret_cast<const Bf8*>(inp + r * C + c0), pd = *reinterpret_cast<const Bf8*>(dout + r * C + c0);
      old = *reinterpret_cast<const Bf8*>(dinp + r * C + c0);
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const float dy = __bfloat162float(pd.v[k]);
        x[k] = __bfloat162float(px.v[k]);
        dn[k] = wv[k] * dy;
        dot[0] += dn[k] * x[k];
        dw[k] += dy * x[k] * rs;
      }
    }
    group_sum(dot, sh, g, G / 32);
    if (live) {
      const float a = dot[0] * rs * rs * rs / C;
      Bf8 o;
#pragma unroll
      for (int k = 0; k < 8; ++k) o.v[k] = __float2bfloat16_rn(__bfloat162float(old.v[k]) + dn[k] * rs - x[k] * a);
      *reinterpret_cast<Bf8*>(dinp + r * C + c0) = o;
    }
  }
  if (!partial) return;  // uniform over the block
  combine_groups(dw, buf, g, R, G);
  if (g == 0 && active) {
    float* pw = partial + static_cast<int64_t>(blockIdx.x) * C;
#pragma unroll
    for (int k = 0; k < 8; ++k) pw[c0 + k] = dw[k];
  }
}

// ---- RoPE ----

// Pair i of every head of row `row`: (x[2i], x[2i+1]) <- rotation by the angle (pos0 + t) theta^(-2i/hd)
// (its opposite when inverse).
constexpr int kRopeMaxPairs = 128;  // hd <= 256, as the attention kernels
struct RopeTable {
  double inv_freq[kRopeMaxPairs];
  double scale;
};

__global__ void rope_kernel(bf* x, int64_t rows, int T, int n_heads, int hd, int64_t row_stride, RopeTable table,
                            int pos0, bool inverse) {
  const int half = hd / 2;
  __shared__ double freq[kRopeMaxPairs];
  for (int i = threadIdx.x; i < half; i += blockDim.x) freq[i] = table.inv_freq[i];
  __syncthreads();
  const int64_t n = rows * half, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n; idx += stride) {
    const int64_t row = idx / half;
    const int i = static_cast<int>(idx % half);
    const double angle = static_cast<double>(pos0 + static_cast<int>(row % T)) * freq[i];
    double sd, cd;
    sincos(angle, &sd, &cd);
    sd *= table.scale, cd *= table.scale;  // x 1.0 is exact: plain RoPE unchanged
    const float c = static_cast<float>(cd), s = static_cast<float>(inverse ? -sd : sd);
    bf* v = x + row * row_stride + 2 * i;
    for (int h = 0; h < n_heads; ++h, v += hd) {
      const float a = __bfloat162float(v[0]), b = __bfloat162float(v[1]);
      v[0] = __float2bfloat16_rn(a * c - b * s);
      v[1] = __float2bfloat16_rn(a * s + b * c);
    }
  }
}

// ---- SwiGLU: out = silu(gate) up over gate_up rows [gate F | up F] ----

__device__ __forceinline__ void swiglu_grad(float g, float u, float dy, float& dg, float& du) {
  const float s = sigmoid(g);  // silu(g) = g s(g), silu'(g) = s(g) (1 + g (1 - s(g)))
  dg = dy * u * s * (1.f + g * (1.f - s));
  du = dy * g * s;
}

// vec: F % 8 == 0 and every pointer 16-byte aligned, one 8-column pack per step.
__global__ void swiglu_fwd_kernel(bf* out, const bf* gate_up, int64_t rows, int64_t F, bool vec) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x,
                i0 = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (vec) {
    const int64_t packs = F / 8;
    for (int64_t p = i0; p < rows * packs; p += stride) {
      const int64_t r = p / packs, j = (p % packs) * 8;
      const bf* g = gate_up + r * 2 * F + j;
      Bf8 pg = *reinterpret_cast<const Bf8*>(g), pu = *reinterpret_cast<const Bf8*>(g + F), y;
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const float gv = __bfloat162float(pg.v[k]);
        y.v[k] = __float2bfloat16_rn(gv * sigmoid(gv) * __bfloat162float(pu.v[k]));
      }
      *reinterpret_cast<Bf8*>(out + r * F + j) = y;
    }
    return;
  }
  for (int64_t i = i0; i < rows * F; i += stride) {
    const int64_t r = i / F, j = i % F;
    const float g = __bfloat162float(gate_up[r * 2 * F + j]), u = __bfloat162float(gate_up[r * 2 * F + F + j]);
    out[i] = __float2bfloat16_rn(g * sigmoid(g) * u);
  }
}

// Each thread reads its gate and up values before writing the same positions of dgate_up, so
// dgate_up may alias gate_up.
__global__ void swiglu_bwd_kernel(bf* dgate_up, const bf* gate_up, const bf* dout, int64_t rows, int64_t F, bool vec) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x,
                i0 = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (vec) {
    const int64_t packs = F / 8;
    for (int64_t p = i0; p < rows * packs; p += stride) {
      const int64_t r = p / packs, j = (p % packs) * 8;
      const bf* g = gate_up + r * 2 * F + j;
      Bf8 pg = *reinterpret_cast<const Bf8*>(g), pu = *reinterpret_cast<const Bf8*>(g + F),
          pd = *reinterpret_cast<const Bf8*>(dout + r * F + j), og, ou;
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        float dg, du;
        swiglu_grad(__bfloat162float(pg.v[k]), __bfloat162float(pu.v[k]), __bfloat162float(pd.v[k]), dg, du);
        og.v[k] = __float2bfloat16_rn(dg);
        ou.v[k] = __float2bfloat16_rn(du);
      }
      bf* d = dgate_up + r * 2 * F + j;
      *reinterpret_cast<Bf8*>(d) = og;
      *reinterpret_cast<Bf8*>(d + F) = ou;
    }
    return;
  }
  for (int64_t i = i0; i < rows * F; i += stride) {
    const int64_t r = i / F, j = i % F, gi = r * 2 * F + j;
    float dg, du;
    swiglu_grad(__bfloat162float(gate_up[gi]), __bfloat162float(gate_up[gi + F]), __bfloat162float(dout[i]), dg, du);
    dgate_up[gi] = __float2bfloat16_rn(dg);
    dgate_up[gi + F] = __float2bfloat16_rn(du);
  }
}

}  // namespace

void rmsnorm_forward(cudaStream_t s, bf16* out, float* rstd, const bf16* inp, const bf16* weight, int64_t rows,
                     int64_t C, float eps) {
  if (rows <= 0) return;
  require_packable(C, "rmsnorm_forward", {out, inp, weight});
  const unsigned rows_per_block = kThreads / 32;
  const unsigned blocks = static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block);
  rms_fwd_kernel<<<blocks, kThreads, 0, s>>>(as_bf(out), rstd, as_bf(inp), as_bf(weight), rows, static_cast<int>(C),
                                             eps);
  launch_check("rms_fwd_kernel");
}

void rmsnorm_backward(cudaStream_t s, Scratch& scratch, bf16* dinp, float* dweight, const bf16* dout, const bf16* inp,
                      const bf16* weight, const float* rstd, int64_t rows, int64_t C) {
  if (rows <= 0) return;
  require_packable(C, "rmsnorm_backward", {dinp, dout, inp, weight});
  if (C / 8 > 1024)
    throw_error("rmsnorm_backward: C = " + std::to_string(C) + " is above the 8192 this kernel handles");
  const RowGroupShape g = row_group_shape(rows, C);
  float* partial =
      dweight ? static_cast<float*>(scratch.get(static_cast<size_t>(g.chunks) * C * sizeof(float))) : nullptr;
  rms_bwd_kernel<<<static_cast<unsigned>(g.chunks), g.groups * g.group_threads,
                   g.combine_bytes(8), s>>>(
      as_bf(dinp), partial, as_bf(dout), as_bf(inp), as_bf(weight), rstd, rows, static_cast<int>(C), g.rows_per_chunk,
      static_cast<int>(g.group_threads), static_cast<int>(g.groups));
  launch_check("rms_bwd_kernel");
  if (dweight) column_sum(s, dweight, partial, g.chunks, C, C);
}

void rope(cudaStream_t s, bf16* x, int B, int T, int n_heads, int hd, int64_t row_stride, const double* inv_freq,
          double scale, int pos0, bool inverse) {
  if (hd <= 0 || hd % 2 != 0) throw_error("rope: head dim " + std::to_string(hd) + " is not even and positive");
  if (hd / 2 > kRopeMaxPairs)
    throw_error("rope: head dim " + std::to_string(hd) + " is above the " + std::to_string(2 * kRopeMaxPairs) +
                " this kernel handles");
  if (static_cast<int64_t>(n_heads) * hd > row_stride)
    throw_error("rope: " + std::to_string(n_heads) + " heads of " + std::to_string(hd) + " do not fit a row of " +
                std::to_string(row_stride));
  const int64_t rows = static_cast<int64_t>(B) * T;
  if (rows <= 0 || n_heads <= 0) return;
  RopeTable table{};
  std::copy(inv_freq, inv_freq + hd / 2, table.inv_freq);
  table.scale = scale;
  rope_kernel<<<grid_for(static_cast<size_t>(rows) * (hd / 2), kThreads), kThreads, 0, s>>>(
      as_bf(x), rows, T, n_heads, hd, row_stride, table, pos0, inverse);
  launch_check("rope_kernel");
}

void swiglu_forward(cudaStream_t s, bf16* out, const bf16* gate_up, int64_t rows, int64_t F) {
  if (rows <= 0 || F <= 0) return;
  const bool vec = F % 8 == 0 && aligned16(out) && aligned16(gate_up);
  const size_t work = static_cast<size_t>(rows) * (vec ? F / 8 : F);
  swiglu_fwd_kernel<<<grid_for(work, kThreads), kThreads, 0, s>>>(as_bf(out), as_bf(gate_up), rows, F, vec);
  launch_check("swiglu_fwd_kernel");
}

void swiglu_backward(cudaStream_t s, bf16* dgate_up, const bf16* gate_up, const bf16* dout, int64_t rows, int64_t F) {
  if (rows <= 0 || F <= 0) return;
  const bool vec = F % 8 == 0 && aligned16(dgate_up) && aligned16(gate_up) && aligned16(dout);
  const size_t work = static_cast<size_t>(rows) * (vec ? F / 8 : F);
  swiglu_bwd_kernel<<<grid_for(work, kThreads), kThreads, 0, s>>>(as_bf(dgate_up), as_bf(gate_up), as_bf(dout), rows,
                                                                  F, vec);
  launch_check("swiglu_bwd_kernel");
}

}  // namespace mpitron::cuda
