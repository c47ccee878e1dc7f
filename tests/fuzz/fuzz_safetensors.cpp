// Fuzz target: a safetensors file, read as `mpitron import hf:DIR` and `train.init_from = hf:DIR`
// read one: the header (read_safetensors_header), then as a tiny LLaMA's model.safetensors next to
// a fixed config.json (HfModel: names, dtypes, shapes) and every tensor (F32/BF16/F16 to float,
// the layout inverted).
//
// Seeds: MPITRON_FUZZ_WRITE_SEEDS=DIR fuzz_safetensors writes that model's model.safetensors in
// F32, BF16 and F16 with the product's writer (SafetensorsWriter) to DIR and exits (`make fuzz-seeds`).
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_common.hpp"
#include "mpitron/checkpoint/hf_import.hpp"
#include "mpitron/checkpoint/safetensors.hpp"
#include "mpitron/core/dtype.hpp"

using namespace mpitron;

namespace {

const char* kConfig =
    R"({"model_type": "llama", "vocab_size": 8, "hidden_size": 8, "intermediate_size": 16,
        "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
        "max_position_embeddings": 4, "rms_norm_eps": 1e-5, "rope_theta": 10000.0})";

void write_text(const std::string& path, const std::string& text) {
  fuzz::write_file(path, reinterpret_cast<const uint8_t*>(text.data()), text.size());
}

void write_seeds(const std::string& dir) {
  fuzz::fs::create_directories(dir);
  const std::string cfg_dir = fuzz::scratch("seedcfg");
  fuzz::fs::create_directories(cfg_dir);
  write_text(cfg_dir + "/config.json", kConfig);
  const ModelConfig c = hf_model_config(cfg_dir + "/config.json");
  for (const char* dt : {"F32", "BF16", "F16"}) {
    std::vector<SafetensorsEntry> entries;
    std::vector<std::vector<char>> data;
    for (const ExternalTensor& t : external_tensors(c)) {
      std::vector<int64_t> shape;
      if (t.name.find("norm") != std::string::npos) shape = {c.d_model};
      else if (t.name.find("embed_tokens") != std::string::npos || t.name == "lm_head.weight") shape = {c.vocab_size, c.d_model};
      else if (t.name.find("q_proj") != std::string::npos || t.name.find("o_proj") != std::string::npos) shape = {8, 8};
      else if (t.name.find("k_proj") != std::string::npos || t.name.find("v_proj") != std::string::npos) shape = {4, 8};
      else if (t.name.find("down_proj") != std::string::npos) shape = {8, 16};
      else shape = {16, 8};
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      std::vector<char> bytes;
      for (int64_t i = 0; i < n; ++i) {
        const float v = 0.01f * static_cast<float>(i % 17) - 0.05f;
        if (std::string(dt) == "F32") {
          bytes.insert(bytes.end(), reinterpret_cast<const char*>(&v), reinterpret_cast<const char*>(&v) + 4);
        } else {
          const uint16_t h = std::string(dt) == "BF16" ? to_bf16(v).bits : to_fp16_bits(v);
          bytes.insert(bytes.end(), reinterpret_cast<const char*>(&h), reinterpret_cast<const char*>(&h) + 2);
        }
      }
      entries.push_back({t.hf_name, dt, shape});
      data.push_back(std::move(bytes));
    }
    SafetensorsWriter w(dir + "/llama_" + dt + ".safetensors", entries, {{"format", "pt"}});
    for (const auto& d : data) w.write_next(d.data(), d.size());
    w.finish();
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::init("safetensors");
  if (const char* dir = std::getenv("MPITRON_FUZZ_WRITE_SEEDS")) {
    write_seeds(dir);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::begin_input();
  static const std::string dir = [] {
    std::string d = fuzz::scratch("model");
    fuzz::fs::create_directories(d);
    write_text(d + "/config.json", kConfig);
    return d;
  }();
  const std::string path = dir + "/model.safetensors";
  fuzz::write_file(path, data, size);
  fuzz::run_one(
      [&] {
        SafetensorsHeader h = read_safetensors_header(path);
        for (const auto& e : h.entries)
          if (e.end < e.begin || h.data_start + e.end > size)
            fuzz::bug("an entry outside the file passed the header check: " + e.name);
        HfModel m(dir);
        for (const ExternalTensor& t : external_tensors(m.config())) (void)m.tensor(t.name);
      },
      dir);
  return 0;
}
