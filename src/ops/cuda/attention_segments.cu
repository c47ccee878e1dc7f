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

namespace mpitron::cuda {
namespace {

// The segment holding query row `row` ([B * Tq] rows), or -1: the table's first rows increase, so
// a binary search for the last segment starting at or before it.
__device__ int segment_of(const int32_t* table, int n, int count, int64_t row) {
  int lo = 0, hi = count - 1, at = -1;
  while (lo <= hi) {
    const int mid = (lo + hi) / 2;
    if (table[mid] <= row) at = mid, lo = mid + 1;
    else hi = mid - 1;
  }
  return at >= 0 && row < int64_t{table[at]} + table[n + at] ? at : -1;
}

// One thread per (row, head): the block's normalised output and log-sum-exp merged into the
// running ones (rows the block's segments do not cover keep theirs; with `first` they start at
// 0 and minus infinity).
__global__ void segments_merge_kernel(float* acc, float* lse_acc, const bf* o_step, const float* lse_step,
                                      const int32_t* table, int n, int count, int64_t rows, int Tq, int H, int hd,
                                      bool first) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < rows * H; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = i / H;
    const int h = static_cast<int>(i % H);
    const int64_t st = (row / Tq * H + h) * Tq + row % Tq;
    float* a = acc + row * H * hd + int64_t{h} * hd;
    const bf* o = o_step + row * H * hd + int64_t{h} * hd;
    const bool covered = segment_of(table, n, count, row) >= 0;
    if (first) {
      lse_acc[st] = covered ? lse_step[st] : -INFINITY;
      for (int e = 0; e < hd; ++e) a[e] = covered ? __bfloat162float(o[e]) : 0.f;
      continue;
    }
    if (!covered) continue;
    const float l0 = lse_acc[st], l1 = lse_step[st];
    const float mx = fmaxf(l0, l1), mn = fminf(l0, l1);
    const float l = mx == -INFINITY ? mx : mx + log1pf(expf(mn - mx));
    const float w0 = l0 == -INFINITY ? 0.f : expf(l0 - l), w1 = l1 == -INFINITY ? 0.f : expf(l1 - l);
    for (int e = 0; e < hd; ++e) a[e] = a[e] * w0 + __bfloat162float(o[e]) * w1;
    lse_acc[st] = l;
  }
}

__global__ void add_bf16_rows_kernel(float* dst, int64_t dst_stride, const bf* src, int64_t src_stride, int64_t rows,
                                     int64_t cols) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < rows * cols; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    dst[r * dst_stride + c] += __bfloat162float(src[r * src_stride + c]);
  }
}

}  // namespace

void attention_segments_merge(cudaStream_t s, float* acc, float* lse_acc, const bf16* o_step, const float* lse_step,
                              const int32_t* table, int n, int count, int B, int Tq, int H, int hd, bool first) {
  const int64_t rows = int64_t{B} * Tq;
  if (rows == 0) return;
  constexpr unsigned threads = 256;
  segments_merge_kernel<<<grid_for(static_cast<size_t>(rows * H), threads), threads, 0, s>>>(
      acc, lse_acc, as_bf(o_step), lse_step, table, n, count, rows, Tq, H, hd, first);
  launch_check("segments_merge_kernel");
}

void add_bf16_rows(cudaStream_t s, float* dst, int64_t dst_stride, const bf16* src, int64_t src_stride, int64_t rows,
                   int64_t cols) {
  if (rows * cols == 0) return;
  constexpr unsigned threads = 256;
  add_bf16_rows_kernel<<<grid_for(static_cast<size_t>(rows * cols), threads), threads, 0, s>>>(
      dst, dst_stride, as_bf(src), src_stride, rows, cols);
  launch_check("add_bf16_rows_kernel");
}

}  // namespace mpitron::cuda
