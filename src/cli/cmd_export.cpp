// `mpitron export CKPT --format hf --out DIR [--dtype fp32|bf16|fp16] [--max-shard-size 5GB]`
#include <cstdio>
#include <string>

#include "mpitron/checkpoint/export.hpp"
#include "mpitron/cli/commands.hpp"
#include "mpitron/core/error.hpp"
#include "mpitron/checkpoint/checkpoint.hpp"
#include "option_values.hpp"
#include "output_paths.hpp"

namespace mpitron {
namespace {

const char* kHelp =
    "usage: mpitron export CHECKPOINT --format hf --out DIR [--dtype fp32|bf16|fp16]\n"
    "                      [--max-shard-size 5GB] [--quiet]\n"
    "       mpitron export CHECKPOINT --format gguf --out FILE.gguf [--dtype f32|f16|bf16|q8_0]\n\n"
    "Writes a checkpoint's model (a step_*.h5 file, a ckpt folder or its `latest`, or a run\n"
    "folder) in a format other tools load. One process; memory: one tensor at a time.\n"
    "  --format hf          a Hugging Face model folder that transformers loads as it is:\n"
    "                       model.safetensors (or model-0000N-of-0000M.safetensors + index),\n"
    "                       config.json (GPT2LMHeadModel / LlamaForCausalLM / MixtralForCausalLM),\n"
    "                       generation_config.json, and the tokenizer (tokenizer.json for GPT-2\n"
    "                       BPE and the byte tokenizer, tokenizer.model for SentencePiece)\n"
    "  --format gguf        one GGUF file for llama.cpp (arch llama or gpt2) with its tokenizer\n"
    "                       (tokenizer.ggml.*: byte-level BPE; SentencePiece not yet)\n"
    "  --out DIR|FILE       hf: the folder (created; the files it writes are replaced whole);\n"
    "                       gguf: the file (replaced whole)\n"
    "  --dtype D            hf: fp32 (exact, the default), bf16 or fp16 (rounded to nearest even);\n"
    "                       gguf: f32 (default), f16, bf16 or q8_0 for the matrices (norms and\n"
    "                       biases stay f32)\n"
    "  --max-shard-size S   tensor bytes per safetensors file (5GB; units B KB MB GB, KiB MiB GiB)\n"
    "  --quiet              no progress lines\n\n"
    "Layouts: HF's GPT-2 Conv1D weights are stored [in, out]; LLaMA's q and k rows are permuted from\n"
    "mpitron's interleaved RoPE pairs to Hugging Face's rotate-half pairs. GGUF keeps mpitron's\n"
    "layout: llama.cpp's llama rotates adjacent pairs, as mpitron does (docs/export.md).\n"
    "Mixture-of-experts models export in Mixtral's layout (HF MixtralForCausalLM; GGUF ffn_gate_inp\n"
    "and the experts stacked in ffn_{gate,up,down}_exps): every block MoE, no shared experts, top-k\n"
    "weights renormalised; other [model.moe] settings are refused with the keys named.\n";

}  // namespace

int cmd_export(const Args& args) {
  std::string ckpt, format, out;
  HfExportOptions opt;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> std::string {
      usage_check(i + 1 < args.size(), "export: {} needs a value", a);
      return args[++i];
    };
    if (a == "--help" || a == "-h") {
      std::printf("%s", kHelp);
      return 0;
    } else if (a == "--format") {
      format = value();
    } else if (a == "--out") {
      out = value();
    } else if (a == "--dtype") {
      opt.dtype = value();
    } else if (a == "--max-shard-size") {
      opt.max_shard_bytes = option_bytes(a, value());
    } else if (a == "--quiet") {
      opt.quiet = true;
    } else if (a.rfind("--", 0) == 0) {
      usage_fail("export: unknown option '{}' (allowed: --format, --out, --dtype, --max-shard-size, --quiet)", a);
    } else {
      usage_check(ckpt.empty(), "export: one checkpoint only (got '{}' and '{}')", ckpt, a);
      ckpt = a;
    }
  }
  usage_check(!ckpt.empty(), "export: give a checkpoint (e.g. runs/x/ckpt/latest); see --help");
  usage_check(!format.empty(), "export: give --format (allowed: hf, gguf)");
  usage_check(format == "hf" || format == "gguf", "export: unknown --format '{}' (allowed: hf, gguf)", format);
  usage_check(!out.empty(), "export: give --out {}", format == "hf" ? "DIR" : "FILE.gguf");
  const std::string path = resolve_checkpoint_path(ckpt);
  check_output_apart("export", "--out", out, {path});
  const ExportSummary s = format == "hf" ? export_hf(path, out, opt) : export_gguf(path, out, opt);
  std::fprintf(stderr, "export: %d tensors (%s) in %d file(s), %.1f MB in %.2f s (%.0f MB/s) -> %s\n", s.tensors,
               opt.dtype.c_str(), s.files, s.bytes / 1e6, s.seconds, s.bytes / 1e6 / std::max(s.seconds, 1e-9),
               out.c_str());
  return 0;
}

}  // namespace mpitron
