#!/usr/bin/env bash
# GptCuda against the CPU GPT without a GPU: gpu_check's training comparison (training_check.cpp)
# linked with a CPU emulation of CudaOps and of the CUDA runtime (fake_cuda.cpp).
#   bash bench/gpu/emulate/run.sh [RESULTS.md] [PRESET B]
# Needs a CUDA build's objects (the toolkit's headers and libraries, no GPU): builds
# $BUILD/bench/gpu_check first (BUILD default build), then links $BUILD/bench/emulated_check.
# The tiny comparison takes seconds; "gpt2-124m 1" adds one full-size step (minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/../../.."
BUILD=${BUILD:-build}
OUT=${1:-$BUILD/emulated_check.md}
shift || true
make --no-print-directory BUILD="$BUILD" CUDA=1 "$BUILD/bench/gpu_check" "$BUILD/libmpitron.a" >/dev/null
flags=$(make --no-print-directory -s BUILD="$BUILD" CUDA=1 -f - print-flags <<'MK'
include Makefile
print-flags:
	@echo $(ALL_CPPFLAGS) $(ALL_CXXFLAGS)
MK
)
libs=$(make --no-print-directory -s BUILD="$BUILD" CUDA=1 -f - print-libs <<'MK'
include Makefile
print-libs:
	@echo $(ALL_LDFLAGS) $(ALL_LDLIBS)
MK
)
mkdir -p "$BUILD/obj/bench/gpu/emulate"
for f in fake_cuda emulated_check; do
  g++ $flags -c "bench/gpu/emulate/$f.cpp" -o "$BUILD/obj/bench/gpu/emulate/$f.o"
done
# The emulation's objects first: they define make_cuda_ops and the runtime
# calls, so the archive's CUDA versions of those are never pulled in.
g++ -o "$BUILD/bench/emulated_check" "$BUILD/obj/bench/gpu/emulate/emulated_check.o" \
  "$BUILD/obj/bench/gpu/emulate/fake_cuda.o" "$BUILD/obj/bench/gpu/training_check.o" \
  "$BUILD/obj/src/model/cuda/gpt_cuda.o" "$BUILD/obj/src/model/cuda/gpt_cuda_state.o" "$BUILD/obj/src/parallel/adamw.o" "$BUILD/libmpitron.a" $libs
# The GPU trainer on the same emulation (tests/e2e/test_gpu_emulated.sh runs it under mpirun).
g++ $flags -c bench/gpu/emulate/emulated_train.cpp -o "$BUILD/obj/bench/gpu/emulate/emulated_train.o"
g++ -o "$BUILD/bench/emulated_train" "$BUILD/obj/bench/gpu/emulate/emulated_train.o" \
  "$BUILD/obj/bench/gpu/emulate/fake_cuda.o" "$BUILD/libmpitron.a" $libs
# GptCuda's TP / SP gradients against the CPU GPT (tests/e2e/test_gpu_emulated.sh runs it at np 2).
g++ $flags -c bench/gpu/emulate/emulated_tp_grads.cpp -o "$BUILD/obj/bench/gpu/emulate/emulated_tp_grads.o"
g++ -o "$BUILD/bench/emulated_tp_grads" "$BUILD/obj/bench/gpu/emulate/emulated_tp_grads.o" \
  "$BUILD/obj/bench/gpu/emulate/fake_cuda.o" "$BUILD/libmpitron.a" $libs
# gpu_check's kernel self-check code on the same emulation (tests/e2e/test_moe_gpu_emulated.sh).
g++ $flags -c bench/gpu/emulate/emulated_self_check.cpp -o "$BUILD/obj/bench/gpu/emulate/emulated_self_check.o"
g++ -o "$BUILD/bench/emulated_self_check" "$BUILD/obj/bench/gpu/emulate/emulated_self_check.o" \
  "$BUILD/obj/bench/gpu/emulate/fake_cuda.o" "$BUILD/obj/tests/cuda/self_check.o" "$BUILD/libmpitron.a" $libs
[ "${BUILD_ONLY:-0}" = 1 ] && exit 0
OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} "$BUILD/bench/emulated_check" "$OUT" "$@"
