// GPT forward/backward over planned activations (llm.c style: one function lays them out).
#include "mpitron/model/gpt.hpp"

#include <algorithm>
#include <cstring>
#include <exception>
#include <functional>

#include "mpitron/core/error.hpp"

namespace mpitron {

namespace {

// The activation layout, walked once to size the buffer and once to hand out pointers.
// `take(n)` returns the next n floats (64-byte aligned). Per slot (one micro-batch in flight):
// the stage input, per block 13 buffers (recompute: only res3, the block output), and on the
// head shard lnf, its mean/rstd, losses, lse, dlnf and the micro-batch's wte gradient. Shared:
// the recompute scratch block, one chunk of logits, and the backward scratch.
struct ActPtrs {
  std::vector<std::vector<float*>> slot;  // [slot][input, 13 per layer (or 1), head 7]
  std::vector<float*> shared;             // [logits, dres, dC, d3C, d4C, 13 recompute scratch]
};
constexpr int kLayerBufs = 13;

// Tensor parallel: the attention width, heads and MLP width are per rank (C/tp, H/tp, F/tp), Vp
// is this rank's vocab slice; with sequence parallel the LayerNorm/residual buffers hold Rl =
// B*T/tp rows, and two shared [B*T, C] buffers hold gathered inputs and full-row partial sums.
template <class Take>
void walk_activations(const ModelConfig& cfg, const ModelShard& s, int B, int64_t chunk_rows, int64_t Vp,
                      ActivationOptions ao, Take&& take, ActPtrs& out) {
  const int tp = s.tp_size;
  const bool sp = s.sequence_parallel && tp > 1;
  const int64_t BT = static_cast<int64_t>(B) * cfg.seq_len, Rl = sp ? BT / tp : BT, C = cfg.d_model;
  const int64_t Cl = C / tp, F = cfg.d_ff / tp;
  const int64_t att = static_cast<int64_t>(B) * (cfg.n_head / tp) * cfg.seq_len * cfg.seq_len;
  const int64_t layer_sizes[kLayerBufs] = {Rl * C, Rl, Rl, BT * 3 * Cl, att, BT * Cl, Rl * C, Rl * C, Rl, Rl, BT * F, BT * F, Rl * C};
  out.slot.assign(ao.slots, {});
  for (auto& p : out.slot) {
    p.push_back(take(Rl * C));  // input: embedding output or previous stage's output
    for (int l = 0; l < local_layers(cfg, s); ++l) {
      if (ao.recompute) p.push_back(take(Rl * C));  // res3: the block output (next block's input)
      else
        for (int64_t n : layer_sizes) p.push_back(take(n));
    }
    if (s.has_head)  // lnf, lnf_mean, lnf_rstd, losses, lse, dlnf, this micro-batch's wte gradient (unscaled)
      for (int64_t n : {Rl * C, Rl, Rl, BT, BT, (sp ? Rl : BT) * C, Vp * C}) p.push_back(take(n));
  }
  out.shared.clear();
  out.shared.push_back(s.has_head ? take(chunk_rows * Vp) : nullptr);  // logits (one chunk of rows)
  for (int64_t n : {Rl * C, BT * C, BT * 3 * Cl, BT * F}) out.shared.push_back(take(n));  // dres, dC, d3C, d4C
  if (ao.recompute && local_layers(cfg, s) > 0)
    for (int i = 0; i < kLayerBufs - 1; ++i) out.shared.push_back(take(layer_sizes[i]));
  for (int i = 0; i < 2; ++i) out.shared.push_back(sp ? take(BT * C) : nullptr);  // xg, dfull (last two)
}

}  // namespace

int64_t logits_chunk_rows(int64_t rows, int64_t vocab, int64_t budget) {
  const int64_t max_rows = std::max<int64_t>(64, budget / vocab);
  const int64_t chunks = (rows + max_rows - 1) / max_rows;
  return (rows + chunks - 1) / chunks;
}

int64_t gpt_logits_chunk_rows(const ModelConfig& cfg, int max_micro_batch) {
  constexpr int64_t kLogitsBudget = int64_t{16} << 20;  // floats: 64 MB
  return logits_chunk_rows(int64_t{max_micro_batch} * cfg.seq_len, cfg.padded_vocab(), kLogitsBudget);
}

int64_t gpt_activation_floats(const ModelConfig& cfg, const ModelShard& s, int B, ActivationOptions ao) {
  int64_t total = 0;
  ActPtrs p;
  walk_activations(cfg, s, B, gpt_logits_chunk_rows(cfg, B), cfg.padded_vocab(s.tp_size) / s.tp_size, ao,
                   [&](int64_t n) {
                     total += flat_padded(n);
                     return static_cast<float*>(nullptr);
                   },
                   p);
  return total;
}

int64_t gpt_activation_bytes(const ModelConfig& cfg, const ModelShard& s, int B, ActivationOptions ao) {
  const int64_t BT = static_cast<int64_t>(B) * cfg.seq_len;
  const int64_t last_logits = s.has_head ? int64_t{B} * (cfg.padded_vocab(s.tp_size) / s.tp_size) : 0;
  return 4 * (gpt_activation_floats(cfg, s, B, ao) + last_logits) + 4 * 2 * BT * ao.slots;
}

GPT::GPT(const ModelConfig& cfg, const ModelShard& shard, Ops& ops, int max_micro_batch, ActivationOptions act,
         Comm* tp)
    : cfg_(cfg), shard_(shard), ops_(ops), max_B_(max_micro_batch), act_opts_(act) {
  check(cfg.arch == Arch::gpt2, "GPT: model '{}' is not a GPT-2 architecture", cfg.name);
  const int tp_size = tp ? tp->size() : 1, tp_rank = tp ? tp->rank() : 0;
  check(shard.tp_size == tp_size && shard.tp_rank == tp_rank,
        "GPT: the shard says tp rank {} of {}, the TP group rank {} of {}", shard.tp_rank, shard.tp_size, tp_rank,
        tp_size);
  check(cfg.n_head % tp_size == 0, "GPT: n_head ({}) must be divisible by tp ({}): heads are split over TP ranks",
        cfg.n_head, tp_size);
  shard_.sequence_parallel = shard.sequence_parallel && tp_size > 1;
  check(!shard_.sequence_parallel || cfg.seq_len % tp_size == 0,
        "GPT: sequence parallel needs seq_len ({}) divisible by tp ({})", cfg.seq_len, tp_size);
  tp_ = TpContext{tp, shard_.sequence_parallel, tp_comm_s_.get()};
  check(max_micro_batch > 0, "GPT: max_micro_batch must be > 0");
  check(act.slots > 0, "GPT: activation slots must be > 0 (got {})", act.slots);
  check(cfg.d_model % cfg.n_head == 0 && cfg.d_ff == 4 * cfg.d_model, "GPT: bad config d_model {} n_head {} d_ff {}",
        cfg.d_model, cfg.n_head, cfg.d_ff);
  n_local_layers_ = local_layers(cfg, shard);
  vp_ = cfg.padded_vocab(tp_size) / tp_size;
  c_local_ = cfg.d_model / tp_size, h_local_ = cfg.n_head / tp_size, f_local_ = cfg.d_ff / tp_size;
  qkv_ = std::make_unique<ColumnParallelLinear>(ops, tp_, cfg.d_model, 3 * cfg.d_model);
  proj_ = std::make_unique<RowParallelLinear>(ops, tp_, cfg.d_model, cfg.d_model);
  fc_ = std::make_unique<ColumnParallelLinear>(ops, tp_, cfg.d_model, cfg.d_ff);
  fcp_ = std::make_unique<RowParallelLinear>(ops, tp_, cfg.d_ff, cfg.d_model);
  emb_ = std::make_unique<VocabParallelEmbedding>(ops, tp_, cfg.padded_vocab(tp_size), cfg.d_model);
  ce_ = std::make_unique<VocabParallelCrossEntropy>(ops, tp_, cfg.padded_vocab(tp_size), cfg.vocab_size);
  if (tp_.sp()) ln_grad_ = Buffer<float>(Mem::workspace, 2 * static_cast<size_t>(cfg.d_model));
  chunk_rows_ = gpt_logits_chunk_rows(cfg, max_micro_batch);
  params_ = gpt_param_table(cfg, shard);
  const size_t n = flat_param_floats(params_);
  n_flat_ = n;
  params_buf_ = Buffer<float>(Mem::params, n);
  grads_buf_ = Buffer<float>(Mem::grads, n);
  w_ = resolve(params_buf_.data());
  g_ = resolve(grads_buf_.data());
  for (size_t i = 0; i < params_.size(); ++i)  // field() must follow the table's order
    check(*field(w_, i) == params_buf_.data() + params_[i].offset, "GPT: field order differs at {}", params_[i].name);

  act_buf_ = Buffer<float>(Mem::activations, gpt_activation_floats(cfg, shard_, max_micro_batch, act));
  const int64_t BT = static_cast<int64_t>(max_micro_batch) * cfg.seq_len;
  tok_buf_ = Buffer<int32_t>(Mem::activations, 2 * BT * act.slots);
  last_logits_ = Buffer<float>(Mem::activations, shard.has_head ? max_micro_batch * vp_ : 0);
  check(static_cast<int64_t>(act_buf_.bytes() + tok_buf_.bytes() + last_logits_.bytes()) ==
            gpt_activation_bytes(cfg, shard, max_micro_batch, act),
        "GPT: activation allocations differ from gpt_activation_bytes (the memory ledger's prediction)");
  float* cur = act_buf_.data();
  ActPtrs p;
  walk_activations(cfg, shard_, max_micro_batch, chunk_rows_, vp_, act,
                   [&](int64_t k) {
                     float* q = cur;
                     cur += flat_padded(k);
                     return q;
                   },
                   p);
  act_.logits = p.shared[0];
  act_.dres = p.shared[1], act_.dC = p.shared[2], act_.d3C = p.shared[3], act_.d4C = p.shared[4];
  act_.xg = p.shared[p.shared.size() - 2], act_.dfull = p.shared.back();
  for (int k = 0; k < act.slots; ++k) {
    SlotActs sa;
    float** q = p.slot[k].data();
    sa.input = *q++;
    for (int l = 0; l < n_local_layers_; ++l) {
      if (act.recompute) {  // scratch for all but res3
        float** r = &p.shared[5];
        sa.layers.push_back({r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10], r[11], *q++});
      } else {
        sa.layers.push_back({q[0], q[1], q[2], q[3], q[4], q[5], q[6], q[7], q[8], q[9], q[10], q[11], q[12]});
        q += kLayerBufs;
      }
    }
    sa.output = n_local_layers_ > 0 ? sa.layers.back().res3 : sa.input;
    if (shard.has_head) {
      sa.lnf = q[0], sa.lnf_mean = q[1], sa.lnf_rstd = q[2], sa.losses = q[3], sa.lse = q[4], sa.dlnf = q[5];
      sa.dwte_head = q[6];
    }
    sa.tokens = tok_buf_.data() + 2 * BT * k;
    slots_.push_back(std::move(sa));
  }
}

// (Here, not in gpt_params.cpp: that file holds no GPT member, so the tools that link the
// parameter table without the model, e.g. the fuzz targets, need no GPT type information.)
void GPT::init_weights(uint64_t seed) { init_gpt_params(cfg_, params_, params_buf_.data(), seed, shard_.tp_rank); }

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

float** GPT::field(Weights& w, size_t i) {
  // Table order (gpt_param_table): [wte] [wpe], 12 per block in LayerW's order, [ln_f w, b].
  static constexpr float* LayerW::*kBlock[12] = {&LayerW::ln1_w,  &LayerW::ln1_b,  &LayerW::qkv_w, &LayerW::qkv_b,
                                                 &LayerW::proj_w, &LayerW::proj_b, &LayerW::ln2_w, &LayerW::ln2_b,
                                                 &LayerW::fc_w,   &LayerW::fc_b,   &LayerW::fcp_w, &LayerW::fcp_b};
  check(i < params_.size(), "GPT: parameter index {} out of range", i);
  if (shard_.has_embedding || shard_.has_head) {
    if (i == 0) return &w.wte;
    --i;
  }
  if (shard_.has_embedding) {
    if (i == 0) return &w.wpe;
    --i;
  }
  if (i < 12 * w.layers.size()) return &(w.layers[i / 12].*kBlock[i % 12]);
  return i == 12 * w.layers.size() ? &w.lnf_w : &w.lnf_b;
}

void GPT::release_param_buffer() {
  params_buf_.reset();
  for (size_t i = 0; i < params_.size(); ++i) *field(w_, i) = nullptr;
}

void GPT::release_grad_buffer() {
  grads_buf_.reset();
  for (size_t i = 0; i < params_.size(); ++i) *field(g_, i) = nullptr;
}

void GPT::zero_grad() {
  if (grads_buf_.data()) std::memset(grads_buf_.data(), 0, grads_buf_.bytes());
}

namespace {
// Emits a unit's post event when forward leaves the scope normally (it has several exits).
struct PostEvent {
  const std::function<void()> f;
  ~PostEvent() noexcept(false) {
    if (std::uncaught_exceptions() == 0) f();
  }
};
}  // namespace

// One block's forward from its input `res`. full = false stops after the GELU: what backward
// needs when it recomputes a block (the block output is stored, res3 is not needed).
// Tensor parallel: QKV and fc are column-parallel (this rank's heads / MLP columns), proj and
// fcp row-parallel; LayerNorm and residual work on this rank's rows (all of them without SP).
void GPT::layer_forward(const LayerW& w, const LayerAct& a, const float* res, int B, bool full) {
  const int T = cfg_.seq_len, C = cfg_.d_model, hd = cfg_.head_dim();
  const int64_t BT = static_cast<int64_t>(B) * T, Rl = local_rows(B);
  ops_.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, res, w.ln1_w, w.ln1_b, Rl, C);
  qkv_->forward(a.qkv, a.ln1, act_.xg, w.qkv_w, w.qkv_b, BT);
  ops_.attention_forward(a.atty, a.att, a.qkv, B, T, static_cast<int>(h_local_), hd);
  proj_->forward(a.res2, a.atty, w.proj_w, w.proj_b, BT, act_.dfull);
  ops_.add_inplace(a.res2, res, Rl * C);
  ops_.layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, w.ln2_w, w.ln2_b, Rl, C);
  fc_->forward(a.fch, a.ln2, act_.xg, w.fc_w, w.fc_b, BT);
  ops_.gelu_forward(a.fch_gelu, a.fch, BT * f_local_);
  if (!full) return;
  fcp_->forward(a.res3, a.fch_gelu, w.fcp_w, w.fcp_b, BT, act_.dfull);
  ops_.add_inplace(a.res3, a.res2, Rl * C);
}

const float* GPT::gather_rows(const float* local, int64_t rows) {
  if (!tp_.sp()) return local;
  TpCommTimer timer(tp_);
  gather_from_sequence_forward(*tp_.comm, local, act_.xg, static_cast<size_t>(sequence_local_rows(tp_, rows) * cfg_.d_model));
  return act_.xg;
}

void GPT::ln_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                      const float* mean, const float* rstd, int64_t rows) {
  const int64_t C = cfg_.d_model;
  if (!tp_.sp()) {
    ops_.layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, rows, C);
    return;
  }
  float* g = ln_grad_.data();
  std::memset(g, 0, ln_grad_.bytes());
  ops_.layernorm_backward(dinp, g, g + C, dout, inp, w, mean, rstd, rows, C);
  {
    TpCommTimer timer(tp_);
    sum_sequence_parallel_grads(*tp_.comm, g, static_cast<size_t>(2 * C));
  }
  ops_.add_inplace(dw, g, static_cast<size_t>(C));
  ops_.add_inplace(db, g + C, static_cast<size_t>(C));
}

double GPT::forward(const int32_t* inputs, const int32_t* targets, int B, int64_t* n_targets, int slot) {
  check(B > 0 && B <= max_B_, "GPT::forward: micro-batch {} outside [1, {}]", B, max_B_);
  check(slot >= 0 && slot < act_opts_.slots, "GPT::forward: activation slot {} outside [0, {})", slot,
        act_opts_.slots);
  const int T = cfg_.seq_len, C = cfg_.d_model;
  const int64_t BT = static_cast<int64_t>(B) * T;
  SlotActs& sa = slots_[slot];
  last_slot_ = slot;
  sa.B = B;
  sa.had_targets = targets != nullptr;
  sa.had_grad = grad_enabled_;
  int32_t* toks = sa.tokens;
  int32_t* tgts = toks + static_cast<int64_t>(max_B_) * T;
  emit(UnitEvent::pre_forward, kEmbeddingUnit);
  PostEvent post_emb{[this] { emit(UnitEvent::post_forward, kEmbeddingUnit); }};
  if (shard_.has_embedding) {
    check(inputs != nullptr, "GPT::forward: the first stage needs input tokens");
    for (int64_t i = 0; i < BT; ++i) {
      check(inputs[i] >= 0 && inputs[i] < cfg_.vocab_size, "GPT::forward: input token {} at {} outside [0, {})",
            inputs[i], i, cfg_.vocab_size);
      toks[i] = inputs[i];
    }
    emb_->forward(sa.input, toks, w_.wte, w_.wpe, B, T, act_.dfull);
  }
  const float* res = sa.input;
  for (int l = 0; l < n_local_layers_; ++l) {
    emit(UnitEvent::pre_forward, l);
    layer_forward(w_.layers[l], sa.layers[l], res, B, true);
    res = sa.layers[l].res3;
    emit(UnitEvent::post_forward, l);
  }
  if (n_targets) *n_targets = 0;
  if (!shard_.has_head) return 0.0;
  emit(UnitEvent::pre_forward, kHeadUnit);
  PostEvent post_head{[this] { emit(UnitEvent::post_forward, kHeadUnit); }};
  const int64_t Rl = local_rows(B);
  ops_.layernorm_forward(sa.lnf, sa.lnf_mean, sa.lnf_rstd, res, w_.lnf_w, w_.lnf_b, Rl, C);
  check(targets || !tp_.sp(), "GPT::forward: generation (no targets) is not available with sequence parallel");
  if (!targets) {  // generation: logits (this rank's vocab columns) of the last position of every sequence
    for (int b = 0; b < B; ++b)
      ops_.matmul_forward(last_logits_.data() + b * vp_, sa.lnf + (static_cast<int64_t>(b) * T + T - 1) * C,
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
  // chunk's logits become softmax - onehot in place, then dlnf and this micro-batch's wte
  // gradient (dwte_head), both kept in the slot. That spares recomputing the logits GEMM later.
  // Tensor parallel: the head is a column-parallel linear over this rank's vocab slice (input
  // all-gathered under SP), the loss vocab-parallel; dlnf's partial sums go through f's backward.
  if (grad_enabled_) std::memset(sa.dwte_head, 0, static_cast<size_t>(vp_) * C * sizeof(float));
  const float* lnf = gather_rows(sa.lnf, BT);
  float* dlnf = tp_.sp() ? act_.dC : sa.dlnf;  // [BT, C] partial sums under SP
  for (int64_t r0 = 0; r0 < BT; r0 += chunk_rows_) {
    int64_t rows = std::min(chunk_rows_, BT - r0);
    ops_.matmul_forward(act_.logits, lnf + r0 * C, w_.wte, nullptr, rows, C, vp_);
    ce_->forward(sa.losses + r0, sa.lse + r0, act_.logits, tgts + r0, rows);
    if (!grad_enabled_) continue;
    ce_->backward(act_.logits, sa.lse + r0, tgts + r0, rows, 1.f);
    ops_.matmul_backward(dlnf + r0 * C, sa.dwte_head, nullptr, act_.logits, lnf + r0 * C, w_.wte, rows, C, vp_);
  }
  if (grad_enabled_ && tp_.active()) {
    TpCommTimer timer(tp_);
    if (tp_.sp()) gather_from_sequence_backward(*tp_.comm, dlnf, sa.dlnf, static_cast<size_t>(Rl * C));
    else copy_to_tp_region_backward(*tp_.comm, sa.dlnf, static_cast<size_t>(BT * C));
  }
  double loss = 0.0;
  for (int64_t i = 0; i < BT; ++i) loss += sa.losses[i];
  if (n_targets) *n_targets = count;
  return loss;
}

void GPT::compute_logits(int64_t row_begin, int64_t rows, float* out) {
  const SlotActs& sa = slots_[last_slot_];
  check(shard_.has_head && sa.B > 0 && row_begin >= 0 && row_begin + rows <= int64_t{sa.B} * cfg_.seq_len,
        "GPT::compute_logits: rows [{}, {}) not in the last forward", row_begin, row_begin + rows);
  check(!tp_.sp(), "GPT::compute_logits is not available with sequence parallel");
  ops_.matmul_forward(out, sa.lnf + row_begin * cfg_.d_model, w_.wte, nullptr, rows, cfg_.d_model, vp_);
}

void GPT::backward(float loss_scale, int slot) {
  check(slot >= 0 && slot < act_opts_.slots, "GPT::backward: activation slot {} outside [0, {})", slot,
        act_opts_.slots);
  SlotActs& sa = slots_[slot];
  const int B = sa.B, T = cfg_.seq_len, C = cfg_.d_model, hd = cfg_.head_dim();
  const int64_t BT = static_cast<int64_t>(B) * T, Rl = local_rows(B), Cl = c_local_;
  check(B > 0, "GPT::backward without a forward");
  const int32_t* toks = sa.tokens;
  float* dres = act_.dres;
  if (shard_.has_head) {
    check(sa.had_targets && sa.had_grad, "GPT::backward: the last forward had no targets or no gradients");
    emit(UnitEvent::pre_backward, kHeadUnit);
    std::memset(dres, 0, Rl * C * sizeof(float));
    ops_.scale_inplace(sa.dlnf, loss_scale, Rl * C);
    ops_.axpy(g_.wte, loss_scale, sa.dwte_head, static_cast<size_t>(vp_) * C);
    ln_backward(dres, g_.lnf_w, g_.lnf_b, sa.dlnf, sa.output, w_.lnf_w, sa.lnf_mean, sa.lnf_rstd, Rl);
    emit(UnitEvent::post_backward, kHeadUnit);
  }
  for (int l = n_local_layers_ - 1; l >= 0; --l) {
    const LayerW &w = w_.layers[l], &g = g_.layers[l];
    const LayerAct& a = sa.layers[l];
    const float* res_in = l > 0 ? sa.layers[l - 1].res3 : sa.input;
    emit(UnitEvent::pre_backward, l);  // before reading w: ZeRO-3 gathers the block here
    if (act_opts_.recompute) layer_forward(w, a, res_in, B, false);  // the block's activations again
    // Under SP the column-parallel layers' inputs (ln2, ln1) are all-gathered again (Megatron
    // keeps only this rank's rows), and dres holds this rank's rows.
    fcp_->backward(act_.d4C, g.fcp_w, g.fcp_b, dres, act_.dfull, a.fch_gelu, w.fcp_w, BT);
    ops_.gelu_backward(act_.d4C, a.fch, act_.d4C, BT * f_local_);
    fc_->backward(act_.dC, g.fc_w, g.fc_b, act_.d4C, gather_rows(a.ln2, BT), w.fc_w, BT, act_.dfull);
    ln_backward(dres, g.ln2_w, g.ln2_b, act_.dC, a.res2, w.ln2_w, a.ln2_mean, a.ln2_rstd, Rl);
    proj_->backward(act_.dC, g.proj_w, g.proj_b, dres, act_.dfull, a.atty, w.proj_w, BT);
    ops_.attention_backward(act_.d3C, act_.dC, a.qkv, a.att, B, T, static_cast<int>(h_local_), hd);
    qkv_->backward(act_.dC, g.qkv_w, g.qkv_b, act_.d3C, gather_rows(a.ln1, BT), w.qkv_w, BT, act_.dfull);
    // The key bias adds q.b_k to every score of a softmax row, so its gradient is exactly zero;
    // computed, it is pure rounding noise that Adam would amplify into lr-sized steps (and into
    // differences between parallel layouts). Keep it exactly zero. Layout [q | k | v], C/tp each.
    std::fill(g.qkv_b + Cl, g.qkv_b + 2 * Cl, 0.0f);
    ln_backward(dres, g.ln1_w, g.ln1_b, act_.dC, res_in, w.ln1_w, a.ln1_mean, a.ln1_rstd, Rl);
    emit(UnitEvent::post_backward, l);
  }
  emit(UnitEvent::pre_backward, kEmbeddingUnit);
  if (shard_.has_embedding) emb_->backward(g_.wte, g_.wpe, dres, act_.dfull, toks, B, T);
  emit(UnitEvent::post_backward, kEmbeddingUnit);
}

}  // namespace mpitron
