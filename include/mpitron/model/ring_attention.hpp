// Context-parallel causal attention over a ring (Liu et al. 2023, "Ring Attention"; Megatron /
// Transformer Engine's load-balanced layout), CPU, fp32; each step's block is one
// Ops::attention_block_forward / _backward (small GEMMs that skip the causally masked half).
//
// Every rank of the cp group holds Tl = T / cp positions of each sequence: chunks r and
// 2 cp - 1 - r of T / (2 cp) tokens (cp_global_position), so each rank does the same causal work.
// Its queries attend to every rank's keys and values, which travel around the ring:
//   forward   cp steps; at step s the rank holds the k|v block of rank r - s, sends it on to
//             r + 1 (isend/irecv posted before the step's compute, so the transfer overlaps it)
//             and merges its partial attention into the output with the online softmax (running
//             max and sum); the log-sum-exp per query row is kept for the backward.
//   backward  the same ring, each block carrying its accumulated dk|dv along: at step s the rank
//             adds its queries' contribution to block r - s's dk, dv and passes k|v (posted before
//             the compute) and dk|dv (after it) on; after cp steps a final hop brings each block's
//             dk|dv home. dq stays local. Scores are recomputed from q, k and the log-sum-exp
//             (flash attention's backward), so no [T, T] matrix is kept.
// Masking is by global position (key position <= query position). Grouped-query attention: query
// head h reads kv head h / (H / KV); the backward runs one task per (sequence, kv head), summing
// its group's dk, dv in order (deterministic).
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "mpitron/dist/comm.hpp"
#include "mpitron/ops/ops.hpp"

namespace mpitron {

class RingAttention {
 public:
  // B <= max_B sequences of Tl local rows; qkv rows [q H hd | k KV hd | v KV hd]; T the full
  // sequence length. cp: the context-parallel group (2 cp divides T). workspace:
  // buffer_floats(max_B, ...) floats the model plans with its activations (Mem::activations).
  // ops: the per-block compute (Ops::attention_block_forward / _backward).
  RingAttention(Ops& ops, Comm& cp, int max_B, int Tl, int T, int H, int KV, int hd, float* workspace);
  // out[B*Tl, H*hd] (overwritten), lse[B, H, Tl] (kept for backward).
  void forward(float* out, float* lse, const float* qkv, int B);
  // dqkv[B*Tl, (H + 2 KV) hd] overwritten from dout and the forward's out, lse.
  void backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse, int B);
  // Floats of the ring's buffers: two k|v blocks and two dk|dv blocks in flight, [B, Tl, 2 KV hd]
  // each, and per (b, h, t) the running max, sum and D = rowsum(dout * out).
  static int64_t buffer_floats(int max_B, int Tl, int H, int KV, int hd) {
    return 4 * int64_t{max_B} * Tl * 2 * KV * hd + 3 * int64_t{max_B} * H * Tl;
  }
  double comm_wait_seconds() const { return wait_s_; }  // time blocked on the ring (not overlapped)

 private:
  void pack_own_block(const float* qkv, int B);  // into kv_[0]
  std::pair<Request, Request> pass_on(const float* send, float* recv, size_t n, int tag);
  void wait(std::pair<Request, Request>& hop);  // timed: the ring's exposed wait
  Ops& ops_;
  Comm& cp_;
  int Tl_, H_, KV_, hd_;
  int64_t row_;  // (H + 2 KV) hd
  float *kv_[2], *dkv_[2];  // k|v and dk|dv blocks in flight, [B, Tl, 2 KV hd] each
  float *m_, *l_, *dsum_;   // per (b, h, t): running max, sum; D = rowsum(dout * out)
  std::vector<std::vector<int>> pos_;  // per cp rank: the global positions of its rows
  double wait_s_ = 0;
};

}  // namespace mpitron
