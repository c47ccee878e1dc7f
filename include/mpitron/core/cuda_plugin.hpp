// The CUDA backend as a library of its own, loaded when a process first needs it.
//
// A CUDA build puts every src/**/cuda/ file and the .cu kernels into libmpitron-cuda.so, next to
// the mpitron binary (`make install`: PREFIX/lib/mpitron/). cuBLASLt, cuDNN and NCCL are that
// library's dependencies, not the binary's: mapping them costs a process about 0.3 s and 220 MB
// (cuBLASLt's start-up alone), which every rank of a CPU job, every `mpitron plan` and every
// `prep` paid while the binary linked them. Test programs, gpu_check and the CPU emulation link
// the same code into themselves: the lookup finds it there first.
//
// The non-CUDA code reaches the backend only through extern "C" entry points (declared in
// distributed/device.hpp and train/train_backend.hpp, defined at the end of the cuda/ files that
// implement them),
// called as MPITRON_CUDA_ENTRY(name)(args...): the declaration gives the type, the name the symbol.
#pragma once
#include <string>

namespace mpitron {

// Whether the CUDA backend can be tried here without loading anything: its code is linked into
// this program, or its library exists next to the binary and an NVIDIA driver device is present
// (/dev/nvidiactl, or /dev/dxg under WSL), or MPITRON_CUDA_LOAD=always says to load it anyway.
// When not, `why` says which is missing.
bool cuda_backend_may_run(std::string* why);

// The address of an extern "C" entry point of the CUDA backend, loading the library on first use.
// Throws UsageError naming the library and the loader's message when it cannot be loaded (or
// Error in a CPU build, which has no CUDA backend to call).
void* cuda_plugin_symbol(const char* name);

// Where the library is looked for: next to the executable, then ../lib/mpitron/ (make install).
// The first that exists, or "" when neither does.
std::string cuda_plugin_path();

template <class Fn>
Fn cuda_plugin_fn(const char* name) {
  return reinterpret_cast<Fn>(cuda_plugin_symbol(name));
}

}  // namespace mpitron

#define MPITRON_CUDA_ENTRY(fn) (::mpitron::cuda_plugin_fn<decltype(&fn)>(#fn))
