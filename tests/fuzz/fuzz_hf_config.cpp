// Fuzz target: a Hugging Face config.json, read as `mpitron import hf:DIR` and
// `train.init_from = hf:DIR` read it (hf_model_config, then model_for_hf_init with a job that sets
// no [model] key). Beyond the harness's contract (accept, or a clear Error naming the file), an
// accepted config must describe a model mpitron can build: every size in range, heads that divide
// the hidden size and the query heads, an even head size for RoPE, finite positive rates. A value
// the reader truncated or let through out of range is reported as a bug.
//
// Seeds: tests/fuzz/corpus/hf_config/*.json (hand-written: GPT-2, LLaMA with GQA, Mixtral, LLaMA 3.1
// with its rope_scaling, Qwen2, Qwen3 with heads wider than hidden / heads, Qwen3-MoE, and edge
// values).
#include <cmath>
#include <cstdint>
#include <string>

#include "fuzz_common.hpp"
#include "mpitron/checkpoint/hf_import.hpp"
#include "mpitron/config/job_config.hpp"

using namespace mpitron;

namespace {

void check_model(const ModelConfig& c) {
  auto need = [](bool ok, const char* what) {
    if (!ok) fuzz::bug(std::string("an accepted config.json describes an impossible model: ") + what);
  };
  need(c.n_layer >= 1 && c.n_head >= 1 && c.n_kv_head >= 1 && c.d_model >= 1 && c.d_ff >= 1, "a size below 1");
  need(c.seq_len >= 2 && c.vocab_size >= 1, "positions below 2 or an empty vocabulary");
  need((c.head_size > 0 || c.d_model % c.n_head == 0) && c.n_head % c.n_kv_head == 0, "heads that do not divide");
  need(c.head_size == 0 || (c.arch == Arch::llama && c.head_size >= 2), "a head_dim on GPT-2 or below 2");
  need(c.arch != Arch::llama || c.head_dim() % 2 == 0, "an odd head size under RoPE");
  need(!c.qkv_bias || c.head_dim() % 16 == 0, "q/k/v biases on a head size that is not a multiple of 16");
  need(!(c.qkv_bias && c.qk_norm), "both Qwen2's biases and Qwen3's q/k norms");
  need(std::isfinite(c.rope_theta) && c.rope_theta > 1, "rope_theta not finite or <= 1");
  need(std::isfinite(c.norm_eps) && c.norm_eps > 0 && c.norm_eps < 1, "norm_eps outside (0, 1)");
  if (c.moe.enabled()) {
    need(c.moe.top_k >= 1 && c.moe.top_k <= c.moe.n_experts, "top_k outside [1, n_experts]");
    need(std::isfinite(c.moe.aux_loss_coef) && c.moe.aux_loss_coef >= 0, "a negative or non-finite aux_loss_coef");
    need(std::isfinite(c.moe.z_loss_coef) && c.moe.z_loss_coef >= 0, "a negative or non-finite z_loss_coef");
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::init("hf_config");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::begin_input();
  static const std::string dir = [] {
    std::string d = fuzz::scratch("model");
    fuzz::fs::create_directories(d);
    return d;
  }();
  const std::string path = dir + "/config.json";
  fuzz::write_file(path, data, size);
  fuzz::run_one(
      [&] {
        const ModelConfig c = hf_model_config(path);
        check_model(c);
        check_model(model_for_hf_init(ModelSection{}, dir));
      },
      "config.json");
  return 0;
}
