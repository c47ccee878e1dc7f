// Model architecture: presets and the resolved config every module uses. The sizes of every
// tensor are computed from this in one place (model/sizes), shared by the allocator and the
// memory ledger.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace mpitron {

struct ModelSection;

enum class Arch : uint8_t { gpt2, llama };

// Mixture-of-experts MLPs ([model.moe]; model/moe/moe_mlp.hpp). n_experts 0: every block is dense.
enum class MoeRouter : uint8_t { softmax_topk, topk_softmax };
struct MoeConfig {
  int n_experts = 0;
  int top_k = 2;
  int d_ff = 0;  // each expert's SwiGLU width
  int n_shared = 0;  // always-on experts: one SwiGLU of width n_shared * d_ff
  int layer_freq = 1;
  MoeRouter router = MoeRouter::softmax_topk;
  bool norm_topk_prob = false;
  double aux_loss_coef = 0.01, z_loss_coef = 0.0, capacity_factor = 0.0;
  bool enabled() const { return n_experts > 0; }
  bool is_moe_layer(int l) const { return enabled() && l % layer_freq == 0; }
};

// RoPE scaling (LLaMA family; model/rope_scaling.hpp turns it into the frequencies): none; LLaMA
// 3.1's "llama3" (wavelengths above original_max_pos / low_freq_factor slowed by factor, those
// below original_max_pos / high_freq_factor kept, a smooth ramp between); or YaRN (each pair's
// frequency a ramp between itself and itself / factor over the pairs beta_fast..beta_slow
// rotations cover in original_max_pos, cos and sin times an attention factor). The fields a type
// does not use keep these defaults, so two configs are equal exactly when they rotate alike.
enum class RopeScalingType : uint8_t { none, llama3, yarn };
struct RopeScaling {
  RopeScalingType type = RopeScalingType::none;
  double factor = 0.0;                                   // context extension (LLaMA 3.1: 8, 3.2: 32)
  int original_max_pos = 0;                              // the pretraining context (LLaMA 3.1: 8192)
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
  double beta_fast = 32.0, beta_slow = 1.0;              // yarn
  double attention_factor = 0.0;                         // yarn; 0: transformers' 0.1 ln(factor) + 1
  bool enabled() const { return type != RopeScalingType::none; }
  bool operator==(const RopeScaling&) const = default;
};

struct ModelConfig {
  std::string name = "custom";
  Arch arch = Arch::gpt2;
  int n_layer = 0;
  int n_head = 0;
  int n_kv_head = 0;  // == n_head for GPT-2 (no GQA)
  int d_model = 0;
  int d_ff = 0;  // 4*d_model for GPT-2
  int vocab_size = 0;  // real vocabulary; the model pads it (padded_vocab)
  int seq_len = 0;
  bool tied_embeddings = true;
  // LLaMA only (GPT-2: LayerNorm eps 1e-5, learned positions).
  float norm_eps = 1e-5f;       // RMSNorm epsilon
  double rope_theta = 10000.0;  // RoPE base: 10000 (LLaMA 2), 500000 (LLaMA 3)
  RopeScaling rope_scaling;
  // Qwen's additions to the LLaMA block: biases on q, k and v (Qwen2, Qwen2.5); an RMSNorm over
  // each head's q and k before RoPE, one weight [head_dim] for the query heads, one for the key
  // heads (Qwen3).
  bool qkv_bias = false;
  bool qk_norm = false;
  // LLaMA's hidden-size rule, kept to re-derive d_ff when d_model changes: 4d -> 2/3 of it ->
  // times ffn_multiplier -> rounded up to a multiple of multiple_of (llama_ffn_dim).
  double ffn_multiplier = 1.0;
  int multiple_of = 1;
  MoeConfig moe;

  // LLaMA family: the head size where it is not d_model / n_head (Qwen3-0.6B: 128 with d_model 1024
  // and 16 heads; the attention is then n_head x head_size wide); 0: d_model / n_head.
  int head_size = 0;

  int head_dim() const { return head_size > 0 ? head_size : d_model / n_head; }
  int64_t attention_width() const { return int64_t{n_head} * head_dim(); }  // q (and o_proj's input)
  // Vocabulary padded to a multiple of 64*tp, so every TP shard is a multiple of 64.
  int padded_vocab(int tp = 1) const {
    int m = 64 * tp;
    return (vocab_size + m - 1) / m * m;
  }
};

// RoPE pairing convention of the LLaMA model (ops.hpp: Ops::rope), written to checkpoints so an
// exporter can map it: "interleaved" = Meta's reference, elements (2i, 2i+1) of a head rotate
// together (Hugging Face's rotate-half layout pairs (i, i + hd/2): permute q/k rows to convert).
inline constexpr const char* kRopePairing = "interleaved";

// LLaMA's MLP width: h = int(2 * 4d / 3), h = int(ffn_multiplier * h) when != 1, rounded up to a
// multiple of multiple_of (Meta's FeedForward: 4096 -> 11008 with 256; LLaMA 3 8B 1.3, 1024 -> 14336).
int llama_ffn_dim(int d_model, double ffn_multiplier, int multiple_of);

// Named presets: tiny, gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1.5b, llama-tiny, llama-small and
// the real shapes llama2-7b/13b/70b, llama3-8b/70b/405b, llama3.1-8b/70b, llama3.2-1b/3b,
// qwen3-0.6b/1.7b/8b, qwen3-30b-a3b, mixtral-8x7b, ... Throws UsageError listing them.
ModelConfig model_preset(const std::string& name);
std::vector<std::string> model_preset_names();

// Preset overlaid with the non-zero fields of the job's [model] section; validated
// (d_model divisible by n_head, all positive). Throws UsageError naming the bad key.
ModelConfig resolve_model_config(const ModelSection& s);

}  // namespace mpitron
