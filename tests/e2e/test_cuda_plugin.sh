#!/usr/bin/env bash
# The CUDA backend is a library mpitron loads (libmpitron-cuda.so, include/mpitron/core/cuda_plugin.hpp),
# not one it links: CPU processes of a CUDA build never map cuBLASLt, cuDNN or NCCL.
#   - the binary links none of them; `plan` and `env` (which probes for GPUs) load none of them here,
#     where no GPU driver is;
#   - MPITRON_CUDA_LOAD=always loads the library anyway: it resolves against the binary (RTLD_NOW)
#     and the CUDA runtime's own answer comes back (no device here);
#   - found next to the binary and in ../lib/mpitron/ (make install's layout); missing, it is named,
#     and train.backend = "nccl" stops with the reason instead of a loader crash.
# Skipped (one line) when $MPITRON is not a CUDA build.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
skip_unless_cuda_build
lib=$(dirname "$MPITRON")/libmpitron-cuda.so
[ -f "$lib" ] || fail "no $lib next to $MPITRON"
cuda_libs='libcublasLt|libcublas\.|libcudnn|libnccl|libcudart'

! ldd "$MPITRON" | grep -E "$cuda_libs" || fail "mpitron links a CUDA library"
# Output captured before matching: `ldd | grep -q` under pipefail fails whenever grep exits at the
# match while ldd is still writing (SIGPIPE, exit 141), which a loaded machine makes likely.
lib_deps=$(ldd "$lib")
grep -qE 'libcublasLt' <<<"$lib_deps" || fail "$lib does not link cuBLASLt: $lib_deps"
echo "ok    mpitron links no CUDA library; $(basename "$lib") links them"

loaded() {  # log: the libraries the loader mapped (LD_DEBUG=files)
  grep -oE "file=[^ ]*($cuda_libs|libmpitron-cuda)[^ ]*" "$1" | sed 's/file=//' | sort -u | tr '\n' ' '
}
LD_DEBUG=files "$MPITRON" plan jobs/tiny.toml >"$tmp/plan.log" 2>&1
[ -z "$(loaded "$tmp/plan.log")" ] || fail "plan loaded $(loaded "$tmp/plan.log")"
LD_DEBUG=files $MPIRUN -np 1 "$MPITRON" env >"$tmp/env.log" 2>&1
[ -z "$(loaded "$tmp/env.log")" ] || fail "env loaded $(loaded "$tmp/env.log")"
grep -q "built with CUDA but no usable GPU (no NVIDIA GPU driver on this node: no /dev/nvidiactl)" "$tmp/env.log" ||
  { cat "$tmp/env.log" | grep -v "^ *[0-9]*:"; fail "env: no note about the missing driver"; }
echo "ok    plan and env (GPU probe) map no CUDA library without a GPU driver"

MPITRON_CUDA_LOAD=always LD_DEBUG=files $MPIRUN -np 1 -x MPITRON_CUDA_LOAD -x LD_DEBUG "$MPITRON" env >"$tmp/load.log" 2>&1
mapped=$(loaded "$tmp/load.log")
grep -q "libmpitron-cuda.so" <<<"$mapped" || fail "MPITRON_CUDA_LOAD=always did not load the library"
grep -q "libcublasLt" <<<"$mapped" || fail "the library loaded without cuBLASLt"
note=$(grep -m1 "^mpitron: built with CUDA" "$tmp/load.log")
[[ "$note" == *cudaGetDeviceCount* ]] || fail "MPITRON_CUDA_LOAD=always: not the CUDA runtime's answer: $note"
echo "ok    MPITRON_CUDA_LOAD=always loads it and asks the runtime: ${note#mpitron: }"

mkdir -p "$tmp/alone" "$tmp/prefix/bin" "$tmp/prefix/lib/mpitron"
cp "$MPITRON" "$tmp/alone/"
cp "$MPITRON" "$tmp/prefix/bin/" && cp "$lib" "$tmp/prefix/lib/mpitron/"
MPITRON_CUDA_LOAD=always $MPIRUN -np 1 -x MPITRON_CUDA_LOAD "$tmp/prefix/bin/mpitron" env >"$tmp/prefix.log" 2>&1
grep -q "cudaGetDeviceCount" "$tmp/prefix.log" || { cat "$tmp/prefix.log"; fail "not found in ../lib/mpitron/"; }
MPITRON_CUDA_LOAD=always $MPIRUN -np 1 -x MPITRON_CUDA_LOAD "$tmp/alone/mpitron" env >"$tmp/alone.log" 2>&1
grep -q "no usable GPU (the CUDA backend's library libmpitron-cuda.so is not installed next to the binary)" \
  "$tmp/alone.log" || { cat "$tmp/alone.log"; fail "a missing library is not named"; }
echo "ok    found in ../lib/mpitron/ (make install); missing, it is named"

prep_fortunes "$tmp/data" 20000 fortunes
rc=0
timeout 60 $MPIRUN -np 1 "$MPITRON" train jobs/tiny.toml --data.path="$tmp/data" --train.steps=1 \
  --train.backend=nccl --job.run_dir="$tmp/run" >"$tmp/nccl.log" 2>&1 || rc=$?
[ $rc -eq 2 ] && grep -q 'error: .*needs a GPU.*no /dev/nvidiactl' "$tmp/nccl.log" ||
  { cat "$tmp/nccl.log"; fail "train.backend=nccl without a GPU: exit $rc"; }
echo "ok    train.backend=nccl without a GPU: $(grep -m1 -o 'error: .*' "$tmp/nccl.log")"
