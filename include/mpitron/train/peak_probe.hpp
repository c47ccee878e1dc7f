// Peak FLOP/s per rank for MFU: a short fp32 GEMM probe on a GPT-shaped matmul (1024 tokens,
// d 768 -> 3072) with this rank's threads, best of the runs that fit in ~0.3 s after a warm-up. It measures the
// machine's practical GEMM ceiling, which is what MFU on a CPU should be judged against.
#pragma once
#include "mpitron/ops/ops.hpp"

namespace mpitron {

double measure_peak_flops(Ops& ops);

}  // namespace mpitron
