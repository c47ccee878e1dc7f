// gpu_check's training comparison on the CPU emulation of CudaOps (fake_cuda.cpp):
// TransformerModelCuda against the CPU TransformerModel without a GPU. See run.sh.
//   emulated_check RESULTS.md [PRESET B]   (PRESET B: also one timed step of that preset, slow)
#include <cstdlib>
#include <cstring>
#include <vector>

#include "../report.hpp"
#include "../training_check.hpp"
#include "mpitron/model/cuda/transformer_model_cuda.hpp"
#include "mpitron/model/transformer_model.hpp"

using namespace mpitron;
using namespace mpitron::gpu_check;

int main(int argc, char** argv) {
  if (argc != 2 && argc != 4) {
    std::fprintf(stderr, "usage: emulated_check RESULTS.md [PRESET B]\n");
    return 2;
  }
  Report rep(argv[1]);
  rep.line("# TransformerModelCuda on a CPU emulation of CudaOps (bench/gpu/emulate): wiring check, no GPU\n");
  auto cpu = make_cpu_ops();
  {  // TransformerModelCuda::init_weights = TransformerModel::init_weights, bit for bit
    const ModelConfig cfg = model_preset("tiny");
    TransformerModel ref(cfg, ModelShard{}, *cpu, 1);
    ref.init_weights(7);
    auto ops = make_cuda_ops();
    TransformerModelCuda model(cfg, ModelShard{}, *ops, 1);
    model.init_weights(7);
    std::vector<float> host(model.num_params());
    model.copy_params_to_host(host.data(), host.size());
    const bool same =
        host.size() == ref.num_params() && std::memcmp(host.data(), ref.param_data(), host.size() * sizeof(float)) == 0;
    rep.line("TransformerModelCuda::init_weights(7) equals TransformerModel::init_weights(7) bit for bit: {}\n",
             same ? "ok" : "**FAIL**");
    if (!same) ++rep.failures;
  }
  tiny_training_check(rep, *cpu);
  if (argc == 4) {
    rep.line("| model | micro-batch | initial loss CPU / GPU (rel diff) | ms/step | tokens/s | TFLOP/s | MFU (peak) | "
             "MFU (GEMM rate) | loss | model device memory |\n|---|---|---|---|---|---|---|---|---|---|");
    time_training_step(rep, *cpu, argv[2], std::atoi(argv[3]), 0.0);
  }
  rep.line("\nResult: {}", rep.failures == 0 ? "every check passed" : fmt::format("{} check(s) failed", rep.failures));
  return rep.failures == 0 ? 0 : 1;
}
