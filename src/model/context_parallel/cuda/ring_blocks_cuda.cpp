// CudaRingBlocks (model/context_parallel/cuda/ring_blocks_cuda.hpp).
#include "mpitron/model/context_parallel/cuda/ring_blocks_cuda.hpp"

#include <cuda_runtime_api.h>

#include "mpitron/ops/cuda/check.hpp"

namespace mpitron {

using cuda::cuda_check;

void CudaRingBlocks::pack_own_block(const bf16* qkv, int B) {
  const size_t blk_row = 2 * static_cast<size_t>(KV_) * hd_ * sizeof(bf16);
  cuda_check(cudaMemcpy2DAsync(b_.kv[0], blk_row, qkv + int64_t{H_} * hd_, static_cast<size_t>(row_) * sizeof(bf16),
                               blk_row, static_cast<size_t>(B) * Tl_, cudaMemcpyDeviceToDevice, ops_.stream()),
             "cudaMemcpy2DAsync(ring: own k|v block)");
}

void CudaRingBlocks::forward_begin(void*, const void* qkv, int B, const int32_t* doc_start) {
  q_ = static_cast<const bf16*>(qkv), doc_start_ = doc_start;
  pack_own_block(q_, B);
  first_ = true;  // the first block starts the accumulators (no fill)
}

void CudaRingBlocks::forward_block(const void* kv, int src, int B) {
  if (seg_) {  // the block on cuDNN, merged by log-sum-exp (b_.m: the running lse; b_.l: the block's)
    const bf16* k = static_cast<const bf16*>(kv);
    const int64_t kv_row = 2 * int64_t{KV_} * hd_;
    ops_.attention_segments_forward(b_.step, b_.l, q_, row_, k, k + int64_t{KV_} * hd_, kv_row, H_, KV_, hd_, seg_[src]);
    ops_.attention_segments_merge(b_.acc, b_.m, b_.step, b_.l, H_, hd_, seg_[src], first_);
    first_ = false;
    return;
  }
  ops_.attention_block_forward(b_.acc, b_.m, b_.l, q_, row_, static_cast<const bf16*>(kv), B, Tl_, Tl_, H_, KV_, hd_,
                               pos(r_), pos(src), doc_start_, first_);
  first_ = false;
}

void CudaRingBlocks::forward_end(void* out, float* lse, int B) {
  if (seg_) {  // acc is normalised already
    const int64_t rows = int64_t{B} * Tl_;
    ops_.to_bf16(static_cast<bf16*>(out), b_.acc, static_cast<size_t>(rows * H_ * hd_));
    cuda_check(cudaMemcpyAsync(lse, b_.m, static_cast<size_t>(rows * H_) * sizeof(float), cudaMemcpyDeviceToDevice,
                               ops_.stream()),
               "cudaMemcpyAsync(ring: lse)");
    return;
  }
  ops_.attention_block_finish(static_cast<bf16*>(out), lse, b_.acc, b_.m, b_.l, B, Tl_, H_, hd_);
}

void CudaRingBlocks::backward_begin(void*, const void* qkv, const void* dout, const void* out, const float* lse,
                                    int B, const int32_t* doc_start) {
  q_ = static_cast<const bf16*>(qkv), dout_ = static_cast<const bf16*>(dout), lse_ = lse, doc_start_ = doc_start;
  out_ = static_cast<const bf16*>(out);
  if (!seg_) ops_.attention_block_dsum(b_.dsum, dout_, out_, B, Tl_, H_, hd_);  // cuDNN's graph computes its own
  pack_own_block(q_, B);
  const int64_t rows = int64_t{B} * Tl_;
  cuda_check(cudaMemsetAsync(b_.acc, 0, static_cast<size_t>(rows * H_ * hd_) * sizeof(float), ops_.stream()),
             "cudaMemsetAsync(ring: dq)");
  cuda_check(cudaMemsetAsync(b_.dkv[0], 0, static_cast<size_t>(rows * 2 * KV_ * hd_) * sizeof(float), ops_.stream()),
             "cudaMemsetAsync(ring: dk|dv)");
}

void CudaRingBlocks::backward_block(const void* kv, void* dkv, int src, int B) {
  if (seg_) {  // the block's bf16 dq, dk|dv (zero where its segments do not reach) into the fp32 sums
    const bf16* k = static_cast<const bf16*>(kv);
    const int64_t rows = int64_t{B} * Tl_, kv_row = 2 * int64_t{KV_} * hd_, kvh = int64_t{KV_} * hd_;
    cuda_check(cudaMemsetAsync(b_.step, 0, static_cast<size_t>(rows * row_) * sizeof(bf16), ops_.stream()),
               "cudaMemsetAsync(ring: block dq)");
    cuda_check(cudaMemsetAsync(b_.dkv_step, 0, static_cast<size_t>(rows * kv_row) * sizeof(bf16), ops_.stream()),
               "cudaMemsetAsync(ring: block dk|dv)");
    ops_.attention_segments_backward(b_.step, b_.dkv_step, b_.dkv_step + kvh, dout_, q_, row_, k, k + kvh, kv_row,
                                     out_, lse_, H_, KV_, hd_, seg_[src]);
    ops_.add_bf16_rows(b_.acc, int64_t{H_} * hd_, b_.step, row_, rows, int64_t{H_} * hd_);
    ops_.add_bf16_rows(static_cast<float*>(dkv), kv_row, b_.dkv_step, kv_row, rows, kv_row);
    return;
  }
  ops_.attention_block_backward(b_.acc, static_cast<float*>(dkv), q_, row_, static_cast<const bf16*>(kv), dout_, lse_,
                                b_.dsum, B, Tl_, Tl_, H_, KV_, hd_, pos(r_), pos(src), doc_start_);
}

void CudaRingBlocks::backward_end(void* dqkv, const void* dkv_home, int B) {
  ops_.attention_block_grads(static_cast<bf16*>(dqkv), b_.acc, static_cast<const float*>(dkv_home), int64_t{B} * Tl_,
                             H_, KV_, hd_);
}

}  // namespace mpitron
