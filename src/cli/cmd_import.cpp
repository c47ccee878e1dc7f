// `mpitron import hf:DIR --out FILE.h5`: a Hugging Face model folder as an mpitron checkpoint.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

#include "mpitron/checkpoint/hf_import.hpp"
#include "mpitron/cli/commands.hpp"
#include "mpitron/core/error.hpp"
#include "mpitron/model/arch.hpp"
#include "mpitron/core/version.hpp"
#include "mpitron/distributed/launch.hpp"
#include "mpitron/model/param_tables.hpp"
#include "mpitron/checkpoint/checkpoint.hpp"
#include "output_paths.hpp"

namespace mpitron {
namespace {

const char* kHelp =
    "usage: mpitron import hf:DIR --out FILE.h5\n\n"
    "Writes a Hugging Face model folder (config.json of GPT2LMHeadModel, LlamaForCausalLM, Mixtral,\n"
    "Qwen2, Qwen3 or Qwen3-MoE;\n"
    "model.safetensors or sharded model-*.safetensors with their index; F32, BF16 or F16) as an\n"
    "mpitron checkpoint: the parameters (no optimizer state), the model config from config.json\n"
    "and the tokenizer (tokenizer.json: byte-level BPE; tokenizer.model: SentencePiece). Start a\n"
    "run from it with train.init_from = \"FILE.h5\", or directly from the folder with\n"
    "train.init_from = \"hf:DIR\" (any layout; docs/export.md). One process, one tensor at a time:\n"
    "memory holds the largest tensor in fp32, not the model.\n";

}  // namespace

int cmd_import(const Args& args) {
  std::string src, out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      std::printf("%s", kHelp);
      return 0;
    } else if (a == "--out") {
      usage_check(i + 1 < args.size(), "import: --out needs a value");
      out = args[++i];
    } else if (a.rfind("--", 0) == 0) {
      usage_fail("import: unknown option '{}' (allowed: --out)", a);
    } else {
      usage_check(src.empty(), "import: one source only (got '{}' and '{}')", src, a);
      src = a;
    }
  }
  usage_check(!src.empty(), "import: give the source, hf:DIR; see --help");
  usage_check(src.rfind("hf:", 0) == 0, "import: unknown source '{}' (allowed: hf:DIR)", src);
  usage_check(!out.empty(), "import: give --out FILE.h5");
  std::error_code ec;
  usage_check(!std::filesystem::is_directory(out, ec), "import: --out '{}' is a folder; give a file name", out);
  check_output_apart("import", "--out", out, {src.substr(3)});
  const auto t0 = std::chrono::steady_clock::now();
  // The tokenizer before the tensors: one with more ids than config.json's vocab_size is named as
  // such, not as an embedding of the wrong shape.
  const std::string dir = src.substr(3);
  std::string tokenizer;
  if (std::filesystem::is_directory(dir, ec)) tokenizer = hf_tokenizer_json(dir, hf_model_config(dir + "/config.json").vocab_size);
  const HfModel hf(dir);
  init_launch();  // the checkpoint writer is MPI-IO (over this one process)

  CheckpointMeta meta;
  meta.model = hf.config();
  meta.layout = GridShape{1, 1, 1, 1};
  meta.tokenizer_json = tokenizer;
  meta.job_toml = fmt::format("# imported from {}\n", src);
  meta.version = kVersion;
  check_meta_savable(meta);
  // From the safetensors files into the checkpoint a few MB at a time: memory holds a few MB.
  CheckpointWriteOptions opt;
  opt.tensor_source = [&](const std::string& name, int64_t row0, int64_t rows, float* into) {
    hf.read_rows(name, row0, rows, into);
  };
  const std::string tmp = out + ".tmp";
  try {
    write_checkpoint_file(tmp, MPI_COMM_SELF, meta, {}, opt);
  } catch (...) {
    std::filesystem::remove(tmp, ec);  // nothing half-written stays behind
    throw;
  }
  usage_check(std::rename(tmp.c_str(), out.c_str()) == 0, "import: cannot rename '{}' to '{}'", tmp, out);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "import: %s -> %s: %s, %zu parameters, tokenizer %s (%.2f s)\n", src.c_str(), out.c_str(),
               meta.model.moe.enabled()   ? fmt::format("{} ({} experts, top {})", meta.model.qk_norm ? "Qwen3-MoE" : "Mixtral", meta.model.moe.n_experts,
                                                        meta.model.moe.top_k).c_str()
                                          : family_name(meta.model),
               hf.parameter_count(),
               meta.tokenizer_json.empty() ? "none" : "stored", secs);
  return 0;
}

}  // namespace mpitron
