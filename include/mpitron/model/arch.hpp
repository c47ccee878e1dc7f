// What a transformer block is made of, per architecture: the one place where GPT-2 and LLaMA
// differ. Both models (the CPU TransformerModel, the GPU TransformerModelCuda), their activation
// planners and the decode path read these fields and never ask which architecture they run; a new
// architecture made of the same parts is one more BlockSpec here plus its parameter table
// (param_tables.hpp), with no branch added to the models. A variant of a block that only adds
// tensors is an option of the config instead (Qwen2's q/k/v biases, Qwen3's q/k norm:
// ModelConfig::qkv_bias / qk_norm, named by block_tensor_name), so every path that runs LLaMA runs
// it.
//
// The block, for every architecture (pre-norm):
//   x = x + proj(attention(positions(qkv(norm1(x)))))     qkv fused: [q | k | v] in one GEMM
//   x = x + fcp(activation(fc(norm2(x))))                 swiglu: fc fused [gate | up]
// around a token embedding (+ learned positions), a final norm and the LM head.
#pragma once
#include <array>
#include <cstdint>

#include "mpitron/model/config.hpp"

namespace mpitron {

enum class NormKind : uint8_t { layernorm, rmsnorm };  // LayerNorm (mean, rstd, weight + bias) / RMSNorm (rstd, weight)
enum class MlpKind : uint8_t { gelu, swiglu };         // fc -> GELU -> fcp / fc = [gate | up] -> silu(gate) * up -> fcp
enum class PositionKind : uint8_t { learned, rope };   // wpe rows added to the embedding / rotary on q and k

// The parameter tensors of a block and of the model around it, by role. A role an architecture
// lacks has no name (nullptr). k_w, v_w and up_w sit right behind qkv_w and fc_w in the flat
// layout (fused_with_previous), k_b and v_b behind qkv_b: the models run q|k|v and gate|up as
// one GEMM each. qkv_b, k_b, v_b (LLaMA: Qwen2's q/k/v biases) and q_norm, k_norm (Qwen3's
// per-head RMSNorm weights) are optional in the LLaMA family: block_tensor_name says whether a
// model has them.
enum class BlockTensor : uint8_t {
  ln1_w, ln1_b, qkv_w, qkv_b, k_w, v_w, k_b, v_b, q_norm, k_norm, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, up_w, fcp_w, fcp_b
};
inline constexpr int kBlockTensors = 19;
enum class ModelTensor : uint8_t { tok_emb, pos_emb, lnf_w, lnf_b, lm_head };
inline constexpr int kModelTensors = 5;

struct BlockSpec {
  NormKind norm;
  MlpKind mlp;
  PositionKind positions;
  bool biases;      // the linear layers and norms have biases
  bool grouped_kv;  // n_kv_head may be below n_head (otherwise it is n_head)
  bool ff_is_4d;    // the MLP width must be 4 d_model
  const char* layer_prefix;                         // "h." / "layers." (then the layer index and ".")
  std::array<const char*, kBlockTensors> block;     // names after "<prefix><l>."
  std::array<const char*, kModelTensors> model;     // whole names

  int fc_factor() const { return mlp == MlpKind::swiglu ? 2 : 1; }  // fc's output: F, or [gate | up] = 2F
  bool norm_has_mean() const { return norm == NormKind::layernorm; }
  int norm_params() const { return biases ? 2 : 1; }  // C-float tensors per norm: weight (+ bias)
  bool rope() const { return positions == PositionKind::rope; }
  const char* name(BlockTensor t) const { return block[static_cast<int>(t)]; }
  const char* name(ModelTensor t) const { return model[static_cast<int>(t)]; }
};

const BlockSpec& block_spec(Arch a);
inline const BlockSpec& block_spec(const ModelConfig& c) { return block_spec(c.arch); }
// The key/value heads the model runs with: n_kv_head where the architecture groups them, else n_head.
inline int kv_heads(const ModelConfig& c) { return block_spec(c).grouped_kv ? c.n_kv_head : c.n_head; }
// The name (after "<prefix><l>.") of a block tensor this model has, nullptr where it has none: the
// architecture's, less the LLaMA family's optional q/k/v biases (cfg.qkv_bias) and q/k norms
// (cfg.qk_norm).
const char* block_tensor_name(const ModelConfig& c, BlockTensor t);
// The model family, for messages: "GPT-2", "LLaMA", "Qwen2" (q/k/v biases), "Qwen3" (q/k norms),
// "Qwen3-MoE" (q/k norms and a mixture of experts).
const char* family_name(const ModelConfig& c);

}  // namespace mpitron
