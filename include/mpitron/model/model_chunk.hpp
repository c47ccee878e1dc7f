// What the backend-neutral training code (src/parallel: DataParallel with its gradient buckets
// and ZeRO 1-3, AdamW, the tied embedding, StageModel) needs of one model chunk: its parameter
// table and fp32 flat parameter / gradient buffers, the unit events of its forward and backward,
// and the rebinding ZeRO-2/3 do. The CPU TransformerModel (transformer_model.hpp) and the GPU
// TransformerModelCuda (cuda/transformer_model_cuda.hpp) implement it, so data parallel, ZeRO and
// the optimizer are written once for both backends. It sits in model/ (not parallel/, which uses
// it) so that models do not depend on parallel/.
//
// A chunk is one rank's part of the model: a pipeline stage (or an interleaved virtual stage)
// of a tensor-parallel slice (ModelShard). Its buffers are of the device its FlatOps works on.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "mpitron/core/dtype.hpp"
#include "mpitron/model/config.hpp"
#include "mpitron/model/fp8_recipe.hpp"
#include "mpitron/model/moe/moe_routing.hpp"

namespace mpitron {

struct ModelShard {
  int tp_rank = 0, tp_size = 1;
  int layer_begin = 0, layer_end = -1;  // -1: n_layer
  bool has_embedding = true, has_head = true;
  bool sequence_parallel = false;  // parallel.sp (only with tp_size > 1); last, so positional inits keep working
  // Context parallel (parallel.cp): every sequence split over cp_size ranks in 2 cp_size chunks,
  // this rank holding chunks cp_rank and 2 cp_size - 1 - cp_rank (causal load balance).
  int cp_rank = 0, cp_size = 1;
  // Expert parallel (parallel.ep): this rank holds routed experts [ep_rank E/ep, (ep_rank+1) E/ep)
  // of each MoE block, laid out after every other parameter of the chunk (param_tables.hpp).
  int ep_rank = 0, ep_size = 1;
};

// Positions (tokens) of a sequence a shard holds: seq_len / cp_size.
inline int local_seq_len(const ModelConfig& cfg, const ModelShard& s) { return cfg.seq_len / s.cp_size; }
// The global position of local position t of cp rank `r` of `cp` (seq_len T): chunk r, then
// chunk 2 cp - 1 - r, each T / (2 cp) long.
inline int cp_global_position(int t, int r, int cp, int T) {
  const int chunk = T / (2 * cp);
  return t < chunk ? r * chunk + t : (2 * cp - 1 - r) * chunk + (t - chunk);
}

// The number of blocks the shard holds.
inline int local_layers(const ModelConfig& cfg, const ModelShard& s) {
  return (s.layer_end < 0 ? cfg.n_layer : s.layer_end) - s.layer_begin;
}

// One parameter tensor of this shard. Names follow Hugging Face GPT-2 ("wte.weight",
// "h.3.attn.c_attn.weight", ...) or LLaMA ("embed_tokens.weight", "layers.3.self_attn.q_proj.weight",
// ..., param_tables.hpp); linear weights are [out, in] as torch.nn.Linear.
// Locating the shard in the full tensor: along split_dim the full extent is viewed as
// split_parts equal parts (3 for the fused QKV weight/bias: q, k, v), each split evenly over
// tp; this rank's slice of part p starts at p*full/split_parts + local_offset_in_full and has
// local/split_parts entries. split_dim -1: replicated (local == full).
struct ParamInfo {
  std::string name;
  std::vector<int64_t> full_shape;
  std::vector<int64_t> local_shape;
  int split_dim = -1;
  int split_parts = 1;
  int64_t local_offset_in_full = 0;
  size_t offset = 0;  // into the flat buffer (floats)
  size_t numel = 0;
  bool decay = false;  // weight decay: 2-D weights only
  int layer = -1;      // global layer index, -1 for embeddings / final LN
  bool expert = false;  // a routed expert's tensor: split over ep, synchronised over expert_dp
};

// The parameters one DataParallel (and one checkpoint shard) covers. Expert parallel (ep > 1)
// lays a chunk's routed experts out after its other parameters (param_tables.hpp), and the two
// contiguous ranges are synchronised over different groups: `dense` over dp x cp, `experts` over
// expert_dp. Without ep, `all`: one range, the whole buffer.
enum class ParamSet { all, dense, experts };
inline bool in_param_set(const ParamInfo& p, ParamSet s) {
  return s == ParamSet::all || p.expert == (s == ParamSet::experts);
}

// How a model chunk keeps its activations, the same options on every device.
struct ModelOptions {
  // Micro-batches whose activations are kept at once: a pipeline schedule keeps several in
  // flight on a stage (PipelineSchedule::max_in_flight), each in its own slot; forward and
  // backward name their slot.
  int slots = 1;
  // train.recompute = "full": keep only each block's input (and the stage output); backward
  // recomputes one block's forward at a time into one shared scratch set first (+1 forward).
  bool recompute = false;
  // Rows of logits the LM head computes at once (bounds its [rows, vocab / tp] buffer); 0: the
  // device's default budget (CPU 2^24 fp32 elements, GPU 2^29 bf16 elements).
  int64_t logits_chunk_rows = 0;
  // train.precision = "fp8": the blocks' linear layers in FP8 (fp8_recipe.hpp; CPU models).
  bool fp8 = false;
};

class ModelChunk {
 public:
  virtual ~ModelChunk() = default;

  virtual const ModelConfig& config() const = 0;
  virtual const ModelShard& shard() const = 0;
  virtual const std::vector<ParamInfo>& params() const = 0;
  const ParamInfo* find_param(const std::string& name) const;  // nullptr when not on this shard
  const ParamInfo* find_token_embedding() const;               // wte / embed_tokens, or nullptr
  virtual size_t num_params() const = 0;  // floats of the flat layout (with padding)

  // The fp32 flat buffers (the GPU's master weights): nullptr once released.
  virtual float* param_data() = 0;
  virtual float* grad_data() = 0;
  virtual void zero_grad() = 0;
  // After param_data() was written by someone else (the optimizer, a broadcast, a load): a model
  // that computes from a low-precision copy (the GPU's bf16 weights, the CPU's bf16 GEMM inputs
  // under train.precision = bf16) refreshes it here.
  virtual void params_changed() {}
  // That low-precision copy where it is a bf16 buffer laid out as param_data() (the GPU's), so the
  // optimizer can write it as it updates the master weights instead of params_changed() converting
  // all of them again; nullptr: none such (the CPU model, ZeRO-3's released buffers).
  virtual bf16* param_bf16_data() { return nullptr; }
  // One micro-batch [B, T] of token ids (T = cfg.seq_len, 1 <= B <= the model's max micro-batch;
  // targets may hold -1 = ignore). Returns the SUM of per-token losses over counted targets and
  // sets *n_targets (may be nullptr). `slot` (< ModelOptions::slots) keeps this micro-batch's
  // activations until its backward. A pipeline stage without the head returns 0 and leaves its
  // output for get_stage_output; one without the embedding starts from set_stage_input.
  // positions ([B, T] like the tokens; nullptr: none): document masking (Batch::positions), every
  // stage's attention sees only the keys of each token's own document.
  virtual double forward(const int32_t* inputs, const int32_t* targets, int B, int64_t* n_targets = nullptr,
                         int slot = 0, const int32_t* positions = nullptr) = 0;
  // Accumulates d(loss_sum * loss_scale) of the slot's forward into the gradients. Without the
  // head it starts from set_stage_output_grad; without the embedding it leaves this stage's input
  // gradient for get_stage_input_grad.
  virtual void backward(float loss_scale, int slot = 0) = 0;
  // Pipeline stage tensors (the executor's messages, pipeline.hpp): fp32 host arrays of
  // stage_floats(B) = [rows, d_model] elements, rows = B * seq_len / cp, this rank's share of them
  // under sequence parallel.
  virtual size_t stage_floats(int B) const = 0;
  virtual void set_stage_input(int slot, const float* x, size_t n) = 0;  // before forward(slot), not on the first stage
  virtual void get_stage_output(int slot, float* x, size_t n) = 0;       // after forward(slot), not on the last stage
  virtual void set_stage_output_grad(const float* g, size_t n) = 0;      // before backward, not on the last stage
  virtual void get_stage_input_grad(float* g, size_t n) = 0;             // after backward, not on the first stage
  // Off: forward computes the loss only (evaluation); backward is then an error. Default on.
  virtual void set_grad_enabled(bool on) = 0;
  virtual bool grad_enabled() const = 0;

  // Hooks for src/parallel (DDP gradient buckets, ZeRO). A unit is a group of parameters handled
  // together: block l (local index 0..), kEmbeddingUnit (the token embedding, GPT-2's wpe) or
  // kHeadUnit (the final norm, an untied lm_head; param_unit below). Events:
  //   forward:  pre(emb) [embedding] {pre(l) [block l] post(l)} ascending, pre(head) [head] post(head), post(emb)
  //   backward: pre(head) [head] post(head), {pre(l) [block l] post(l)} descending, pre(emb) [embedding] post(emb)
  // The tied wte belongs to the embedding unit, but the head writes its gradient first: it is
  // final only at post_backward(emb), the last event of backward. On the GPU an event comes when
  // the unit's kernels are ENQUEUED; a collective started there is ordered after them by the
  // communicator (Comm::set_compute_stream).
  enum class UnitEvent { pre_forward, post_forward, pre_backward, post_backward };
  static constexpr int kEmbeddingUnit = -1, kHeadUnit = -2;
  using UnitHook = std::function<void(UnitEvent, int unit)>;
  virtual void set_unit_hook(UnitHook h) = 0;
  // Where parameter i (index into params()) is read from / its gradient accumulates into;
  // default param_data() / grad_data() + params()[i].offset. ZeRO-3 points a unit's parameters
  // into a gathered working buffer; ZeRO-2 points gradients into a bucket buffer.
  virtual void bind_param(size_t i, float* data) = 0;
  virtual void bind_grad(size_t i, float* data) = 0;
  // Free the flat parameter / gradient buffer (the owner of a shard binds every unit before the
  // model uses it). Tracked memory drops by 4 * num_params() bytes each.
  virtual void release_param_buffer() = 0;
  virtual void release_grad_buffer() = 0;

  // Seconds spent in tensor-parallel collectives since construction, where the model times them
  // (the CPU TransformerModel); < 0: not measured (the GPU's run on the stream, untimed on the
  // host).
  virtual double tp_comm_seconds() const { return -1.0; }
  // Seconds blocked on the context-parallel ring since construction (its transfers not hidden
  // behind attention compute); < 0: not measured or no context parallel.
  virtual double cp_wait_seconds() const { return -1.0; }
  // MoE blocks: routing statistics since the last take (global layer, stats); empty when dense.
  virtual std::vector<std::pair<int, MoeStats>> take_moe_stats() { return {}; }
  // train.precision = "fp8": the casts' statistics since the last take (all zero without FP8).
  virtual Fp8Stats take_fp8_stats() { return {}; }
  // Seconds in the expert-parallel token exchanges since construction; < 0: none.
  virtual double ep_seconds() const { return -1.0; }
};

// The token embedding (GPT-2 wte, LLaMA embed_tokens): the tensor a tied LM head reads, which
// the last pipeline stage then holds a copy of.
inline bool is_token_embedding(const std::string& name) {
  return name == "wte.weight" || name == "embed_tokens.weight";
}
// Tensors with one row per (padded) vocabulary entry: the token embedding and the untied LM head.
// Checkpoints store their real rows only; the padding rows are zero.
inline bool is_vocab_rows(const std::string& name) { return is_token_embedding(name) || name == "lm_head.weight"; }

// Tensors the model reads as one with the tensor before them in the flat layout (one GEMM over
// LLaMA's q|k|v and gate|up weights): whoever binds parameters into other memory (gradient
// buckets) must keep such a tensor adjacent to its predecessor.
inline bool fused_with_previous(const std::string& name) {
  return name.ends_with("self_attn.k_proj.weight") || name.ends_with("self_attn.v_proj.weight") ||
         name.ends_with("mlp.up_proj.weight") || name.ends_with(".w3.weight") ||
         name.ends_with("shared_experts.up_proj.weight");
}

// The unit (ModelChunk::kEmbeddingUnit, kHeadUnit or local block index) that owns parameter p.
inline int param_unit(const ParamInfo& p, const ModelShard& shard) {
  if (p.layer >= 0) return p.layer - shard.layer_begin;
  if (p.name.rfind("ln_f.", 0) == 0 || p.name == "norm.weight" || p.name == "lm_head.weight")
    return ModelChunk::kHeadUnit;
  return ModelChunk::kEmbeddingUnit;  // wte / embed_tokens, wpe
}

}  // namespace mpitron
