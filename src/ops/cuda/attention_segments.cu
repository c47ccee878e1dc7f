// The per-segment inputs of cuDNN's ragged attention graphs (attention_cudnn.cpp), from a segment
// table (ops/attention_segments.hpp, segment_table) on the device, so that the host uploads the
// table once per micro-batch and every layer's call only launches this kernel.
#include <string>

#include "common.cuh"

namespace mpitron::cuda {
namespace {

// out [6][n + 1] int32: seq_q, seq_kv (n entries), then the element offsets of each segment's
// first row in q (and dq), k|v (and dk|dv), out (and dout) and stats [B, H, Tq]; entry n is one
// past the last segment (the ragged offsets' end).
__global__ void segment_offsets_kernel(int32_t* out, const int32_t* table, int n, int Tq, int H, int64_t qs,
                                       int64_t ks, int64_t os) {
  const int64_t m = n + 1;
  const int last = n - 1;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < m; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t qrow = i < n ? table[i] : int64_t{table[last]} + table[n + last];
    const int64_t krow = i < n ? table[2 * n + i] : int64_t{table[2 * n + last]} + table[3 * n + last];
    if (i < n) out[i] = table[n + i], out[m + i] = table[3 * n + i];
    out[2 * m + i] = static_cast<int32_t>(qrow * qs);
    out[3 * m + i] = static_cast<int32_t>(krow * ks);
    out[4 * m + i] = static_cast<int32_t>(qrow * os);
    out[5 * m + i] = static_cast<int32_t>(qrow / Tq * H * Tq + qrow % Tq);
  }
}

}  // namespace

void segment_offsets(cudaStream_t s, int32_t* out, const int32_t* table, int n, int Tq, int H, int64_t q_stride,
                     int64_t kv_stride, int64_t out_stride) {
  if (n < 1 || Tq < 1)
    throw_error("segment_offsets: " + std::to_string(n) + " segments of " + std::to_string(Tq) + " query rows");
  constexpr unsigned threads = 256;
  segment_offsets_kernel<<<grid_for(static_cast<size_t>(n) + 1, threads), threads, 0, s>>>(out, table, n, Tq, H,
                                                                                          q_stride, kv_stride,
                                                                                          out_stride);
  launch_check("segment_offsets_kernel");
}

}  // namespace mpitron::cuda
