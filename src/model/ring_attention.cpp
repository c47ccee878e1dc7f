// RingAttention (ring_attention.hpp): context-parallel causal attention, CPU fp32.
#include "mpitron/model/ring_attention.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "mpitron/core/error.hpp"
#include "mpitron/model/model_chunk.hpp"

namespace mpitron {

namespace {

float dot(const float* a, const float* b, int n) {
  float s = 0.f;
#pragma omp simd reduction(+ : s)
  for (int e = 0; e < n; ++e) s += a[e] * b[e];
  return s;
}

}  // namespace

RingAttention::RingAttention(Ops& ops, Comm& cp, int max_B, int Tl, int T, int H, int KV, int hd, float* workspace)
    : ops_(ops), cp_(cp), Tl_(Tl), H_(H), KV_(KV), hd_(hd), row_(int64_t{H + 2 * KV} * hd) {
  const int C = cp.size();
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
void RingAttention::pack_own_block(const float* qkv, int B) {
  const int64_t blk_row = 2 * int64_t{KV_} * hd_;
  for (int64_t i = 0; i < int64_t{B} * Tl_; ++i)
    std::memcpy(kv_[0] + i * blk_row, qkv + i * row_ + int64_t{H_} * hd_, blk_row * sizeof(float));
}

// One hop of the ring: `send` to the next rank, `recv` from the previous one, posted now.
std::pair<Request, Request> RingAttention::pass_on(const float* send, float* recv, size_t n, int tag) {
  const int C = cp_.size(), r = cp_.rank();
  Request rq = cp_.irecv(recv, n, DType::f32, (r + C - 1) % C, tag);
  Request sq = cp_.isend(send, n, DType::f32, (r + 1) % C, tag);
  return {std::move(rq), std::move(sq)};
}

void RingAttention::wait(std::pair<Request, Request>& hop) {
  const auto t0 = std::chrono::steady_clock::now();
  hop.first->wait();
  hop.second->wait();
  wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void RingAttention::forward(float* out, float* lse, const float* qkv, int B) {
  const int C = cp_.size(), r = cp_.rank(), Tl = Tl_, H = H_, hd = hd_;
  const int64_t n_blk = int64_t{B} * Tl * 2 * KV_ * hd, stats = int64_t{B} * H * Tl;
  pack_own_block(qkv, B);
  std::fill(m_, m_ + stats, -INFINITY);
  std::fill(l_, l_ + stats, 0.f);
  std::fill(out, out + int64_t{B} * Tl * H * hd, 0.f);
  for (int s = 0; s < C; ++s) {
    const float* cur = kv_[s % 2];
    std::pair<Request, Request> hop;
    if (s + 1 < C) hop = pass_on(cur, kv_[(s + 1) % 2], static_cast<size_t>(n_blk), 0);  // overlaps the compute
    const int src = (r + C - s) % C;
    ops_.attention_block_forward(out, m_, l_, qkv, row_, cur, B, Tl, Tl, H, KV_, hd, pos_[r].data(),
                                 pos_[src].data());
    if (s + 1 < C) wait(hop);
  }
  for (int64_t st = 0; st < stats; ++st) {  // st = (b H + h) Tl + i
    const int64_t b = st / (int64_t{H} * Tl), h = st / Tl % H, i = st % Tl;
    float* o = out + (b * Tl + i) * H * hd + h * hd;
    const float inv = 1.f / l_[st];  // l > 0: a query always sees itself
    for (int e = 0; e < hd; ++e) o[e] *= inv;
    lse[st] = m_[st] + std::log(l_[st]);
  }
}

void RingAttention::backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                             int B) {
  const int C = cp_.size(), r = cp_.rank(), Tl = Tl_, H = H_, hd = hd_;
  const int64_t blk_row = 2 * int64_t{KV_} * hd, n_blk = int64_t{B} * Tl * blk_row;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < Tl; ++i) {
        const int64_t row = (int64_t{b} * Tl + i) * H * hd + int64_t{h} * hd;
        dsum_[(int64_t{b} * H + h) * Tl + i] = dot(dout + row, out + row, hd);
      }
  pack_own_block(qkv, B);
  for (int64_t i = 0; i < int64_t{B} * Tl; ++i)
    std::fill(dqkv + i * row_, dqkv + i * row_ + int64_t{H} * hd, 0.f);  // dq accumulates locally
  std::fill(dkv_[0], dkv_[0] + n_blk, 0.f);
  for (int s = 0; s < C; ++s) {
    const float* cur = kv_[s % 2];
    float* dcur = dkv_[s % 2];
    std::pair<Request, Request> hop;
    if (s + 1 < C) hop = pass_on(cur, kv_[(s + 1) % 2], static_cast<size_t>(n_blk), 1);  // k|v do not change
    const int src = (r + C - s) % C;
    ops_.attention_block_backward(dqkv, row_, dcur, qkv, row_, cur, dout, lse, dsum_, B, Tl, Tl, H, KV_, hd,
                                  pos_[r].data(), pos_[src].data());
    // dk|dv of this block go on with it (after the compute); the last hop takes them home.
    std::pair<Request, Request> dhop = pass_on(dcur, dkv_[(s + 1) % 2], static_cast<size_t>(n_blk), 2);
    if (s + 1 < C) wait(hop);
    wait(dhop);
  }
  // After cp steps and the final hop, dkv_[C % 2] holds this rank's own block's dk|dv.
  const float* mine = dkv_[C % 2];
  for (int64_t i = 0; i < int64_t{B} * Tl; ++i)
    std::memcpy(dqkv + i * row_ + int64_t{H} * hd, mine + i * blk_row, blk_row * sizeof(float));
}

}  // namespace mpitron
