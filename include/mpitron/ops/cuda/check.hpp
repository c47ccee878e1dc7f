// Return-code checks for the CUDA runtime, cuBLAS(Lt) and cuDNN: plain functions (no macros) that
// throw mpitron::Error naming the call and the library's own message. Kernel launches are checked
// with launch_check("kernel name"), which reads cudaGetLastError.
#pragma once
#include <cublas_api.h>
#include <cuda_runtime_api.h>
#include <cudnn_graph.h>

#include <string>

namespace mpitron::cuda {

void cuda_check(cudaError_t e, const char* call);
void cublas_check(cublasStatus_t s, const char* call);
void cudnn_check(cudnnStatus_t s, const char* call);
void launch_check(const char* kernel);
// Throws mpitron::Error(msg): for .cu files, where fmt's consteval format strings do not compile.
[[noreturn]] void throw_error(const std::string& msg);

}  // namespace mpitron::cuda
