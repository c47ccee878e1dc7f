#!/usr/bin/env bash
# sanitizers: skip (bf16 rounding of the kernels, compiled at -O3 in both builds; the paths run sanitized in the unit tests)
# train.precision on the CPU backend: bf16 GEMM inputs, fp32 accumulation.
#   - the tiny model 40 steps: the bf16 loss within 2% of fp32's at every step, the final
#     validation loss within 1%, and not identical (the rounding happens);
#   - layouts in bf16 (dp 2, tp 2) follow the single-rank bf16 run within 2% (the bound: GEMM
#     inputs are rounded to 8 bits of mantissa, and a layout's different fp32 summation order
#     flips the rounding of some of them, so layouts agree at bf16's level, not fp32's 1e-5);
#   - the ledger stays EXACT in bf16, its params 1.5x fp32's: the weights' bf16 copy (2 B/param,
#     rounded once per step; the activations are rounded into per-call workspace);
#   - auto says what it chose and the two probe rates behind it; a bad value is refused.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
prep_fortunes "$tmp/data" 200000 fortunes
common=(--data.path="$tmp/data" --train.steps=40 --train.micro_batch=2 --train.global_batch=8 --eval.every=20
        --eval.batches=2 --log.every=1 --train.peak_flops=1e11 --model.seq_len=32)
run() {  # name np extra...
  local name=$1 np=$2
  shift 2
  timeout 180 $MPIRUN -np "$np" "$MPITRON" train jobs/tiny.toml "${common[@]}" --job.run_dir="$tmp/$name" "$@" \
    >"$tmp/$name.log" 2>&1 || { tail -20 "$tmp/$name.log"; fail "$name"; }
}
run fp32 1 --train.precision=fp32 --train.check_ledger=true
# A CPU without oneDNN's bf16 matmul (AVX2 only): auto picks fp32 and says why, bf16 is refused.
run auto 1 --train.precision=auto --train.steps=1
if grep -q "fp32 (auto: this CPU has no bf16 GEMM in oneDNN)" "$tmp/auto.log"; then
  ! timeout 60 "$MPITRON" train jobs/tiny.toml "${common[@]}" --job.run_dir="$tmp/refused" --train.precision=bf16 \
    >"$tmp/refused.log" 2>&1 || fail "bf16 on a CPU without bf16 GEMMs was not refused"
  grep -q 'train.precision = "bf16": this CPU has no bf16 GEMM' "$tmp/refused.log" || fail "bf16 refusal: $(tail -2 "$tmp/refused.log")"
  echo "SKIP: this CPU has no bf16 GEMM in oneDNN (auto chose fp32, bf16 refused: checked)"
  exit 0
fi
run bf16 1 --train.precision=bf16 --train.check_ledger=true
run bf16_dp2 2 --train.precision=bf16 --parallel.dp=2
run bf16_tp2 2 --train.precision=bf16 --parallel.tp=2
grep -q "bf16 GEMMs (train.precision)" "$tmp/bf16.log" || fail "bf16: not in the layout line"
grep -Eq "(fp32|bf16 GEMMs) \(auto: bf16 GEMM probe [0-9]+ vs fp32 [0-9]+ GFLOP/s, [0-9.]+x (<|>=) 1.3x\)" "$tmp/auto.log" ||
  { grep "^layout" "$tmp/auto.log"; fail "auto: no choice and probe rates in the layout line"; }
echo "    $(grep -o '[a-z0-9 ]* (auto: [^)]*)' "$tmp/auto.log")"
ok=$(grep -c "ledger OK" "$tmp/bf16.log" || true)
[ "$ok" -eq 2 ] && ! grep -q "MISMATCH\|OFF BY" "$tmp/bf16.log" || { grep "ledger" "$tmp/bf16.log"; fail "bf16 ledger"; }
params() { grep -m1 "ledger rank 0 after step 1" "$tmp/$1.log" | sed -n 's/.*params tracked \([0-9]*\) .*/\1/p'; }
p32=$(params fp32) p16=$(params bf16)
[ -n "$p32" ] && [ $((p32 * 3)) -eq $((p16 * 2)) ] || fail "bf16 params $p16 bytes, expected 1.5 x fp32's $p32 (the weights' bf16 copy)"
echo "    params: fp32 $p32 bytes, bf16 $p16 (+ the bf16 weight copy, 2 B/param)"
/usr/bin/python3 - "$tmp" <<'PY'
import json, sys
t = sys.argv[1]
def rows(n): return list(map(json.loads, open(f"{t}/{n}/metrics.jsonl")))
def losses(n): return {r["step"]: r["loss"] for r in rows(n) if "loss" in r}
def val(n): return [r["val_loss"] for r in rows(n) if "val_loss" in r][-1]
f, b = losses("fp32"), losses("bf16")
assert sorted(b) == list(range(1, 41))
worst = max(abs(b[s] - f[s]) / f[s] for s in f)
vf, vb = val("fp32"), val("bf16")
print(f"bf16 vs fp32, 40 steps: losses within {worst:.2e} (bound 2e-2), final val {abs(vb - vf) / vf:.2e} (bound 1e-2)")
assert worst < 2e-2 and abs(vb - vf) / vf < 1e-2
assert any(b[s] != f[s] for s in f), "bf16 losses identical to fp32's: no rounding happened"
for n in ("bf16_dp2", "bf16_tp2"):
    o = losses(n)
    d = max(abs(o[s] - b[s]) / b[s] for s in b)
    print(f"{n} vs bf16 np1: {d:.2e} (bound 2e-2)")
    assert d < 2e-2
PY
if "$MPITRON" train jobs/tiny.toml "${common[@]}" --job.run_dir="$tmp/bad" --train.precision=fp16 >"$tmp/bad.log" 2>&1; then
  fail "fp16 accepted"
fi
grep -q "allowed: auto, fp32, bf16" "$tmp/bad.log" || { cat "$tmp/bad.log"; fail "no list of allowed values"; }
echo ok
