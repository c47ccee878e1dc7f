// Elementwise kernels (bf16 residual add, fp32 gradient arithmetic, conversions) and the
// deterministic column sums behind the matmul bias gradient. Grid-stride loops, 16-byte packs
// when every pointer is 16-byte aligned, scalar otherwise.
#include <algorithm>

#include "common.cuh"

namespace mpitron::cuda {
namespace {

constexpr unsigned kThreads = 256;

__global__ void residual_kernel(bf* out, const bf* a, const bf* b, size_t n, bool vec) {
  size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x, i0 = blockIdx.x * blockDim.x + threadIdx.x;
  if (vec) {
    for (size_t i = i0; i < n / 8; i += stride) {
      Bf8 x = reinterpret_cast<const Bf8*>(a)[i], y = reinterpret_cast<const Bf8*>(b)[i], o;
#pragma unroll
      for (int k = 0; k < 8; ++k) o.v[k] = __float2bfloat16_rn(__bfloat162float(x.v[k]) + __bfloat162float(y.v[k]));
      reinterpret_cast<Bf8*>(out)[i] = o;
    }
    for (size_t i = n / 8 * 8 + i0; i < n; i += stride)
      out[i] = __float2bfloat16_rn(__bfloat162float(a[i]) + __bfloat162float(b[i]));
  } else {
    for (size_t i = i0; i < n; i += stride) out[i] = __float2bfloat16_rn(__bfloat162float(a[i]) + __bfloat162float(b[i]));
  }
}

// y = alpha * y + beta * x (covers add, scale, axpy); x may be null when beta == 0.
__global__ void f32_kernel(float* y, const float* x, float alpha, float beta, size_t n, bool vec) {
  size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x, i0 = blockIdx.x * blockDim.x + threadIdx.x;
  size_t head = 0;
  if (vec) {
    for (size_t i = i0; i < n / 4; i += stride) {
      F4 a = reinterpret_cast<F4*>(y)[i];
      F4 b = x ? reinterpret_cast<const F4*>(x)[i] : F4{};
#pragma unroll
      for (int k = 0; k < 4; ++k) a.v[k] = x ? alpha * a.v[k] + beta * b.v[k] : alpha * a.v[k];
      reinterpret_cast<F4*>(y)[i] = a;
    }
    head = n / 4 * 4;
  }
  for (size_t i = head + i0; i < n; i += stride) y[i] = x ? alpha * y[i] + beta * x[i] : alpha * y[i];
}

__global__ void to_bf16_kernel(bf* out, const float* in, size_t n) {
  size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) out[i] = __float2bfloat16_rn(in[i]);
}
__global__ void to_f32_kernel(float* out, const bf* in, size_t n) {
  size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) out[i] = __bfloat162float(in[i]);
}

// partial[chunk, col] = sum over the chunk's rows (in order) of x[row, col].
__global__ void column_partial_kernel(float* partial, const bf* x, int64_t M, int64_t N, int64_t rows_per_chunk) {
  int64_t col = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (col >= N) return;
  int64_t r0 = blockIdx.y * rows_per_chunk, r1 = min(M, r0 + rows_per_chunk);
  float acc = 0.f;
  for (int64_t r = r0; r < r1; ++r) acc += __bfloat162float(x[r * N + col]);
  partial[blockIdx.y * N + col] = acc;
}
__global__ void scale_bf16_kernel(bf* x, float k, size_t n) {
  size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += stride)
    x[i] = __float2bfloat16_rn(__bfloat162float(x[i]) * k);
}
__global__ void column_finish_kernel(float* dst, const float* partial, int chunks, int64_t N) {
  int64_t col = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (col >= N) return;
  float acc = 0.f;
  for (int c = 0; c < chunks; ++c) acc += partial[c * N + col];
  dst[col] += acc;
}

}  // namespace

void residual_forward(cudaStream_t s, bf16* out, const bf16* a, const bf16* b, size_t n) {
  if (!n) return;
  bool vec = aligned16(out) && aligned16(a) && aligned16(b);
  residual_kernel<<<grid_for(vec ? n / 8 + 1 : n, kThreads), kThreads, 0, s>>>(as_bf(out), as_bf(a), as_bf(b), n, vec);
  launch_check("residual_kernel");
}

static void f32_op(cudaStream_t s, float* y, const float* x, float alpha, float beta, size_t n, const char* what) {
  if (!n) return;
  bool vec = aligned16(y) && (!x || aligned16(x));
  f32_kernel<<<grid_for(vec ? n / 4 + 1 : n, kThreads), kThreads, 0, s>>>(y, x, alpha, beta, n, vec);
  launch_check(what);
}
void add_inplace(cudaStream_t s, float* a, const float* b, size_t n) { f32_op(s, a, b, 1.f, 1.f, n, "add_inplace"); }
void scale_inplace(cudaStream_t s, float* a, float k, size_t n) { f32_op(s, a, nullptr, k, 0.f, n, "scale_inplace"); }
void axpy(cudaStream_t s, float* y, float a, const float* x, size_t n) { f32_op(s, y, x, 1.f, a, n, "axpy"); }

void scale_bf16(cudaStream_t s, bf16* x, float k, size_t n) {
  if (!n) return;
  scale_bf16_kernel<<<grid_for(n, kThreads), kThreads, 0, s>>>(as_bf(x), k, n);
  launch_check("scale_bf16_kernel");
}

void to_bf16(cudaStream_t s, bf16* out, const float* in, size_t n) {
  if (!n) return;
  to_bf16_kernel<<<grid_for(n, kThreads), kThreads, 0, s>>>(as_bf(out), in, n);
  launch_check("to_bf16_kernel");
}
void to_f32(cudaStream_t s, float* out, const bf16* in, size_t n) {
  if (!n) return;
  to_f32_kernel<<<grid_for(n, kThreads), kThreads, 0, s>>>(out, as_bf(in), n);
  launch_check("to_f32_kernel");
}

void column_sums(cudaStream_t s, Scratch& scratch, float* dbias, const bf16* x, int64_t M, int64_t N) {
  if (M <= 0 || N <= 0) return;
  unsigned col_blocks = static_cast<unsigned>((N + kThreads - 1) / kThreads);
  // Enough chunks to fill the machine (~4 blocks per SM), each at least 32 rows.
  int64_t want = std::max<int64_t>(1, 4 * sm_count() / static_cast<int64_t>(col_blocks));
  int64_t chunks = std::min<int64_t>(want, (M + 31) / 32);
  int64_t rows_per_chunk = (M + chunks - 1) / chunks;
  chunks = (M + rows_per_chunk - 1) / rows_per_chunk;
  float* partial = static_cast<float*>(scratch.get(static_cast<size_t>(chunks) * N * sizeof(float)));
  column_partial_kernel<<<dim3(col_blocks, static_cast<unsigned>(chunks)), kThreads, 0, s>>>(partial, as_bf(x), M, N,
                                                                                              rows_per_chunk);
  launch_check("column_partial_kernel");
  column_finish_kernel<<<col_blocks, kThreads, 0, s>>>(dbias, partial, static_cast<int>(chunks), N);
  launch_check("column_finish_kernel");
}

int sm_count() {
  static int cached_dev = -1, cached = 0;
  int dev = 0;
  cuda_check(cudaGetDevice(&dev), "cudaGetDevice");
  if (dev != cached_dev) {
    cuda_check(cudaDeviceGetAttribute(&cached, cudaDevAttrMultiProcessorCount, dev),
               "cudaDeviceGetAttribute(MultiProcessorCount)");
    cached_dev = dev;
  }
  return cached;
}

}  // namespace mpitron::cuda
