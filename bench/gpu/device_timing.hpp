// Device buffers and kernel timing for gpu_check's timing sections (gpu_check.cpp, fp8_timings.cpp).
#pragma once
#include <cuda_runtime_api.h>

#include <algorithm>
#include <functional>
#include <vector>

#include "mpitron/core/error.hpp"
#include "mpitron/ops/cuda/cuda_ops.hpp"

namespace mpitron::gpu_check {

inline void cuda_ok(cudaError_t e, const char* call) {
  if (e != cudaSuccess) fail("{} failed: CUDA error {} ({})", call, static_cast<int>(e), cudaGetErrorString(e));
}

// A device buffer filled with the byte 0x3c: bf16 0x3c3c and fp32 0x3c3c3c3c are both ~0.0115,
// finite and non-zero (timing needs no particular values).
struct Buf {
  explicit Buf(size_t bytes) {
    cuda_ok(cudaMalloc(&p, bytes ? bytes : 16), "cudaMalloc(bench buffer)");
    cuda_ok(cudaMemset(p, 0x3c, bytes), "cudaMemset");
    // cudaMemset runs on the legacy default stream, which CudaOps' non-blocking stream does not
    // wait for: finish it before any kernel reads the buffer.
    cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
  ~Buf() { cudaFree(p); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  template <class T>
  T* as() const {
    return static_cast<T*>(p);
  }
  void* p = nullptr;
};

// Median milliseconds of `reps` runs of f on ops' stream (after 2 warm-up runs).
inline double time_ms(CudaOps& ops, int reps, const std::function<void()>& f) {
  f();
  f();
  std::vector<cudaEvent_t> ev(2 * reps);
  for (auto& e : ev) cuda_ok(cudaEventCreate(&e), "cudaEventCreate");
  for (int r = 0; r < reps; ++r) {
    cuda_ok(cudaEventRecord(ev[2 * r], ops.stream()), "cudaEventRecord");
    f();
    cuda_ok(cudaEventRecord(ev[2 * r + 1], ops.stream()), "cudaEventRecord");
  }
  ops.synchronize();
  std::vector<double> ms(reps);
  for (int r = 0; r < reps; ++r) {
    float t = 0;
    cuda_ok(cudaEventElapsedTime(&t, ev[2 * r], ev[2 * r + 1]), "cudaEventElapsedTime");
    ms[r] = t;
  }
  for (auto& e : ev) cudaEventDestroy(e);
  std::sort(ms.begin(), ms.end());
  return ms[reps / 2];
}

}  // namespace mpitron::gpu_check
