#include "mpitron/ops/cuda/check.hpp"

#include <cublas_v2.h>

#include "mpitron/core/error.hpp"

namespace mpitron::cuda {

void cuda_check(cudaError_t e, const char* call) {
  if (e == cudaSuccess) return;
  cudaGetLastError();  // clear a non-sticky error so the next call reports its own
  fail("{} failed: CUDA error {} ({}): {}", call, static_cast<int>(e), cudaGetErrorName(e), cudaGetErrorString(e));
}

void cublas_check(cublasStatus_t s, const char* call) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  fail("{} failed: cuBLAS status {} ({})", call, static_cast<int>(s), cublasGetStatusString(s));
}

void cudnn_check(cudnnStatus_t s, const char* call) {
  if (s == CUDNN_STATUS_SUCCESS) return;
  char last[1024] = {};
  cudnnGetLastErrorString(last, sizeof last);
  fail("{} failed: cuDNN status {} ({}){}{}", call, static_cast<int>(s), cudnnGetErrorString(s), last[0] ? ": " : "",
       last);
}

void launch_check(const char* kernel) {
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return;
  fail("kernel launch {} failed: CUDA error {} ({}): {}", kernel, static_cast<int>(e), cudaGetErrorName(e),
       cudaGetErrorString(e));
}

void throw_error(const std::string& msg) { throw Error(msg); }

}  // namespace mpitron::cuda
