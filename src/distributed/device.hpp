// CUDA device discovery, binding and communication buffers: the CUDA backend's entry points the
// dist module calls (defined at the end of cuda/device.cpp and cuda/nccl_comm.cpp; reached through
// MPITRON_CUDA_ENTRY, core/cuda_plugin.hpp, so that only a process that uses a GPU loads the CUDA
// libraries). Kept out of the public headers so nothing
// else in the tree needs the CUDA runtime headers.
#pragma once
#include <mpi.h>

#include <cstddef>
#include <memory>
#include <string>

namespace mpitron {
class Comm;
}

namespace mpitron::detail {

struct DeviceProbe {
  int count = 0;      // visible devices (after CUDA_VISIBLE_DEVICES)
  std::string error;  // non-empty when cudaGetDeviceCount failed ("error 35: ...")
};

// The implementations, in the CUDA backend (cuda/device.cpp, cuda/nccl_comm.hpp).
DeviceProbe probe_cuda_devices();
void bind_cuda_device(int device);  // cudaSetDevice, throws Error
void* cuda_alloc(size_t bytes);     // cudaMalloc + zero fill, throws Error
void cuda_free(void* p);
void cuda_copy(void* dst, const void* src, size_t bytes);  // cudaMemcpyDefault, synchronous

}  // namespace mpitron::detail

// The same, as the backend exports them (C names: one dlsym each). Only the names are C: the
// plugin and the executable are one C++ build, so C++ return types are fine (clang warns).
#if defined(__clang__)
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wreturn-type-c-linkage"
#endif
extern "C" {
mpitron::detail::DeviceProbe mpitron_cuda_probe_devices();
void mpitron_cuda_bind_device(int device);
void* mpitron_cuda_alloc(size_t bytes);
void mpitron_cuda_free(void* p);
void mpitron_cuda_copy(void* dst, const void* src, size_t bytes);
std::unique_ptr<mpitron::Comm> mpitron_cuda_make_nccl_comm(MPI_Comm comm, const std::string& name, int device,
                                                           double timeout_s);
}
#if defined(__clang__)
#pragma clang diagnostic pop
#endif
