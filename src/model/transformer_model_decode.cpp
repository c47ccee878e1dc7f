// TransformerModel::decode: generation with a KV cache (transformer_model.hpp). Per block the keys
// and values of every position so far stay in the cache ([seq_len, KV*hd] each, after RoPE for
// LLaMA), so a new token costs one row through each GEMM plus attention over the cached rows,
// instead of the whole window's forward again.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "mpitron/core/error.hpp"
#include "mpitron/model/transformer_model.hpp"

namespace mpitron {

struct TransformerModel::DecodeState {
  std::vector<Buffer<float>> k, v;  // per local block: [T, KV*hd]
  Buffer<float> x, x2, h, mean, rstd, qkv, y, fc, act, scores;
  Buffer<float> qk_normed, qk_rstd;  // Qwen3's q/k norm: one row's query and key heads
};

void TransformerModel::decode(const int32_t* tokens, int n, int pos, float* logits) {
  const int T = cfg_.seq_len, C = cfg_.d_model, hd = cfg_.head_dim();
  check(shard_.has_embedding && shard_.has_head && shard_.tp_size == 1 && shard_.cp_size == 1,
        "TransformerModel::decode needs the whole model on one rank (no pipeline or tensor parallelism)");
  check(n > 0 && pos >= 0 && pos + n <= T, "TransformerModel::decode: positions [{}, {}) outside the context of {}",
        pos, pos + n, T);
  const int64_t H = geo_.h_local, KV = geo_.kv_local, Q = geo_.qkv_local, kvw = KV * hd;
  if (!decode_) {
    auto d = std::make_shared<DecodeState>();
    for (int l = 0; l < n_local_layers_; ++l) {
      d->k.emplace_back(Mem::activations, static_cast<size_t>(T) * kvw);
      d->v.emplace_back(Mem::activations, static_cast<size_t>(T) * kvw);
    }
    auto rows = [&](int64_t w) { return Buffer<float>(Mem::activations, static_cast<size_t>(T) * w); };
    d->x = rows(C), d->x2 = rows(C), d->h = rows(C), d->mean = rows(1), d->rstd = rows(1), d->qkv = rows(Q);
    d->y = rows(geo_.c_local), d->fc = rows(geo_.fc_local), d->act = rows(geo_.f_local), d->scores = rows(1);
    if (cfg_.qk_norm) {
      d->qk_normed = Buffer<float>(Mem::activations, static_cast<size_t>((H + KV) * hd));
      d->qk_rstd = Buffer<float>(Mem::activations, static_cast<size_t>(H + KV));
    }
    decode_ = std::move(d);
  }
  DecodeState& d = *decode_;
  for (int i = 0; i < n; ++i)
    check(tokens[i] >= 0 && tokens[i] < cfg_.vocab_size, "TransformerModel::decode: token {} outside [0, {})",
          tokens[i], cfg_.vocab_size);
  // Position pos + t: wpe's row pos + t (GPT-2); RoPE's angle (LLaMA, pos0 = pos).
  ops_.embedding_forward(d.x.data(), tokens, w_.wte, w_.wpe ? w_.wpe + static_cast<int64_t>(pos) * C : nullptr, 1, n,
                         C, 0, geo_.vp);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (int l = 0; l < n_local_layers_; ++l) {
    const LayerW& w = w_.layers[l];
    norm_forward(d.h.data(), d.mean.data(), d.rstd.data(), d.x.data(), w.ln1_w, w.ln1_b, n);
    ops_.matmul_forward(d.qkv.data(), d.h.data(), w.qkv_w, w.qkv_b, n, C, Q);
    if (w.q_norm) {  // Qwen3: RMSNorm over each query head and each key head of every new row
      float *normed = d.qk_normed.data(), *rstd = d.qk_rstd.data();
      for (int t = 0; t < n; ++t) {
        float* row = d.qkv.data() + static_cast<int64_t>(t) * Q;
        ops_.rmsnorm_forward(normed, rstd, row, w.q_norm, H, hd, cfg_.norm_eps);
        ops_.rmsnorm_forward(normed + H * hd, rstd + H, row + geo_.c_local, w.k_norm, KV, hd, cfg_.norm_eps);
        std::copy(normed, normed + (H + KV) * hd, row);  // q heads then k heads: contiguous (c_local = H hd)
      }
    }
    if (spec_.rope()) {
      ops_.rope(d.qkv.data(), 1, n, static_cast<int>(H), hd, Q, geo_.rope_freqs, pos, false);
      ops_.rope(d.qkv.data() + geo_.c_local, 1, n, static_cast<int>(KV), hd, Q, geo_.rope_freqs, pos, false);
    }
    float *K = d.k[l].data(), *V = d.v[l].data();
    for (int t = 0; t < n; ++t) {
      const float* row = d.qkv.data() + static_cast<int64_t>(t) * Q;
      std::memcpy(K + (pos + t) * kvw, row + geo_.c_local, kvw * sizeof(float));
      std::memcpy(V + (pos + t) * kvw, row + geo_.c_local + kvw, kvw * sizeof(float));
    }
    // Causal attention of the n new queries over the cached keys 0 .. pos + t (query head h reads
    // kv head h / (H / KV)), softmax in double as a reference would, output [n, H*hd].
    const int64_t group = H / KV;
    for (int t = 0; t < n; ++t) {
      const int len = pos + t + 1;
      for (int64_t h = 0; h < H; ++h) {
        const float* q = d.qkv.data() + static_cast<int64_t>(t) * Q + h * hd;
        const int64_t kh = h / group;
        float* sc = d.scores.data();
        float mx = -INFINITY;
        for (int j = 0; j < len; ++j) {
          const float* k = K + j * kvw + kh * hd;
          float s = 0;
          for (int e = 0; e < hd; ++e) s += q[e] * k[e];
          sc[j] = s * scale;
          mx = std::max(mx, sc[j]);
        }
        double sum = 0;
        for (int j = 0; j < len; ++j) sum += sc[j] = std::exp(sc[j] - mx);
        float* y = d.y.data() + static_cast<int64_t>(t) * geo_.c_local + h * hd;
        std::fill(y, y + hd, 0.f);
        for (int j = 0; j < len; ++j) {
          const float p = static_cast<float>(sc[j] / sum);
          const float* v = V + j * kvw + kh * hd;
          for (int e = 0; e < hd; ++e) y[e] += p * v[e];
        }
      }
    }
    ops_.matmul_forward(d.x2.data(), d.y.data(), w.proj_w, w.proj_b, n, geo_.c_local, C);
    ops_.add_inplace(d.x2.data(), d.x.data(), static_cast<size_t>(n) * C);
    norm_forward(d.h.data(), d.mean.data(), d.rstd.data(), d.x2.data(), w.ln2_w, w.ln2_b, n);
    if (w.router) {  // a MoE block: its routed and shared experts on these rows
      MoeActs<float> moe;
      moe_->mlp().forward(block_weights(w).moe, moe, d.x.data(), d.h.data(), n);
    } else {
      ops_.matmul_forward(d.fc.data(), d.h.data(), w.fc_w, w.fc_b, n, C, geo_.fc_local);
      mlp_activation(d.act.data(), d.fc.data(), n);
      ops_.matmul_forward(d.x.data(), d.act.data(), w.fcp_w, w.fcp_b, n, geo_.f_local, C);
    }
    ops_.add_inplace(d.x.data(), d.x2.data(), static_cast<size_t>(n) * C);
  }
  const float* last = d.x.data() + static_cast<int64_t>(n - 1) * C;
  norm_forward(d.h.data(), d.mean.data(), d.rstd.data(), last, w_.lnf_w, w_.lnf_b, 1);
  ops_.matmul_forward(logits, d.h.data(), w_.head(), nullptr, 1, C, geo_.vp);
}

}  // namespace mpitron
