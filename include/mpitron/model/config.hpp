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

  int head_dim() const { return d_model / n_head; }
  // Vocabulary padded to a multiple of 64*tp, so every TP shard is a multiple of 64.
  int padded_vocab(int tp = 1) const {
    int m = 64 * tp;
    return (vocab_size + m - 1) / m * m;
  }
};

// Named presets: tiny, gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1.5b (and, for planning,
// llama2-7b/13b/70b, llama3-8b/70b/405b). Throws UsageError listing them for an unknown name.
ModelConfig model_preset(const std::string& name);
std::vector<std::string> model_preset_names();

// Preset overlaid with the non-zero fields of the job's [model] section; validated
// (d_model divisible by n_head, all positive). Throws UsageError naming the bad key.
ModelConfig resolve_model_config(const ModelSection& s);

}  // namespace mpitron
