// The ISA variant a kernel file is compiled as. The Makefile builds each kernel file twice: once
// for the build's ARCH (namespace mpitron::cpu::base) and once with -DMPITRON_CPU_ISA_AVX512
// (namespace mpitron::cpu::avx512), where the pragma below turns AVX-512 on for the code after it.
// cpu_isa.cpp picks one of the two at run time, so a binary built for a portable ARCH still runs
// the AVX-512 kernels on CPUs that have them and the portable ones on CPUs that do not.
//
// Include this after every other header of a kernel file: only functions defined after the pragma
// get AVX-512. A library inline or template (std::fill, std::vector) instantiated with AVX-512 in
// one object and without it in another is one symbol to the linker, which keeps either copy; the
// AVX-512 one would then run on CPUs without it. The headers below are the ones the kernels use,
// included here so that nothing from them is ever compiled under the pragma.
#pragma once
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "avx512.hpp"

#ifdef MPITRON_CPU_ISA_AVX512
// AVX-512 F/CD/BW/DQ/VL (x86-64-v4) + FMA: what cpu_isa.cpp checks before choosing this variant.
#pragma GCC target("avx512f,avx512cd,avx512bw,avx512dq,avx512vl,avx2,fma,bmi,bmi2,lzcnt,f16c")
#define MPITRON_CPU_ISA avx512
#else
#define MPITRON_CPU_ISA base
#endif
// Whether the code after this may use AVX-512 intrinsics: the avx512 variant, or a base compiled
// for an ARCH that has AVX-512 (ARCH=native on such a machine). g++ does not define __AVX512F__
// after a target pragma, so the kernels test this instead.
#if defined(MPITRON_CPU_ISA_AVX512) || defined(__AVX512F__)
#define MPITRON_CPU_AVX512 1
#else
#define MPITRON_CPU_AVX512 0
#endif
