#!/usr/bin/env bash
# End-to-end tensor and sequence parallel: the golden rule against the single-rank
# run (losses every step and parameters gathered back to full shape within 1e-5 relative) for
# tp=2 and tp=4 with and without sequence parallel, dp2 x tp2 with ZeRO 0 and 1 (+sp), and
# pp2 x tp2; the byte
# vocabulary (257) is not a multiple of tp. Memory: per-rank lines at start, parameters per rank
# ~1/tp. A tp2+sp checkpoint resumes under tp4. Errors: n_head not divisible by tp, sp without tp.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

prep_fortunes "$tmp/data" 200000 fortunes computers science wisdom

common=(--data.path="$tmp/data" --train.steps=10 --train.micro_batch=2 --train.global_batch=4
        --eval.every=5 --eval.batches=1 --log.every=1 --train.peak_flops=1e11)
run() {  # name np extra...
  local name=$1 np=$2
  shift 2
  timeout 300 $MPIRUN -np "$np" "$MPITRON" train jobs/tiny.toml "${common[@]}" --job.run_dir="$tmp/$name" "$@" \
    --train.dump_params="$tmp/$name.params.h5" >"$tmp/$name.log" 2>&1 || { cat "$tmp/$name.log"; fail "$name run failed"; }
}
golden() {  # name np extra...
  local name=$1
  run "$@"
  echo -n "$name: "
  /usr/bin/python3 tests/e2e/compare_runs.py "$tmp/np1" "$tmp/$name" --params "$tmp/np1.params.h5" \
    "$tmp/$name.params.h5" || { cat "$tmp/$name.log"; fail "$name does not reproduce the single-rank run"; }
}
run np1 1
golden tp2 2 --parallel.tp=2
golden tp2_sp 2 --parallel.tp=2 --parallel.sp=true --checkpoint.every=5
golden tp4 4 --parallel.tp=4
golden tp4_sp 4 --parallel.tp=4 --parallel.sp=true
golden dp2_tp2 4 --parallel.tp=2 --parallel.dp=2
golden dp2_tp2_zero1_sp 4 --parallel.tp=2 --parallel.dp=2 --parallel.zero=1 --parallel.sp=true
golden pp2_tp2 4 --parallel.tp=2 --parallel.pp=2

# Checkpoints hold full logical tensors: tp2+sp's step-5 checkpoint resumes under tp4 and ends
# where the single-rank run ends.
mkdir -p "$tmp/resume/ckpt"
cp "$tmp/tp2_sp/ckpt/step_00000005.h5" "$tmp/resume/ckpt/" && ln -s step_00000005.h5 "$tmp/resume/ckpt/latest"
run resume 4 --parallel.tp=4
grep -q "resumed from .*step_00000005.h5" "$tmp/resume.log" || fail "tp4 did not resume: $(head "$tmp/resume.log")"
/usr/bin/python3 - "$tmp" <<'PY'
import json, sys, h5py, numpy as np
tmp = sys.argv[1]
last = lambda d: [json.loads(l) for l in open(f"{tmp}/{d}/metrics.jsonl") if '"loss"' in l][-1]
a, b = last("np1"), last("resume")
assert a["step"] == b["step"] == 10, (a, b)
for k in ("loss", "grad_norm", "lr"):
    assert abs(a[k] - b[k]) <= 1e-5 * abs(a[k]), (k, a, b)
pa, pb = h5py.File(f"{tmp}/np1.params.h5"), h5py.File(f"{tmp}/resume.params.h5")
err = max(float(np.linalg.norm(pa[k][()] - pb[k][()]) / max(np.linalg.norm(pa[k][()]), 1e-30)) for k in pa)
assert err <= 1e-5, err
print(f"tp2+sp checkpoint resumed under tp4: step 10 loss {b['loss']:.6f}, parameters max relative L2 {err:.2e}")
PY

# Memory: one line per rank at start (rank-prefixed, in rank order); parameters per rank drop ~tp.
/usr/bin/python3 - "$tmp" <<'PY'
import re, sys
tmp = sys.argv[1]
def param_bytes(name):
    rows = {}
    for line in open(f"{tmp}/{name}.log"):
        m = re.match(r"memory at start rank (\d+): params ([\d.]+) (KiB|MiB)", line)
        if m:
            rows[int(m.group(1))] = float(m.group(2)) * (1 if m.group(3) == "KiB" else 1024)
    return rows
p1, p2, p4 = param_bytes("np1"), param_bytes("tp2"), param_bytes("tp4")
assert sorted(p1) == [0] and sorted(p2) == [0, 1] and sorted(p4) == [0, 1, 2, 3], (p1, p2, p4)
# Replicated: LayerNorms, row-parallel biases, wpe (64 x 64 here); the padded vocab grows with tp.
for tp, p in ((2, p2), (4, p4)):
    for r, b in p.items():
        assert b < p1[0] / tp * 1.4, f"tp={tp} rank {r}: {b} KiB of parameters vs {p1[0]} KiB on one rank"
print(f"params per rank: tp1 {p1[0]:.0f} KiB, tp2 {p2[0]:.0f} KiB, tp4 {p4[0]:.0f} KiB")
# Sequence parallel: the LayerNorm/residual activations are split too.
def act_bytes(name):
    for line in open(f"{tmp}/{name}.log"):
        m = re.match(r"memory at start rank 0: .*activations ([\d.]+) (KiB|MiB)", line)
        if m:
            return float(m.group(1)) * (1 if m.group(2) == "KiB" else 1024)
a2, a2s, a4, a4s = (act_bytes(n) for n in ("tp2", "tp2_sp", "tp4", "tp4_sp"))
assert a2s < a2 and a4s < a4, (a2, a2s, a4, a4s)
print(f"activations rank 0: tp2 {a2:.0f} KiB, tp2+sp {a2s:.0f} KiB, tp4 {a4:.0f} KiB, tp4+sp {a4s:.0f} KiB")
PY

# Errors: heads that do not divide by tp; sequence parallel without tensor parallel.
if timeout 60 $MPIRUN -np 4 "$MPITRON" train jobs/tiny.toml "${common[@]}" --job.run_dir="$tmp/bad" \
    --parallel.tp=4 --model.n_head=2 >"$tmp/heads.log" 2>&1; then fail "n_head 2 accepted with tp 4"; fi
grep -q "n_head (2) must be divisible by parallel.tp (4)" "$tmp/heads.log" || fail "heads message: $(cat "$tmp/heads.log")"
if "$MPITRON" train jobs/tiny.toml "${common[@]}" --job.run_dir="$tmp/bad" --parallel.sp=true >"$tmp/sp.log" 2>&1; then
  fail "sp accepted without tp"
fi
grep -q "parallel.sp needs parallel.tp > 1" "$tmp/sp.log" || fail "sp message: $(cat "$tmp/sp.log")"
echo "ok"
