#!/usr/bin/env bash
# The CUDA backend's device check, one command on a GPU machine (under 8 minutes on an H200):
#   bash bench/gpu_check.sh [RESULTS.md]
# 1. builds build-gpu/bench/gpu_check with CUDA=1 (its own build folder, -j$(nproc));
# 2. runs it: every CUDA kernel against the CPU backend (relative error, bound per op), cuDNN
#    attention against the naive path, kernel timings at gpt2-124m shapes, the cuBLASLt GEMM rate,
#    20 tiny-model training steps on TransformerModelCuda against the CPU TransformerModel, gpt2-124m/350m step timings + MFU;
# 3. builds $BUILD/mpitron (or uses the carried one) and runs the trainer end to end on this GPU (train.backend = "nccl",
#    20 steps of the tiny model on a corpus made of this repository's text) against the same
#    job on the CPU backend: loss curves within bf16 tolerance (2e-2 relative); the same for the
#    mixture-of-experts model jobs/moe-tiny.toml and for the tiny model in FP8 (train.precision);
# 4. writes the results (markdown) to RESULTS.md, default bench/results/gpu_check_<gpu>.md.
# Each section of step 2 runs in its own process (a sticky CUDA error in one cannot fail the others);
# where the cuDNN attention fails, the gpt2 step timings and the trainer run are repeated with
# model.attention = naive so their numbers still come out (the failure stays counted).
# Exit status: 0 all checks passed, 1 a check failed, 2 no GPU / build failure.
# NO_BUILD=1 skips the build (uses $BUILD/bench/gpu_check as it is). When the build fails here (this
# image may lack the project's build dependencies), a gpu_check prebuilt on the build machine by
# bench/gpu/prepare_carry.sh and carried as build-gpu-carry/ is used instead, if present.
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
BIN="$BUILD/bench/gpu_check"
MPITRON="$BUILD/mpitron"
# gpu_check and mpitron prebuilt on the build machine: bench/gpu/carried.sh (use_carried).
source bench/gpu/carried.sh
if [ "${USE_CARRY:-0}" = 1 ]; then
  use_carried || { echo "gpu_check: USE_CARRY=1 but no usable $CARRY/bundle.tar.gz"; exit 2; }
  NO_BUILD=1
fi
if [ "${NO_BUILD:-0}" != 1 ]; then
  echo "gpu_check: building $BUILD/bench/gpu_check (make BUILD=$BUILD CUDA=1 -j$(nproc)) ..."
  if ! timeout $((LIMIT - 120)) make --no-print-directory BUILD="$BUILD" CUDA=1 -j"$(nproc)" \
      "$BUILD/bench/gpu_check" >"$log" 2>&1 && ! { echo "gpu_check: build failed (see $log)"; use_carried; }; then
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
  echo "gpu_check: $BIN ready after $((SECONDS - t0)) s"
fi

# 2. One process per section, all appending to $OUT: a kernel fault (illegal address, ...) is
# sticky for the whole CUDA context, so in one process it would also fail every later section.
# Each section gets at most its cap and never eats the last 120 s (kept for the trainer check).
: >"$OUT"
rc=0
first=1
for sec in device:30 kernels:150 attention:120 timings:120 fp8:60 tiny:120 steps:150; do
  name=${sec%%:*} cap=${sec##*:}
  left=$((LIMIT - (SECONDS - t0) - 120))
  [ "$left" -gt "$cap" ] && left=$cap
  if [ "$left" -lt 20 ]; then
    echo "gpu_check: section $name skipped (out of time)" | tee -a "$OUT"
    rc=1
    continue
  fi
  args=("$OUT")
  [ "$first" = 1 ] || args+=(--append)
  first=0
  ts=$SECONDS
  timeout --kill-after=10 "$left" "${RUNENV[@]}" "$BIN" "${args[@]}" "$name"
  src=$?
  echo "gpu_check: section $name exit $src after $((SECONDS - ts)) s"
  if [ "$src" -eq 124 ] || [ "$src" -eq 137 ]; then
    echo "gpu_check: section $name timed out after ${left} s (partial results above)" | tee -a "$OUT"
  elif [ "$src" -gt 2 ]; then
    echo "gpu_check: section $name crashed (exit $src)" | tee -a "$OUT"
  fi
  if [ "$src" -eq 2 ]; then rc=2; break; fi  # no usable GPU: nothing else can run
  [ "$src" -ne 0 ] && rc=1
done
[ "$rc" -eq 2 ] && { echo "gpu_check: exit 2 (no usable GPU)"; exit 2; }
if [ "$BIN" != "$BUILD/bench/gpu_check" ] && [ "${USE_CARRY:-0}" != 1 ]; then
  { echo; echo "Note: the build on this machine failed ($log: $(grep -m1 -E 'error|Error' "$log" || tail -n1 "$log"));"
    echo "the sections above ran the gpu_check prebuilt on the build machine ($BIN)."; } | tee -a "$OUT"
fi

# 3. The trainer end to end: `mpitron train` on the GPU against the CPU backend.
# compare_losses DIR GPU_RUN CPU_RUN LABEL: the two runs' 20 losses (metrics.jsonl) within 2e-2
# relative, and the GPU run learning; one line; status 0 when so.
compare_losses() {
  python3 - "$@" <<'PY'
import json, sys
d, gpu, cpu, label = sys.argv[1:]
def losses(b): return {r["step"]: r["loss"] for r in map(json.loads, open(f"{d}/{b}/metrics.jsonl")) if "loss" in r}
g, c = losses(gpu), losses(cpu)
rel = max(abs(g[s] - c[s]) / c[s] for s in c)
ok = rel <= 2e-2 and sorted(g) == sorted(c) and g[20] < g[1]
print(f"{label}: max relative loss difference {rel:.2e} (bound 2e-2), GPU loss {g[1]:.4f} -> {g[20]:.4f}: "
      f"{'ok' if ok else '**FAIL**'}")
sys.exit(0 if ok else 1)
PY
}
# pair NAME LABEL WHAT JOB_ARGS...: the job on the GPU and on the CPU backend (runs NAME_nccl, NAME_cpu),
# then compare_losses; status 0 when both ran and agree (a failed run's log tail is printed).
pair() {
  local name=$1 label=$2 what=$3 b
  shift 3
  for b in nccl cpu; do
    timeout 120 "${RUNENV[@]}" "$MPITRON" train "$@" --train.backend=$b --job.run_dir="$d/${name}_$b" \
      >"$d/${name}_$b.log" 2>&1 && continue
    echo "trainer check ($label): train.backend=$b failed:"; echo '```'; tail -n 15 "$d/${name}_$b.log"; echo '```'
    return 1
  done
  echo '```'
  grep -E "^step +(1|10|20)/|^step (1|20) $name" "$d/${name}_nccl.log"
  echo '```'
  compare_losses "$d" "${name}_nccl" "${name}_cpu" "trainer check ($label): GPU vs CPU backend, $what"
}
trainer_check() {
  left=$((LIMIT - (SECONDS - t0)))
  # Not run (exit 3, the overall result is the kernels' then): no time left, or no mpitron build
  # here (the whole program needs Open MPI, HDF5, oneDNN and fmt, which a bare GPU image may lack).
  if [ "$left" -lt 90 ]; then echo "trainer check skipped: ${left} s left"; return 3; fi
  if [ "$MPITRON" = "$BUILD/mpitron" ] &&
      ! timeout $((left - 60)) make --no-print-directory BUILD="$BUILD" CUDA=1 -j"$(nproc)" "$BUILD/mpitron" >>"$log" 2>&1; then
    echo "build of $BUILD/mpitron failed on this machine (missing MPI/HDF5/oneDNN/fmt?):"
    echo '```'; grep -m5 -E "error|No such file" "$log"; echo '```'
    use_carried || { echo "trainer check NOT RUN: no carried mpitron either"; return 3; }
  fi
  local d="$BUILD/gpu_check_train"
  rm -rf "$d" && mkdir -p "$d"
  cat README.md docs/*.md $(find src include -name '*.[ch]pp' | sort) >"$d/corpus.txt"
  "${RUNENV[@]}" "$MPITRON" prep --input "$d/corpus.txt" --tokenizer byte --out "$d/data" --val-fraction 0.05 --quiet ||
    { echo "trainer check: prep failed"; return 1; }
  local job=(jobs/tiny.toml --data.path="$d/data" --train.steps=20 --log.every=1 --eval.every=0 --eval.batches=0)
  local failed=0
  for b in nccl cpu; do
    timeout 120 "${RUNENV[@]}" "$MPITRON" train "${job[@]}" --train.backend=$b --job.run_dir="$d/$b" >"$d/$b.log" 2>&1 && continue
    echo "trainer check: train.backend=$b failed:"; echo '```'; tail -n 15 "$d/$b.log"; echo '```'
    [ "$b" = nccl ] && grep -q "cuDNN" "$d/$b.log" || return 1  # cuDNN errors say "cuDNN"
    # A cuDNN failure: still compare the trainer on the GPU through the other attention path (the
    # failure stays a failure).
    failed=1
    echo "trainer check: retrying train.backend=nccl with model.attention = naive"
    timeout 120 "${RUNENV[@]}" "$MPITRON" train "${job[@]}" --train.backend=nccl --model.attention=naive \
      --job.run_dir="$d/$b" >"$d/$b.log" 2>&1 ||
      { echo '```'; tail -n 15 "$d/$b.log"; echo '```'; return 1; }
  done
  echo '```'
  grep -m1 "^layout" "$d/nccl.log"
  grep -E "^step +(1|10|20)/" "$d/nccl.log"
  echo '```'
  compare_losses "$d" nccl cpu "trainer check: GPU vs CPU backend, 20 steps of the tiny model"
  local prc=$?
  # The mixture-of-experts model (jobs/moe-tiny.toml: the router on the host, the moe_* row kernels,
  # one GEMM per expert) the same way, through the attention path that worked above.
  local att=()
  [ "$failed" = 1 ] && att=(--model.attention=naive)
  local moe=(jobs/moe-tiny.toml --data.path="$d/data" --train.steps=20 --log.every=1 --eval.every=0 --eval.batches=0)
  pair moe "MoE" "20 steps of moe-tiny" "${moe[@]}" "${att[@]}"
  local mrc=$?
  # FP8 (train.precision = "fp8", docs/fp8.md): the tiny model's linears through cuBLASLt's FP8
  # GEMMs against the CPU backend's emulation of the same recipe.
  pair fp8 "FP8" "20 steps of the tiny model in FP8" "${job[@]}" "${att[@]}" --train.precision=fp8
  local frc=$?
  [ "$failed" = 1 ] && return 1
  [ "$prc" -ne 0 ] && return $prc
  [ "$mrc" -ne 0 ] && return 1
  [ "$frc" -ne 0 ] && return 1
  return 0
}
{ echo; echo "## The trainer on this GPU (mpitron train, train.backend = nccl) vs the CPU backend"; echo; } >>"$OUT"
trainer_check 2>&1 | tee -a "$OUT"
trc=${PIPESTATUS[0]}
[ "$rc" -eq 0 ] && [ "$trc" -eq 1 ] && rc=1
{ echo; echo "Run $(date -u '+%F %H:%M UTC'), $((SECONDS - t0)) s in all, exit $rc."; } >>"$OUT"
echo "gpu_check: exit $rc, $((SECONDS - t0)) s in all; results in $OUT"
exit "$rc"
