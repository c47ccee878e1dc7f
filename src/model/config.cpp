#include "mpitron/model/config.hpp"

#include <algorithm>
#include <cstdint>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "mpitron/config/job_config.hpp"
#include "mpitron/core/error.hpp"
#include "mpitron/model/rope_scaling.hpp"

namespace mpitron {
namespace {

// A job key's value where the job sets one (0: keep the preset's).
template <class V, class D>
void take_set(V v, D& dst) {
  if (v != 0) dst = v;
}

ModelConfig gpt2(const char* name, int layers, int heads, int d, int vocab = 50257, int seq = 1024) {
  ModelConfig c;
  c.name = name;
  c.arch = Arch::gpt2;
  c.n_layer = layers;
  c.n_head = heads;
  c.n_kv_head = heads;
  c.d_model = d;
  c.d_ff = 4 * d;
  c.vocab_size = vocab;
  c.seq_len = seq;
  c.tied_embeddings = true;
  return c;
}

ModelConfig llama(const char* name, int layers, int heads, int kv_heads, int d, double ffn_multiplier, int multiple_of,
                  int vocab, int seq, double rope_theta) {
  ModelConfig c;
  c.name = name;
  c.arch = Arch::llama;
  c.n_layer = layers;
  c.n_head = heads;
  c.n_kv_head = kv_heads;
  c.d_model = d;
  c.ffn_multiplier = ffn_multiplier;
  c.multiple_of = multiple_of;
  c.d_ff = llama_ffn_dim(d, ffn_multiplier, multiple_of);
  c.vocab_size = vocab;
  c.seq_len = seq;
  c.tied_embeddings = false;
  c.norm_eps = 1e-5f;
  c.rope_theta = rope_theta;
  return c;
}

ModelConfig moe(ModelConfig c, int experts, int top_k, int expert_d_ff, int shared) {
  c.moe.n_experts = experts;
  c.moe.top_k = top_k;
  c.moe.d_ff = expert_d_ff;
  c.moe.n_shared = shared;
  c.d_ff = expert_d_ff;
  return c;
}

// LLaMA 3.1 / 3.2: LLaMA 3's shape with config.json's rope_scaling {"rope_type": "llama3",
// "factor": F, "low_freq_factor": 1, "high_freq_factor": 4, "original_max_position_embeddings":
// 8192} (max_position_embeddings 131072; the preset's seq_len stays at the 8192 of pretraining).
ModelConfig llama3_scaled(ModelConfig c, double factor, bool tied) {
  c.rope_scaling = RopeScaling{.type = RopeScalingType::llama3, .factor = factor, .original_max_pos = 8192,
                               .low_freq_factor = 1.0, .high_freq_factor = 4.0};
  c.tied_embeddings = tied;
  return c;
}

// Qwen3 (Qwen's config.json): LLaMA's block with an RMSNorm over each head's q and k, heads of
// 128 whatever the hidden size, RMSNorm eps 1e-6, RoPE theta 1e6, a 151936-token vocabulary; the
// preset's seq_len is the 4096 of pretraining's general stage (config.json's
// max_position_embeddings, 40960, is the long-context stage's).
ModelConfig qwen3(const char* name, int layers, int heads, int kv_heads, int d, int d_ff, bool tied) {
  ModelConfig c = llama(name, layers, heads, kv_heads, d, 1.0, 1, 151936, 4096, 1000000.0);
  c.d_ff = d_ff;
  c.head_size = d / heads == 128 ? 0 : 128;
  c.qk_norm = true;
  c.norm_eps = 1e-6f;
  c.tied_embeddings = tied;
  return c;
}

const std::vector<ModelConfig>& presets() {
  static const std::vector<ModelConfig> all = {
      gpt2("tiny", 2, 4, 64, 256, 64),
      gpt2("gpt2-124m", 12, 12, 768),
      gpt2("gpt2-350m", 24, 16, 1024),
      gpt2("gpt2-774m", 36, 20, 1280),
      gpt2("gpt2-1.5b", 48, 25, 1600),
      // For tests and CPU runs (byte-level vocabulary like tiny): d_ff 192 and 704.
      llama("llama-tiny", 2, 4, 2, 64, 1.0, 32, 256, 64, 10000.0),
      llama("llama-small", 4, 8, 2, 256, 1.0, 64, 256, 256, 10000.0),
      // A ~1B LLaMA for GPU benchmarks (TinyLlama-1.1B's shape: 22 layers, d 2048, 32 query heads on
      // 4 kv heads, d_ff 5632, vocab 32000): 1.10B parameters.
      llama("llama-1b", 22, 32, 4, 2048, 1.0, 256, 32000, 2048, 10000.0),
      // Meta's params.json: d_ff 11008, 13824, 28672, 14336, 28672, 53248.
      llama("llama2-7b", 32, 32, 32, 4096, 1.0, 256, 32000, 4096, 10000.0),
      llama("llama2-13b", 40, 40, 40, 5120, 1.0, 256, 32000, 4096, 10000.0),
      llama("llama2-70b", 80, 64, 8, 8192, 1.3, 4096, 32000, 4096, 10000.0),
      llama("llama3-8b", 32, 32, 8, 4096, 1.3, 1024, 128256, 8192, 500000.0),
      llama("llama3-70b", 80, 64, 8, 8192, 1.3, 4096, 128256, 8192, 500000.0),
      llama("llama3-405b", 126, 128, 8, 16384, 1.2, 4096, 128256, 8192, 500000.0),
      // Meta's config.json / params.json for LLaMA 3.1 (rope factor 8, untied head) and 3.2 (factor
      // 32, tied head; 1B: ffn_dim_multiplier 1.5, 3B: 1.0, multiple_of 256 -> d_ff 8192):
      // 8,030,261,248, 70,553,706,496, 1,235,814,400 and 3,212,749,824 parameters.
      llama3_scaled(llama("llama3.1-8b", 32, 32, 8, 4096, 1.3, 1024, 128256, 8192, 500000.0), 8.0, false),
      llama3_scaled(llama("llama3.1-70b", 80, 64, 8, 8192, 1.3, 4096, 128256, 8192, 500000.0), 8.0, false),
      llama3_scaled(llama("llama3.2-1b", 16, 32, 8, 2048, 1.5, 256, 128256, 8192, 500000.0), 32.0, true),
      llama3_scaled(llama("llama3.2-3b", 28, 24, 8, 3072, 1.0, 256, 128256, 8192, 500000.0), 32.0, true),
      // Qwen3 (its config.json files): 596,049,920, 1,720,574,976 and 8,190,735,360 parameters.
      qwen3("qwen3-0.6b", 28, 16, 8, 1024, 3072, true),
      qwen3("qwen3-1.7b", 28, 16, 8, 2048, 6144, true),
      qwen3("qwen3-8b", 36, 32, 8, 4096, 12288, false),
      // Mixtures of experts (every block MoE, SwiGLU experts, untied head).
      // Tests and CPU runs: 4 experts of width 96, top 2.
      moe(llama("llama-moe-tiny", 2, 4, 2, 64, 1.0, 32, 256, 64, 10000.0), 4, 2, 96, 0),
      // Mistral's config.json: 8 experts of 14336, top 2, 32k vocabulary, theta 1e6 (46.7B, 12.9B active).
      moe(llama("mixtral-8x7b", 32, 32, 8, 4096, 1.3, 1024, 32000, 4096, 1000000.0), 8, 2, 14336, 0),
      // OLMoE-1B-7B (allenai): 64 experts of 1024, top 8, 16 MHA heads, vocab 50304 (6.9B, 1.3B
      // active; mpitron's LLaMA block has no QK-norm: 2 x 2048 fewer parameters per layer).
      // Qwen3-30B-A3B: Qwen3's attention (32 heads of 128 on 4 kv heads, d 2048), 128 experts of 768,
      // top 8 renormalised (norm_topk_prob: Mixtral's weights): 30,532,122,624 parameters.
      moe(qwen3("qwen3-30b-a3b", 48, 32, 4, 2048, 768, false), 128, 8, 768, 0),
      moe(llama("olmoe-1b-7b", 16, 16, 16, 2048, 1.0, 256, 50304, 4096, 10000.0), 64, 8, 1024, 0),
  };
  return all;
}

// [model.moe] over the preset's: a key at its default leaves the preset's value.
void resolve_moe(ModelConfig& c, const ModelSection& s) {
  const ModelSection def;
  MoeConfig& m = c.moe;
  if (s.moe_n_experts != 0) m.n_experts = s.moe_n_experts;
  if (s.moe_top_k != def.moe_top_k) m.top_k = s.moe_top_k;
  if (s.moe_expert_d_ff != 0) m.d_ff = s.moe_expert_d_ff;
  if (s.moe_n_shared_experts != 0) m.n_shared = s.moe_n_shared_experts;
  m.layer_freq = s.moe_layer_freq;
  m.router = s.moe_router == "topk_softmax" ? MoeRouter::topk_softmax : MoeRouter::softmax_topk;
  m.norm_topk_prob = s.moe_norm_topk_prob;
  m.aux_loss_coef = s.moe_aux_loss_coef;
  m.z_loss_coef = s.moe_z_loss_coef;
  m.capacity_factor = s.moe_capacity_factor;
  const bool set = s.moe_n_experts != 0 || s.moe_top_k != def.moe_top_k || s.moe_expert_d_ff != 0 ||
                   s.moe_n_shared_experts != 0 || s.moe_layer_freq != def.moe_layer_freq ||
                   s.moe_router != def.moe_router || s.moe_norm_topk_prob || s.moe_capacity_factor != 0;
  if (!m.enabled()) {
    usage_check(!set, "model.moe.* keys need model.moe.n_experts >= 1 (the preset '{}' is dense)", s.preset);
    return;
  }
  usage_check(c.arch == Arch::llama,
              "model.moe.n_experts: mixture-of-experts blocks need the llama architecture (SwiGLU experts); set "
              "model.arch = \"llama\" or pick a llama preset (GPT-2 MoE is not there yet)");
  if (m.d_ff == 0) m.d_ff = c.d_ff;
  usage_check(m.top_k <= m.n_experts, "model.moe.top_k ({}) must be <= model.moe.n_experts ({})", m.top_k,
              m.n_experts);
  usage_check(m.d_ff % 16 == 0, "model.moe.expert_d_ff ({}) must be a multiple of 16 (gate and up run as one GEMM)",
              m.d_ff);
  usage_check(!m.norm_topk_prob || m.router == MoeRouter::topk_softmax,
              "model.moe.norm_topk_prob applies to router = \"topk_softmax\" (softmax_topk's weights already sum to 1)");
}

// The [model] rope_* keys over the preset's RoPE scaling (a llama model: the GPT-2 branch refuses
// them). Another type than the preset's starts from that type's defaults; the factor and the
// original context have none and must be given.
void resolve_rope_scaling(ModelConfig& c, const ModelSection& s) {
  RopeScaling& r = c.rope_scaling;
  if (s.rope_scaling != "auto") {
    const RopeScalingType t = rope_scaling_type(s.rope_scaling).value_or(RopeScalingType::none);
    if (t != r.type) r = RopeScaling{.type = t};
  }
  const bool llama3 = r.type == RopeScalingType::llama3, yarn = r.type == RopeScalingType::yarn;
  auto only = [&](double v, const char* key, bool applies, const char* types) {
    usage_check(v == 0 || applies, "model.{} applies to model.rope_scaling = {} (this model's is \"{}\")", key, types,
                rope_scaling_name(r.type));
  };
  only(s.rope_factor, "rope_factor", r.enabled(), "\"llama3\" or \"yarn\"");
  only(s.rope_original_max_pos, "rope_original_max_pos", r.enabled(), "\"llama3\" or \"yarn\"");
  only(s.rope_low_freq_factor, "rope_low_freq_factor", llama3, "\"llama3\"");
  only(s.rope_high_freq_factor, "rope_high_freq_factor", llama3, "\"llama3\"");
  only(s.rope_beta_fast, "rope_beta_fast", yarn, "\"yarn\"");
  only(s.rope_beta_slow, "rope_beta_slow", yarn, "\"yarn\"");
  only(s.rope_attention_factor, "rope_attention_factor", yarn, "\"yarn\"");
  if (!r.enabled()) return;
  take_set(s.rope_factor, r.factor);
  take_set(s.rope_original_max_pos, r.original_max_pos);
  take_set(s.rope_low_freq_factor, r.low_freq_factor);
  take_set(s.rope_high_freq_factor, r.high_freq_factor);
  take_set(s.rope_beta_fast, r.beta_fast);
  take_set(s.rope_beta_slow, r.beta_slow);
  take_set(s.rope_attention_factor, r.attention_factor);
  usage_check(r.factor != 0 && r.original_max_pos != 0,
              "model.rope_scaling = \"{}\" needs model.rope_factor and model.rope_original_max_pos (LLaMA 3.1: 8 and "
              "8192; LLaMA 3.2: 32 and 8192; Qwen's YaRN: 4 and 32768)",
              rope_scaling_name(r.type));
  check_job_value("model.rope_factor", r.factor);
  check_job_value("model.rope_original_max_pos", r.original_max_pos);
  check_rope_scaling(r, "model.rope_*");
}

}  // namespace

int llama_ffn_dim(int d_model, double ffn_multiplier, int multiple_of) {
  int64_t h = 2 * (4 * int64_t{d_model}) / 3;
  if (ffn_multiplier != 1.0) h = static_cast<int64_t>(ffn_multiplier * static_cast<double>(h));
  const int64_t m = std::max(multiple_of, 1);
  return static_cast<int>((h + m - 1) / m * m);
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const auto& p : presets()) names.push_back(p.name);
  return names;
}

ModelConfig model_preset(const std::string& name) {
  for (const auto& p : presets())
    if (p.name == name) return p;
  usage_fail("unknown model preset '{}' (allowed: {})", name, fmt::join(model_preset_names(), ", "));
}

ModelConfig resolve_model_config(const ModelSection& s) {
  ModelConfig c = model_preset(s.preset);
  const ModelConfig preset = c;
  take_set(s.n_layer, c.n_layer);
  take_set(s.n_head, c.n_head);
  take_set(s.d_model, c.d_model);
  take_set(s.vocab_size, c.vocab_size);
  take_set(s.seq_len, c.seq_len);
  if (s.arch != "auto") {
    const Arch want = s.arch == "llama" ? Arch::llama : Arch::gpt2;
    if (want != c.arch) {  // the other family's block on this preset's sizes
      c.arch = want;
      c.n_kv_head = c.n_head;
      c.tied_embeddings = want == Arch::gpt2;
      c.ffn_multiplier = 1.0;
      c.multiple_of = want == Arch::llama ? 32 : 1;
      c.qkv_bias = c.qk_norm = false;
      c.head_size = 0;
    }
  }
  if (c.arch == Arch::gpt2) {
    auto only_llama = [](bool set, const char* key) {
      usage_check(!set, "model.{} applies to LLaMA models only (model.arch = \"llama\" or a llama preset); GPT-2 has "
                        "LayerNorm, learned positions, MHA and a 4*d_model MLP",
                  key);
    };
    only_llama(s.n_kv_head != 0 && s.n_kv_head != c.n_head, "n_kv_head");
    only_llama(s.d_ff != 0 && s.d_ff != 4 * c.d_model, "d_ff");
    only_llama(s.ffn_multiplier != 0, "ffn_multiplier");
    only_llama(s.multiple_of != 0, "multiple_of");
    only_llama(s.norm_eps != 0, "norm_eps");
    only_llama(s.rope_theta != 0, "rope_theta");
    only_llama(s.rope_scaling != "auto" && s.rope_scaling != "none", "rope_scaling");
    only_llama(s.qkv_bias == "true", "qkv_bias");
    only_llama(s.head_dim != 0, "head_dim");
    only_llama(s.qk_norm == "true", "qk_norm");
    const double original = s.rope_original_max_pos;
    for (auto [key, v] : {std::pair{"rope_factor", s.rope_factor}, {"rope_original_max_pos", original},
                          {"rope_low_freq_factor", s.rope_low_freq_factor},
                          {"rope_high_freq_factor", s.rope_high_freq_factor}, {"rope_beta_fast", s.rope_beta_fast},
                          {"rope_beta_slow", s.rope_beta_slow}, {"rope_attention_factor", s.rope_attention_factor}})
      only_llama(v != 0, key);
    c.n_kv_head = c.n_head;
    c.d_ff = 4 * c.d_model;
  } else {
    take_set(s.n_kv_head, c.n_kv_head);
    take_set(s.ffn_multiplier, c.ffn_multiplier);
    take_set(s.multiple_of, c.multiple_of);
    check_job_value("model.multiple_of", c.multiple_of);
    check_job_value("model.ffn_multiplier", c.ffn_multiplier);
    if (s.d_ff != 0) c.d_ff = s.d_ff;
    else if (c.d_model != preset.d_model || s.ffn_multiplier != 0 || s.multiple_of != 0 || c.arch != preset.arch)
      c.d_ff = llama_ffn_dim(c.d_model, c.ffn_multiplier, c.multiple_of);
    take_set(s.norm_eps, c.norm_eps);
    take_set(s.rope_theta, c.rope_theta);
    check_job_value("model.d_ff", c.d_ff);
    usage_check(c.n_kv_head > 0 && c.n_head % c.n_kv_head == 0,
                "model.n_kv_head ({}) must divide model.n_head ({}): each key/value head serves n_head / n_kv_head "
                "query heads (n_kv_head = n_head is MHA, 1 is MQA)",
                c.n_kv_head, c.n_head);
    check_job_value("model.norm_eps", c.norm_eps);
    check_job_value("model.rope_theta", c.rope_theta);
    resolve_rope_scaling(c, s);
    if (s.qkv_bias != "auto") c.qkv_bias = s.qkv_bias == "true";
    if (s.qk_norm != "auto") c.qk_norm = s.qk_norm == "true";
    if (s.head_dim != 0) c.head_size = s.head_dim;
  }
  if (s.tie_embeddings != "auto") c.tied_embeddings = s.tie_embeddings == "true";
  resolve_moe(c, s);
  const bool custom = c.n_layer != preset.n_layer || c.n_head != preset.n_head || c.n_kv_head != preset.n_kv_head ||
                      c.d_model != preset.d_model || c.d_ff != preset.d_ff || c.vocab_size != preset.vocab_size ||
                      c.seq_len != preset.seq_len || c.arch != preset.arch ||
                      c.tied_embeddings != preset.tied_embeddings || c.norm_eps != preset.norm_eps ||
                      c.rope_theta != preset.rope_theta || c.rope_scaling != preset.rope_scaling ||
                      c.qkv_bias != preset.qkv_bias || c.qk_norm != preset.qk_norm || c.head_size != preset.head_size ||
                      c.moe.n_experts != preset.moe.n_experts ||
                      c.moe.top_k != preset.moe.top_k || c.moe.d_ff != preset.moe.d_ff ||
                      c.moe.n_shared != preset.moe.n_shared || c.moe.layer_freq != preset.moe.layer_freq;
  if (custom) c.name = s.preset + "+custom";
  // The preset's values and the keys' own, under the keys' ranges (config/job_config.cpp).
  for (auto [key, v] : {std::pair{"model.n_layer", c.n_layer}, {"model.n_head", c.n_head}, {"model.d_model", c.d_model},
                        {"model.vocab_size", c.vocab_size}, {"model.seq_len", c.seq_len}, {"model.n_kv_head", c.n_kv_head}})
    check_job_value(key, v);
  // The head size d_model / n_head, unless model.head_dim gives it (then stored only where it differs).
  if (c.head_size > 0 && c.d_model % c.n_head == 0 && c.head_size == c.d_model / c.n_head) c.head_size = 0;
  usage_check(c.head_size > 0 || c.d_model % c.n_head == 0,
              "model.d_model ({}) must be divisible by model.n_head ({}), or model.head_dim set", c.d_model, c.n_head);
  if (c.arch == Arch::llama) {
    usage_check(c.head_dim() % 2 == 0, "the head size ({}) must be even: RoPE rotates pairs", c.head_dim());
    // q, k, v (and gate, up) sit back to back in the flat buffer and run as one GEMM, which needs
    // every tensor's size to be a multiple of the 16-float alignment: d_model % 16 == 0 does it.
    usage_check(c.d_model % 16 == 0, "model.d_model ({}) must be a multiple of 16 for a llama model", c.d_model);
    // The q, k and v biases too: a rank's k bias is kv_local whole heads.
    usage_check(!c.qkv_bias || c.head_dim() % 16 == 0,
                "model.qkv_bias = true needs a head size ({}) that is a multiple of 16", c.head_dim());
  }
  return c;
}

}  // namespace mpitron
