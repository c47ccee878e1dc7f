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
//   - GGUF (both archs): tensors in mpitron's own [out, in] element order (GGUF lists the
//     dimensions innermost first); llama.cpp's arch "llama" rotates adjacent pairs, mpitron's
//     pairing, so no permutation.
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
};

// Every tensor of the model in the checkpoint's order (the tied head is mpitron's wte /
// embed_tokens; no separate entry).
std::vector<ExternalTensor> external_tensors(const ModelConfig& cfg);

// A tensor [rows, cols] (row-major) rearranged into the HF layout of `t`; `shape` is updated.
std::vector<float> to_hf_layout(const ExternalTensor& t, std::vector<float> v, std::vector<int64_t>* shape);
// The inverse of to_hf_layout (import).
std::vector<float> from_hf_layout(const ExternalTensor& t, std::vector<float> v, std::vector<int64_t>* shape);

}  // namespace mpitron
