#!/usr/bin/env bash
# sanitizers: skip (job-key values: the parser runs sanitized in the fuzzers and the unit tests)
# Job values checked at the door, and no NaN ever saved as the last good checkpoint.
#   1. A corpus of malformed numeric values (flags and job files, np 1 and 2): each refused before
#      anything runs, exit 2, with the message "bad value for 'KEY': VALUE (allowed: RANGE)".
#   2. Settings that cannot take effect (a trace window past the run, eval.every without
#      validation): a warning naming them, and the run completes.
#   3. A model that turns NaN (MPITRON_FAULT=poison@params plants it after an optimizer step, on
#      one rank): no checkpoint of that state is written, latest keeps naming the last good step,
#      the message names the rank and tensor, and a resume from latest continues; nan_policy =
#      stop and skip (train.nan_skip_limit) both end with exit 1, never "done".
#   4. An unsavable configuration (poison@model_config: rope_theta = inf past the ranges) fails at
#      start-up, before step 1, naming the field.
#   5. Small command-line options: prep --workers, generate --max-tokens, a blend without weights.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=1

prep_fortunes "$tmp/data" 60000 fortunes
base=(jobs/tiny.toml --data.path="$tmp/data" --model.seq_len=32 --train.micro_batch=2 --eval.batches=1 --eval.every=0
      --train.peak_flops=1e11)
n=0

# expect RC NEEDLE LOG cmd...: cmd exits with RC and its output holds NEEDLE (once, for np 2).
expect() {
  local want=$1 needle=$2 log=$3 rc=0
  shift 3
  timeout -k 5 120 "$@" >"$log" 2>&1 || rc=$?
  [ "$rc" = "$want" ] || { cat "$log"; fail "exit $rc, not $want: $*"; }
  grep -qF -- "$needle" "$log" || { cat "$log"; fail "no '$needle' in the output of: $*"; }
  n=$((n + 1))
}

# 1. The corpus: the issue's table, and more. Each line: flag, the message's allowed range.
while IFS='|' read -r flag allowed; do
  [ -n "$flag" ] || continue
  key=${flag%%=*} value=${flag#*=}
  expect 2 "bad value for '$key': $value (allowed: $allowed)" "$tmp/bad.log" \
    "$MPITRON" train "${base[@]}" --job.run_dir="$tmp/bad" "--$flag"
  [ ! -e "$tmp/bad" ] || fail "--$flag: a run directory was made before the value was refused"
done <<'CORPUS'
optim.lr=nan|finite, >= 0
optim.lr=inf|finite, >= 0
optim.lr=-3e-3|finite, >= 0
optim.min_lr=nan|finite, >= 0
optim.eps=-1e-8|finite, > 0
optim.grad_clip=-1|0 (off) or finite, > 0
optim.warmup_steps=-10|>= 0
optim.beta1=1|0 <= v < 1
optim.beta2=1.5|0 <= v < 1
optim.weight_decay=-0.1|finite, >= 0
model.rope_theta=inf|0 (from the preset) or finite, > 1
model.norm_eps=nan|0 (from the preset) or 1e-30 <= v < 1
model.n_layer=-2|0 (from the preset) or >= 1
eval.batches=-1|0 (no validation) or >= 1
eval.every=-5|0 (only at the end) or >= 1
comm.timeout_s=nan|0 (off) or finite, > 0
checkpoint.timeout_s=inf|0 (comm.timeout_s) or finite, > 0
data.prefetch=-1|0 (no loader thread: read when needed) or >= 1
train.threads=-4|0 (cores per node / ranks per node) or >= 1
train.global_batch=-8|0 (micro_batch*dp) or >= 1
train.steps=0|>= 1
train.peak_flops=-1e12|0 (measured) or finite, > 0
parallel.zero=4|0 <= v <= 3
parallel.bucket_mb=nan|0 (automatic) or finite, > 0
CORPUS
expect 2 "bad value for 'train.trace_steps': item 0 = 0 (allowed: each item >= 1)" "$tmp/bad.log" \
  "$MPITRON" train "${base[@]}" --job.run_dir="$tmp/bad" "--train.trace_steps=[0, 2]"
expect 2 "bad value for 'train.trace_steps': [3, 2]" "$tmp/bad.log" \
  "$MPITRON" train "${base[@]}" --job.run_dir="$tmp/bad" "--train.trace_steps=[3, 2]"
# train.reproducible on the GPU: cuDNN's attention backward is not deterministic, so refused.
expect 2 'train.reproducible = true on the GPU needs model.attention = "naive" (got "cudnn")' "$tmp/bad.log" \
  "$MPITRON" train "${base[@]}" --job.run_dir="$tmp/bad" --train.backend=nccl --train.reproducible=true --dry-run
# A job file says the same (TOML's own nan / inf), and a preset's LLaMA keys are held to the
# same ranges.
printf '[job]\nname = "x"\n[optim]\nlr = nan\n' >"$tmp/nan.toml"
expect 2 "bad value for 'optim.lr': nan (allowed: finite, >= 0)" "$tmp/bad.log" "$MPITRON" train "$tmp/nan.toml"
printf '[model]\npreset = "llama-tiny"\nrope_theta = -inf\n' >"$tmp/inf.toml"
expect 2 "bad value for 'model.rope_theta': -inf" "$tmp/bad.log" "$MPITRON" train "$tmp/inf.toml"
# np 2: every rank refuses, rank 0 says it once.
expect 2 "bad value for 'optim.beta2': 1.5 (allowed: 0 <= v < 1)" "$tmp/bad2.log" \
  $MPIRUN -np 2 "$MPITRON" train "${base[@]}" --job.run_dir="$tmp/bad" --optim.beta2=1.5
[ "$(grep -c "bad value" "$tmp/bad2.log")" = 1 ] || { cat "$tmp/bad2.log"; fail "np 2: the message is not said once"; }
expect 2 "bad value for 'comm.timeout_s': nan" "$tmp/bad2.log" \
  $MPIRUN -np 2 "$MPITRON" train "${base[@]}" --job.run_dir="$tmp/bad" --comm.timeout_s=nan

# 2. Settings that cannot take effect: warned, and the run completes. The model line names the
# architecture and its sizes.
expect 0 "warning: train.trace_steps = [10, 12] starts after the last step (train.steps = 2): no trace is written" \
  "$tmp/warn.log" "$MPITRON" train "${base[@]}" --job.run_dir="$tmp/warn" --train.steps=2 "--train.trace_steps=[10, 12]"
[ ! -e "$tmp/warn/trace" ] || fail "a trace folder for a window past the run"
grep -q "^model tiny+custom: gpt2, 2 layers, 4 heads, d_model 64, d_ff 256, vocab 257" "$tmp/warn.log" ||
  { cat "$tmp/warn.log"; fail "the model line does not name the architecture and sizes"; }
expect 0 "warning: eval.every = 1 has no effect: eval.batches = 0 turns validation off" "$tmp/warn2.log" \
  "$MPITRON" train "${base[@]}" --job.run_dir="$tmp/warn2" --train.steps=2 --eval.every=1 --eval.batches=0
expect 0 "llama (RMSNorm eps 1e-05, RoPE theta 10000, SwiGLU, untied head), 2 layers, 4 heads (2 kv), d_model 64, d_ff" \
  "$tmp/llama.log" "$MPITRON" train "${base[@]}" --job.run_dir="$tmp/llama" --train.steps=1 --model.arch=llama \
  --model.n_kv_head=2

# 3. A model that turns NaN after step 2's update (checkpoint every step): step 2 is never saved.
ckpts() { (cd "$1/ckpt" && ls step_*.h5 2>/dev/null | tr '\n' ' '); }
latest_step() { readlink "$1/ckpt/latest" | sed 's/.*step_0*\([0-9]*\)\.h5/\1/'; }
expect 1 "step 2: the model state holds NaN/inf (rank 0's parameter 'wte.weight'" "$tmp/p1.log" \
  env MPITRON_FAULT="poison@params,step=2" "$MPITRON" train "${base[@]}" --job.run_dir="$tmp/p1" --train.steps=4 \
  --checkpoint.every=1
grep -q "checkpoint step 2 not written, $tmp/p1/ckpt/latest names step 1 (the last good state)" "$tmp/p1.log" ||
  { cat "$tmp/p1.log"; fail "the message does not say what latest names"; }
[ "$(ckpts "$tmp/p1")" = "step_00000001.h5 " ] || fail "checkpoints after the NaN step: $(ckpts "$tmp/p1")"
[ "$(latest_step "$tmp/p1")" = 1 ] || fail "latest names step $(latest_step "$tmp/p1"), not 1"
! grep -q "^done" "$tmp/p1.log" || fail "a NaN run said done"
# ... and the run resumes from it (without the fault) to the end.
expect 0 "resumed from $tmp/p1/ckpt/step_00000001.h5: step 1" "$tmp/p1r.log" \
  "$MPITRON" train "${base[@]}" --job.run_dir="$tmp/p1" --train.steps=4 --checkpoint.every=1
grep -q "^done: 4 steps" "$tmp/p1r.log" || { cat "$tmp/p1r.log"; fail "the resumed run did not finish"; }
# dp 2, only rank 1's state poisoned: the verdict is agreed, rank 1 named (the first tensor of the
# half it saves: each rank checks what it writes), nothing written.
expect 1 "step 2: the model state holds NaN/inf (rank 1's parameter 'h.0." "$tmp/p2.log" \
  env MPITRON_FAULT="poison@params,step=2,rank=1" $MPIRUN -np 2 -x MPITRON_FAULT "$MPITRON" train "${base[@]}" \
  --job.run_dir="$tmp/p2" --train.steps=4 --checkpoint.every=1
[ "$(latest_step "$tmp/p2")" = 1 ] || fail "dp2: latest names step $(latest_step "$tmp/p2"), not 1"
# nan_policy = stop, no checkpoint due: step 3's loss is NaN, and the state before it is NaN too.
expect 1 "step 3: non-finite loss (nan) or grad norm (nan); stopping (train.nan_policy = \"stop\"). The state before this step is not saved either: rank 0's parameter 'wte.weight'" \
  "$tmp/p3.log" env MPITRON_FAULT="poison@params,step=2" "$MPITRON" train "${base[@]}" --job.run_dir="$tmp/p3" \
  --train.steps=6
[ -z "$(ckpts "$tmp/p3")" ] || fail "nan_policy stop wrote $(ckpts "$tmp/p3")"
# nan_policy = skip: stops at train.nan_skip_limit consecutive skipped steps ...
expect 1 "step 5: 3 consecutive steps with a non-finite loss or grad norm" "$tmp/p4.log" \
  env MPITRON_FAULT="poison@params,step=2" "$MPITRON" train "${base[@]}" --job.run_dir="$tmp/p4" --train.steps=20 \
  --train.nan_policy=skip --train.nan_skip_limit=3
# ... and a checkpoint due inside a skipped stretch (step 4) is not written: the state is NaN.
expect 1 "step 4: the model state holds NaN/inf" "$tmp/p5.log" \
  env MPITRON_FAULT="poison@params,step=3" "$MPITRON" train "${base[@]}" --job.run_dir="$tmp/p5" --train.steps=5 \
  --train.nan_policy=skip --checkpoint.every=2
[ "$(latest_step "$tmp/p5")" = 2 ] || fail "skip: latest names step $(latest_step "$tmp/p5"), not 2"

# 4. What a checkpoint stores is serialised at start-up: an unsavable value fails before step 1.
expect 2 "this run's checkpoints could not be saved: their metadata field 'model.rope_theta' would be inf" \
  "$tmp/c.log" env MPITRON_FAULT="poison@model_config" "$MPITRON" train "${base[@]}" --job.run_dir="$tmp/c" --train.steps=2
! grep -q "^step " "$tmp/c.log" || { cat "$tmp/c.log"; fail "the unsavable config was found only after training began"; }

# 5. Small options.
expect 2 "option --workers: '-3' is not allowed (allowed: an integer, 1 <= v <= 256)" "$tmp/o.log" \
  "$MPITRON" prep --input "$tmp/corpus.txt" --out "$tmp/o" --workers -3
expect 2 "option --max-tokens: '1e30' is not allowed (allowed: an integer, >= 0)" "$tmp/o.log" \
  "$MPITRON" generate "$tmp/p1/ckpt/latest" --prompt "x" --max-tokens 1e30
expect 2 "the entry for '$tmp/data' has no weight" "$tmp/o.log" \
  "$MPITRON" train "${base[@]}" --job.run_dir="$tmp/bad" "--data.paths=[{ path = \"$tmp/data\" }]"
echo "test_job_values: $n checks passed"
