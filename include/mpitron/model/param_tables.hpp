// The parameter table of either architecture (model_chunk.hpp's ParamInfo, in the flat layout's
// order): what a model chunk allocates and what the memory ledger (src/plan) counts, from one
// function per architecture.
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
#include <vector>

#include "mpitron/model/config.hpp"
#include "mpitron/model/model_chunk.hpp"

namespace mpitron {

std::vector<ParamInfo> llama_param_table(const ModelConfig& cfg, const ModelShard& shard);
// gpt_param_table (gpt.hpp) or llama_param_table, by cfg.arch.
std::vector<ParamInfo> model_param_table(const ModelConfig& cfg, const ModelShard& shard);
// Parameters a token does not touch: in every MoE block, the n_experts - top_k routed experts
// it is not sent to (active parameters = all parameters - this).
int64_t moe_inactive_params(const ModelConfig& cfg);

}  // namespace mpitron
