// CUDA device discovery and binding (implemented in cuda/device.cpp, GPU builds only). Kept out of
// the public headers so nothing else in the tree needs the CUDA runtime headers.
#pragma once
#include <cstddef>
#include <string>

namespace mpitron::detail {

struct DeviceProbe {
  int count = 0;      // visible devices (after CUDA_VISIBLE_DEVICES)
  std::string error;  // non-empty when cudaGetDeviceCount failed ("error 35: ...")
};

#if MPITRON_CUDA
DeviceProbe probe_cuda_devices();
void bind_cuda_device(int device);  // cudaSetDevice, throws Error
void* cuda_alloc(size_t bytes);     // cudaMalloc + zero fill, throws Error
void cuda_free(void* p);
void cuda_copy(void* dst, const void* src, size_t bytes);  // cudaMemcpyDefault, synchronous
#endif

}  // namespace mpitron::detail
