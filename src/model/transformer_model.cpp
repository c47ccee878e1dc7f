// TransformerModel forward/backward over planned activations (llm.c style: one function lays them
// out).
#include "mpitron/model/transformer_model.hpp"

#include <algorithm>
#include <cstring>
#include <exception>
#include <functional>

#include "mpitron/core/error.hpp"
#include "mpitron/model/arch.hpp"
#include "mpitron/model/param_tables.hpp"

namespace mpitron {

namespace {

// The activation layout, walked once to size the buffer and once to hand out pointers.
// `take(n)` returns the next n floats (64-byte aligned). Per slot (one micro-batch in flight):
// the stage input, per block 13 buffers (recompute: only res3, the block output), and on the
// head shard lnf, its mean/rstd, losses, lse, dlnf and the micro-batch's head gradient. Shared:
// the recompute scratch block, one chunk of logits, and the backward scratch. LLaMA's RMSNorm
// has no mean (0 floats), its fused QKV is (H + 2 KV) hd wide and its fc (gate|up) 2F.
struct ActPtrs {
  std::vector<std::vector<float*>> slot;  // [slot][input, 15 per layer (or 1), head 7]
  std::vector<float*> shared;  // [logits, dres, dC, d3C, d4C, dmlp, proj_out, 14 recompute scratch, ring, qk_tmp, xg, dfull]
};
constexpr int kLayerBufs = 15;
constexpr int kScratch = 7;  // index of the first recompute scratch buffer in ActPtrs::shared

// Tensor parallel: the attention width, heads and MLP width are per rank (C/tp, H/tp, F/tp), Vp
// is this rank's vocab slice; with sequence parallel the LayerNorm/residual buffers hold Rl =
// B*T/tp rows, and two shared [B*T, C] buffers hold gathered inputs and full-row partial sums.
template <class Take>
void walk_activations(const ModelConfig& cfg, const ModelShard& s, int B, int64_t chunk_rows, int64_t Vp,
                      ModelOptions ao, Take&& take, ActPtrs& out) {
  const int tp = s.tp_size;
  const bool sp = s.sequence_parallel && tp > 1;
  // Context parallel: every buffer holds this rank's seq_len / cp positions of each sequence.
  const int64_t BT = static_cast<int64_t>(B) * local_seq_len(cfg, s), Rl = sp ? BT / tp : BT, C = cfg.d_model;
  const BlockSpec& spec = block_spec(cfg);
  const int64_t hd = cfg.head_dim(), Cl = cfg.n_head / tp * hd, F = cfg.d_ff / tp, KV = kv_heads(cfg);
  const int64_t Q = (cfg.n_head + 2 * KV) / tp * hd, Fc = spec.fc_factor() * F, mean = spec.norm_has_mean() ? Rl : 0;
  // The attention probabilities [B, H, T, T]; under cp the ring's log-sum-exp [B, H, Tl] instead.
  const int64_t Tl = local_seq_len(cfg, s), att = s.cp_size > 1 ? int64_t{B} * (cfg.n_head / tp) * Tl
                                                                 : int64_t{B} * (cfg.n_head / tp) * Tl * Tl;
  // Qwen3's q/k norm: its input (this rank's query and key heads) and their rstd.
  const int64_t qk_heads = cfg.qk_norm ? (cfg.n_head + KV) / tp : 0;
  const int64_t layer_sizes[kLayerBufs] = {Rl * C, mean, Rl, BT * Q, att, BT * Cl, Rl * C, Rl * C, mean, Rl,
                                           BT * Fc, BT * F, BT * qk_heads * hd, BT * qk_heads, Rl * C};
  out.slot.assign(ao.slots, {});
  for (auto& p : out.slot) {
    p.push_back(take(Rl * C));  // input: embedding output or previous stage's output
    for (int l = 0; l < local_layers(cfg, s); ++l) {
      if (ao.recompute) p.push_back(take(Rl * C));  // res3: the block output (next block's input)
      else
        for (int64_t n : layer_sizes) p.push_back(take(n));
    }
    if (s.has_head)  // lnf, lnf_mean, lnf_rstd, losses, lse, dlnf, this micro-batch's head gradient (unscaled)
      for (int64_t n : {Rl * C, mean, Rl, BT, BT, (sp ? Rl : BT) * C, Vp * C}) p.push_back(take(n));
  }
  out.shared.clear();
  out.shared.push_back(s.has_head ? take(chunk_rows * Vp) : nullptr);  // logits (one chunk of rows)
  // dC: d ln (C wide) and d atty (Cl: wider where model.head_dim makes the attention wider).
  for (int64_t n : {Rl * C, BT * std::max(C, Cl), BT * Q, BT * Fc, spec.mlp == MlpKind::swiglu ? BT * F : 0})  // dres, dC, d3C, d4C, dmlp
    out.shared.push_back(take(n));
  out.shared.push_back(local_layers(cfg, s) > 0 ? take(Rl * C) : nullptr);  // proj_out
  if (ao.recompute && local_layers(cfg, s) > 0)
    for (int i = 0; i < kLayerBufs - 1; ++i) out.shared.push_back(take(layer_sizes[i]));
  const int64_t ring = s.cp_size > 1 && local_layers(cfg, s) > 0
                           ? CpuRingBlocks::buffer_floats(B, static_cast<int>(Tl), cfg.n_head / tp,
                                                          static_cast<int>(KV / tp), static_cast<int>(hd))
                           : 0;
  out.shared.push_back(ring ? take(ring) : nullptr);  // the ring attention's blocks in flight (fourth last)
  out.shared.push_back(take(2 * BT * qk_heads * hd));  // q/k norm scratch (third last)
  for (int i = 0; i < 2; ++i) out.shared.push_back(sp ? take(BT * C) : nullptr);  // xg, dfull (last two)
}

}  // namespace

int64_t logits_chunk_rows(int64_t rows, int64_t vocab, int64_t budget) {
  const int64_t max_rows = std::max<int64_t>(64, budget / vocab);
  const int64_t chunks = (rows + max_rows - 1) / max_rows;
  return (rows + chunks - 1) / chunks;
}

int64_t gpt_logits_chunk_rows(const ModelConfig& cfg, int max_micro_batch, const ModelOptions& opts) {
  if (opts.logits_chunk_rows > 0) return opts.logits_chunk_rows;
  constexpr int64_t kLogitsBudget = int64_t{16} << 20;  // floats: 64 MB
  return logits_chunk_rows(int64_t{max_micro_batch} * cfg.seq_len, cfg.padded_vocab(), kLogitsBudget);
}

int64_t gpt_activation_floats(const ModelConfig& cfg, const ModelShard& s, int B, ModelOptions ao) {
  int64_t total = 0;
  ActPtrs p;
  walk_activations(cfg, s, B, gpt_logits_chunk_rows(cfg, B, ao), cfg.padded_vocab(s.tp_size) / s.tp_size, ao,
                   [&](int64_t n) {
                     total += flat_padded(n);
                     return static_cast<float*>(nullptr);
                   },
                   p);
  return total;
}

int64_t gpt_activation_bytes(const ModelConfig& cfg, const ModelShard& s, int B, ModelOptions ao) {
  const int64_t BT = static_cast<int64_t>(B) * local_seq_len(cfg, s);
  const int64_t last_logits = s.has_head ? int64_t{B} * (cfg.padded_vocab(s.tp_size) / s.tp_size) : 0;
  return 4 * (gpt_activation_floats(cfg, s, B, ao) + last_logits) + 4 * 4 * BT * ao.slots;
}

TransformerModel::TransformerModel(const ModelConfig& cfg, const ModelShard& shard, Ops& ops, int max_micro_batch,
                                   ModelOptions opts, Comm* tp, Comm* cp, Comm* ep)
    : cfg_(cfg), spec_(block_spec(cfg)), shard_(shard), geo_(cfg, shard), ops_(ops), max_B_(max_micro_batch),
      opts_(opts), dev_{ops} {
  cfg_.n_kv_head = kv_heads(cfg);  // multi-head attention where the architecture has no GQA, whatever a config says
  const int tp_size = tp ? tp->size() : 1, tp_rank = tp ? tp->rank() : 0;
  check(shard.tp_size == tp_size && shard.tp_rank == tp_rank,
        "TransformerModel: the shard says tp rank {} of {}, the TP group rank {} of {}", shard.tp_rank, shard.tp_size,
        tp_rank, tp_size);
  check((shard.cp_size == 1) == (cp == nullptr) && (!cp || (cp->size() == shard.cp_size && cp->rank() == shard.cp_rank)),
        "TransformerModel: the shard says cp rank {} of {}, the CP group does not match", shard.cp_rank, shard.cp_size);
  check((ep ? ep->size() : 1) == shard.ep_size && (ep ? ep->rank() : 0) == shard.ep_rank,
        "TransformerModel: the shard says ep rank {} of {}, the EP group rank {} of {}", shard.ep_rank, shard.ep_size,
        ep ? ep->rank() : 0, ep ? ep->size() : 1);
  shard_.sequence_parallel = geo_.sp;
  tp_ = TpContext{tp, shard_.sequence_parallel, tp_comm_s_.get()};
  check(max_micro_batch > 0, "TransformerModel: max_micro_batch must be > 0");
  check(opts.slots > 0, "TransformerModel: activation slots must be > 0 (got {})", opts.slots);
  n_local_layers_ = local_layers(cfg, shard);
  block_ = std::make_unique<TransformerBlock<CpuDevice>>(dev_, cfg_, geo_, tp_);
  if (opts.fp8) {  // an operand split over tp or cp is scaled by the whole tensor's amax
    fp8_ = std::make_unique<Fp8Recipe>(tp, cp);
    block_->set_fp8(fp8_.get());
  }
  if (cfg.moe.enabled()) {
    // Under sequence parallel the block hands the MoE all BT rows (gathered): its shared experts
    // then run as plain tensor parallel (all-reduce), not sequence parallel.
    // The MoE blocks' saved state for a full micro-batch (the memory ledger counts it).
    moe_ = std::make_unique<MoeBlocks<CpuDevice>>(dev_, cfg_, TpContext{tp, false, tp_comm_s_.get()}, ep, cp,
                                                  shard.layer_begin, n_local_layers_, opts.slots, opts.recompute,
                                                  int64_t{max_micro_batch} * local_seq_len(cfg, shard));
    block_->set_moe(&moe_->mlp());
  }
  emb_ = std::make_unique<VocabParallelEmbedding<CpuDevice>>(dev_, tp_, cfg.padded_vocab(tp_size), cfg.d_model);
  if (tp_.sp()) ln_grad_ = Buffer<float>(Mem::workspace, 2 * static_cast<size_t>(cfg.d_model));
  block_->set_norm_grad_scratch(ln_grad_.data());
  chunk_rows_ = gpt_logits_chunk_rows(cfg, max_micro_batch, opts);
  head_ = std::make_unique<LmHead<CpuDevice>>(dev_, cfg_, geo_, tp_, chunk_rows_);
  if (tp_.active() && shard.has_head) ce_scratch_ = Buffer<float>(Mem::workspace, 4 * static_cast<size_t>(chunk_rows_));
  params_ = model_param_table(cfg, shard_);
  const size_t n = flat_param_floats(params_);
  n_flat_ = n;
  params_buf_ = Buffer<float>(Mem::params, n);
  ops_.register_weights(params_buf_.data(), n);  // bf16 GEMMs: its rounded copy
  grads_buf_ = Buffer<float>(Mem::grads, n);
  fields_ = field_refs();
  w_ = resolve(params_buf_.data());
  g_ = resolve(grads_buf_.data());

  act_buf_ = Buffer<float>(Mem::activations, gpt_activation_floats(cfg, shard_, max_micro_batch, opts));
  const int64_t BT = static_cast<int64_t>(max_micro_batch) * local_seq_len(cfg, shard_);
  tok_buf_ = Buffer<int32_t>(Mem::activations, 4 * BT * opts.slots);
  last_logits_ = Buffer<float>(Mem::activations, shard.has_head ? max_micro_batch * geo_.vp : 0);
  check(static_cast<int64_t>(act_buf_.bytes() + tok_buf_.bytes() + last_logits_.bytes()) ==
            gpt_activation_bytes(cfg, shard, max_micro_batch, opts),
        "TransformerModel: activation allocations differ from gpt_activation_bytes (the memory ledger's prediction)");
  float* cur = act_buf_.data();
  ActPtrs p;
  walk_activations(cfg, shard_, max_micro_batch, chunk_rows_, geo_.vp, opts,
                   [&](int64_t k) {
                     float* q = cur;
                     cur += flat_padded(k);
                     return q;
                   },
                   p);
  act_.logits = p.shared[0];
  act_.dres = p.shared[1], act_.dC = p.shared[2], act_.d3C = p.shared[3], act_.d4C = p.shared[4];
  act_.dmlp = p.shared[5], act_.proj_out = p.shared[6];
  act_.xg = p.shared[p.shared.size() - 2], act_.dfull = p.shared.back();
  // full and dres_full are never live at once (block_tensors.hpp): one buffer serves both.
  scratch_ = {.proj_out = act_.proj_out, .dres = act_.dres, .dC = act_.dC, .dqkv = act_.d3C, .d4C = act_.d4C,
              .dmlp = act_.dmlp, .gath = act_.xg, .full = act_.dfull, .dres_full = act_.dfull,
              .qk_tmp = p.shared[p.shared.size() - 3]};
  if (cp && n_local_layers_ > 0) {
    ring_blocks_ = std::make_unique<CpuRingBlocks>(ops, cp->rank(), cp->size(), max_micro_batch,
                                                   local_seq_len(cfg, shard_), cfg.seq_len, static_cast<int>(geo_.h_local),
                                                   static_cast<int>(geo_.kv_local), cfg.head_dim(),
                                                   p.shared[p.shared.size() - 4]);
    ring_ = std::make_unique<RingAttention>(*cp, *ring_blocks_, local_seq_len(cfg, shard_), 2 * geo_.kv_local * cfg.head_dim());
    block_->set_ring(ring_.get());
  }
  for (int k = 0; k < opts.slots; ++k) {
    SlotActs sa;
    float** q = p.slot[k].data();
    sa.input = *q++;
    // The walk's order: ln1, its mean, rstd, qkv, att, atty, res2, ln2, its mean, rstd, fch, fch_gelu,
    // qk_in, qk_rstd, res3.
    auto acts = [](float* const* r, float* res3) {
      return LayerAct{.ln1 = r[0], .qkv = r[3], .atty = r[5], .res2 = r[6], .ln2 = r[7], .fch = r[10],
                      .fch_gelu = r[11], .res3 = res3, .ln1_mean = r[1], .ln1_rstd = r[2], .att = r[4],
                      .ln2_mean = r[8], .ln2_rstd = r[9], .qk_in = r[12], .qk_rstd = r[13]};
    };
    for (int l = 0; l < n_local_layers_; ++l) {
      if (opts.recompute) {  // scratch for all but res3
        sa.layers.push_back(acts(&p.shared[kScratch], *q++));
      } else {
        sa.layers.push_back(acts(q, q[kLayerBufs - 1]));
        q += kLayerBufs;
      }
    }
    sa.output = n_local_layers_ > 0 ? sa.layers.back().res3 : sa.input;
    if (shard.has_head) {
      sa.lnf = q[0], sa.lnf_mean = q[1], sa.lnf_rstd = q[2], sa.losses = q[3], sa.lse = q[4], sa.dlnf = q[5];
      sa.dwte_head = q[6];
    }
    sa.tokens = tok_buf_.data() + 4 * BT * k;
    sa.doc_pos = sa.tokens + 2 * BT;
    sa.doc_start = sa.doc_pos + BT;
    slots_.push_back(std::move(sa));
  }
}

// (Here, not in gpt_params.cpp: that file holds no TransformerModel member, so the tools that link
// the parameter table without the model, e.g. the fuzz targets, need no TransformerModel type
// information.)
TransformerModel::~TransformerModel() {
  if (params_buf_.data()) ops_.unregister_weights(params_buf_.data());
}

void TransformerModel::init_weights(uint64_t seed) {
  init_model_params(cfg_, params_, param_data(), seed, shard_.tp_rank);
}

// Table name -> Weights member: the architecture's name for each role (arch.hpp).
std::vector<TransformerModel::FieldRef> TransformerModel::field_refs() const {
  static constexpr float* LayerW::*kBlock[kBlockTensors] = {
      &LayerW::ln1_w,  &LayerW::ln1_b, &LayerW::qkv_w,  &LayerW::qkv_b,  &LayerW::k_w,   &LayerW::v_w,  &LayerW::k_b,
      &LayerW::v_b,    &LayerW::q_norm, &LayerW::k_norm, &LayerW::proj_w, &LayerW::proj_b, &LayerW::ln2_w,
      &LayerW::ln2_b,  &LayerW::fc_w,  &LayerW::fc_b,   &LayerW::up_w,   &LayerW::fcp_w, &LayerW::fcp_b};
  static constexpr float* Weights::*kModel[kModelTensors] = {&Weights::wte, &Weights::wpe, &Weights::lnf_w,
                                                             &Weights::lnf_b, &Weights::lm_head};
  std::vector<FieldRef> out;
  for (const ParamInfo& p : params_) {
    FieldRef f;
    if (p.layer >= 0) {
      f.local_layer = p.layer - shard_.layer_begin;
      const std::string rest = p.name.substr(p.name.find('.', p.name.find('.') + 1) + 1);  // "h.3.ln_1.weight" -> "ln_1.weight"
      for (int r = 0; r < kBlockTensors; ++r)
        if (spec_.block[r] && rest == spec_.block[r]) f.block = kBlock[r];
      moe_field(rest, f);
      check((f.block != nullptr || f.expert_tensor != nullptr) && f.local_layer >= 0 && f.local_layer < n_local_layers_,
            "TransformerModel: no field for {}", p.name);
    } else {
      for (int r = 0; r < kModelTensors; ++r)
        if (spec_.model[r] && p.name == spec_.model[r]) f.global = kModel[r];
      check(f.global != nullptr, "TransformerModel: no field for {}", p.name);
    }
    out.push_back(f);
  }
  return out;
}

// A MoE block's tensor names (after "layers.<l>."; llama_params.cpp) -> its LayerW member.
void TransformerModel::moe_field(const std::string& rest, FieldRef& f) {
  static const std::string m = "block_sparse_moe.";
  if (rest.rfind(m, 0) != 0) return;
  const std::string r = rest.substr(m.size());
  if (r == "gate.weight") f.block = &LayerW::router;
  else if (r == "shared_experts.gate_proj.weight") f.block = &LayerW::sh_fc;
  else if (r == "shared_experts.up_proj.weight") f.block = &LayerW::sh_up;
  else if (r == "shared_experts.down_proj.weight") f.block = &LayerW::sh_fcp;
  else if (r.rfind("experts.", 0) == 0) {  // experts.<e>.w1.weight
    const size_t dot = r.find('.', 8);
    f.expert = std::stoi(r.substr(8, dot - 8));
    const std::string t = r.substr(dot + 1);
    f.expert_tensor = t == "w1.weight" ? &LayerW::w1 : t == "w3.weight" ? &LayerW::w3 : t == "w2.weight" ? &LayerW::w2 : nullptr;
  }
}

TransformerModel::Weights TransformerModel::resolve(float* base) const {
  Weights w;
  w.layers.resize(n_local_layers_);
  for (auto& l : w.layers)
    for (auto* v : {&l.w1, &l.w3, &l.w2}) v->assign(cfg_.moe.n_experts, nullptr);
  for (size_t i = 0; i < params_.size(); ++i) {
    const FieldRef& f = fields_[i];
    float* at = base + params_[i].offset;
    if (f.expert_tensor) (w.layers[f.local_layer].*f.expert_tensor)[f.expert] = at;
    else (f.block ? w.layers[f.local_layer].*f.block : w.*f.global) = at;
  }
  return w;
}

float** TransformerModel::field(Weights& w, size_t i) {
  check(i < fields_.size(), "TransformerModel: parameter index {} out of range", i);
  const FieldRef& f = fields_[i];
  if (f.expert_tensor) return &(w.layers[f.local_layer].*f.expert_tensor)[f.expert];
  return f.block ? &(w.layers[f.local_layer].*f.block) : &(w.*f.global);
}

void TransformerModel::release_param_buffer() {
  if (params_buf_.data()) ops_.unregister_weights(params_buf_.data());
  params_buf_.reset();
  for (size_t i = 0; i < params_.size(); ++i) *field(w_, i) = nullptr;
}

void TransformerModel::release_grad_buffer() {
  grads_buf_.reset();
  for (size_t i = 0; i < params_.size(); ++i) *field(g_, i) = nullptr;
}

void TransformerModel::zero_grad() {
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

// Separate q, k, v (gate, up) tensors run as one GEMM each: the table puts them back to back, and
// whoever rebinds them (ZeRO-3 units, gradient buckets) must keep them so.
void TransformerModel::check_fused(const LayerW& x, const char* what) const {
  const int64_t C = cfg_.d_model, hd = cfg_.head_dim();
  check((!x.k_w || (x.k_w == x.qkv_w + geo_.h_local * hd * C && x.v_w == x.k_w + geo_.kv_local * hd * C)) &&
            (!x.k_b || (x.k_b == x.qkv_b + geo_.h_local * hd && x.v_b == x.k_b + geo_.kv_local * hd)) &&
            (!x.up_w || x.up_w == x.fc_w + geo_.f_local * C),
        "TransformerModel: a block's q/k/v or gate/up {} are not contiguous", what);
  if (!x.router) return;
  const int64_t Fe = cfg_.moe.d_ff, Fs = int64_t{cfg_.moe.n_shared} * Fe / shard_.tp_size;
  for (size_t e = 0; e < x.w1.size(); ++e)
    check(!x.w1[e] || x.w3[e] == x.w1[e] + Fe * C, "TransformerModel: expert {}'s w1/w3 {} are not contiguous", e,
          what);  // null: another ep rank's
  check(!x.sh_up || x.sh_up == x.sh_fc + Fs * C, "TransformerModel: the shared experts' gate/up {} are not contiguous",
        what);
}

void TransformerModel::mlp_activation(float* out, const float* fc, int64_t rows) {
  if (spec_.mlp == MlpKind::swiglu) ops_.swiglu_forward(out, fc, rows, geo_.f_local);
  else ops_.gelu_forward(out, fc, rows * geo_.f_local);
}

void TransformerModel::norm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w,
                                    const float* b, int64_t rows) {
  block_->norm_forward(out, mean, rstd, inp, w, b, rows);
}

BlockTensors<const float> TransformerModel::block_weights(const LayerW& w) {
  return {w.ln1_w, w.ln1_b, w.qkv_w, w.qkv_b, w.proj_w, w.proj_b, w.ln2_w, w.ln2_b, w.fc_w, w.fc_b, w.fcp_w, w.fcp_b,
          {w.router, w.w1.data(), w.w2.data(), w.sh_fc, w.sh_fcp}, w.q_norm, w.k_norm};
}

BlockTensors<float> TransformerModel::block_grads(const LayerW& g) {
  return {g.ln1_w, g.ln1_b, g.qkv_w, g.qkv_b, g.proj_w, g.proj_b, g.ln2_w, g.ln2_b, g.fc_w, g.fc_b, g.fcp_w, g.fcp_b,
          {g.router, g.w1.data(), g.w2.data(), g.sh_fc, g.sh_fcp}, g.q_norm, g.k_norm};
}

double TransformerModel::forward(const int32_t* inputs, const int32_t* targets, int B, int64_t* n_targets, int slot,
                                 const int32_t* positions) {
  check(B > 0 && B <= max_B_, "TransformerModel::forward: micro-batch {} outside [1, {}]", B, max_B_);
  check(slot >= 0 && slot < opts_.slots, "TransformerModel::forward: activation slot {} outside [0, {})", slot,
        opts_.slots);
  const int T = local_seq_len(cfg_, shard_), C = cfg_.d_model;
  const int64_t BT = static_cast<int64_t>(B) * T;
  SlotActs& sa = slots_[slot];
  last_slot_ = slot;
  sa.B = B;
  sa.had_targets = targets != nullptr;
  sa.had_grad = grad_enabled_;
  if (fp8_) fp8_->set_counting(grad_enabled_);  // an evaluation's casts are not the step's
  int32_t* toks = sa.tokens;
  int32_t* tgts = toks + static_cast<int64_t>(max_B_) * T;
  sa.had_docs = positions != nullptr;
  if (positions) geo_.document_rows(positions, BT, sa.doc_pos, sa.doc_start, "TransformerModel::forward");
  block_->set_documents(sa.docs());
  emit(UnitEvent::pre_forward, kEmbeddingUnit);
  PostEvent post_emb{[this] { emit(UnitEvent::post_forward, kEmbeddingUnit); }};
  if (shard_.has_embedding) {
    check(inputs != nullptr, "TransformerModel::forward: the first stage needs input tokens");
    for (int64_t i = 0; i < BT; ++i) {  // context parallel: this rank's positions of each sequence
      const int64_t at = geo_.full_index(i);
      const int32_t tok = inputs[at];
      check(tok >= 0 && tok < cfg_.vocab_size, "TransformerModel::forward: input token {} at {} outside [0, {})", tok,
            at, cfg_.vocab_size);
      toks[i] = tok;
    }
    const WpeRows rows = wpe_rows(sa);
    emb_->forward(sa.input, toks, w_.wte, w_.wpe, B, T, act_.dfull, rows.positions, rows.per_row);
  }
  // Each block's output is added lazily, by the next block's first norm (block l writes res3 of
  // block l - 1); with recompute every block writes its own at once (the only tensor it keeps).
  const int64_t Rl = local_rows(B);
  for (int l = 0; l < n_local_layers_; ++l) {
    emit(UnitEvent::pre_forward, l);
    check_fused(w_.layers[l], "weights");
    const bool lazy = !opts_.recompute && l > 0;
    sa.layers[l].moe = moe_ ? moe_->acts(slot, l) : nullptr;
    block_->forward(block_weights(w_.layers[l]), sa.layers[l], scratch_, l > 0 ? sa.layers[l - 1].res3 : sa.input,
                    lazy ? &sa.layers[l - 1] : nullptr, opts_.recompute ? sa.layers[l].res3 : nullptr, B);
    if (w_.layers[l].router && grad_enabled_) moe_->record(l, sa.layers[l].moe->route);
    emit(UnitEvent::post_forward, l);
  }
  if (n_local_layers_ > 0 && !opts_.recompute) {  // the last block's output: the stage output
    const LayerAct& last = sa.layers.back();
    ops_.residual_forward(last.res3, last.res2, act_.proj_out, static_cast<size_t>(Rl * C));
  }
  const float* res = sa.output;
  if (n_targets) *n_targets = 0;
  if (!shard_.has_head) return 0.0;
  emit(UnitEvent::pre_forward, kHeadUnit);
  PostEvent post_head{[this] { emit(UnitEvent::post_forward, kHeadUnit); }};
  norm_forward(sa.lnf, sa.lnf_mean, sa.lnf_rstd, res, w_.lnf_w, w_.lnf_b, Rl);
  check(targets || (!tp_.sp() && shard_.cp_size == 1),
        "TransformerModel::forward: generation (no targets) is not available with sequence or context parallel");
  if (!targets) {  // generation: logits (this rank's vocab columns) of the last position of every sequence
    for (int b = 0; b < B; ++b)
      ops_.matmul_forward(last_logits_.data() + b * geo_.vp, sa.lnf + (static_cast<int64_t>(b) * T + T - 1) * C,
                          w_.head(), nullptr, 1, C, geo_.vp);
    return 0.0;
  }
  int64_t count = 0;
  for (int64_t i = 0; i < BT; ++i) {
    const int64_t at = geo_.full_index(i);
    const int32_t tgt = targets[at];
    check(tgt < cfg_.vocab_size, "TransformerModel::forward: target {} at {} >= vocab size {}", tgt, at,
          cfg_.vocab_size);
    tgts[i] = tgt;
    count += tgt >= 0;
  }
  // The LM head and loss (lm_head.hpp); with gradients its backward too, unscaled, into the slot's
  // dlnf and dwte_head (backward() applies loss_scale).
  head_->forward(w_.head(), sa.lnf, sa.dlnf, sa.dwte_head, sa.losses, sa.lse, tgts, BT, grad_enabled_,
                 {.logits = act_.logits, .gath = act_.xg, .full = act_.dfull, .ce = ce_scratch_.data()});
  double loss = 0.0;
  for (int64_t i = 0; i < BT; ++i) loss += sa.losses[i];
  if (n_targets) *n_targets = count;
  return loss;
}

void TransformerModel::compute_logits(int64_t row_begin, int64_t rows, float* out) {
  const SlotActs& sa = slots_[last_slot_];
  check(shard_.has_head && sa.B > 0 && row_begin >= 0 && row_begin + rows <= int64_t{sa.B} * cfg_.seq_len,
        "TransformerModel::compute_logits: rows [{}, {}) not in the last forward", row_begin, row_begin + rows);
  check(!tp_.sp() && shard_.cp_size == 1,
        "TransformerModel::compute_logits is not available with sequence or context parallel");
  ops_.matmul_forward(out, sa.lnf + row_begin * cfg_.d_model, w_.head(), nullptr, rows, cfg_.d_model, geo_.vp);
}

void TransformerModel::backward(float loss_scale, int slot) {
  check(slot >= 0 && slot < opts_.slots, "TransformerModel::backward: activation slot {} outside [0, {})", slot,
        opts_.slots);
  SlotActs& sa = slots_[slot];
  const int B = sa.B, T = local_seq_len(cfg_, shard_), C = cfg_.d_model;
  const int64_t Rl = local_rows(B);
  check(B > 0, "TransformerModel::backward without a forward");
  const int32_t* toks = sa.tokens;
  float* dres = act_.dres;
  block_->set_documents(sa.docs());
  if (shard_.has_head) {
    check(sa.had_targets && sa.had_grad, "TransformerModel::backward: the last forward had no targets or no gradients");
    emit(UnitEvent::pre_backward, kHeadUnit);
    std::memset(dres, 0, Rl * C * sizeof(float));
    ops_.scale_inplace(sa.dlnf, loss_scale, Rl * C);
    ops_.axpy(g_.head(), loss_scale, sa.dwte_head, static_cast<size_t>(geo_.vp) * C);
    block_->norm_backward(dres, g_.lnf_w, g_.lnf_b, sa.dlnf, sa.output, w_.lnf_w, sa.lnf_mean, sa.lnf_rstd, Rl);
    emit(UnitEvent::post_backward, kHeadUnit);
  }
  if (moe_) moe_->mlp().set_loss_scale(loss_scale);
  for (int l = n_local_layers_ - 1; l >= 0; --l) {
    emit(UnitEvent::pre_backward, l);  // before reading w: ZeRO-3 gathers the block here
    sa.layers[l].moe = moe_ ? moe_->acts(slot, l) : nullptr;
    check_fused(g_.layers[l], "gradients");  // gradient buckets keep the fused ranges whole (fused_with_previous)
    block_->backward(block_weights(w_.layers[l]), block_grads(g_.layers[l]), sa.layers[l], scratch_,
                     l > 0 ? sa.layers[l - 1].res3 : sa.input, B, opts_.recompute);
    emit(UnitEvent::post_backward, l);
  }
  emit(UnitEvent::pre_backward, kEmbeddingUnit);
  if (shard_.has_embedding) {
    const WpeRows rows = wpe_rows(sa);
    emb_->backward(g_.wte, g_.wpe, dres, act_.dfull, toks, B, T, rows.positions, rows.per_row);
  }
  emit(UnitEvent::post_backward, kEmbeddingUnit);
}

}  // namespace mpitron
