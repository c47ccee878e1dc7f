#include "mpitron/model/config.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "mpitron/config/job_config.hpp"
#include "mpitron/core/error.hpp"

namespace mpitron {
namespace {

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

ModelConfig llama(const char* name, int layers, int heads, int kv_heads, int d, int ff, int vocab, int seq) {
  ModelConfig c;
  c.name = name;
  c.arch = Arch::llama;
  c.n_layer = layers;
  c.n_head = heads;
  c.n_kv_head = kv_heads;
  c.d_model = d;
  c.d_ff = ff;
  c.vocab_size = vocab;
  c.seq_len = seq;
  c.tied_embeddings = false;
  return c;
}

const std::vector<ModelConfig>& presets() {
  static const std::vector<ModelConfig> all = {
      gpt2("tiny", 2, 4, 64, 256, 64),
      gpt2("gpt2-124m", 12, 12, 768),
      gpt2("gpt2-350m", 24, 16, 1024),
      gpt2("gpt2-774m", 36, 20, 1280),
      gpt2("gpt2-1.5b", 48, 25, 1600),
      llama("llama2-7b", 32, 32, 32, 4096, 11008, 32000, 4096),
      llama("llama2-13b", 40, 40, 40, 5120, 13824, 32000, 4096),
      llama("llama2-70b", 80, 64, 8, 8192, 28672, 32000, 4096),
      llama("llama3-8b", 32, 32, 8, 4096, 14336, 128256, 8192),
      llama("llama3-70b", 80, 64, 8, 8192, 28672, 128256, 8192),
      llama("llama3-405b", 126, 128, 8, 16384, 53248, 128256, 8192),
  };
  return all;
}

}  // namespace

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
  bool custom = false;
  auto take = [&](int v, int& dst) {
    if (v != 0) {
      custom |= (v != dst);
      dst = v;
    }
  };
  take(s.n_layer, c.n_layer);
  take(s.n_head, c.n_head);
  take(s.d_model, c.d_model);
  take(s.vocab_size, c.vocab_size);
  take(s.seq_len, c.seq_len);
  if (c.arch == Arch::gpt2) {
    c.n_kv_head = c.n_head;
    c.d_ff = 4 * c.d_model;
  }
  if (custom) c.name = s.preset + "+custom";
  usage_check(c.n_layer > 0, "model.n_layer must be > 0 (got {})", c.n_layer);
  usage_check(c.n_head > 0, "model.n_head must be > 0 (got {})", c.n_head);
  usage_check(c.d_model > 0, "model.d_model must be > 0 (got {})", c.d_model);
  usage_check(c.vocab_size > 0, "model.vocab_size must be > 0 (got {})", c.vocab_size);
  usage_check(c.seq_len > 0, "model.seq_len must be > 0 (got {})", c.seq_len);
  usage_check(c.d_model % c.n_head == 0, "model.d_model ({}) must be divisible by model.n_head ({})", c.d_model,
              c.n_head);
  return c;
}

}  // namespace mpitron
