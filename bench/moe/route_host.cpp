// The MoE router's host cost (moe_routing.hpp: top-k, weights, the expert-sorted order, the aux
// and z losses, and the router's backward) per MoE block and micro-batch, at the published
// shapes of Mixtral 8x7B and OLMoE 1B-7B, next to the FLOPs of that block's expert GEMMs (the
// time they take at an assumed GPU GEMM rate): what routing on the host, as the GPU backend
// does (one logits copy and sync per block), costs against the work it routes. One core.
//   moe_route_host [RESULTS.md] [GEMM_TFLOPS (default 600, bf16 dense on an H100/H200)]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "mpitron/core/rng.hpp"
#include "mpitron/model/config.hpp"
#include "mpitron/model/moe/moe_routing.hpp"

using namespace mpitron;

namespace {

double seconds_of(auto&& f) {
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const char* out_path = argc > 1 ? argv[1] : nullptr;
  const double tflops = argc > 2 ? std::atof(argv[2]) : 600.0;
  std::string md = "| model | rows (tokens) | E | top k | host routing fwd ms | router bwd ms | expert GEMMs fwd+bwd GFLOP | "
                   "their ms at " + std::to_string(static_cast<int>(tflops)) + " TFLOP/s | routing / GEMMs |\n|---|---|---|---|---|---|---|---|---|\n";
  for (const char* preset : {"mixtral-8x7b", "olmoe-1b-7b"}) {
    const ModelConfig cfg = model_preset(preset);
    for (int64_t R : {int64_t{4096}, int64_t{16384}}) {
      const int E = cfg.moe.n_experts, k = cfg.moe.top_k;
      std::vector<float> logits(static_cast<size_t>(R * E));
      for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(normal_at(1, 7, i));
      MoeRouting r;
      const double fwd = seconds_of([&] { moe_route(cfg.moe, logits.data(), R, cfg.seq_len, r); });
      std::vector<float> dweight(static_cast<size_t>(R * k), 0.01f), dlogits(static_cast<size_t>(R * E));
      const double bwd = seconds_of([&] { moe_router_backward(cfg.moe, r, dweight.data(), 1e-5, dlogits.data()); });
      // Expert SwiGLU per copy: 3 GEMMs of C x Fe, forward 2 flops per MAC, backward twice that.
      const double gflop = 3.0 * 2.0 * 3.0 * double(R) * k * cfg.d_model * cfg.moe.d_ff / 1e9;
      const double gemm_ms = gflop / tflops;  // GFLOP / (TFLOP/s) = ms
      char line[512];
      std::snprintf(line, sizeof line, "| %s | %lld | %d | %d | %.2f | %.2f | %.0f | %.2f | %.2fx |\n", preset,
                    static_cast<long long>(R), E, k, 1e3 * fwd, 1e3 * bwd, gflop, gemm_ms, 1e3 * (fwd + bwd) / gemm_ms);
      md += line;
      std::fputs(line, stdout);
    }
  }
  if (out_path) {
    FILE* f = std::fopen(out_path, "w");
    if (!f) return 1;
    std::string cpu = "unknown CPU";
    if (FILE* c = std::fopen("/proc/cpuinfo", "r")) {
      char buf[512];
      while (std::fgets(buf, sizeof buf, c))
        if (std::string(buf).rfind("model name", 0) == 0) {
          cpu = std::string(buf).substr(std::string(buf).find(':') + 2);
          cpu.erase(cpu.find_last_not_of(" \n") + 1);
          break;
        }
      std::fclose(c);
    }
    std::fprintf(f,
                 "# The MoE router on the host against its block's expert GEMMs\n\n"
                 "`make bench-moe-route` (bench/moe/route_host.cpp), one core of %s, best of 5. Routing: moe_route "
                 "(softmax, top-k, weights, the expert-sorted order, aux and z losses) and moe_router_backward per MoE "
                 "block and micro-batch of `rows` tokens, random logits. GEMMs: the block's expert SwiGLU FLOPs "
                 "(forward and backward, 18 x rows x top_k x d_model x expert_d_ff) at %.0f TFLOP/s, what the GPU "
                 "backend's routed experts would take on an H100/H200 at a realistic bf16 rate. The GPU backend "
                 "routes on the host (one logits copy and sync per block), so the last column is what that costs "
                 "against the work it routes when the host does not overlap it.\n\n",
                 cpu.c_str(), tflops);
    std::fputs(md.c_str(), f);
    std::fclose(f);
  }
  return 0;
}
