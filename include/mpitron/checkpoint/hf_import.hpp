// Reading a Hugging Face model folder (config.json + safetensors, sharded or not, F32/BF16/F16):
// `mpitron import hf:DIR` and `train.init_from = "hf:DIR"`. The name and layout rules are
// export's (external_layout.hpp), inverted.
#pragma once
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "mpitron/checkpoint/external_layout.hpp"
#include "mpitron/checkpoint/safetensors.hpp"
#include "mpitron/model/config.hpp"
#include "mpitron/checkpoint/checkpoint.hpp"

namespace mpitron {

struct ModelSection;

class HfModel {
 public:
  // Reads DIR/config.json and the safetensors headers; checks that every tensor the model needs
  // is there with its HF shape and a float dtype, and that nothing else is (GPT-2's attention-mask
  // buffers and a tied model's lm_head.weight are ignored). UsageError naming file and tensor.
  explicit HfModel(const std::string& dir);
  HfModel(const HfModel&) = delete;  // where_ points into table_
  HfModel& operator=(const HfModel&) = delete;
  const ModelConfig& config() const { return cfg_; }
  const std::string& dir() const { return dir_; }
  // The tokenizer's JSON (tokenizer.json or tokenizer.model), "" if the folder has none.
  std::string tokenizer_json() const;
  // Tensor `name` (mpitron's) at the checkpoint file's shape and layout, as float.
  std::vector<float> tensor(const std::string& name) const;
  // The elements of all the model's tensors (a tied head counted once).
  size_t parameter_count() const;
  // Rows [row0, row0 + rows) of that tensor (dimension 0 of the file's shape; a row is the rest)
  // into `out`: the import streams a tensor through a few MB, not the tensor's size. Not
  // thread-safe (one scratch buffer).
  void read_rows(const std::string& name, int64_t row0, int64_t rows, float* out) const;

 private:
  struct Where {
    std::string file;
    SafetensorsEntry entry;
    uint64_t data_start = 0;
    const ExternalTensor* tensor = nullptr;  // its entry in table_
  };
  const Where& where(const std::string& name) const;
  // Rows [row0, row0 + rows) of the file's tensor as stored (HF layout), as float, refusing a
  // non-finite value.
  void read_file_rows(const Where& at, int64_t row0, int64_t rows, float* out) const;
  std::string dir_;
  ModelConfig cfg_;
  std::vector<ExternalTensor> table_;
  std::map<std::string, Where> where_;  // by mpitron name
  // read_rows' scratch, reused from call to call: fresh buffers cost a page fault per 4 KB.
  mutable std::vector<char> raw_;
  mutable std::vector<float> rows_;
  mutable std::string whole_name_;  // a transposed tensor (GPT-2's Conv1D) is read whole, once
  mutable std::vector<float> whole_;
};

// The model of an HF config.json (GPT2LMHeadModel / LlamaForCausalLM). UsageError naming the
// field otherwise.
ModelConfig hf_model_config(const std::string& config_json_path);

// The folder's tokenizer (tokenizer.json or tokenizer.model) as mpitron's JSON, "" if it has none;
// UsageError naming the file when it has more ids than `vocab_size` (config.json's).
std::string hf_tokenizer_json(const std::string& dir, int vocab_size);

// train.init_from = "hf:DIR": the model is config.json's; every [model] key the job sets (not 0
// or "auto") must agree with it, or a UsageError names each key that does not.
ModelConfig model_for_hf_init(const ModelSection& job, const std::string& hf_dir);

// Whether an HF model (config.json's) may train on windows of `seq_len`: a RoPE model (the LLaMA
// family) on any up to max_position_embeddings (a LLaMA 3.2 at 8192 of its 131072), GPT-2 only
// on exactly n_positions (its learned positions are that many rows).
inline bool hf_trains_at(const ModelConfig& hf, int seq_len) {
  return hf.arch == Arch::llama ? seq_len <= hf.seq_len : seq_len == hf.seq_len;
}

// Fills this rank's parameters (shards' params ranges, any layout) from the folder, one full
// tensor at a time: peak memory is this rank's shard plus one tensor.
void load_hf_into_shards(const HfModel& hf, std::span<CheckpointShard> shards);

}  // namespace mpitron
