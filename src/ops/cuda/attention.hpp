// Causal attention on the fused QKV layout, two implementations behind one small interface:
//   - CudnnAttention (attention_cudnn.cpp): cuDNN 9 backend graphs, built once per shape, cached;
//   - NaiveAttention (attention_naive.cu): permute to [B,H,T,hd], cuBLAS strided-batched GEMMs
//     (bf16 in, fp32 accumulate) and a causal softmax kernel; recomputes P in the backward.
// Both save only stats[B,H,T] = logsumexp of the scaled, masked scores row (fp32).
// KV (>= 1, dividing H; CudaOps resolves Ops' 0) kv heads: qkv rows [q H hd | k KV hd | v KV hd],
// query head h reading kv head h / (H / KV); the backward sums each group's dk, dv.
#pragma once
#include <cublas_v2.h>
#include <cudnn_graph.h>

#include <memory>
#include <string>

#include "kernels.hpp"
#include "mpitron/ops/attention_segments.hpp"

namespace mpitron::cuda {

class Attention {
 public:
  virtual ~Attention() = default;
  // doc_start (device [B, T], nullptr: none): document masking, query t sees keys doc_start[t] .. t;
  // the naive path only (cuDNN's causal graph has no such mask: it refuses).
  virtual void forward(cudaStream_t s, bf16* out, float* stats, const bf16* qkv, int B, int T, int H, int hd, int KV,
                       const int32_t* doc_start) = 0;
  virtual void backward(cudaStream_t s, bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out,
                        const float* stats, int B, int T, int H, int hd, int KV, const int32_t* doc_start) = 0;
  virtual int graphs() const { return 0; }  // cuDNN graphs built (the naive path builds none)
};

// Attention over segments (ops/attention_segments.hpp; CudaOps::attention_segments_*), on cuDNN's
// ragged graphs.
class SegmentAttention {
 public:
  virtual ~SegmentAttention() = default;
  virtual void forward(cudaStream_t s, bf16* out, float* lse, const bf16* q, int64_t q_stride, const bf16* k,
                       const bf16* v, int64_t kv_stride, int H, int KV, int hd, const DeviceSegments& seg) = 0;
  virtual void backward(cudaStream_t s, bf16* dq, bf16* dk, bf16* dv, const bf16* dout, const bf16* q,
                        int64_t q_stride, const bf16* k, const bf16* v, int64_t kv_stride, const bf16* out,
                        const float* lse, int H, int KV, int hd, const DeviceSegments& seg) = 0;
  virtual int graphs() const = 0;  // cuDNN graphs built (forward and backward)
};

std::unique_ptr<Attention> make_naive_attention(cublasHandle_t cublas, Scratch& scratch);
std::unique_ptr<SegmentAttention> make_cudnn_segment_attention(cudnnHandle_t cudnn, Scratch& scratch);
std::unique_ptr<Attention> make_cudnn_attention(cudnnHandle_t cudnn, Scratch& scratch);

// Builds and finalises the forward and backward cuDNN graphs for one shape (KV kv heads, 0: H).
// With handle == nullptr it stops after the operation graph (heuristics and plans need a device
// or a device-property descriptor); returns a one-line summary of what was finalised. Throws
// Error naming the descriptor that failed. For tests and gpu_check.
std::string cudnn_attention_dry_build(cudnnHandle_t handle, int B, int T, int H, int hd, int KV = 0);

// The same for the segment graphs (packed documents, the ring's blocks; ops/attention_segments.hpp):
// buckets k (k.n segments of at most k.sq query and k.skv key rows), causal or not, q and k|v rows
// of q_stride and kv_stride elements, out rows of H hd, stats [.., H, stats_T]. Cached per
// (buckets, causal) once wired into the trainer.
std::string cudnn_segment_attention_dry_build(cudnnHandle_t handle, const SegmentBuckets& k, bool causal, int H, int hd,
                                              int KV, int64_t q_stride, int64_t kv_stride, int stats_T);

}  // namespace mpitron::cuda
