// The parameter table (names, full and local shapes, flat offsets), the GPT-2 initialisation
// defined on full logical tensors, and the FLOP count.
#include <cmath>

#include "mpitron/core/error.hpp"
#include "mpitron/core/rng.hpp"
#include "mpitron/model/arch.hpp"
#include "mpitron/model/transformer_model.hpp"
#include "param_table_builder.hpp"

namespace mpitron {

int64_t param_full_index(const ParamInfo& p, int64_t i, int /*tp_rank*/) {
  if (p.split_dim < 0) return i;
  // Decompose the local flat index, map the split dimension, recompose on the full shape.
  int nd = static_cast<int>(p.local_shape.size());
  int64_t idx[4] = {0, 0, 0, 0};
  for (int d = nd - 1; d >= 0; --d) {
    idx[d] = i % p.local_shape[d];
    i /= p.local_shape[d];
  }
  int64_t local_part = p.local_shape[p.split_dim] / p.split_parts;
  int64_t full_part = p.full_shape[p.split_dim] / p.split_parts;
  int64_t part = idx[p.split_dim] / local_part;
  idx[p.split_dim] = part * full_part + p.local_offset_in_full + idx[p.split_dim] % local_part;
  int64_t f = 0;
  for (int d = 0; d < nd; ++d) f = f * p.full_shape[d] + idx[d];
  return f;
}

std::vector<ParamInfo> gpt_param_table(const ModelConfig& cfg, const ModelShard& shard) {
  const int64_t C = cfg.d_model, V = cfg.padded_vocab(shard.tp_size), T = cfg.seq_len, F = cfg.d_ff;
  int lb = shard.layer_begin, le = shard.layer_end < 0 ? cfg.n_layer : shard.layer_end;
  check(0 <= lb && lb <= le && le <= cfg.n_layer, "bad layer range [{}, {}) for {} layers", lb, le, cfg.n_layer);
  ParamTableBuilder t{shard, {}, 0};
  // The tied LM head needs wte on the last stage too (a copy whose gradient the pipeline
  // layer all-reduces with the first stage's).
  if (shard.has_embedding || shard.has_head) t.add("wte.weight", {V, C}, 0, 1, -1);
  if (shard.has_embedding) t.add("wpe.weight", {T, C}, -1, 1, -1);
  for (int l = lb; l < le; ++l) {
    std::string h = "h." + std::to_string(l) + ".";
    t.add(h + "ln_1.weight", {C}, -1, 1, l);
    t.add(h + "ln_1.bias", {C}, -1, 1, l);
    t.add(h + "attn.c_attn.weight", {3 * C, C}, 0, 3, l);  // column parallel, per q/k/v part
    t.add(h + "attn.c_attn.bias", {3 * C}, 0, 3, l);
    t.add(h + "attn.c_proj.weight", {C, C}, 1, 1, l);  // row parallel
    t.add(h + "attn.c_proj.bias", {C}, -1, 1, l);
    t.add(h + "ln_2.weight", {C}, -1, 1, l);
    t.add(h + "ln_2.bias", {C}, -1, 1, l);
    t.add(h + "mlp.c_fc.weight", {F, C}, 0, 1, l);
    t.add(h + "mlp.c_fc.bias", {F}, 0, 1, l);
    t.add(h + "mlp.c_proj.weight", {C, F}, 1, 1, l);
    t.add(h + "mlp.c_proj.bias", {C}, -1, 1, l);
  }
  if (shard.has_head) {
    t.add("ln_f.weight", {C}, -1, 1, -1);
    t.add("ln_f.bias", {C}, -1, 1, -1);
  }
  return t.out;
}

double gpt_flops_per_token(const ModelConfig& cfg) {
  double C = cfg.d_model, L = cfg.n_layer, T = cfg.seq_len, V = cfg.padded_vocab(), F = cfg.d_ff;
  // One block's parameters from its parts (arch.hpp): q|k|v, the attention output, fc (or
  // gate|up) and fcp, two norms, and the biases where the architecture has them.
  const BlockSpec& spec = block_spec(cfg);
  const double qkv = (cfg.n_head + 2.0 * kv_heads(cfg)) * cfg.head_dim(), att = double(cfg.n_head) * cfg.head_dim();
  double per_layer = qkv * C + C * att + (spec.fc_factor() + 1) * C * F + 2.0 * spec.norm_params() * C;
  if (spec.biases) per_layer += qkv + C + spec.fc_factor() * F + C;
  if (cfg.qkv_bias) per_layer += qkv;
  if (cfg.qk_norm) per_layer += 2.0 * cfg.head_dim();
  double n_nonembed = L * per_layer + 2 * C;
  // A MoE block's MLP as a token sees it: the router, top_k experts and the shared ones (the
  // active parameters), in place of the dense MLP.
  const MoeConfig& m = cfg.moe;
  const double moe_mlp = C * m.n_experts + 3.0 * C * m.d_ff * (m.top_k + m.n_shared);
  for (int l = 0; l < cfg.n_layer; ++l)
    if (m.is_moe_layer(l)) n_nonembed += moe_mlp - (spec.fc_factor() + 1) * C * F;
  return 6 * n_nonembed + 6 * V * C + 12 * L * T * att;
}

double gpt_attention_flops_per_token(const ModelConfig& cfg) {
  return 12.0 * cfg.n_layer * cfg.seq_len * static_cast<double>(cfg.attention_width());
}

// Initialisation on the full logical tensor: normal(0, 0.02), the residual projections (GPT-2
// attn.c_proj and mlp.c_proj, LLaMA o_proj and down_proj weights) scaled by 1/sqrt(2*n_layer)
// (GPT-2's rule; torchtitan's LLaMA uses the same depth scaling); biases 0; norm weights 1, bias
// 0; rows of the vocabulary tensors (wte / embed_tokens, lm_head) >= vocab_size (padding) 0.
// Element i of a tensor draws normal_at(seed, stable_hash(name), full flat index), so any shard
// computes exactly its own elements.
void init_model_params(const ModelConfig& cfg, const std::vector<ParamInfo>& table, float* base, uint64_t seed,
                       int tp_rank) {
  const double std0 = 0.02, std_res = 0.02 / std::sqrt(2.0 * cfg.n_layer);
  for (const auto& p : table) {
    float* dst = base + p.offset;
    auto ends_with = [&](std::string_view s) { return p.name.size() >= s.size() && p.name.ends_with(s); };
    bool is_norm = p.name.find("ln_") != std::string::npos || p.name.find("norm.") != std::string::npos ||
                   p.name.find("layernorm.") != std::string::npos;
    if (is_norm) {
      float v = ends_with(".weight") ? 1.f : 0.f;
      for (size_t i = 0; i < p.numel; ++i) dst[i] = v;
      continue;
    }
    if (ends_with(".bias")) {
      for (size_t i = 0; i < p.numel; ++i) dst[i] = 0.f;
      continue;
    }
    bool residual = ends_with("attn.c_proj.weight") || ends_with("mlp.c_proj.weight") || ends_with("o_proj.weight") ||
                    ends_with("down_proj.weight") || ends_with(".w2.weight");
    double sd = residual ? std_res : std0;
    uint64_t stream = stable_hash(p.name);
    bool vocab_rows = is_vocab_rows(p.name);
    int64_t C = p.full_shape.back();
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < p.numel; ++i) {
      int64_t f = param_full_index(p, static_cast<int64_t>(i), tp_rank);
      dst[i] = (vocab_rows && f / C >= cfg.vocab_size) ? 0.f : static_cast<float>(sd * normal_at(seed, stream, f));
    }
  }
}

}  // namespace mpitron
