// The per-architecture name and layout tables (external_layout.hpp).
#include "mpitron/checkpoint/external_layout.hpp"

#include <cstdio>
#include <fmt/ranges.h>

#include "mpitron/core/error.hpp"

namespace mpitron {
namespace {

std::vector<ExternalTensor> gpt2_tensors(const ModelConfig& c) {
  std::vector<ExternalTensor> t;
  t.push_back({"wte.weight", "transformer.wte.weight", "token_embd.weight"});
  t.push_back({"wpe.weight", "transformer.wpe.weight", "position_embd.weight"});
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string m = "h." + std::to_string(l) + ".", hf = "transformer." + m, g = "blk." + std::to_string(l) + ".";
    auto add = [&](const char* ours, const char* gguf, bool transpose) {
      t.push_back({m + ours, hf + ours, g + gguf, transpose});
    };
    add("ln_1.weight", "attn_norm.weight", false);
    add("ln_1.bias", "attn_norm.bias", false);
    add("attn.c_attn.weight", "attn_qkv.weight", true);
    add("attn.c_attn.bias", "attn_qkv.bias", false);
    add("attn.c_proj.weight", "attn_output.weight", true);
    add("attn.c_proj.bias", "attn_output.bias", false);
    add("ln_2.weight", "ffn_norm.weight", false);
    add("ln_2.bias", "ffn_norm.bias", false);
    add("mlp.c_fc.weight", "ffn_up.weight", true);
    add("mlp.c_fc.bias", "ffn_up.bias", false);
    add("mlp.c_proj.weight", "ffn_down.weight", true);
    add("mlp.c_proj.bias", "ffn_down.bias", false);
  }
  t.push_back({"ln_f.weight", "transformer.ln_f.weight", "output_norm.weight"});
  t.push_back({"ln_f.bias", "transformer.ln_f.bias", "output_norm.bias"});
  return t;
}

std::vector<ExternalTensor> llama_tensors(const ModelConfig& c) {
  std::vector<ExternalTensor> t;
  t.push_back({"embed_tokens.weight", "model.embed_tokens.weight", "token_embd.weight"});
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string m = "layers." + std::to_string(l) + ".", g = "blk." + std::to_string(l) + ".";
    auto add = [&](const char* ours, const char* gguf, int rope_heads = 0) {
      t.push_back({m + ours, "model." + m + ours, g + gguf, false, rope_heads});
    };
    add("input_layernorm.weight", "attn_norm.weight");
    add("self_attn.q_proj.weight", "attn_q.weight", c.n_head);
    add("self_attn.k_proj.weight", "attn_k.weight", c.n_kv_head);
    add("self_attn.v_proj.weight", "attn_v.weight");
    if (c.qkv_bias) {  // Qwen2: the biases' rows follow their weights' (q and k permuted alike)
      add("self_attn.q_proj.bias", "attn_q.bias", c.n_head);
      add("self_attn.k_proj.bias", "attn_k.bias", c.n_kv_head);
      add("self_attn.v_proj.bias", "attn_v.bias");
    }
    if (c.qk_norm) {  // Qwen3: a weight over one head's dimensions, in that head's pairing
      add("self_attn.q_norm.weight", "attn_q_norm.weight", 1);
      add("self_attn.k_norm.weight", "attn_k_norm.weight", 1);
    }
    add("self_attn.o_proj.weight", "attn_output.weight");
    add("post_attention_layernorm.weight", "ffn_norm.weight");
    if (c.moe.is_moe_layer(l)) {
      // Qwen3-MoE's HF names: mlp.gate (the router), mlp.experts.E.gate_proj / up_proj / down_proj.
      const bool qwen = c.qk_norm;
      const std::string b = "block_sparse_moe.";
      add((b + "gate.weight").c_str(), "ffn_gate_inp.weight");
      if (qwen) t.back().hf_name = "model." + m + "mlp.gate.weight";
      for (int e = 0; e < c.moe.n_experts; ++e) {
        const std::string x = b + "experts." + std::to_string(e) + ".";
        static const char* const kW[3][3] = {{"w1", "ffn_gate_exps.weight", "gate_proj"},
                                             {"w3", "ffn_up_exps.weight", "up_proj"},
                                             {"w2", "ffn_down_exps.weight", "down_proj"}};
        for (const auto& [w, gguf, qwen_name] : kW) {
          add((x + w + ".weight").c_str(), gguf);
          t.back().gguf_expert = e;
          if (qwen) t.back().hf_name = fmt::format("model.{}mlp.experts.{}.{}.weight", m, e, qwen_name);
        }
      }
      if (c.moe.n_shared > 0)  // no Mixtral or llama.cpp "llama" name (check_moe_exportable refuses them)
        for (const char* w : {"gate_proj", "up_proj", "down_proj"})
          add((b + "shared_experts." + w + ".weight").c_str(), "");
      continue;
    }
    add("mlp.gate_proj.weight", "ffn_gate.weight");
    add("mlp.up_proj.weight", "ffn_up.weight");
    add("mlp.down_proj.weight", "ffn_down.weight");
  }
  t.push_back({"norm.weight", "model.norm.weight", "output_norm.weight"});
  if (!c.tied_embeddings) t.push_back({"lm_head.weight", "lm_head.weight", "output.weight"});
  return t;
}

// Rows of `heads` heads of head_dim hd, in one order or the other (hf_rope_row).
std::vector<float> permute_rope_rows(const std::vector<float>& v, const std::vector<int64_t>& shape, int heads,
                                     bool to_hf) {
  check((shape.size() == 1 || shape.size() == 2) && heads > 0 && shape[0] % heads == 0 && (shape[0] / heads) % 2 == 0,
        "RoPE row permutation: a [{} rows] tensor does not split into {} heads of even size",
        shape.empty() ? 0 : shape[0], heads);
  const int64_t hd = shape[0] / heads, cols = shape.size() == 2 ? shape[1] : 1;  // a bias or norm: one column
  std::vector<float> out(v.size());
  for (int64_t ours = 0; ours < shape[0]; ++ours) {
    const int64_t hf = hf_rope_row(ours, hd);
    const int64_t from = to_hf ? ours : hf, to = to_hf ? hf : ours;
    std::copy(v.begin() + from * cols, v.begin() + (from + 1) * cols, out.begin() + to * cols);
  }
  return out;
}

std::vector<float> transpose(const std::vector<float>& v, std::vector<int64_t>* shape) {
  check(shape->size() == 2, "transpose: a {}-D tensor", shape->size());
  const int64_t r = (*shape)[0], c = (*shape)[1];
  std::vector<float> out(v.size());
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) out[j * r + i] = v[i * c + j];
  *shape = {c, r};
  return out;
}

}  // namespace

void check_moe_exportable(const ModelConfig& c, const std::string& ckpt, const std::string& format, bool quiet,
                          bool renormalised_only) {
  const MoeConfig& m = c.moe;
  if (!m.enabled()) return;
  std::vector<std::string> bad;
  if (m.n_shared != 0) bad.push_back(fmt::format("model.moe.n_shared_experts = {} (must be 0)", m.n_shared));
  if (m.layer_freq != 1) bad.push_back(fmt::format("model.moe.layer_freq = {} (must be 1)", m.layer_freq));
  if (renormalised_only && m.router == MoeRouter::topk_softmax && !m.norm_topk_prob)
    bad.push_back("model.moe.router = \"topk_softmax\" with norm_topk_prob = false (must renormalise the top-k "
                  "weights: softmax_topk, or norm_topk_prob = true)");
  usage_check(bad.empty(), "export: '{}' is a mixture of experts that {} cannot express: {}", ckpt,
              format, fmt::format("{}", fmt::join(bad, "; ")));
  if (m.capacity_factor > 0 && !quiet)
    std::fprintf(stderr,
                 "export: warning: '%s' was trained with model.moe.capacity_factor = %g; %s routes every token "
                 "(dropless), so its outputs differ where mpitron drops tokens\n",
                 ckpt.c_str(), m.capacity_factor, format.c_str());
}

void check_family_exportable(const ModelConfig& c, const std::string& ckpt, const std::string& format) {
  usage_check(!(c.qkv_bias && c.qk_norm),
              "export: '{}' has both q/k/v biases (model.qkv_bias) and q/k norms (model.qk_norm): no architecture {} "
              "knows has both (Qwen2 has the biases, Qwen3 the norms)", ckpt, format);
  usage_check(!c.qkv_bias || c.head_size == 0,
              "export: '{}' has q/k/v biases (Qwen2) with model.head_dim = {} != d_model / n_head: Qwen2 has no head "
              "size of its own", ckpt, c.head_size);
  usage_check(!c.moe.enabled() || !c.qkv_bias,
              "export: '{}' is a mixture of experts with q/k/v biases (model.qkv_bias): {} has no such architecture "
              "(Mixtral's block has none, Qwen3-MoE's q/k norms)", ckpt, format);
}

std::vector<ExternalTensor> external_tensors(const ModelConfig& cfg) {
  return cfg.arch == Arch::llama ? llama_tensors(cfg) : gpt2_tensors(cfg);
}

std::vector<float> to_hf_layout(const ExternalTensor& t, std::vector<float> v, std::vector<int64_t>* shape) {
  if (t.rope_heads > 0) v = permute_rope_rows(v, *shape, t.rope_heads, true);
  if (t.hf_transpose) v = transpose(v, shape);
  return v;
}

std::vector<float> to_rotate_half_layout(const ExternalTensor& t, std::vector<float> v, const std::vector<int64_t>& shape) {
  return t.rope_heads > 0 ? permute_rope_rows(v, shape, t.rope_heads, true) : v;
}

std::vector<float> from_hf_layout(const ExternalTensor& t, std::vector<float> v, std::vector<int64_t>* shape) {
  if (t.hf_transpose) v = transpose(v, shape);
  if (t.rope_heads > 0) v = permute_rope_rows(v, *shape, t.rope_heads, false);
  return v;
}

}  // namespace mpitron
