#!/usr/bin/env bash
# TransformerModelCuda against the CPU TransformerModel without a GPU: gpu_check's training comparison (training_check.cpp)
# linked with a CPU emulation of CudaOps and of the CUDA runtime (fake_cuda.cpp).
#   bash bench/gpu/emulate/run.sh [RESULTS.md] [PRESET B]
# Needs a CUDA build (the toolkit's headers and libraries, no GPU): makes $BUILD/bench/emulated_*
# (BUILD default build; the Makefile's EMULATED, also part of `make tests`), then runs
# emulated_check. The tiny comparison takes seconds; "gpt2-124m 1" adds one full-size step
# (minutes on 2 cores). BUILD_ONLY=1 stops after the build.
set -euo pipefail
cd "$(dirname "$0")/../../.."
BUILD=${BUILD:-build}
OUT=${1:-$BUILD/emulated_check.md}
shift || true
make --no-print-directory BUILD="$BUILD" CUDA=1 \
  "$BUILD"/bench/emulated_{check,train,tp_grads,self_check} >/dev/null
[ "${BUILD_ONLY:-0}" = 1 ] && exit 0
OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} "$BUILD/bench/emulated_check" "$OUT" "$@"
