// The LLaMA 3.1 / 3.2 presets (model/config.cpp) against Meta's published models: the parameter
// count the ledger prints (model_param_table over the whole model), the llama3 RoPE scaling, and
// the config.json transformers writes for each read back by the HF importer to the same model.
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "mpitron/checkpoint/hf_import.hpp"
#include "mpitron/config/job_config.hpp"
#include "mpitron/model/config.hpp"
#include "mpitron/model/model_chunk.hpp"
#include "mpitron/model/param_tables.hpp"

using namespace mpitron;
namespace fs = std::filesystem;

namespace {

int64_t total_params(const ModelConfig& c) {
  ModelShard all;  // the whole model on one rank, as compute_ledger counts it
  all.layer_end = c.n_layer;
  int64_t n = 0;
  for (const auto& p : model_param_table(c, all)) n += static_cast<int64_t>(p.numel);
  return n;
}

// The same count from the shapes alone: embeddings, per layer q/k/v/o + gate/up/down + two norms,
// the final norm and (untied) the head.
int64_t count_from_shapes(int64_t layers, int64_t d, int64_t heads, int64_t kv_heads, int64_t ff, int64_t vocab,
                          bool tied) {
  const int64_t hd = d / heads;
  const int64_t attn = d * heads * hd + 2 * d * kv_heads * hd + heads * hd * d;
  const int64_t layer = attn + 3 * d * ff + 2 * d;
  return vocab * d + layers * layer + d + (tied ? 0 : vocab * d);
}

struct Published {
  const char* preset;
  int layers, d, heads, kv_heads, ff;
  bool tied;
  double factor;
  int64_t params;  // Hugging Face's count
};

const Published kModels[] = {
    {"llama3.2-1b", 16, 2048, 32, 8, 8192, true, 32.0, 1235814400LL},
    {"llama3.2-3b", 28, 3072, 24, 8, 8192, true, 32.0, 3212749824LL},
    {"llama3.1-8b", 32, 4096, 32, 8, 14336, false, 8.0, 8030261248LL},
    {"llama3.1-70b", 80, 8192, 64, 8, 28672, false, 8.0, 70553706496LL},
};

// config.json as transformers 4.45 writes it for meta-llama/Llama-3.x-*.
std::string hf_config_json(const Published& m) {
  return "{\n"
         "  \"architectures\": [\"LlamaForCausalLM\"],\n"
         "  \"attention_bias\": false,\n"
         "  \"attention_dropout\": 0.0,\n"
         "  \"bos_token_id\": 128000,\n"
         "  \"eos_token_id\": 128001,\n"
         "  \"head_dim\": " + std::to_string(m.d / m.heads) + ",\n"
         "  \"hidden_act\": \"silu\",\n"
         "  \"hidden_size\": " + std::to_string(m.d) + ",\n"
         "  \"initializer_range\": 0.02,\n"
         "  \"intermediate_size\": " + std::to_string(m.ff) + ",\n"
         "  \"max_position_embeddings\": 131072,\n"
         "  \"mlp_bias\": false,\n"
         "  \"model_type\": \"llama\",\n"
         "  \"num_attention_heads\": " + std::to_string(m.heads) + ",\n"
         "  \"num_hidden_layers\": " + std::to_string(m.layers) + ",\n"
         "  \"num_key_value_heads\": " + std::to_string(m.kv_heads) + ",\n"
         "  \"pretraining_tp\": 1,\n"
         "  \"rms_norm_eps\": 1e-05,\n"
         "  \"rope_scaling\": {\n"
         "    \"factor\": " + std::to_string(m.factor) + ",\n"
         "    \"high_freq_factor\": 4.0,\n"
         "    \"low_freq_factor\": 1.0,\n"
         "    \"original_max_position_embeddings\": 8192,\n"
         "    \"rope_type\": \"llama3\"\n"
         "  },\n"
         "  \"rope_theta\": 500000.0,\n"
         "  \"tie_word_embeddings\": " + std::string(m.tied ? "true" : "false") + ",\n"
         "  \"torch_dtype\": \"bfloat16\",\n"
         "  \"transformers_version\": \"4.45.0.dev0\",\n"
         "  \"use_cache\": true,\n"
         "  \"vocab_size\": 128256\n"
         "}\n";
}

}  // namespace

BOOST_AUTO_TEST_SUITE(presets)

BOOST_AUTO_TEST_CASE(llama3_1_and_3_2_shapes_and_counts) {
  for (const auto& m : kModels) {
    BOOST_TEST_CONTEXT(m.preset) {
      const ModelConfig c = model_preset(m.preset);
      BOOST_TEST(c.name == m.preset);
      BOOST_TEST((c.arch == Arch::llama));
      BOOST_TEST(c.n_layer == m.layers);
      BOOST_TEST(c.d_model == m.d);
      BOOST_TEST(c.n_head == m.heads);
      BOOST_TEST(c.n_kv_head == m.kv_heads);
      BOOST_TEST(c.d_ff == m.ff);
      BOOST_TEST(c.head_dim() == m.d / m.heads);
      BOOST_TEST(c.vocab_size == 128256);
      BOOST_TEST(c.tied_embeddings == m.tied);
      BOOST_TEST(c.norm_eps == 1e-5f);
      BOOST_TEST(c.rope_theta == 500000.0);
      BOOST_TEST(c.seq_len == 8192);
      BOOST_TEST(!c.moe.enabled());
      // The published total, and the same from the shapes by hand.
      BOOST_TEST(total_params(c) == m.params);
      BOOST_TEST(count_from_shapes(m.layers, m.d, m.heads, m.kv_heads, m.ff, 128256, m.tied) == m.params);
      // config.json's rope_scaling.
      BOOST_TEST((c.rope_scaling.type == RopeScalingType::llama3));
      BOOST_TEST(c.rope_scaling.factor == m.factor);
      BOOST_TEST(c.rope_scaling.low_freq_factor == 1.0);
      BOOST_TEST(c.rope_scaling.high_freq_factor == 4.0);
      BOOST_TEST(c.rope_scaling.original_max_pos == 8192);
    }
  }
  // The LLaMA 3 presets keep plain RoPE.
  BOOST_TEST((model_preset("llama3-8b").rope_scaling.type == RopeScalingType::none));
  BOOST_TEST((model_preset("llama3-70b").rope_scaling.type == RopeScalingType::none));
}

// A job naming the preset and nothing else resolves to it unchanged (not "+custom"); its rope
// keys override it as for any llama preset.
BOOST_AUTO_TEST_CASE(llama3_1_and_3_2_resolve_as_jobs) {
  for (const auto& m : kModels) {
    BOOST_TEST_CONTEXT(m.preset) {
      ModelSection s;
      s.preset = m.preset;
      const ModelConfig c = resolve_model_config(s);
      BOOST_TEST(c.name == m.preset);
      BOOST_TEST(total_params(c) == m.params);
      BOOST_TEST((c.rope_scaling == model_preset(m.preset).rope_scaling));
    }
  }
  ModelSection s;
  s.preset = "llama3.1-8b";
  s.rope_factor = 16;
  ModelConfig c = resolve_model_config(s);
  BOOST_TEST(c.rope_scaling.factor == 16.0);
  BOOST_TEST(c.name == "llama3.1-8b+custom");
  s.rope_factor = 0;
  s.rope_scaling = "none";
  c = resolve_model_config(s);
  BOOST_TEST((c.rope_scaling.type == RopeScalingType::none));
  BOOST_TEST(c.name == "llama3.1-8b+custom");
}

// The config.json of each model, read by the importer, is the preset's model (but for the
// context: config.json's max_position_embeddings 131072, the preset's seq_len 8192).
BOOST_AUTO_TEST_CASE(llama3_1_and_3_2_match_hf_config_json) {
  const fs::path dir = fs::temp_directory_path() / ("mpitron-presets-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (const auto& m : kModels) {
    BOOST_TEST_CONTEXT(m.preset) {
      const fs::path path = dir / (std::string(m.preset) + ".json");
      std::ofstream(path) << hf_config_json(m);
      const ModelConfig hf = hf_model_config(path.string());
      const ModelConfig p = model_preset(m.preset);
      BOOST_TEST(hf.n_layer == p.n_layer);
      BOOST_TEST(hf.n_head == p.n_head);
      BOOST_TEST(hf.n_kv_head == p.n_kv_head);
      BOOST_TEST(hf.d_model == p.d_model);
      BOOST_TEST(hf.d_ff == p.d_ff);
      BOOST_TEST(hf.vocab_size == p.vocab_size);
      BOOST_TEST(hf.tied_embeddings == p.tied_embeddings);
      BOOST_TEST(hf.norm_eps == p.norm_eps);
      BOOST_TEST(hf.rope_theta == p.rope_theta);
      BOOST_TEST((hf.rope_scaling == p.rope_scaling));
      BOOST_TEST(hf.seq_len == 131072);
      BOOST_TEST(total_params(hf) == m.params);
    }
  }
  fs::remove_all(dir);
}

// Qwen3 against Qwen's config.json files: the sizes, the head of 128 (not d_model / n_head for
// 0.6B and 30B-A3B), the q/k norm, and the published parameter counts.
BOOST_AUTO_TEST_CASE(qwen3_shapes_and_counts) {
  struct Qwen {
    const char* preset;
    int layers, d, heads, kv_heads, ff, experts;
    bool tied;
    int64_t params;
  };
  const Qwen models[] = {{"qwen3-0.6b", 28, 1024, 16, 8, 3072, 0, true, 596049920LL},
                         {"qwen3-1.7b", 28, 2048, 16, 8, 6144, 0, true, 1720574976LL},
                         {"qwen3-8b", 36, 4096, 32, 8, 12288, 0, false, 8190735360LL},
                         {"qwen3-30b-a3b", 48, 2048, 32, 4, 768, 128, false, 30532122624LL}};
  for (const auto& m : models) {
    BOOST_TEST_CONTEXT(m.preset) {
      const ModelConfig c = model_preset(m.preset);
      BOOST_TEST(c.n_layer == m.layers);
      BOOST_TEST(c.d_model == m.d);
      BOOST_TEST(c.n_head == m.heads);
      BOOST_TEST(c.n_kv_head == m.kv_heads);
      BOOST_TEST(c.head_dim() == 128);
      BOOST_TEST(c.attention_width() == int64_t{m.heads} * 128);
      BOOST_TEST((c.moe.enabled() ? c.moe.d_ff : c.d_ff) == m.ff);
      BOOST_TEST(c.moe.n_experts == m.experts);
      BOOST_TEST(c.qk_norm);
      BOOST_TEST(!c.qkv_bias);
      BOOST_TEST(c.tied_embeddings == m.tied);
      BOOST_TEST(c.vocab_size == 151936);
      BOOST_TEST(c.norm_eps == 1e-6f);
      BOOST_TEST(c.rope_theta == 1e6);
      BOOST_TEST(total_params(c) == m.params);
      ModelSection s;  // a job naming the preset resolves to it unchanged
      s.preset = m.preset;
      BOOST_TEST(resolve_model_config(s).name == m.preset);
      BOOST_TEST(total_params(resolve_model_config(s)) == m.params);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
