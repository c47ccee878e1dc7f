// The GPU backend's half of ring attention (model/context_parallel/ring_attention.hpp): k|v blocks
// travel in bf16 (the activations' own precision, so passing them on loses nothing), dk|dv in fp32
// (they accumulate over the ring's steps); the output and dq accumulate in fp32 and are rounded to
// bf16 once at the end. Every call is enqueued on ops.stream(); the ring's hops (NCCL send/recv
// groups on the communicator's stream) are ordered after it by Comm::set_compute_stream, and
// compute that reads a received block is enqueued only after the hop's wait.
// Two ways to compute a block: with segments (set_segments; model.attention = "cudnn"), each
// block is one cuDNN ragged attention call (ops/attention_segments.hpp: the diagonal block causal,
// the others full, documents as segments of their own) returning its output and log-sum-exp, merged
// into the running output by log-sum-exp (TransformerEngine's correction); its backward reruns per
// block from the final output and log-sum-exp, the bf16 dq and dk|dv added into the fp32
// accumulators. Without (model.attention = "naive"): the block kernels (attention_block.cu), an
// online softmax over position masks.
// The buffers are TransformerModelCuda's activations (model/gpu_activations.hpp: GpuRingBufs), so
// the planner counts them. GPU builds only.
#pragma once
#include "mpitron/model/context_parallel/ring_attention.hpp"
#include "mpitron/model/gpu_activations.hpp"
#include "mpitron/ops/cuda/cuda_ops.hpp"

namespace mpitron {

class CudaRingBlocks final : public RingBlocks {
 public:
  // H, KV: this rank's query and kv heads (tensor parallel slices); bufs.positions holds every cp
  // rank's positions ([cp, Tl]).
  CudaRingBlocks(CudaOps& ops, const GpuRingBufs& bufs, int cp_rank, int Tl, int H, int KV, int hd)
      : ops_(ops), b_(bufs), r_(cp_rank), Tl_(Tl), H_(H), KV_(KV), hd_(hd), row_(int64_t{H + 2 * KV} * hd) {}
  DType kv_type() const override { return DType::bf16; }
  DType dkv_type() const override { return DType::f32; }
  void* kv(int i) override { return b_.kv[i]; }
  void* dkv(int i) override { return b_.dkv[i]; }
  // The next passes' segments, one per source cp rank ([cp]; the caller keeps them), or nullptr:
  // the block kernels.
  void set_segments(const DeviceSegments* per_src) { seg_ = per_src; }
  void forward_begin(void* out, const void* qkv, int B, const int32_t* doc_start) override;
  void forward_block(const void* kv, int src, int B) override;
  void forward_end(void* out, float* lse, int B) override;
  void backward_begin(void* dqkv, const void* qkv, const void* dout, const void* out, const float* lse, int B,
                      const int32_t* doc_start) override;
  void backward_block(const void* kv, void* dkv, int src, int B) override;
  void backward_end(void* dqkv, const void* dkv_home, int B) override;

 private:
  const int32_t* pos(int rank) const { return b_.positions + int64_t{rank} * Tl_; }
  void pack_own_block(const bf16* qkv, int B);  // into kv[0]
  CudaOps& ops_;
  GpuRingBufs b_;
  int r_, Tl_, H_, KV_, hd_;
  int64_t row_;  // (H + 2 KV) hd
  bool first_ = true;
  const bf16 *q_ = nullptr, *dout_ = nullptr, *out_ = nullptr;
  const DeviceSegments* seg_ = nullptr;
  const float* lse_ = nullptr;
  const int32_t* doc_start_ = nullptr;  // device [B, Tl]: each query row's document start (global), or none
};

}  // namespace mpitron
