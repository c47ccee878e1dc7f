#!/usr/bin/env bash
# The CUDA backend's device check, one command on a GPU machine (under 8 minutes on an H200):
#   bash bench/gpu_check.sh [RESULTS.md]
# 1. builds build-gpu/bench/gpu_check with CUDA=1 (its own build folder, -j$(nproc));
# 2. runs it: every CUDA kernel against the CPU backend (relative error, bound per op), cuDNN
#    attention against the naive path, kernel timings at gpt2-124m shapes, the cuBLASLt GEMM rate,
#    20 tiny-model training steps on GptCuda against the CPU GPT, gpt2-124m/350m step timings + MFU;
# 3. writes the results (markdown) to RESULTS.md, default bench/results/gpu_check_<gpu>.md.
# Exit status: 0 all checks passed, 1 a check failed, 2 no GPU / build failure.
# NO_BUILD=1 skips the build (uses $BUILD/bench/gpu_check as it is).
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-gpu}
LIMIT=${GPU_CHECK_LIMIT_S:-470}  # the whole script stays under 8 minutes
t0=$SECONDS
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr ' ' '-' | tr -cd 'A-Za-z0-9_-')
OUT=${1:-bench/results/gpu_check_${gpu:-unknown}.md}
mkdir -p "$(dirname "$OUT")"
log="$BUILD/gpu_check_build.log"
mkdir -p "$BUILD"

echo "gpu_check: $(nvidia-smi -L 2>/dev/null | head -1 || echo 'nvidia-smi not found')"
if [ "${NO_BUILD:-0}" != 1 ]; then
  echo "gpu_check: building $BUILD/bench/gpu_check (make BUILD=$BUILD CUDA=1 -j$(nproc)) ..."
  if ! timeout $((LIMIT - 120)) make --no-print-directory BUILD="$BUILD" CUDA=1 -j"$(nproc)" \
      "$BUILD/bench/gpu_check" >"$log" 2>&1; then
    {
      echo "# gpu_check: mpitron CUDA backend"
      echo
      echo "Build failed after $((SECONDS - t0)) s (make BUILD=$BUILD CUDA=1). Last lines of $log:"
      echo
      echo '```'
      grep -E 'error|Error' "$log" | head -20
      echo '...'
      tail -n 30 "$log"
      echo '```'
    } >"$OUT"
    cat "$OUT"
    exit 2
  fi
  echo "gpu_check: built in $((SECONDS - t0)) s"
fi

left=$((LIMIT - (SECONDS - t0)))
[ "$left" -lt 60 ] && left=60
timeout --kill-after=10 "$left" "$BUILD/bench/gpu_check" "$OUT"
rc=$?
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
  echo "gpu_check: timed out after ${left} s (partial results, if any, are above)" | tee -a "$OUT"
fi
echo "gpu_check: exit $rc, $((SECONDS - t0)) s in all; results in $OUT"
exit "$rc"
