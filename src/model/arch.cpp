#include "mpitron/model/arch.hpp"

namespace mpitron {

namespace {

// GPT-2 (Hugging Face's names): LayerNorm with biases, learned positions, GELU MLP of width 4d,
// multi-head attention with a fused c_attn.
constexpr BlockSpec kGpt2{
    NormKind::layernorm,
    MlpKind::gelu,
    PositionKind::learned,
    /*biases=*/true,
    /*grouped_kv=*/false,
    /*ff_is_4d=*/true,
    "h.",
    {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", nullptr, nullptr, nullptr, nullptr, nullptr,
     nullptr, "attn.c_proj.weight",
     "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias", nullptr, "mlp.c_proj.weight",
     "mlp.c_proj.bias"},
    {"wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias", "lm_head.weight"},
};

// LLaMA (Hugging Face's names): RMSNorm, rotary positions, SwiGLU, grouped-query attention, no
// biases; q|k|v and gate|up are separate tensors in files, adjacent in the flat layout. Qwen2's
// q/k/v biases and Qwen3's q/k norms are this block's, where the config has them.
constexpr BlockSpec kLlama{
    NormKind::rmsnorm,
    MlpKind::swiglu,
    PositionKind::rope,
    /*biases=*/false,
    /*grouped_kv=*/true,
    /*ff_is_4d=*/false,
    "layers.",
    {"input_layernorm.weight", nullptr, "self_attn.q_proj.weight", "self_attn.q_proj.bias", "self_attn.k_proj.weight",
     "self_attn.v_proj.weight", "self_attn.k_proj.bias", "self_attn.v_proj.bias", "self_attn.q_norm.weight",
     "self_attn.k_norm.weight", "self_attn.o_proj.weight", nullptr, "post_attention_layernorm.weight", nullptr,
     "mlp.gate_proj.weight", nullptr, "mlp.up_proj.weight", "mlp.down_proj.weight", nullptr},
    {"embed_tokens.weight", nullptr, "norm.weight", nullptr, "lm_head.weight"},
};

}  // namespace

const BlockSpec& block_spec(Arch a) { return a == Arch::llama ? kLlama : kGpt2; }

const char* block_tensor_name(const ModelConfig& c, BlockTensor t) {
  const BlockSpec& s = block_spec(c);
  if (c.arch == Arch::llama) {
    const bool bias = t == BlockTensor::qkv_b || t == BlockTensor::k_b || t == BlockTensor::v_b;
    const bool qk_norm = t == BlockTensor::q_norm || t == BlockTensor::k_norm;
    if ((bias && !c.qkv_bias) || (qk_norm && !c.qk_norm)) return nullptr;
  }
  return s.name(t);
}

const char* family_name(const ModelConfig& c) {
  if (c.arch == Arch::gpt2) return "GPT-2";
  if (c.qk_norm && !c.qkv_bias) return c.moe.enabled() ? "Qwen3-MoE" : "Qwen3";
  return c.qk_norm ? "LLaMA with q/k/v biases and q/k norms" : c.qkv_bias ? "Qwen2" : "LLaMA";
}

}  // namespace mpitron
