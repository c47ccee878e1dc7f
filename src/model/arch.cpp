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
    {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", nullptr, nullptr, "attn.c_proj.weight",
     "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias", nullptr, "mlp.c_proj.weight",
     "mlp.c_proj.bias"},
    {"wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias", "lm_head.weight"},
};

// LLaMA (Hugging Face's names): RMSNorm, rotary positions, SwiGLU, grouped-query attention, no
// biases; q|k|v and gate|up are separate tensors in files, adjacent in the flat layout.
constexpr BlockSpec kLlama{
    NormKind::rmsnorm,
    MlpKind::swiglu,
    PositionKind::rope,
    /*biases=*/false,
    /*grouped_kv=*/true,
    /*ff_is_4d=*/false,
    "layers.",
    {"input_layernorm.weight", nullptr, "self_attn.q_proj.weight", nullptr, "self_attn.k_proj.weight",
     "self_attn.v_proj.weight", "self_attn.o_proj.weight", nullptr, "post_attention_layernorm.weight", nullptr,
     "mlp.gate_proj.weight", nullptr, "mlp.up_proj.weight", "mlp.down_proj.weight", nullptr},
    {"embed_tokens.weight", nullptr, "norm.weight", nullptr, "lm_head.weight"},
};

}  // namespace

const BlockSpec& block_spec(Arch a) { return a == Arch::llama ? kLlama : kGpt2; }

}  // namespace mpitron
