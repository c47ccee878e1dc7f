// Which variant of the CPU kernels this process runs (src/ops/cpu/isa.hpp): "avx512" on CPUs with
// AVX-512 (F, CD, BW, DQ, VL), else "base" (the build's ARCH). MPITRON_CPU_ISA=base forces base.
#pragma once

namespace mpitron::cpu {

const char* kernel_isa();

}  // namespace mpitron::cpu
