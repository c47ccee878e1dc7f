// FP8 casts with current (per-tensor) scaling (CudaOps::fp8_amax, fp8_cast; ops/fp8_scaling.hpp):
// the tensor's amax (a block max, then an integer atomicMax on the float's bits: non-negative
// floats order as their bits, and a max is the same in any order), then every element cast as
// fp8(x * scale) by core/fp8.hpp's encoder, the same function the CPU runs: the same bytes. The
// transposed copy goes through a 32 x 32 shared-memory tile, so that reads and writes both run
// along rows.
#include <algorithm>

#include "common.cuh"
#include "mpitron/ops/fp8_scaling.hpp"

namespace mpitron::cuda {
namespace {

constexpr unsigned kThreads = 256, kTile = 32, kTileRows = 8;

__global__ void amax_kernel(unsigned* amax_bits, const bf* x, int64_t n) {
  __shared__ float sh[32];
  float m = 0.f;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    m = fmaxf(m, fabsf(__bfloat162float(x[i])));
  m = block_max(m, sh);
  if (threadIdx.x == 0) atomicMax(amax_bits, __float_as_uint(m));
}

// One cast's constants, and its statistics as the CPU counts them (fp8_scaling.cpp).
struct Cast {
  float scale, top;
  Fp8Format f;
  __device__ uint8_t operator()(float x, unsigned& sat, unsigned& under) const {
    const float y = x * scale;
    const uint8_t c = fp8_from_float(f, y);
    sat += fabsf(y) >= top;
    under += x != 0.f && (c & 0x7f) == 0;
    return c;
  }
};

// Thread 0 of block 0 publishes scale_inv and the amax statistic.
__device__ Cast begin_cast(float* scale_inv, const unsigned* amax_bits, Fp8Format f, Fp8DeviceStats* stats,
                           bool first) {
  const Cast c{fp8_scale_for(f, __uint_as_float(*amax_bits)), fp8_saturation_threshold(f), f};
  if (first) {
    *scale_inv = 1.f / c.scale;
    if (stats) atomicMax(&stats->amax_bits, *amax_bits);
  }
  return c;
}

// Every thread calls it (warp shuffles); one atomic per warp and count.
__device__ void add_counts(Fp8DeviceStats* stats, unsigned sat, unsigned under) {
  for (int o = 16; o > 0; o >>= 1) {
    sat += __shfl_xor_sync(0xffffffffu, sat, o);
    under += __shfl_xor_sync(0xffffffffu, under, o);
  }
  const unsigned lane = (threadIdx.y * blockDim.x + threadIdx.x) & 31u;
  if (lane == 0 && sat) atomicAdd(&stats->saturated, static_cast<unsigned long long>(sat));
  if (lane == 0 && under) atomicAdd(&stats->underflowed, static_cast<unsigned long long>(under));
}

__global__ void cast_kernel(uint8_t* q, float* scale_inv, const unsigned* amax_bits, const bf* x, int64_t n,
                            Fp8Format f, Fp8DeviceStats* stats) {
  const Cast cast = begin_cast(scale_inv, amax_bits, f, stats, blockIdx.x == 0 && threadIdx.x == 0);
  unsigned sat = 0, under = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    q[i] = cast(__bfloat162float(x[i]), sat, under);
  if (stats) add_counts(stats, sat, under);
}

// Blocks of kTile x kTileRows threads over the [rows, cols] tiles; q may be nullptr.
__global__ void cast_transpose_kernel(uint8_t* q, uint8_t* qt, float* scale_inv, const unsigned* amax_bits,
                                      const bf* x, int64_t rows, int64_t cols, Fp8Format f, Fp8DeviceStats* stats) {
  __shared__ uint8_t tile[kTile][kTile + 1];
  const Cast cast = begin_cast(scale_inv, amax_bits, f, stats, blockIdx.x == 0 && threadIdx.x == 0 && threadIdx.y == 0);
  unsigned sat = 0, under = 0;
  const int64_t tiles_c = (cols + kTile - 1) / kTile, tiles = tiles_c * ((rows + kTile - 1) / kTile);
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t r0 = t / tiles_c * kTile, c0 = t % tiles_c * kTile;
    for (unsigned i = threadIdx.y; i < kTile; i += kTileRows) {
      const int64_t r = r0 + i, c = c0 + threadIdx.x;
      if (r < rows && c < cols) {
        const uint8_t code = cast(__bfloat162float(x[r * cols + c]), sat, under);
        if (q) q[r * cols + c] = code;
        tile[i][threadIdx.x] = code;
      }
    }
    __syncthreads();
    for (unsigned i = threadIdx.y; i < kTile; i += kTileRows) {
      const int64_t c = c0 + i, r = r0 + threadIdx.x;
      if (r < rows && c < cols) qt[c * rows + r] = tile[threadIdx.x][i];
    }
    __syncthreads();
  }
  if (stats) add_counts(stats, sat, under);
}

}  // namespace

void fp8_amax(cudaStream_t s, float* amax, const bf16* x, int64_t n) {
  cuda_check(cudaMemsetAsync(amax, 0, sizeof(float), s), "cudaMemsetAsync(fp8 amax)");
  if (n <= 0) return;
  amax_kernel<<<grid_for(static_cast<size_t>(n), kThreads), kThreads, 0, s>>>(reinterpret_cast<unsigned*>(amax),
                                                                              as_bf(x), n);
  launch_check("fp8 amax_kernel");
}

void fp8_cast(cudaStream_t s, uint8_t* q, uint8_t* qt, float* scale_inv, const float* amax, const bf16* x,
              int64_t rows, int64_t cols, Fp8Format f, Fp8DeviceStats* stats) {
  if (!q && !qt) throw_error("fp8_cast: neither a cast nor a transposed copy asked for");
  const auto* bits = reinterpret_cast<const unsigned*>(amax);
  const int64_t n = rows * cols;
  if (!qt) {
    cast_kernel<<<grid_for(static_cast<size_t>(std::max<int64_t>(n, 1)), kThreads), kThreads, 0, s>>>(
        q, scale_inv, bits, as_bf(x), n, f, stats);
    launch_check("fp8 cast_kernel");
    return;
  }
  const size_t tiles = static_cast<size_t>((rows + kTile - 1) / kTile) * static_cast<size_t>((cols + kTile - 1) / kTile);
  cast_transpose_kernel<<<grid_for(std::max<size_t>(tiles, 1), 1), dim3(kTile, kTileRows), 0, s>>>(
      q, qt, scale_inv, bits, as_bf(x), rows, cols, f, stats);
  launch_check("fp8 cast_transpose_kernel");
}

}  // namespace mpitron::cuda
