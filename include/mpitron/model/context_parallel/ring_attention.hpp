// Context-parallel causal attention over a ring (Liu et al. 2023, "Ring Attention"; Megatron /
// Transformer Engine's load-balanced layout), one driver for both backends: RingAttention runs
// the ring (which block is where, the hops, the waits); a RingBlocks does a backend's per-block
// compute on its own memory (CpuRingBlocks below: host fp32 through Ops::attention_block_*;
// CudaRingBlocks, model/context_parallel/cuda/ring_blocks_cuda.hpp: device bf16 blocks, fp32
// accumulators).
//
// Every rank of the cp group holds Tl = T / cp positions of each sequence: chunks r and
// 2 cp - 1 - r of T / (2 cp) tokens (cp_global_position), so each rank does the same causal work.
// Its queries attend to every rank's keys and values, which travel around the ring:
//   forward   cp steps; at step s the rank holds the k|v block of rank r - s, sends it on to
//             r + 1 and receives the next one from r - 1 in one paired exchange
//             (Comm::isendrecv: one NCCL group on the GPU, so the ring cannot deadlock), posted
//             before the step's compute so the transfer overlaps it, and merges its partial
//             attention into the output with the online softmax (running max and sum); the
//             log-sum-exp per query row is kept for the backward.
//   backward  the same ring, each block carrying its accumulated dk|dv along: at step s the rank
//             adds its queries' contribution to block r - s's dk, dv and passes k|v (posted before
//             the compute) and dk|dv (after it) on; after cp steps a final hop brings each block's
//             dk|dv home. dq stays local. Scores are recomputed from q, k and the log-sum-exp
//             (flash attention's backward), so no [T, T] matrix is kept.
// Masking is by global position (key position <= query position; with document masking also >=
// the first position of the query's document: blocks of keys no query row sees are skipped,
// ring_attention's row blocks). Grouped-query attention: query
// head h reads kv head h / (H / KV); dk, dv are summed over each group in order (deterministic).
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "mpitron/distributed/comm.hpp"
#include "mpitron/ops/ops.hpp"

namespace mpitron {

// A backend's half of the ring: the blocks in flight and the compute on them. Shapes: B
// sequences of Tl local rows; qkv rows [q H hd | k KV hd | v KV hd]; a k|v block is
// [B, Tl, 2 KV hd] of kv_type(), a dk|dv block the same of dkv_type(). Pointers are the backend's
// memory (host or device), typed by the backend.
class RingBlocks {
 public:
  virtual ~RingBlocks() = default;
  virtual DType kv_type() const = 0;
  virtual DType dkv_type() const = 0;
  virtual void* kv(int i) = 0;   // i = 0, 1: the two k|v blocks in flight
  virtual void* dkv(int i) = 0;  // the two dk|dv blocks
  // forward_begin: kv(0) <- this rank's own k|v (from qkv); accumulators reset. out is where
  // forward_end will write (a backend may accumulate there directly). doc_start: document
  // masking, the first sequence index each local row sees ([B, Tl] host; nullptr: none), for
  // this pass's blocks (backward_begin's too).
  virtual void forward_begin(void* out, const void* qkv, int B, const int32_t* doc_start) = 0;
  // The block of cp rank `src` (its positions) merged into the accumulators.
  virtual void forward_block(const void* kv, int src, int B) = 0;
  // out[B*Tl, H hd] and lse[B, H, Tl] (fp32) from the accumulators.
  virtual void forward_end(void* out, float* lse, int B) = 0;
  // backward_begin: kv(0) <- own k|v, dkv(0) <- 0, dq accumulator <- 0, D = rowsum(dout * out).
  // dqkv is where backward_end will write (a backend may accumulate dq there directly).
  virtual void backward_begin(void* dqkv, const void* qkv, const void* dout, const void* out, const float* lse,
                              int B, const int32_t* doc_start) = 0;
  // Block `src`'s contribution: dq accumulator +=, dkv +=.
  virtual void backward_block(const void* kv, void* dkv, int src, int B) = 0;
  // dqkv[B*Tl, (H + 2 KV) hd] <- [dq | this rank's own dk|dv (dkv_home)].
  virtual void backward_end(void* dqkv, const void* dkv_home, int B) = 0;
};

class RingAttention {
 public:
  // blocks: the backend's half (the caller keeps it alive); Tl rows per sequence and rank, B <=
  // the max_B the blocks were made for; kv_row = 2 KV hd.
  RingAttention(Comm& cp, RingBlocks& blocks, int Tl, int64_t kv_row);
  // out[B*Tl, H*hd] (overwritten), lse[B, H, Tl] (kept for backward). doc_start: RingBlocks'.
  void forward(void* out, float* lse, const void* qkv, int B, const int32_t* doc_start = nullptr);
  // dqkv[B*Tl, (H + 2 KV) hd] overwritten from dout and the forward's out, lse.
  void backward(void* dqkv, const void* dout, const void* qkv, const void* out, const float* lse, int B,
                const int32_t* doc_start = nullptr);
  double comm_wait_seconds() const { return wait_s_; }  // time blocked on the ring (not overlapped)

 private:
  Request pass_on(const void* send, void* recv, size_t n, DType t, int tag);
  // Timed: the ring's exposed wait; on the timeline the hop from `posted` and the wait.
  void wait(Request& hop, std::chrono::steady_clock::time_point posted, const char* what);
  Comm& cp_;
  RingBlocks& blocks_;
  int Tl_;
  int64_t kv_row_;
  double wait_s_ = 0;
};

// The CPU backend's blocks: fp32 host memory, Ops::attention_block_forward / _backward.
class CpuRingBlocks final : public RingBlocks {
 public:
  // T the full sequence length (2 cp divides it); workspace: buffer_floats(max_B, ...) floats
  // the model plans with its activations (Mem::activations).
  CpuRingBlocks(Ops& ops, int cp_rank, int cp_size, int max_B, int Tl, int T, int H, int KV, int hd, float* workspace);
  // Two k|v blocks and two dk|dv blocks in flight, [B, Tl, 2 KV hd] each, and per (b, h, t)
  // the running max, sum and D = rowsum(dout * out).
  static int64_t buffer_floats(int max_B, int Tl, int H, int KV, int hd) {
    return 4 * int64_t{max_B} * Tl * 2 * KV * hd + 3 * int64_t{max_B} * H * Tl;
  }
  DType kv_type() const override { return DType::f32; }
  DType dkv_type() const override { return DType::f32; }
  void* kv(int i) override { return kv_[i]; }
  void* dkv(int i) override { return dkv_[i]; }
  void forward_begin(void* out, const void* qkv, int B, const int32_t* doc_start) override;
  void forward_block(const void* kv, int src, int B) override;
  void forward_end(void* out, float* lse, int B) override;
  void backward_begin(void* dqkv, const void* qkv, const void* dout, const void* out, const float* lse, int B,
                      const int32_t* doc_start) override;
  void backward_block(const void* kv, void* dkv, int src, int B) override;
  void backward_end(void* dqkv, const void* dkv_home, int B) override;

 private:
  void pack_own_block(const float* qkv, int B);  // into kv_[0]
  Ops& ops_;
  int r_, Tl_, H_, KV_, hd_;
  int64_t row_;  // (H + 2 KV) hd
  float *kv_[2], *dkv_[2];  // k|v and dk|dv blocks in flight, [B, Tl, 2 KV hd] each
  float *m_, *l_, *dsum_;   // per (b, h, t): running max, sum; D = rowsum(dout * out)
  float* o_ = nullptr;      // forward: the output being accumulated (the caller's out)
  const float *q_ = nullptr, *dout_ = nullptr, *lse_ = nullptr;  // this pass's inputs
  const int32_t* doc_start_ = nullptr;
  float* dq_ = nullptr;     // backward: the caller's dqkv (dq accumulates in its q columns)
  std::vector<std::vector<int>> pos_;  // per cp rank: the global positions of its rows
};

}  // namespace mpitron
