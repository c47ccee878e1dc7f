// `mpitron export`: a checkpoint's model in the formats other tools load (docs/export.md).
#pragma once
#include <cstdint>
#include <string>

namespace mpitron {

struct HfExportOptions {
  std::string dtype = "fp32";                  // hf: fp32 | bf16 | fp16; gguf: f32 | f16 | bf16 | q8_0
  uint64_t max_shard_bytes = 5000000000ull;    // tensor bytes per safetensors file (HF's 5GB)
  bool quiet = false;                          // no progress lines on stderr
};

struct ExportSummary {
  int tensors = 0, files = 0;
  uint64_t bytes = 0;  // bytes written (all files)
  double seconds = 0;
};

// A Hugging Face model directory from checkpoint file `ckpt` (one process; memory: one tensor
// at a time): model.safetensors (or model-0000N-of-0000M.safetensors + its index),
// config.json, generation_config.json and the tokenizer files. Creates `out_dir`; overwrites
// the files it writes, each whole or not at all.
ExportSummary export_hf(const std::string& ckpt, const std::string& out_dir, const HfExportOptions& opt);

// One GGUF file for llama.cpp (arch "llama" or "gpt2"), opt.dtype f32 (or fp32) | f16 | bf16 |
// q8_0 for the matrices (norms and biases stay f32), with tokenizer.ggml.* (byte-level BPE).
ExportSummary export_gguf(const std::string& ckpt, const std::string& out_file, const HfExportOptions& opt);

}  // namespace mpitron
