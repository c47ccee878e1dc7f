// The parameter table of either architecture (model_chunk.hpp's ParamInfo, in the flat layout's
// order): what a model chunk allocates and what the memory ledger (src/plan) counts, from one
// function per architecture; and the sizes and FLOPs that follow from a model's shape (the flat
// buffers' floats, the CPU model's activations, the LM head's chunks, FLOPs per token), for the
// ledger, the planner, checkpoints and the reporter, which need them without the model.
//
// LLaMA (Hugging Face names without the "model." prefix; linear weights [out, in]):
//   embed_tokens.weight [Vp, C]                    vocab-parallel (rows), first stage
//   per layer l, "layers.l.":
//     input_layernorm.weight [C]                   RMSNorm, replicated
//     self_attn.q_proj.weight [H hd, C]            column parallel (whole query heads)
//     self_attn.k_proj.weight [KV hd, C]           column parallel (whole kv heads: KV % tp == 0)
//     self_attn.v_proj.weight [KV hd, C]           column parallel
//     self_attn.{q,k,v}_proj.bias [H hd], [KV hd], [KV hd]   column parallel (model.qkv_bias: Qwen2)
//     self_attn.{q,k}_norm.weight [hd]             replicated (model.qk_norm: Qwen3)
//     self_attn.o_proj.weight [C, H hd]            row parallel
//     post_attention_layernorm.weight [C]          replicated
//     mlp.gate_proj.weight [F, C], mlp.up_proj.weight [F, C]   column parallel
//     mlp.down_proj.weight [C, F]                  row parallel
//   norm.weight [C]                                last stage
//   lm_head.weight [Vp, C]                         vocab-parallel, last stage (untied; with
//                                                  tied_embeddings the head reads embed_tokens,
//                                                  which the last stage then holds as GPT-2's wte)
// No other biases. q, k, v (their biases, and gate, up) are adjacent in the flat buffer, so this rank's slices form
// one [(H + 2 KV) hd / tp, C] (and [2F / tp, C]) weight for a single GEMM: the layouts the
// grouped-query attention and SwiGLU kernels read (ops.hpp).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "mpitron/model/config.hpp"
#include "mpitron/model/model_chunk.hpp"

namespace mpitron {

std::vector<ParamInfo> llama_param_table(const ModelConfig& cfg, const ModelShard& shard);
// gpt_param_table (below) or llama_param_table, by cfg.arch.
std::vector<ParamInfo> model_param_table(const ModelConfig& cfg, const ModelShard& shard);
// Parameters a token does not touch: in every MoE block, the n_experts - top_k routed experts
// it is not sent to (active parameters = all parameters - this).
int64_t moe_inactive_params(const ModelConfig& cfg);

// Full-tensor flat index of local element `i` of `p` (row-major), for initialisation and
// checkpoint hyperslabs.
int64_t param_full_index(const ParamInfo& p, int64_t i, int tp_rank);
// The initialisation of the flat buffer `base` laid out as `table` (model_param_table): what
// TransformerModel::init_weights does, for callers without a TransformerModel (the GPU model loads
// it from the host).
void init_model_params(const ModelConfig& cfg, const std::vector<ParamInfo>& table, float* base, uint64_t seed,
                     int tp_rank = 0);

std::vector<ParamInfo> gpt_param_table(const ModelConfig& cfg, const ModelShard& shard);
// A tensor of n elements takes flat_padded(n) floats of a flat buffer (the parameters, their
// gradients, the CPU activation buffer): every tensor starts on a 16-float (64-byte) boundary.
template <class I>
constexpr I flat_padded(I n) {
  return (n + 15) / 16 * 16;
}
// Floats of the flat buffer laid out by `table` (gpt_param_table): the last offset + its padding.
inline size_t flat_param_floats(const std::vector<ParamInfo>& table) {
  return table.empty() ? 0 : table.back().offset + flat_padded(table.back().numel);
}
// Floats of activations (incl. backward scratch) the model plans for micro-batch B.
int64_t gpt_activation_floats(const ModelConfig& cfg, const ModelShard& shard, int max_micro_batch,
                              ModelOptions opts = {});
// Every byte the TransformerModel constructor allocates under Mem::activations: the planned buffer
// above, each slot's token ids (inputs + targets) and document rows (positions + starts), int32,
// and the last-position logits on the head shard.
// The memory ledger (src/plan) predicts the activation category with this.
int64_t gpt_activation_bytes(const ModelConfig& cfg, const ModelShard& shard, int max_micro_batch,
                             ModelOptions opts = {});
// Rows of logits per LM-head chunk for `rows` = B*T rows of a `vocab`-wide head: at most
// `budget` elements of logits at a time (at least 64 rows), rows split evenly over the chunks.
// Bigger chunks make the head GEMMs more efficient (fewer passes over the [vocab, d] gradient).
// Worked example: 8192 rows, vocab 50304, budget 2^24 -> at most 333 rows -> 25 chunks of 328.
int64_t logits_chunk_rows(int64_t rows, int64_t vocab, int64_t budget);
// The CPU TransformerModel's: opts.logits_chunk_rows when set, else logits_chunk_rows over
// padded_vocab() with a budget of 2^24 floats (64 MB).
int64_t gpt_logits_chunk_rows(const ModelConfig& cfg, int max_micro_batch, const ModelOptions& opts = {});

// FLOPs per token, forward + backward: 6*N_nonembedding + 6*V*d + 12*L*T*d (6 FLOPs per weight and token, plus attention), for
// either architecture (LLaMA: N counts the (H + 2 KV) hd x d attention input and the 3 d x F MLP).
double gpt_flops_per_token(const ModelConfig& cfg);
// Its attention term, 12*L*T*d: every query against all T keys, the convention (PaLM, nanoGPT)
// that counts causal attention in full. Document masking does a fraction of it (the trainer's
// step line scales this term by the keys the step's queries actually saw).
double gpt_attention_flops_per_token(const ModelConfig& cfg);

}  // namespace mpitron
