// How each mpitron parameter appears in the formats the rest of the world uses: Hugging Face
// (safetensors + config.json) and llama.cpp (GGUF). One table per architecture, read by export
// (and, in the same terms, by import): a new architecture adds a table, not a converter.
//
// mpitron stores every tensor as the model uses it: linear weights [out, in], vocabulary rows
// unpadded (checkpoint.hpp), LLaMA's q and k rows in Meta's interleaved RoPE order (the pairs
// x[2i], x[2i+1] of a head rotate together). The conventions of the other formats:
//   - HF GPT-2 (GPT2LMHeadModel): Conv1D weights are [in, out] (transposed); q|k|v stay fused
//     as attn.c_attn in that order; the tied lm_head is not stored.
//   - HF LLaMA (LlamaForCausalLM): rotate-half RoPE, pairs (x[i], x[i + hd/2]) of a head:
//     q and k rows are permuted per head (hf_row(h, half, i) = mpitron_row(h, i, half)).
//   - HF Mixtral (MixtralForCausalLM): LLaMA's names and RoPE rule, with block_sparse_moe.gate
//     (the router, [experts, hidden]) and block_sparse_moe.experts.E.w1 / w3 / w2 (gate, up,
//     down) in place of mlp.*: mpitron's own names.
//   - HF Qwen3-MoE (Qwen3MoeForCausalLM): Qwen3's attention, the router mlp.gate and the experts
//     mlp.experts.E.gate_proj / up_proj / down_proj (mpitron's block_sparse_moe.gate, w1 / w3 / w2).
//   - HF Qwen2 / Qwen3 (Qwen2ForCausalLM, Qwen3ForCausalLM): LLaMA's names and RoPE rule, with
//     self_attn.{q,k,v}_proj.bias (Qwen2) or self_attn.{q,k}_norm.weight [head_dim] (Qwen3); the
//     q and k biases and the norm weights are permuted per head as the q and k rows are.
//   - GGUF (both archs): tensors in mpitron's own [out, in] element order (GGUF lists the
//     dimensions innermost first); llama.cpp's arch "llama" rotates adjacent pairs, mpitron's
//     pairing, so no permutation; its "qwen2" and "qwen3" rotate half, as HF does: their q and k
//     rows are permuted as for HF (not transposed). MoE blocks: ffn_gate_inp (router) and the experts stacked into
//     ffn_gate_exps / ffn_up_exps [experts][d_ff][hidden] and ffn_down_exps [experts][hidden][d_ff].
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "mpitron/model/config.hpp"

namespace mpitron {

struct ExternalTensor {
  std::string name;       // mpitron's (the checkpoint's "model/<name>")
  std::string hf_name;    // Hugging Face state-dict key
  std::string gguf_name;  // llama.cpp tensor name
  bool hf_transpose = false;  // 2-D [a, b] -> [b, a] for HF (GPT-2's Conv1D)
  int rope_heads = 0;         // > 0: q/k rows permuted to rotate-half order for HF, in this many heads
  int gguf_expert = -1;       // >= 0: slice gguf_expert of the 3-D GGUF tensor gguf_name (llama.cpp
                              // stacks a block's experts: ffn_{gate,up,down}_exps), in expert order
};

// Every tensor of the model in the checkpoint's order (the tied head is mpitron's wte /
// embed_tokens; no separate entry).
std::vector<ExternalTensor> external_tensors(const ModelConfig& cfg);

// Refuses (a clear error naming the [model.moe] keys) a mixture-of-experts model that `format`
// cannot express: HF's MixtralForCausalLM / Qwen3MoeForCausalLM and llama.cpp's "llama" /
// "qwen3moe" archs are Mixtral's block (every layer MoE, no shared experts, top-k weights
// renormalised; Qwen3-MoE may also keep the softmax weights, norm_topk_prob = false). Warns, unless quiet, that both
// route dropless when the model was trained with a capacity factor. Dense models pass.
// renormalised_only: the format always renormalises the top-k weights (Mixtral, llama.cpp), so
// topk_softmax without norm_topk_prob is refused; HF's Qwen3-MoE expresses both.
void check_moe_exportable(const ModelConfig& cfg, const std::string& ckpt, const std::string& format, bool quiet,
                          bool renormalised_only = true);

// Refuses a LLaMA-family model no exported architecture expresses: q/k/v biases (Qwen2) with q/k
// norms (Qwen3), or either with a mixture of experts.
void check_family_exportable(const ModelConfig& cfg, const std::string& ckpt, const std::string& format);

// A tensor [rows, cols] (row-major) rearranged into the HF layout of `t`; `shape` is updated.
std::vector<float> to_hf_layout(const ExternalTensor& t, std::vector<float> v, std::vector<int64_t>* shape);
// q and k rows (and their biases, norms) in rotate-half order, nothing transposed: the GGUF layout
// of llama.cpp's qwen2 and qwen3, which rotate as Hugging Face does.
std::vector<float> to_rotate_half_layout(const ExternalTensor& t, std::vector<float> v, const std::vector<int64_t>& shape);
// The inverse of to_hf_layout (import).
std::vector<float> from_hf_layout(const ExternalTensor& t, std::vector<float> v, std::vector<int64_t>* shape);
// RoPE's row orders within a head of `head_rows` rows: mpitron interleaves each rotated pair (rows
// 2i, 2i + 1), Hugging Face rotates halves (rows i, i + head_rows/2). The HF row of mpitron's `row`.
inline int64_t hf_rope_row(int64_t row, int64_t head_rows) {
  const int64_t j = row % head_rows;
  return row - j + (j % 2) * (head_rows / 2) + j / 2;
}

}  // namespace mpitron
