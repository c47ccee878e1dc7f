// The one kernel GptCuda needs beyond CudaOps (host-side declaration, so g++ units can include it).
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>

#include "mpitron/core/dtype.hpp"

namespace mpitron::cuda {

// x[i] *= s in fp32, rounded back to bf16 (the head's input gradient gets its loss scale).
void scale_bf16(cudaStream_t s, bf16* x, float scale, size_t n);

}  // namespace mpitron::cuda
