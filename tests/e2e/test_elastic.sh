#!/usr/bin/env bash
# train.elastic = true (docs/slurm.md): a restart on another number of ranks keeps tp x cp x pp and
# the global batch, takes dp from the ranks there are (whatever parallel.dp says), logs the change,
# and continues the checkpoint's trajectory:
#   - 3 steps at dp 2, then steps 4-6 at dp 1 with the job still saying parallel.dp = 2: the log says
#     "elastic: ... dp 1 (parallel.dp = 2 is for 2 ranks)" and "layout changed since the checkpoint",
#     the losses of steps 4-6 follow the uninterrupted dp 2 run within 1e-5 (other fp32 sums: the
#     accumulation of 4 micro-batches instead of 2 x 2); and back to dp 2 from there;
#   - without train.elastic the same restart is refused (parallel.dp = 2 needs 2 ranks);
#   - refused with the reason: train.elastic without train.global_batch, and a launch that is not a
#     multiple of tp x cp x pp.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
prep_fortunes "$tmp/data" 200000 fortunes
common=(jobs/tiny.toml --data.path="$tmp/data" --model.n_layer=2 --train.micro_batch=2 --train.global_batch=8
        --parallel.dp=2 --eval.every=0 --eval.batches=0 --log.every=1 --checkpoint.every=3
        --optim.lr=1e-3 --optim.min_lr=1e-3 --optim.warmup_steps=0)  # a constant lr: legs of any train.steps agree
run() {  # name np extra...
  local name=$1 np=$2
  shift 2
  timeout -k 5 120 $MPIRUN -np "$np" "$MPITRON" train "${common[@]}" --job.run_dir="$tmp/$name" "$@" \
    >"$tmp/$name.log" 2>&1 </dev/null || { tail -20 "$tmp/$name.log"; fail "$name"; }
}
run whole 2 --train.steps=6
run shrink 2 --train.steps=3 --train.elastic=true
run shrink 1 --train.steps=6 --train.elastic=true
grep -q "^elastic: 1 ranks = tp 1 x cp 1 x pp 1 x dp 1 (parallel.dp = 2 is for 2 ranks); global batch 8 = micro 2 x dp 1 x accumulation 4" \
  "$tmp/shrink.log" || { head -20 "$tmp/shrink.log"; fail "no elastic line"; }
grep -q "^layout changed since the checkpoint: tp 1 x cp 1 x dp 2 x pp 1 (2 ranks) -> tp 1 x cp 1 x dp 1 x pp 1 (1 ranks); train.elastic" \
  "$tmp/shrink.log" || fail "no layout change line"
cp -r "$tmp/shrink" "$tmp/grow"
run grow 2 --train.steps=9 --train.elastic=true --train.resume="$tmp/shrink/ckpt/step_00000006.h5"
run whole9 2 --train.steps=9
/usr/bin/python3 - "$tmp" <<'PY'
import json, sys
t = sys.argv[1]
def losses(d): return {r["step"]: r["loss"] for r in map(json.loads, open(f"{t}/{d}/metrics.jsonl")) if "loss" in r}
w, s, g, w9 = losses("whole"), losses("shrink"), losses("grow"), losses("whole9")
d = max(abs(s[k] - w[k]) / w[k] for k in (4, 5, 6))
d2 = max(abs(g[k] - w9[k]) / w9[k] for k in (7, 8, 9))
print(f"dp 2 -> dp 1 at step 3: steps 4-6 within {d:.1e} of the uninterrupted dp 2 run; back to dp 2: steps 7-9 within {d2:.1e} (bound 1e-5)")
assert d < 1e-5 and d2 < 1e-5
PY
out=$($MPIRUN -np 1 "$MPITRON" train "${common[@]}" --job.run_dir="$tmp/plain" --train.steps=6 2>&1 </dev/null || true)
grep -q "parallel.dp" <<<"$out" || { echo "$out" | tail -5; fail "a restart at 1 rank with parallel.dp = 2 was not refused"; }
out=$($MPIRUN -np 1 "$MPITRON" train "${common[@]}" --train.global_batch=0 --train.elastic=true --job.run_dir="$tmp/nb" 2>&1 </dev/null || true)
grep -q "train.elastic = true needs train.global_batch" <<<"$out" || { echo "$out" | tail -5; fail "no global batch: not refused"; }
out=$($MPIRUN -np 3 "$MPITRON" train "${common[@]}" --parallel.tp=2 --train.elastic=true --job.run_dir="$tmp/odd" 2>&1 </dev/null || true)
grep -q "train.elastic: this launch has 3 ranks, not a multiple of tp 2 x cp 1 x pp 1 = 2" <<<"$out" ||
  { echo "$out" | tail -5; fail "3 ranks at tp 2: not refused"; }
echo "ok    refused: a restart on other ranks without train.elastic; train.elastic without train.global_batch; 3 ranks at tp 2"
