// gpu_check's fp8 section (fp8_timings.cpp): the FP8 linears against bf16 at model shapes.
#pragma once
#include "report.hpp"

namespace mpitron::gpu_check {

// The four linears of a block (fused qkv, attention output, fc or gate|up, the MLP's second matrix)
// at gpt2-124m, llama-1b-like and llama-3b-like shapes, 8192 rows: bf16 (CudaOps::matmul_*) against
// FP8 (CudaDevice::fp8_matmul_*, train.precision = "fp8"), forward + backward, with the FP8 GEMMs
// and the casts (amax, cast, transposed copies) timed apart. Timings only: nothing is bounded.
void fp8_section(Report& rep);

}  // namespace mpitron::gpu_check
