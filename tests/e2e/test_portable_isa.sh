#!/usr/bin/env bash
# The default build (ARCH=x86-64-v3) runs on a CPU without AVX-512: `mpitron --version` and a few
# training steps of the tiny model under qemu-x86_64 -cpu Haswell (AVX2 + FMA, no AVX-512), a
# single-rank MPI singleton (no mpirun), for GPT-2 (jobs/tiny.toml: GELU, LayerNorm) and LLaMA
# (jobs/llama-tiny.toml: RMSNorm, RoPE, SwiGLU, grouped-query attention). Checks:
#   - --version runs and reports the base kernels under Haswell and the avx512 ones natively
#     on an AVX-512 host (the run-time dispatch, src/ops/cpu/cpu_isa.cpp);
#   - the emulated run's loss at every step equals the same job run natively by the same binary,
#     to 2e-5 relative. The two differ only in float summation order: the base kernels against
#     the AVX-512 ones (same arithmetic, isa.hpp) and oneDNN's AVX2 GEMMs against its AVX-512 ones,
#     measured at ~1e-8 on these steps; a wrong fallback kernel (exp, GELU, softmax,
#     attention, AdamW) moves the loss by 1e-3 or more.
# A binary built with ARCH=native on an AVX-512 machine fails here (SIGILL under qemu).
# Skipped under SAN (qemu-user cannot host ASan's shadow memory).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
if [ -n "${SAN:-}" ]; then
  echo "SKIP: sanitizer build (SAN=$SAN)"
  exit 0
fi
command -v qemu-x86_64 >/dev/null || fail "qemu-x86_64 not found (make deps installs qemu-user)"
QEMU=(qemu-x86_64 -cpu Haswell)
export OMP_NUM_THREADS=1

ver=$(timeout 60 "${QEMU[@]}" "$MPITRON" --version 2>"$tmp/qemu.err") || { cat "$tmp/qemu.err"; fail "--version under qemu -cpu Haswell"; }
echo "    qemu Haswell: $ver"
grep -q "cpu kernels: base" <<<"$ver" || fail "under Haswell the kernels should be the base variant: $ver"
native=$("$MPITRON" --version)
if grep -q avx512f /proc/cpuinfo; then
  grep -q "cpu kernels: avx512" <<<"$native" || fail "this CPU has AVX-512 but the kernels are not the avx512 variant: $native"
fi

prep_fortunes "$tmp/data" 30000 fortunes
common=(--data.path="$tmp/data" --train.steps=4 --train.micro_batch=2 --train.global_batch=2
        --eval.every=0 --eval.batches=0 --log.every=1 --train.threads=1 --train.peak_flops=1e11)
run() {  # name job [launcher...]: one rank, no mpirun
  local name=$1 job=$2
  shift 2
  timeout -k 5 120 "$@" "$MPITRON" train "$job" "${common[@]}" --job.run_dir="$tmp/$name" >"$tmp/$name.log" 2>&1 ||
    { tail -20 "$tmp/$name.log"; fail "$name run failed"; }
}
for model in gpt2:jobs/tiny.toml llama:jobs/llama-tiny.toml; do
  run "${model%%:*}_native" "${model#*:}"
  run "${model%%:*}_haswell" "${model#*:}" "${QEMU[@]}"
done

/usr/bin/python3 - "$tmp" <<'PY'
import json, sys
tmp = sys.argv[1]
def losses(name):
    return {r["step"]: r["loss"] for r in map(json.loads, open(f"{tmp}/{name}/metrics.jsonl")) if "loss" in r}
bad = False
for model in ("gpt2", "llama"):
    a, b = losses(f"{model}_native"), losses(f"{model}_haswell")
    if sorted(a) != sorted(b) or len(a) < 4:
        sys.exit(f"FAIL: {model}: steps differ: native {sorted(a)}, haswell {sorted(b)}")
    worst = max(abs(a[s] - b[s]) / abs(a[s]) for s in a)
    for s in sorted(a):
        print(f"    {model} step {s}: native {a[s]:.7f}  haswell {b[s]:.7f}")
    print(f"    {model}: largest relative difference {worst:.1e} (bound 2e-5)")
    bad |= worst > 2e-5
if bad:
    sys.exit("FAIL: the loss under Haswell (base kernels) differs from the native run's")
PY
echo ok
