#pragma once
namespace mpitron {
constexpr const char* kVersion = "0.1.0";
// True when this binary was built with the CUDA backend (make CUDA=auto|1 with nvcc present).
bool built_with_cuda();
}  // namespace mpitron
