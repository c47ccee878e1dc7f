// The CUDA runtime calls of the dist module: count, bind, allocate communication buffers.
#include <cuda_runtime.h>

#include "../device.hpp"
#include "mpitron/core/error.hpp"

namespace mpitron::detail {

DeviceProbe probe_cuda_devices() {
  DeviceProbe p;
  cudaError_t e = cudaGetDeviceCount(&p.count);
  if (e != cudaSuccess) {
    p.count = 0;
    p.error = fmt::format("cudaGetDeviceCount failed with error {} ({})", static_cast<int>(e),
                          cudaGetErrorString(e));
    cudaGetLastError();  // clear the sticky error so later calls report their own
  } else if (p.count == 0) {
    p.error = "cudaGetDeviceCount found no devices";
  }
  return p;
}

void bind_cuda_device(int device) {
  cudaError_t e = cudaSetDevice(device);
  check(e == cudaSuccess, "cudaSetDevice({}) failed: {}", device, cudaGetErrorString(e));
}

void* cuda_alloc(size_t bytes) {
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
  check(e == cudaSuccess, "cudaMalloc({} bytes) failed: {}", bytes, cudaGetErrorString(e));
  e = cudaMemset(p, 0, bytes);
  check(e == cudaSuccess, "cudaMemset failed: {}", cudaGetErrorString(e));
  // cudaMemset is asynchronous on the legacy default stream, which NCCL's non-blocking stream
  // does not wait for: finish it before the buffer is handed out.
  e = cudaDeviceSynchronize();
  check(e == cudaSuccess, "cudaDeviceSynchronize failed: {}", cudaGetErrorString(e));
  return p;
}

void cuda_free(void* p) {
  if (p) cudaFree(p);
}

void cuda_copy(void* dst, const void* src, size_t bytes) {
  cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyDefault);
  check(e == cudaSuccess, "cudaMemcpy({} bytes) failed: {}", bytes, cudaGetErrorString(e));
  // From pageable host memory cudaMemcpy may return before the DMA lands (and it is ordered only
  // on the legacy stream): finish it before a collective on a non-blocking stream reads it.
  e = cudaDeviceSynchronize();
  check(e == cudaSuccess, "cudaDeviceSynchronize failed: {}", cudaGetErrorString(e));
}

}  // namespace mpitron::detail

// The entry points (device.hpp): what the dist module calls through MPITRON_CUDA_ENTRY.
using mpitron::detail::DeviceProbe;
extern "C" {
DeviceProbe mpitron_cuda_probe_devices() { return mpitron::detail::probe_cuda_devices(); }
void mpitron_cuda_bind_device(int device) { mpitron::detail::bind_cuda_device(device); }
void* mpitron_cuda_alloc(size_t bytes) { return mpitron::detail::cuda_alloc(bytes); }
void mpitron_cuda_free(void* p) { mpitron::detail::cuda_free(p); }
void mpitron_cuda_copy(void* dst, const void* src, size_t bytes) { mpitron::detail::cuda_copy(dst, src, bytes); }
}
