// The kernels' entry points: each calls the avx512 or the base variant of its kernel (isa.hpp),
// chosen once per process from the CPU running it. MPITRON_CPU_ISA=base in the environment forces
// the base variant (to test it, or compare it, on an AVX-512 machine).
#include <cstdlib>
#include <cstring>

#include "kernels.hpp"

namespace mpitron::cpu {

namespace {

bool pick_avx512() {
  // What the avx512 variant is compiled for (isa.hpp); libgcc also checks that the OS saves the
  // AVX-512 registers (XCR0), so a kernel without that support gets the base variant.
  __builtin_cpu_init();
  const bool cpu = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
                   __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
                   __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx2") &&
                   __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi") &&
                   __builtin_cpu_supports("bmi2");
  const char* force = std::getenv("MPITRON_CPU_ISA");
  return cpu && !(force && std::strcmp(force, "base") == 0);
}

bool use_avx512() {
  static const bool on = pick_avx512();
  return on;
}

}  // namespace

const char* kernel_isa() { return use_avx512() ? "avx512" : "base"; }

#define MPITRON_CPU_KERNEL(ret, name, params, args) \
  ret name params { return use_avx512() ? avx512::name args : base::name args; }
#include "kernel_list.inc"
#undef MPITRON_CPU_KERNEL

}  // namespace mpitron::cpu
