// GPT forward/backward over planned activations (llm.c style: one function lays them out).
#include "mpitron/model/gpt.hpp"

#include <algorithm>
#include <cstring>

#include "mpitron/core/error.hpp"

namespace mpitron {

namespace {

int local_layers(const ModelConfig& cfg, const ModelShard& s) {
  return (s.layer_end < 0 ? cfg.n_layer : s.layer_end) - s.layer_begin;
}

// The activation layout, walked once to size the buffer and once to hand out pointers.
// `take(n)` returns the next n floats (64-byte aligned).
template <class Take>
void walk_activations(const ModelConfig& cfg, const ModelShard& s, int B, int64_t chunk_rows, int64_t Vp, Take&& take,
                      std::vector<float*>* layer_ptrs, float** globals) {
  const int64_t BT = static_cast<int64_t>(B) * cfg.seq_len, C = cfg.d_model, F = cfg.d_ff;
  const int64_t att = static_cast<int64_t>(B) * cfg.n_head * cfg.seq_len * cfg.seq_len;
  globals[0] = take(BT * C);  // input: embedding output or previous stage's output
  for (int l = 0; l < local_layers(cfg, s); ++l) {
    const int64_t sizes[13] = {BT * C, BT, BT, BT * 3 * C, att, BT * C, BT * C, BT * C, BT, BT, BT * F, BT * F, BT * C};
    for (int64_t n : sizes) {
      float* p = take(n);
      if (layer_ptrs) layer_ptrs->push_back(p);
    }
  }
  if (s.has_head) {
    globals[1] = take(BT * C);               // lnf
    globals[2] = take(BT);                   // lnf_mean
    globals[3] = take(BT);                   // lnf_rstd
    globals[4] = take(BT);                   // losses
    globals[5] = take(BT);                   // lse
    globals[6] = take(chunk_rows * Vp);      // logits (one chunk of rows)
    globals[11] = take(Vp * cfg.d_model);    // this micro-batch's LM-head gradient of wte, unscaled
  }
  globals[7] = take(BT * C);      // dres: residual-stream gradient
  globals[8] = take(BT * C);      // dC
  globals[9] = take(BT * 3 * C);  // d3C
  globals[10] = take(BT * F);     // d4C
}

}  // namespace

int64_t gpt_logits_chunk_rows(const ModelConfig& cfg, int max_micro_batch) {
  // ~8M floats (32 MB) of logits at a time, at least 64 rows.
  int64_t bt = static_cast<int64_t>(max_micro_batch) * cfg.seq_len;
  int64_t rows = std::max<int64_t>(64, (8 << 20) / cfg.padded_vocab());
  return std::min(bt, rows);
}

int64_t gpt_activation_floats(const ModelConfig& cfg, const ModelShard& s, int B) {
  int64_t total = 0;
  float* g[12];
  walk_activations(cfg, s, B, gpt_logits_chunk_rows(cfg, B), cfg.padded_vocab(s.tp_size),
                   [&](int64_t n) {
                     total += (n + 15) / 16 * 16;
                     return static_cast<float*>(nullptr);
                   },
                   nullptr, g);
  return total;
}

GPT::GPT(const ModelConfig& cfg, const ModelShard& shard, Ops& ops, int max_micro_batch)
    : cfg_(cfg), shard_(shard), ops_(ops), max_B_(max_micro_batch) {
  check(cfg.arch == Arch::gpt2, "GPT: model '{}' is not a GPT-2 architecture", cfg.name);
  check(shard.tp_size == 1, "GPT: tensor parallelism (tp_size {}) is not implemented yet", shard.tp_size);
  check(max_micro_batch > 0, "GPT: max_micro_batch must be > 0");
  check(cfg.d_model % cfg.n_head == 0 && cfg.d_ff == 4 * cfg.d_model, "GPT: bad config d_model {} n_head {} d_ff {}",
        cfg.d_model, cfg.n_head, cfg.d_ff);
  n_local_layers_ = local_layers(cfg, shard);
  vp_ = cfg.padded_vocab(shard.tp_size);
  chunk_rows_ = gpt_logits_chunk_rows(cfg, max_micro_batch);
  params_ = gpt_param_table(cfg, shard);
  size_t n = params_.empty() ? 0 : params_.back().offset + (params_.back().numel + 15) / 16 * 16;
  params_buf_ = Buffer<float>(Mem::params, n);
  grads_buf_ = Buffer<float>(Mem::grads, n);
  w_ = resolve(params_buf_.data());
  g_ = resolve(grads_buf_.data());

  act_buf_ = Buffer<float>(Mem::activations, gpt_activation_floats(cfg, shard, max_micro_batch));
  const int64_t BT = static_cast<int64_t>(max_micro_batch) * cfg.seq_len;
  tok_buf_ = Buffer<int32_t>(Mem::activations, 2 * BT);
  last_logits_ = Buffer<float>(Mem::activations, shard.has_head ? max_micro_batch * vp_ : 0);
  float* cur = act_buf_.data();
  std::vector<float*> lp;
  float* g[12] = {};
  walk_activations(cfg, shard, max_micro_batch, chunk_rows_, vp_,
                   [&](int64_t k) {
                     float* p = cur;
                     cur += (k + 15) / 16 * 16;
                     return p;
                   },
                   &lp, g);
  act_.input = g[0];
  for (int l = 0; l < n_local_layers_; ++l) {
    float** p = &lp[13 * l];
    act_.layers.push_back({p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11], p[12]});
  }
  act_.output = n_local_layers_ > 0 ? act_.layers.back().res3 : act_.input;
  act_.lnf = g[1], act_.lnf_mean = g[2], act_.lnf_rstd = g[3], act_.losses = g[4], act_.lse = g[5];
  act_.logits = g[6];
  act_.dwte_head = g[11];
  act_.dres = g[7], act_.dC = g[8], act_.d3C = g[9], act_.d4C = g[10];
}

const ParamInfo* GPT::find_param(const std::string& name) const {
  for (const auto& p : params_)
    if (p.name == name) return &p;
  return nullptr;
}

GPT::Weights GPT::resolve(float* base) const {
  auto at = [&](const std::string& name) {
    const ParamInfo* p = find_param(name);
    check(p != nullptr, "GPT: parameter {} missing from the table", name);
    return base + p->offset;
  };
  Weights w;
  if (shard_.has_embedding || shard_.has_head) w.wte = at("wte.weight");
  if (shard_.has_embedding) w.wpe = at("wpe.weight");
  if (shard_.has_head) w.lnf_w = at("ln_f.weight"), w.lnf_b = at("ln_f.bias");
  for (int l = shard_.layer_begin; l < shard_.layer_begin + n_local_layers_; ++l) {
    std::string h = "h." + std::to_string(l) + ".";
    w.layers.push_back({at(h + "ln_1.weight"), at(h + "ln_1.bias"), at(h + "attn.c_attn.weight"),
                        at(h + "attn.c_attn.bias"), at(h + "attn.c_proj.weight"), at(h + "attn.c_proj.bias"),
                        at(h + "ln_2.weight"), at(h + "ln_2.bias"), at(h + "mlp.c_fc.weight"), at(h + "mlp.c_fc.bias"),
                        at(h + "mlp.c_proj.weight"), at(h + "mlp.c_proj.bias")});
  }
  return w;
}

void GPT::zero_grad() { std::memset(grads_buf_.data(), 0, grads_buf_.bytes()); }

double GPT::forward(const int32_t* inputs, const int32_t* targets, int B, int64_t* n_targets) {
  check(B > 0 && B <= max_B_, "GPT::forward: micro-batch {} outside [1, {}]", B, max_B_);
  const int T = cfg_.seq_len, C = cfg_.d_model, H = cfg_.n_head, hd = cfg_.head_dim(), F = cfg_.d_ff;
  const int64_t BT = static_cast<int64_t>(B) * T;
  last_B_ = B;
  last_had_targets_ = targets != nullptr;
  last_had_grad_ = grad_enabled_;
  int32_t* toks = tok_buf_.data();
  int32_t* tgts = toks + static_cast<int64_t>(max_B_) * T;
  if (shard_.has_embedding) {
    check(inputs != nullptr, "GPT::forward: the first stage needs input tokens");
    for (int64_t i = 0; i < BT; ++i) {
      check(inputs[i] >= 0 && inputs[i] < cfg_.vocab_size, "GPT::forward: input token {} at {} outside [0, {})",
            inputs[i], i, cfg_.vocab_size);
      toks[i] = inputs[i];
    }
    ops_.embedding_forward(act_.input, toks, w_.wte, w_.wpe, B, T, C, 0, vp_);
  }
  const float* res = act_.input;
  for (int l = 0; l < n_local_layers_; ++l) {
    const LayerW& w = w_.layers[l];
    const LayerAct& a = act_.layers[l];
    ops_.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, res, w.ln1_w, w.ln1_b, BT, C);
    ops_.matmul_forward(a.qkv, a.ln1, w.qkv_w, w.qkv_b, BT, C, 3 * C);
    ops_.attention_forward(a.atty, a.att, a.qkv, B, T, H, hd);
    ops_.matmul_forward(a.res2, a.atty, w.proj_w, w.proj_b, BT, C, C);
    ops_.add_inplace(a.res2, res, BT * C);
    ops_.layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, w.ln2_w, w.ln2_b, BT, C);
    ops_.matmul_forward(a.fch, a.ln2, w.fc_w, w.fc_b, BT, C, F);
    ops_.gelu_forward(a.fch_gelu, a.fch, BT * F);
    ops_.matmul_forward(a.res3, a.fch_gelu, w.fcp_w, w.fcp_b, BT, F, C);
    ops_.add_inplace(a.res3, a.res2, BT * C);
    res = a.res3;
  }
  if (n_targets) *n_targets = 0;
  if (!shard_.has_head) return 0.0;
  ops_.layernorm_forward(act_.lnf, act_.lnf_mean, act_.lnf_rstd, res, w_.lnf_w, w_.lnf_b, BT, C);
  if (!targets) {  // generation: logits of the last position of every sequence
    for (int b = 0; b < B; ++b)
      ops_.matmul_forward(last_logits_.data() + b * vp_, act_.lnf + (static_cast<int64_t>(b) * T + T - 1) * C,
                          w_.wte, nullptr, 1, C, vp_);
    return 0.0;
  }
  int64_t count = 0;
  for (int64_t i = 0; i < BT; ++i) {
    check(targets[i] < cfg_.vocab_size, "GPT::forward: target {} at {} >= vocab size {}", targets[i], i,
          cfg_.vocab_size);
    tgts[i] = targets[i];
    count += targets[i] >= 0;
  }
  // LM head + loss in chunks of rows. With gradients enabled the head's backward runs here too,
  // unscaled (loss_scale is only known at backward(); the gradient is linear in it): each
  // chunk's logits become softmax - onehot in place, then dlnf (into dC) and this
  // micro-batch's wte gradient (dwte_head). That spares recomputing the logits GEMM later.
  if (grad_enabled_) std::memset(act_.dwte_head, 0, static_cast<size_t>(vp_) * C * sizeof(float));
  for (int64_t r0 = 0; r0 < BT; r0 += chunk_rows_) {
    int64_t rows = std::min(chunk_rows_, BT - r0);
    ops_.matmul_forward(act_.logits, act_.lnf + r0 * C, w_.wte, nullptr, rows, C, vp_);
    ops_.crossentropy_forward(act_.losses + r0, act_.lse + r0, act_.logits, tgts + r0, rows, vp_, cfg_.vocab_size);
    if (!grad_enabled_) continue;
    ops_.crossentropy_backward(act_.logits, act_.lse + r0, tgts + r0, rows, vp_, cfg_.vocab_size, 1.f);
    ops_.matmul_backward(act_.dC + r0 * C, act_.dwte_head, nullptr, act_.logits, act_.lnf + r0 * C, w_.wte, rows, C,
                         vp_);
  }
  double loss = 0.0;
  for (int64_t i = 0; i < BT; ++i) loss += act_.losses[i];
  if (n_targets) *n_targets = count;
  return loss;
}

void GPT::compute_logits(int64_t row_begin, int64_t rows, float* out) {
  check(shard_.has_head && last_B_ > 0 && row_begin >= 0 && row_begin + rows <= int64_t{last_B_} * cfg_.seq_len,
        "GPT::compute_logits: rows [{}, {}) not in the last forward", row_begin, row_begin + rows);
  ops_.matmul_forward(out, act_.lnf + row_begin * cfg_.d_model, w_.wte, nullptr, rows, cfg_.d_model, vp_);
}

void GPT::backward(float loss_scale) {
  const int B = last_B_, T = cfg_.seq_len, C = cfg_.d_model, H = cfg_.n_head, hd = cfg_.head_dim(), F = cfg_.d_ff;
  const int64_t BT = static_cast<int64_t>(B) * T;
  check(B > 0, "GPT::backward without a forward");
  const int32_t* toks = tok_buf_.data();
  float* dres = act_.dres;
  if (shard_.has_head) {
    check(last_had_targets_ && last_had_grad_, "GPT::backward: the last forward had no targets or no gradients");
    std::memset(dres, 0, BT * C * sizeof(float));
    ops_.scale_inplace(act_.dC, loss_scale, BT * C);
    ops_.axpy(g_.wte, loss_scale, act_.dwte_head, static_cast<size_t>(vp_) * C);
    const float* res_last = n_local_layers_ > 0 ? act_.layers.back().res3 : act_.input;
    ops_.layernorm_backward(dres, g_.lnf_w, g_.lnf_b, act_.dC, res_last, w_.lnf_w, act_.lnf_mean, act_.lnf_rstd, BT,
                            C);
  }
  for (int l = n_local_layers_ - 1; l >= 0; --l) {
    const LayerW &w = w_.layers[l], &g = g_.layers[l];
    const LayerAct& a = act_.layers[l];
    const float* res_in = l > 0 ? act_.layers[l - 1].res3 : act_.input;
    ops_.matmul_backward(act_.d4C, g.fcp_w, g.fcp_b, dres, a.fch_gelu, w.fcp_w, BT, F, C);
    ops_.gelu_backward(act_.d4C, a.fch, act_.d4C, BT * F);
    ops_.matmul_backward(act_.dC, g.fc_w, g.fc_b, act_.d4C, a.ln2, w.fc_w, BT, C, F);
    ops_.layernorm_backward(dres, g.ln2_w, g.ln2_b, act_.dC, a.res2, w.ln2_w, a.ln2_mean, a.ln2_rstd, BT, C);
    ops_.matmul_backward(act_.dC, g.proj_w, g.proj_b, dres, a.atty, w.proj_w, BT, C, C);
    ops_.attention_backward(act_.d3C, act_.dC, a.qkv, a.att, B, T, H, hd);
    ops_.matmul_backward(act_.dC, g.qkv_w, g.qkv_b, act_.d3C, a.ln1, w.qkv_w, BT, C, 3 * C);
    ops_.layernorm_backward(dres, g.ln1_w, g.ln1_b, act_.dC, res_in, w.ln1_w, a.ln1_mean, a.ln1_rstd, BT, C);
  }
  if (shard_.has_embedding) ops_.embedding_backward(g_.wte, g_.wpe, dres, toks, B, T, C, 0, vp_);
}

}  // namespace mpitron
