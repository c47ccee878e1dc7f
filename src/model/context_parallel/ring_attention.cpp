// RingAttention (ring_attention.hpp): the ring, and the CPU backend's blocks (fp32).
#include "mpitron/model/context_parallel/ring_attention.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "mpitron/core/error.hpp"
#include "mpitron/core/trace.hpp"
#include "mpitron/model/model_chunk.hpp"

namespace mpitron {

RingAttention::RingAttention(Comm& cp, RingBlocks& blocks, int Tl, int64_t kv_row)
    : cp_(cp), blocks_(blocks), Tl_(Tl), kv_row_(kv_row) {}

// One hop of the ring: `send` to the next rank, `recv` from the previous one, posted now as one
// exchange.
Request RingAttention::pass_on(const void* send, void* recv, size_t n, DType t, int tag) {
  const int C = cp_.size(), r = cp_.rank();
  return cp_.isendrecv(send, n, (r + 1) % C, recv, n, (r + C - 1) % C, t, tag);
}

void RingAttention::wait(Request& hop, std::chrono::steady_clock::time_point posted, const char* what) {
  const auto t0 = std::chrono::steady_clock::now();
  hop->wait();
  const auto t1 = std::chrono::steady_clock::now();
  wait_s_ += std::chrono::duration<double>(t1 - t0).count();
  if (trace::enabled()) {  // the hop from its post to the end of its wait, and the wait
    trace::lane_event(what, trace::cp, posted, t1);
    trace::event(std::string("waiting for ") + what, trace::compute, t0, t1);
  }
}

void RingAttention::forward(void* out, float* lse, const void* qkv, int B, const int32_t* doc_start) {
  const int C = cp_.size(), r = cp_.rank();
  const size_t n_blk = static_cast<size_t>(int64_t{B} * Tl_ * kv_row_);
  blocks_.forward_begin(out, qkv, B, doc_start);
  for (int s = 0; s < C; ++s) {
    const void* cur = blocks_.kv(s % 2);
    Request hop;
    const auto posted = std::chrono::steady_clock::now();
    if (s + 1 < C) hop = pass_on(cur, blocks_.kv((s + 1) % 2), n_blk, blocks_.kv_type(), 0);  // overlaps the compute
    blocks_.forward_block(cur, (r + C - s) % C, B);
    if (hop) wait(hop, posted, "cp k|v hop");
  }
  blocks_.forward_end(out, lse, B);
}

void RingAttention::backward(void* dqkv, const void* dout, const void* qkv, const void* out, const float* lse,
                             int B, const int32_t* doc_start) {
  const int C = cp_.size(), r = cp_.rank();
  const size_t n_blk = static_cast<size_t>(int64_t{B} * Tl_ * kv_row_);
  blocks_.backward_begin(dqkv, qkv, dout, out, lse, B, doc_start);
  for (int s = 0; s < C; ++s) {
    const void* cur = blocks_.kv(s % 2);
    void* dcur = blocks_.dkv(s % 2);
    Request hop;
    const auto posted = std::chrono::steady_clock::now();
    if (s + 1 < C) hop = pass_on(cur, blocks_.kv((s + 1) % 2), n_blk, blocks_.kv_type(), 1);  // k|v do not change
    blocks_.backward_block(cur, dcur, (r + C - s) % C, B);
    // dk|dv of this block go on with it (after the compute); the last hop takes them home.
    const auto dposted = std::chrono::steady_clock::now();
    Request dhop = pass_on(dcur, blocks_.dkv((s + 1) % 2), n_blk, blocks_.dkv_type(), 2);
    if (hop) wait(hop, posted, "cp k|v hop");
    wait(dhop, dposted, "cp dk|dv hop");
  }
  // After cp steps and the final hop, dkv(C % 2) holds this rank's own block's dk|dv.
  blocks_.backward_end(dqkv, blocks_.dkv(C % 2), B);
}

// ---- CpuRingBlocks ----

namespace {

float dot(const float* a, const float* b, int n) {
  float s = 0.f;
#pragma omp simd reduction(+ : s)
  for (int e = 0; e < n; ++e) s += a[e] * b[e];
  return s;
}

}  // namespace

CpuRingBlocks::CpuRingBlocks(Ops& ops, int cp_rank, int cp_size, int max_B, int Tl, int T, int H, int KV, int hd,
                             float* workspace)
    : ops_(ops), r_(cp_rank), Tl_(Tl), H_(H), KV_(KV), hd_(hd), row_(int64_t{H + 2 * KV} * hd) {
  const int C = cp_size;
  check(C >= 1 && T % (2 * C) == 0 && Tl * C == T, "RingAttention: seq_len {} is not 2 x cp ({}) chunks of {} rows",
        T, C, Tl);
  check(KV > 0 && H % KV == 0, "RingAttention: {} kv heads do not divide {} query heads", KV, H);
  const int64_t blk = int64_t{max_B} * Tl * 2 * KV * hd, stats = int64_t{max_B} * H * Tl;
  kv_[0] = workspace, kv_[1] = kv_[0] + blk, dkv_[0] = kv_[1] + blk, dkv_[1] = dkv_[0] + blk;
  m_ = dkv_[1] + blk, l_ = m_ + stats, dsum_ = l_ + stats;
  pos_.resize(C);
  for (int r = 0; r < C; ++r)
    for (int t = 0; t < Tl; ++t) pos_[r].push_back(cp_global_position(t, r, C, T));
}

// This rank's k|v block, packed [B, Tl, k | v] from the qkv rows.
void CpuRingBlocks::pack_own_block(const float* qkv, int B) {
  const int64_t blk_row = 2 * int64_t{KV_} * hd_;
  for (int64_t i = 0; i < int64_t{B} * Tl_; ++i)
    std::memcpy(kv_[0] + i * blk_row, qkv + i * row_ + int64_t{H_} * hd_, blk_row * sizeof(float));
}

void CpuRingBlocks::forward_begin(void* out, const void* qkv, int B, const int32_t* doc_start) {
  q_ = static_cast<const float*>(qkv), o_ = static_cast<float*>(out), doc_start_ = doc_start;
  pack_own_block(q_, B);
  const int64_t stats = int64_t{B} * H_ * Tl_;
  std::fill(m_, m_ + stats, -INFINITY);
  std::fill(l_, l_ + stats, 0.f);
  std::fill(o_, o_ + int64_t{B} * Tl_ * H_ * hd_, 0.f);  // the output accumulates in place
}

void CpuRingBlocks::forward_block(const void* kv, int src, int B) {
  ops_.attention_block_forward(o_, m_, l_, q_, row_, static_cast<const float*>(kv), B, Tl_, Tl_, H_, KV_, hd_,
                               pos_[r_].data(), pos_[src].data(), doc_start_);
}

void CpuRingBlocks::forward_end(void*, float* lse, int B) {  // out is o_, accumulated in place
  const int Tl = Tl_, H = H_, hd = hd_;
  const int64_t stats = int64_t{B} * H * Tl;
  for (int64_t st = 0; st < stats; ++st) {  // st = (b H + h) Tl + i
    const int64_t b = st / (int64_t{H} * Tl), h = st / Tl % H, i = st % Tl;
    float* o = o_ + (b * Tl + i) * H * hd + h * hd;
    const float inv = 1.f / l_[st];  // l > 0: a query always sees itself
    for (int e = 0; e < hd; ++e) o[e] *= inv;
    lse[st] = m_[st] + std::log(l_[st]);
  }
}

void CpuRingBlocks::backward_begin(void* dqkv, const void* qkv, const void* dout, const void* out, const float* lse,
                                   int B, const int32_t* doc_start) {
  const int Tl = Tl_, H = H_, hd = hd_;
  doc_start_ = doc_start;
  q_ = static_cast<const float*>(qkv), dout_ = static_cast<const float*>(dout), lse_ = lse;
  dq_ = static_cast<float*>(dqkv);
  const float* o = static_cast<const float*>(out);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < Tl; ++i) {
        const int64_t row = (int64_t{b} * Tl + i) * H * hd + int64_t{h} * hd;
        dsum_[(int64_t{b} * H + h) * Tl + i] = dot(dout_ + row, o + row, hd);
      }
  pack_own_block(q_, B);
  for (int64_t i = 0; i < int64_t{B} * Tl; ++i)
    std::fill(dq_ + i * row_, dq_ + i * row_ + int64_t{H} * hd, 0.f);  // dq accumulates in place
  std::fill(dkv_[0], dkv_[0] + int64_t{B} * Tl * 2 * KV_ * hd, 0.f);
}

void CpuRingBlocks::backward_block(const void* kv, void* dkv, int src, int B) {
  ops_.attention_block_backward(dq_, row_, static_cast<float*>(dkv), q_, row_, static_cast<const float*>(kv), dout_,
                                lse_, dsum_, B, Tl_, Tl_, H_, KV_, hd_, pos_[r_].data(), pos_[src].data(), doc_start_);
}

void CpuRingBlocks::backward_end(void* dqkv, const void* dkv_home, int B) {
  const int64_t blk_row = 2 * int64_t{KV_} * hd_;
  float* d = static_cast<float*>(dqkv);
  const float* mine = static_cast<const float*>(dkv_home);
  for (int64_t i = 0; i < int64_t{B} * Tl_; ++i)
    std::memcpy(d + i * row_ + int64_t{H_} * hd_, mine + i * blk_row, blk_row * sizeof(float));
}

}  // namespace mpitron
