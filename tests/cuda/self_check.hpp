// Every CudaOps kernel against the CPU backend (Ops, fp32) on random inputs. The inputs are
// rounded to bf16 first and the CPU runs on exactly those values, so what is measured is the GPU
// kernel's own error (bf16 outputs and intermediates, fp32 accumulation order), as
//   rel_err = max |gpu - cpu| / max |cpu|  over the output tensor,
// against a bound stated per op: bf16 outputs 1e-2 (a bf16 rounding is 2^-9 ~ 2e-3 relative),
// fp32 outputs computed from the same bf16 inputs 1e-3, exact copies 0.
// Used by tests/unit/test_cuda_ops.cpp (small sizes) and bench/gpu/gpu_check.cpp (GPT-2 sizes);
// test code, so not in the library (the Makefile links it into those two in CUDA builds).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "mpitron/ops/cuda/cuda_ops.hpp"
#include "mpitron/ops/ops.hpp"

namespace mpitron {

struct OpCheck {
  std::string op;      // "matmul_forward.out", ...
  double rel_err = 0;  // max |gpu - ref| / max |ref|
  double bound = 0;
  std::string error;   // the exception that stopped this op family ("" when it ran)
  bool pass() const { return error.empty() && rel_err <= bound; }
};

struct SelfCheckShape {
  int B = 2, T = 64, C = 128, H = 4;  // attention: hd = C / H
  int KV = 2;                         // the grouped-query attention case: KV kv heads (0: not run)
  int V = 1000, Vp = 1024;            // cross-entropy / embedding vocabulary (real, padded)
  uint64_t seed = 1234;
};

// Runs every op once on `gpu` (synchronising) and on `cpu`; one OpCheck per output tensor. An op
// family that throws (e.g. cuDNN finds no plan) yields one failed OpCheck carrying the message,
// and the other families still run.
std::vector<OpCheck> check_cuda_ops_against_cpu(CudaOps& gpu, Ops& cpu, const SelfCheckShape& shape);

// Attention alone (out, stats, dqkv) with KV kv heads (KV = H: through the default kv_heads).
std::vector<OpCheck> check_attention_against_cpu(CudaOps& gpu, Ops& cpu, const SelfCheckShape& shape, int KV);

// The two GPU attention paths against each other (out, stats, dqkv) at one shape (KV kv heads, 0: H).
std::vector<OpCheck> check_attention_paths(CudaOps& a, CudaOps& b, int B, int T, int H, int hd, uint64_t seed,
                                           int KV = 0);

}  // namespace mpitron
