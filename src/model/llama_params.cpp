// The LLaMA parameter table (param_tables.hpp).
#include "mpitron/core/error.hpp"
#include "mpitron/model/param_tables.hpp"
#include "mpitron/model/transformer_model.hpp"
#include "param_table_builder.hpp"

namespace mpitron {
namespace {

// A MoE block's MLP (Hugging Face Mixtral names): the router, then per expert w1 (gate), w3 (up,
// right behind w1: one GEMM) and w2 (down), each expert whole (replicated over tp), then the
// shared experts, column/row parallel as a dense MLP. Expert parallel (ep > 1): only this rank's
// experts, and they go to `experts` (laid out after the chunk's other parameters), so the flat
// buffer is one dense range synchronised over dp x cp and one expert range synchronised over
// expert_dp (data_parallel.hpp); with ep = 1 they stay in their block.
struct MoeExpertTensor {
  std::string name;
  std::vector<int64_t> shape;
  int layer;
};

void add_moe_params(ParamTableBuilder& t, const ModelConfig& cfg, const std::string& p, int l,
                    std::vector<MoeExpertTensor>& experts) {
  const int64_t C = cfg.d_model, E = cfg.moe.n_experts, Fe = cfg.moe.d_ff, Fs = int64_t{cfg.moe.n_shared} * Fe;
  const int ep = t.shard.ep_size;
  usage_check(ep >= 1 && E % ep == 0, "model.moe.n_experts = {} must be divisible by parallel.ep = {}", E, ep);
  const std::string m = p + "block_sparse_moe.";
  t.add(m + "gate.weight", {E, C}, -1, 1, l);
  const int64_t el = E / ep, e0 = int64_t{t.shard.ep_rank} * el;
  for (int64_t e = e0; e < e0 + el; ++e) {
    const std::string x = m + "experts." + std::to_string(e) + ".";
    for (auto [n, shape] : {std::pair<const char*, std::vector<int64_t>>{"w1.weight", {Fe, C}},
                            {"w3.weight", {Fe, C}},
                            {"w2.weight", {C, Fe}}}) {
      if (ep > 1) {
        experts.push_back({x + n, shape, l});
      } else {
        t.add(x + n, shape, -1, 1, l);
        t.out.back().expert = true;
      }
    }
  }
  if (Fs == 0) return;
  t.add(m + "shared_experts.gate_proj.weight", {Fs, C}, 0, 1, l);
  t.add(m + "shared_experts.up_proj.weight", {Fs, C}, 0, 1, l);
  t.add(m + "shared_experts.down_proj.weight", {C, Fs}, 1, 1, l);
}

}  // namespace

std::vector<ParamInfo> llama_param_table(const ModelConfig& cfg, const ModelShard& shard) {
  const int64_t C = cfg.d_model, V = cfg.padded_vocab(shard.tp_size), F = cfg.d_ff, hd = cfg.head_dim();
  const int64_t H = cfg.n_head, KV = cfg.n_kv_head, tp = shard.tp_size;
  const int lb = shard.layer_begin, le = shard.layer_end < 0 ? cfg.n_layer : shard.layer_end;
  check(0 <= lb && lb <= le && le <= cfg.n_layer, "bad layer range [{}, {}) for {} layers", lb, le, cfg.n_layer);
  check(KV > 0 && H % KV == 0, "{}: {} key/value heads do not divide {} query heads", cfg.name, KV, H);
  usage_check(H % tp == 0 && KV % tp == 0,
              "tensor parallel {} must divide the query heads ({}) and the key/value heads ({}) of {}", tp, H, KV,
              cfg.name);
  ParamTableBuilder t{shard, {}, 0};
  std::vector<MoeExpertTensor> experts;  // ep > 1: this rank's routed experts, added last
  const bool tied = cfg.tied_embeddings;
  if (shard.has_embedding || (tied && shard.has_head)) t.add("embed_tokens.weight", {V, C}, 0, 1, -1);
  for (int l = lb; l < le; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    t.add(p + "input_layernorm.weight", {C}, -1, 1, l);
    t.add(p + "self_attn.q_proj.weight", {H * hd, C}, 0, 1, l);
    t.add(p + "self_attn.k_proj.weight", {KV * hd, C}, 0, 1, l);
    t.add(p + "self_attn.v_proj.weight", {KV * hd, C}, 0, 1, l);
    if (cfg.qkv_bias)  // Qwen2: this rank's heads' biases, back to back as the weights are
      for (auto [n, rows] : {std::pair{"q_proj.bias", H * hd}, {"k_proj.bias", KV * hd}, {"v_proj.bias", KV * hd}})
        t.add(p + "self_attn." + n, {rows}, 0, 1, l);
    if (cfg.qk_norm) {  // Qwen3: one weight over every head's q, one over every head's k (replicated)
      t.add(p + "self_attn.q_norm.weight", {hd}, -1, 1, l);
      t.add(p + "self_attn.k_norm.weight", {hd}, -1, 1, l);
    }
    t.add(p + "self_attn.o_proj.weight", {C, H * hd}, 1, 1, l);
    t.add(p + "post_attention_layernorm.weight", {C}, -1, 1, l);
    if (cfg.moe.is_moe_layer(l)) {
      add_moe_params(t, cfg, p, l, experts);
      continue;
    }
    t.add(p + "mlp.gate_proj.weight", {F, C}, 0, 1, l);
    t.add(p + "mlp.up_proj.weight", {F, C}, 0, 1, l);
    t.add(p + "mlp.down_proj.weight", {C, F}, 1, 1, l);
  }
  if (shard.has_head) {
    t.add("norm.weight", {C}, -1, 1, -1);
    if (!tied) t.add("lm_head.weight", {V, C}, 0, 1, -1);
  }
  for (MoeExpertTensor& x : experts) {
    t.add(std::move(x.name), std::move(x.shape), -1, 1, x.layer);
    t.out.back().expert = true;
  }
  return t.out;
}

int64_t moe_inactive_params(const ModelConfig& cfg) {
  const MoeConfig& m = cfg.moe;
  int64_t n = 0;
  for (int l = 0; l < cfg.n_layer; ++l)
    if (m.is_moe_layer(l)) n += int64_t{m.n_experts - m.top_k} * 3 * cfg.d_model * m.d_ff;
  return n;
}

std::vector<ParamInfo> model_param_table(const ModelConfig& cfg, const ModelShard& shard) {
  return cfg.arch == Arch::llama ? llama_param_table(cfg, shard) : gpt_param_table(cfg, shard);
}

}  // namespace mpitron
