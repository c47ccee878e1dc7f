// The peak FLOP/s MFU is measured against, and a GEMM probe to set it beside.
//
// Hardware peak of the cores a CPU rank computes on: cores x clock x fp32 FLOP per cycle per
// core from the ISA (/proc/cpuinfo): AVX-512 on Intel 64 (two 16-lane FMA units), on AMD Zen 4
// 32 (512-bit operations on two 256-bit pipes) and Zen 5 64; AVX2 + FMA 32; AVX 16; else 8.
// Clock: cpufreq's cpuinfo_max_freq, else the highest "cpu MHz" (virtual machines report the
// nominal clock, and turbo runs above it). MFU is against max(this estimate, the probe): never
// above 100%, and a probe taken in a noisy moment cannot make it so. GPUs: the datasheet.
//
// The probe: a short fp32 GEMM on a GPT-shaped matmul (1024 tokens, d 768 -> 3072) with this
// rank's threads, best of the runs that fit in ~0.3 s after a warm-up: the practical ceiling,
// shown as "% of GEMM probe" next to MFU.
#pragma once
#include <string>

#include "mpitron/ops/ops.hpp"

namespace mpitron {

double measure_peak_flops(Ops& ops);

struct CpuPeak {
  double flops = 0;      // cores x ghz x 1e9 x flop_per_cycle (0: unknown)
  int cores = 0, flop_per_cycle = 0;
  double ghz = 0;
  std::string isa;       // "AVX-512", "AVX2+FMA", ...
};
// `threads`: the rank's compute threads (one per core; SMT siblings share the FMA units).
// bf16: the peak of bf16 GEMMs (AMX tiles: 1024 FLOP/cycle/core; AVX512-BF16's dot products:
// twice the fp32 rate; without either, the fp32 rate: oneDNN converts).
CpuPeak cpu_hardware_peak(int threads, bool bf16 = false);

}  // namespace mpitron
