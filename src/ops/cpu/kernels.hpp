// CPU kernels behind CpuOps (cpu_ops.cpp), one file per family (list: kernel_list.inc).
// Each kernel file is compiled twice (isa.hpp): mpitron::cpu::base for the build's ARCH and
// mpitron::cpu::avx512 with AVX-512 enabled; the mpitron::cpu:: entry points (cpu_isa.cpp) call
// the avx512 variant when the CPU running the binary has AVX-512, else the base one.
#pragma once
#include <cstddef>
#include <cstdint>

#include "mpitron/ops/cpu_isa.hpp"

namespace mpitron::cpu {

#define MPITRON_CPU_KERNEL(ret, name, params, args) ret name params;
#include "kernel_list.inc"
namespace base {
#include "kernel_list.inc"
}  // namespace base
namespace avx512 {
#include "kernel_list.inc"
}  // namespace avx512
#undef MPITRON_CPU_KERNEL

}  // namespace mpitron::cpu
