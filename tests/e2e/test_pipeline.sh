#!/usr/bin/env bash
# sanitizers: skip (a schedule sweep: the schedules run sanitized in mpi/test_pipeline; every schedule against the single rank runs in the release build)
# End-to-end pipeline parallel. The golden rule: with the same seed, data and
# global batch, pp=2 and pp=4 under gpipe and 1f1b, with and without activation recompute,
# uneven stages (parallel.pp_layers), dp2 x pp2 (ZeRO 0, 2 and 3) and interleaved 1F1B (2 model
# chunks per rank, alone, with recompute and an explicit pp_layers, and with dp2 + ZeRO-1) reproduce the
# single-rank run: every step's loss, the validation loss and every parameter after the last
# step within 1e-5 relative (compare_runs.py). An interleaved checkpoint resumes under plain
# 1F1B. dp2 x tp2 x pp2 is test_3d.sh. Errors: n_layer < pp (x virtual stages), microbatches < pp
# for 1f1b, interleaved constraints: one clear message, non-zero exit, no hang.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
here=$(cd "$(dirname "$0")" && pwd)

prep_fortunes "$tmp/data" 200000 fortunes computers science wisdom

# 4 blocks so pp=4 has one per stage; 4 micro-batches of 2 per step (2 per DP rank at dp=2).
common=(--data.path="$tmp/data" --model.n_layer=4 --train.steps=10 --train.micro_batch=2 --train.global_batch=8
        --eval.every=5 --eval.batches=1 --log.every=1 --train.peak_flops=1e11)
run() {  # name np extra...
  local name=$1 np=$2
  shift 2
  timeout 120 $MPIRUN -np "$np" "$MPITRON" train jobs/tiny.toml "${common[@]}" --job.run_dir="$tmp/$name" \
    --train.dump_params="$tmp/$name.h5" "$@" >"$tmp/$name.log" 2>&1 || { tail -30 "$tmp/$name.log"; fail "$name run failed"; }
}
same() {  # name: compare with the single-rank run
  /usr/bin/python3 "$here/compare_runs.py" "$tmp/np1" "$tmp/$1" --params "$tmp/np1.h5" "$tmp/$1.h5" --min-steps 10 \
    --tol 1e-5 || fail "$1 differs from the single-rank run"
  echo "ok: $1 reproduces the single-rank run"
}

run np1 1
run pp2_gpipe 2 --parallel.pp=2 --parallel.schedule=gpipe
same pp2_gpipe
run pp2_1f1b_recompute 2 --parallel.pp=2 --parallel.schedule=1f1b --train.recompute=full
same pp2_1f1b_recompute
run pp2_1f1b_uneven 2 --parallel.pp=2 --parallel.schedule=1f1b --parallel.pp_layers=[1,3]
same pp2_1f1b_uneven
run pp4_1f1b 4 --parallel.pp=4 --parallel.schedule=1f1b
same pp4_1f1b
run pp4_gpipe_recompute 4 --parallel.pp=4 --parallel.schedule=gpipe --train.recompute=full
same pp4_gpipe_recompute
run dp2_pp2 4 --parallel.pp=2 --parallel.dp=2 --parallel.schedule=1f1b
same dp2_pp2
# ZeRO with pipeline parallel: the tied wte copies of stages 0 and 1 are cut into different DP
# shards, so their gradients must be summed before the reduce-scatter (data_parallel.hpp).
run dp2_pp2_zero2 4 --parallel.pp=2 --parallel.dp=2 --parallel.zero=2
same dp2_pp2_zero2
run dp2_pp2_zero3 4 --parallel.pp=2 --parallel.dp=2 --parallel.zero=3 --parallel.schedule=gpipe
same dp2_pp2_zero3
# Interleaved 1F1B: rank r holds virtual stages r and r+2 (blocks {0}, {2} on rank 0 and {1}, {3}
# on rank 1 with 4 blocks); pp_layers then lists the 4 virtual stages.
il=(--parallel.pp=2 --parallel.schedule=interleaved --parallel.virtual_stages=2)
run pp2_interleaved 2 "${il[@]}"
grep -q "interleaved, 2 model chunks per rank" "$tmp/pp2_interleaved.log" || fail "pp2_interleaved: no model chunks"
same pp2_interleaved
run pp2_interleaved_recompute_layers 2 "${il[@]}" --train.recompute=full --parallel.pp_layers=[1,1,1,1]
same pp2_interleaved_recompute_layers
run dp2_pp2_interleaved_zero1 4 "${il[@]}" --parallel.dp=2 --parallel.zero=1 --checkpoint.every=5
same dp2_pp2_interleaved_zero1
# Its step-5 checkpoint (tensors at full logical shape) resumed under plain 1F1B, pp 2: steps 6-10
# must match the interleaved run.
run resume_1f1b 2 --parallel.pp=2 --train.resume="$tmp/dp2_pp2_interleaved_zero1/ckpt/step_00000005.h5"
/usr/bin/python3 - "$tmp/dp2_pp2_interleaved_zero1" "$tmp/resume_1f1b" <<'PY' || fail "resume of the interleaved checkpoint"
import json, sys
def steps(d):  # step -> (loss, grad_norm, lr)
    return {r["step"]: (r["loss"], r["grad_norm"], r["lr"]) for r in map(json.loads, open(f"{d}/metrics.jsonl")) if "loss" in r}
full, res = steps(sys.argv[1]), steps(sys.argv[2])
assert sorted(res) == [6, 7, 8, 9, 10], sorted(res)
worst = max(abs(a - b) / abs(a) for s in res for a, b in zip(full[s], res[s]))
assert worst < 1e-5, worst
print(f"ok: interleaved checkpoint resumed under 1f1b: steps 6-10 loss, grad_norm and lr max rel diff {worst:.2e}")
PY

# Activation memory on stage 0: GPipe keeps all 4 micro-batches, 1F1B at most pp = 2, and
# recompute keeps one block output per block instead of every intermediate.
act() { sed -n 's/^memory step 1 rank 0: .*activations \([0-9.]* [KMG]iB\).*/\1/p' "$tmp/$1.log" | head -1; }
echo "stage-0 activations: gpipe pp2 $(act pp2_gpipe), 1f1b pp2 + recompute $(act pp2_1f1b_recompute)"

# Errors: one clear message, non-zero exit, no hang.
expect_error() {  # pattern np extra...
  local pattern=$1 np=$2
  shift 2
  if timeout 60 $MPIRUN -np "$np" "$MPITRON" train jobs/tiny.toml "${common[@]}" --job.run_dir="$tmp/bad" "$@" \
      >"$tmp/bad.log" 2>&1; then fail "accepted: $*"; fi
  [ $? -ne 124 ] || fail "hung: $*"
  grep -q "$pattern" "$tmp/bad.log" || { cat "$tmp/bad.log"; fail "no '$pattern' message for: $*"; }
}
expect_error "must be >= parallel.pp" 4 --parallel.pp=4 --model.n_layer=2
expect_error "needs at least parallel.pp (4) micro-batches" 4 --parallel.pp=4 --train.global_batch=4
expect_error "needs parallel.virtual_stages >= 2" 2 --parallel.pp=2 --parallel.schedule=interleaved
expect_error "to be a multiple of parallel.pp" 2 "${il[@]}" --train.global_batch=6
expect_error "must be >= parallel.pp (2) x parallel.virtual_stages (4)" 2 --parallel.pp=2 \
  --parallel.schedule=interleaved --parallel.virtual_stages=4 --model.n_layer=6
expect_error "parallel.pp_layers has 2 entries" 2 "${il[@]}" --parallel.pp_layers=[2,2]
echo "ok"
