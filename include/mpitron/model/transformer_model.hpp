// The decoder-only transformer on one shard, GPT-2 or LLaMA (ModelConfig::arch; like
// Megatron-core's GPTModel, one class for the family, the block's parts switched by the config):
//   gpt2:  token + learned position embeddings, pre-LN blocks (LayerNorm with biases, causal MHA
//          with fused QKV, GELU MLP of width 4d), final LN, LM head tied to wte.
//   llama: token embeddings, pre-norm blocks (RMSNorm, fused q|k|v projection with rotary
//          position embeddings on q and k, grouped-query attention, SwiGLU MLP with a fused
//          gate|up projection), final RMSNorm, untied LM head (or tied, tie_embeddings); no biases.
// Cross-entropy on top, hand-written backward. All parameters live in ONE flat fp32 buffer
// (Mem::params), gradients in another (Mem::grads), activations in a third planned up front from
// (config, shard, max micro-batch) (Mem::activations); the sizes come from model_param_table /
// gpt_activation_floats, which the memory ledger calls too.
//
// The shard descriptor says which part of the full model this rank holds: pipeline stages
// (layer_begin/layer_end, has_embedding/has_head) and the tensor-parallel shard (tp_rank/tp_size,
// Megatron-style, see parallel_layers.hpp): QKV and fc column-parallel (whole query and kv heads
// split over TP), attention and MLP output projections row-parallel, the token embedding and LM
// head vocab-parallel (embedding, head and cross-entropy; the logits are never gathered). The
// parameter table gives local shapes and where each shard sits in the full tensor. With
// sequence_parallel the activations outside the linears (norms, residual) hold rows/tp of the
// micro-batch's B*T rows.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mpitron/core/memory.hpp"
#include "mpitron/model/arch.hpp"
#include "mpitron/model/config.hpp"
#include "mpitron/model/context_parallel/ring_attention.hpp"
#include "mpitron/model/cpu_device.hpp"
#include "mpitron/model/lm_head.hpp"
#include "mpitron/model/model_chunk.hpp"
#include "mpitron/model/moe/moe_mlp.hpp"
#include "mpitron/model/param_tables.hpp"
#include "mpitron/model/shard_geometry.hpp"
#include "mpitron/model/tensor_parallel/parallel_layers.hpp"
#include "mpitron/model/transformer_block.hpp"
#include "mpitron/ops/ops.hpp"

namespace mpitron {

class TransformerModel final : public ModelChunk {
 public:
  // tp: the tensor-parallel group (its size and rank must match shard.tp_size/tp_rank);
  // nullptr without tensor parallelism.
  // cp: the context-parallel group (shard.cp_size > 1; nullptr without): each rank holds
  // seq_len / cp positions of every sequence (ModelShard), attention runs over the ring
  // (ring_attention.hpp), forward() still takes the full [B, seq_len] token arrays.
  // ep: the expert-parallel group of a MoE model (moe_mlp.hpp; nullptr: every expert here).
  TransformerModel(const ModelConfig& cfg, const ModelShard& shard, Ops& ops, int max_micro_batch,
                   ModelOptions opts = {}, Comm* tp = nullptr, Comm* cp = nullptr, Comm* ep = nullptr);
  ~TransformerModel() override;
  TransformerModel(const TransformerModel&) = delete;
  TransformerModel& operator=(const TransformerModel&) = delete;

  void init_weights(uint64_t seed);
  // ModelChunk (model_chunk.hpp says what each does).
  const ModelConfig& config() const override { return cfg_; }
  const ModelShard& shard() const override { return shard_; }
  const std::vector<ParamInfo>& params() const override { return params_; }
  // nullptr after release_param_buffer(). The caller may write through it: the bf16 GEMMs'
  // rounded weights (Ops::register_weights) are refreshed before their next use.
  float* param_data() override {
    params_changed();
    return params_buf_.data();
  }
  void params_changed() override { ops_.weights_changed(params_buf_.data()); }
  float* grad_data() override { return grads_buf_.data(); }    // nullptr after release_grad_buffer()
  size_t num_params() const override { return n_flat_; }
  void zero_grad() override;
  void set_grad_enabled(bool on) override { grad_enabled_ = on; }
  bool grad_enabled() const override { return grad_enabled_; }
  void set_unit_hook(UnitHook h) override { hook_ = std::move(h); }
  void bind_param(size_t i, float* data) override { *field(w_, i) = data; }
  void bind_grad(size_t i, float* data) override { *field(g_, i) = data; }
  void release_param_buffer() override;
  void release_grad_buffer() override;

  // ModelChunk's forward and backward. targets == nullptr (gradients off): no loss; last_logits()
  // then holds the logits at position T-1. Backward needs a forward with targets on the head shard.
  double forward(const int32_t* inputs, const int32_t* targets, int B, int64_t* n_targets = nullptr,
                 int slot = 0, const int32_t* positions = nullptr) override;
  void backward(float loss_scale, int slot = 0) override;
  // Pipeline stage tensors (ModelChunk): copies of the host buffers below.
  size_t stage_floats(int B) const override {
    return static_cast<size_t>(local_rows(B)) * static_cast<size_t>(cfg_.d_model);
  }
  void set_stage_input(int slot, const float* x, size_t n) override { std::copy(x, x + n, stage_input(slot)); }
  void get_stage_output(int slot, float* x, size_t n) override { std::copy(stage_output(slot), stage_output(slot) + n, x); }
  void set_stage_output_grad(const float* g, size_t n) override { std::copy(g, g + n, stage_output_grad()); }
  void get_stage_input_grad(float* g, size_t n) override { std::copy(stage_input_grad(), stage_input_grad() + n, g); }

  // Logits are this rank's vocab columns: [*, local_vocab()] (= padded_vocab without TP).
  const float* last_logits() const { return last_logits_.data(); }  // [B, local_vocab]
  int64_t local_vocab() const { return geo_.vp; }
  // Logits of rows [row_begin, row_begin + rows) of the last forward's [B*T] positions
  // (head shard only) into out[rows, local_vocab]; for evaluation, generation and tests.
  void compute_logits(int64_t row_begin, int64_t rows, float* out);
  // Generation with a KV cache (one sequence, the whole model on one rank, no TP): runs tokens
  // [n] at positions pos .. pos+n-1, appending their keys and values to the cache (whose first
  // pos rows must hold the earlier positions: decode from pos 0 first), and writes the logits of
  // the last of them to logits[padded_vocab]. pos + n <= seq_len. The same arithmetic as
  // forward() but attention, which reads the cached keys (decode_attention).
  void decode(const int32_t* tokens, int n, int pos, float* logits);
  float* stage_input(int slot = 0) { return slots_[slot].input; }               // [B, T, C]
  const float* stage_output(int slot = 0) const { return slots_[slot].output; } // [B, T, C]
  float* stage_output_grad() { return act_.dres; }                  // [B, T, C]
  const float* stage_input_grad() const { return act_.dres; }       // [B, T, C], after backward
  // Rows of [B*T, C] stage activations this rank holds: B*T, or B*T/tp with sequence parallel.
  int64_t local_rows(int B) const { return sequence_local_rows(tp_, int64_t{B} * local_seq_len(cfg_, shard_)); }
  // Seconds blocked on the context-parallel ring (not hidden behind attention compute).
  double cp_wait_seconds() const override { return ring_ ? ring_->comm_wait_seconds() : -1.0; }
  // Seconds spent in tensor-parallel collectives since construction (the trainer reports it per step).
  double tp_comm_seconds() const override { return *tp_comm_s_; }
  int64_t activation_bytes() const { return static_cast<int64_t>(act_buf_.bytes() + tok_buf_.bytes()); }
  // MoE blocks' routing statistics since the last take (global layer -> stats; empty when dense).
  std::vector<std::pair<int, MoeStats>> take_moe_stats() override {
    return moe_ ? moe_->take_stats() : std::vector<std::pair<int, MoeStats>>{};
  }
  double ep_seconds() const override { return moe_ ? moe_->mlp().ep_seconds() : -1.0; }
  Fp8Stats take_fp8_stats() override { return fp8_ ? fp8_->take_stats() : Fp8Stats{}; }

 private:
  // Pointers into the params (or grads) buffer for one block. LLaMA: ln1/ln2 are the RMSNorms
  // (no biases: every *_b is nullptr), qkv_w is q_proj with k_w, v_w right behind it (one GEMM),
  // fc_w is gate_proj with up_w behind it, proj_w o_proj, fcp_w down_proj.
  struct LayerW {
    float *ln1_w = nullptr, *ln1_b = nullptr, *qkv_w = nullptr, *qkv_b = nullptr, *proj_w = nullptr,
          *proj_b = nullptr, *ln2_w = nullptr, *ln2_b = nullptr, *fc_w = nullptr, *fc_b = nullptr, *fcp_w = nullptr,
          *fcp_b = nullptr, *k_w = nullptr, *v_w = nullptr, *up_w = nullptr, *k_b = nullptr, *v_b = nullptr,
          *q_norm = nullptr, *k_norm = nullptr;
    // A MoE block (moe_mlp.hpp): the router, per expert w1 (with w3 right behind it) and w2, the
    // shared experts' gate (with up behind it) and down.
    float *router = nullptr, *sh_fc = nullptr, *sh_up = nullptr, *sh_fcp = nullptr;
    std::vector<float*> w1, w3, w2;
  };
  struct Weights {
    float *wte = nullptr, *wpe = nullptr, *lnf_w = nullptr, *lnf_b = nullptr, *lm_head = nullptr;
    std::vector<LayerW> layers;
    float* head() const { return lm_head ? lm_head : wte; }  // tied: the LM head reads wte
  };
  // Where parameter i of the table lives in a Weights: a block's member or a global one.
  struct FieldRef {
    int local_layer = -1;
    int expert = -1;  // a routed expert's tensor: w1, w3 or w2 below
    std::vector<float*> LayerW::*expert_tensor = nullptr;
    float* LayerW::*block = nullptr;
    float* Weights::*global = nullptr;
  };
  using LayerAct = BlockActs<float>;
  struct SlotActs {  // one micro-batch in flight (with recompute, layers[l] is scratch but res3)
    float *input = nullptr, *output = nullptr;
    std::vector<LayerAct> layers;
    float *lnf = nullptr, *lnf_mean = nullptr, *lnf_rstd = nullptr, *losses = nullptr, *lse = nullptr,
          *dlnf = nullptr, *dwte_head = nullptr;
    int32_t* tokens = nullptr;  // inputs + targets
    int32_t* doc_pos = nullptr;    // document masking: [max B, Tl] positions in the documents ...
    int32_t* doc_start = nullptr;  // ... and each row's document start (DocumentRows)
    int B = 0;
    bool had_targets = false, had_grad = false, had_docs = false;
    DocumentRows docs() const { return had_docs ? DocumentRows{doc_pos, doc_start} : DocumentRows{}; }
  };
  struct Acts {  // shared by all slots
    float *logits = nullptr;
    float *dres = nullptr, *dC = nullptr, *d3C = nullptr, *d4C = nullptr;
    float* dmlp = nullptr;  // LLaMA: [B*T, F/tp], the gradient at the SwiGLU output
    float *xg = nullptr, *dfull = nullptr;  // sequence parallel: gathered [B*T, C] input / full-rows scratch
    float* proj_out = nullptr;              // [rows, C]: a projection's output before its residual add
  };
  // wpe's row of each token (VocabParallelEmbedding's positions): by global position under cp
  // (one [Tl] array for every sequence), by position in the document with document masking (per
  // row), 0 .. T-1 otherwise (nullptr).
  struct WpeRows {
    const int32_t* positions = nullptr;
    bool per_row = false;
  };
  WpeRows wpe_rows(const SlotActs& sa) const {
    if (sa.had_docs) return {sa.doc_pos, true};
    return {shard_.cp_size > 1 ? geo_.positions() : nullptr, false};
  }
  std::vector<FieldRef> field_refs() const;  // from the table's names
  static void moe_field(const std::string& rest, FieldRef& f);
  Weights resolve(float* base) const;
  float** field(Weights& w, size_t i);  // the pointer parameter i reads from, in w
  void check_fused(const LayerW& x, const char* what) const;  // LLaMA's fused tensors are contiguous
  // LayerNorm (GPT-2) or RMSNorm (LLaMA; mean and b unused) over this rank's rows.
  void norm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b,
                    int64_t rows);
  // The MLP's activation of fc's output [rows, geo_.fc_local] into [rows, geo_.f_local] (GELU or SwiGLU).
  void mlp_activation(float* out, const float* fc, int64_t rows);
  void emit(UnitEvent e, int unit) {
    if (hook_) hook_(e, unit);
  }
  // A block's weights (or gradients) as the shared block code takes them.
  static BlockTensors<const float> block_weights(const LayerW& w);
  static BlockTensors<float> block_grads(const LayerW& g);

  ModelConfig cfg_;
  const BlockSpec& spec_;
  ModelShard shard_;
  ShardGeometry geo_;  // per-rank widths, positions, RoPE
  Ops& ops_;
  int max_B_;
  int n_local_layers_;
  int64_t chunk_rows_;
  std::vector<ParamInfo> params_;
  std::vector<FieldRef> fields_;  // per params_ entry
  Buffer<float> params_buf_, grads_buf_, act_buf_, last_logits_;
  Buffer<int32_t> tok_buf_;  // per slot: inputs, targets, document positions and starts
  Weights w_, g_;
  ModelOptions opts_;
  std::vector<SlotActs> slots_;
  Acts act_;
  int last_slot_ = 0;
  bool grad_enabled_ = true;
  size_t n_flat_ = 0;
  UnitHook hook_;
  // Tensor parallel (inactive without TP: every layer is then its plain self).
  std::unique_ptr<double> tp_comm_s_ = std::make_unique<double>(0.0);
  TpContext tp_;
  CpuDevice dev_;
  std::unique_ptr<TransformerBlock<CpuDevice>> block_;  // the blocks' forward and backward (shared with the GPU)
  BlockScratch<float> scratch_;
  std::unique_ptr<VocabParallelEmbedding<CpuDevice>> emb_;
  std::unique_ptr<LmHead<CpuDevice>> head_;
  Buffer<float> ce_scratch_;  // TP: the vocab-parallel cross-entropy's [4, chunk rows]
  Buffer<float> ln_grad_;  // [2C]: one norm's weight (+bias) gradient before the SP all-reduce
  struct DecodeState;      // transformer_model_decode.cpp: the KV cache and one step's scratch, made on first decode()
  std::unique_ptr<CpuRingBlocks> ring_blocks_;  // context parallel (cp > 1): the blocks, the ring
  std::unique_ptr<RingAttention> ring_;
  std::unique_ptr<Fp8Recipe> fp8_;  // train.precision = "fp8": the blocks' linear layers' casts
  std::shared_ptr<DecodeState> decode_;
  std::unique_ptr<MoeBlocks<CpuDevice>> moe_;  // MoE models: the MoE MLP, its saved state and statistics
};

}  // namespace mpitron
