#!/usr/bin/env bash
# Preemption end to end: `scancel -s USR1 --batch` mid-run -> train.sbatch forwards SIGUSR1 ->
# mpitron checkpoints at the step boundary and exits 75 -> the job requeues itself, restarts with
# SLURM_RESTART_COUNT=1, resumes from ckpt/latest and finishes: every step 1..N logged exactly
# once, in order, across the two runs.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source tests/e2e/slurm/lib.sh

make_data && ok "prepped $T/data" || { bad "prep failed"; finish; exit; }
steps=${MPITRON_PREEMPT_STEPS:-400}
out="$T/train.out"
id=$(slurm/submit.sh jobs/tiny.toml -N 2 --ntasks-per-node=2 --parsable -o "$out" -- \
  --data.path="$T/data" --job.run_dir="$T/run" --train.steps=$steps --log.every=1 --eval.every=0) ||
  { bad "submit failed"; finish; exit; }
ok "submitted job $id"
# A USR1 before the ranks install their handler would kill them: wait for training to run.
wait_lines "$out" 3 "^step +[0-9]+/$steps \| loss" "$id" 120 && ok "training is running" ||
  bad "fewer than 3 step lines (job $id $(job_state "$id"); waited up to 120 s)"
scancel -s USR1 --batch "$id" && ok "scancel -s USR1 --batch $id" || bad "scancel failed"
wait_job "$id" 200 || bad "job $id did not finish within 200 s of the signal"
cat "$out"
info=$(scontrol show job "$id")
[ "$(job_state "$id")" = COMPLETED ] && ok "job COMPLETED" || bad "job $(job_state "$id")"
grep -q 'Restarts=1 ' <<<"$info" && ok "requeued once (Restarts=1)" ||
  bad "$(grep -o 'Restarts=[0-9]*' <<<"$info") (did training end before the signal? raise MPITRON_PREEMPT_STEPS)"
grep -q 'step exited 75 (checkpointed after SIGUSR1): scontrol requeue' "$out" && ok "exit 75 -> requeue" || bad "no exit-75 requeue"
grep -q 'restart 1: jobs/tiny.toml' "$out" && ok "restart 1 in the same log" || bad "no 'restart 1' line"
[ -e "$T/run/ckpt/latest" ] && ok "ckpt/latest exists" || bad "no ckpt/latest"
grep -oE "^step +[0-9]+/$steps \| loss" "$out" | awk '{split($2, a, "/"); print a[1]}' >"$T/steps"
if seq 1 "$steps" | cmp -s - "$T/steps"; then
  ok "steps 1..$steps each logged once, in order, across the requeue"
else
  bad "step sequence is not 1..$steps: $(tr '\n' ' ' <"$T/steps" | head -c 400)"
fi
before=$(sed -n '1,/restart 1:/p' "$out" | grep -cE "^step +[0-9]+/$steps \| loss")
[ "$before" -lt "$steps" ] && ok "preempted after step $before, resumed at step $((before + 1))" || bad "no step ran after the restart"
finish
