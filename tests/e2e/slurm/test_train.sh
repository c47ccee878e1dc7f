#!/usr/bin/env bash
# The real slurm/train.sbatch (submitted by slurm/submit.sh) trains jobs/tiny.toml over 2 "nodes"
# x 2 tasks: the job completes, the log (appended per job id) has every per-step line and the
# final summary, metrics.jsonl has every step, the last checkpoint is in place.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source tests/e2e/slurm/lib.sh

make_data && ok "prepped $T/data" || { bad "prep failed"; finish; exit; }
steps=20
out="$T/train.out"
id=$(slurm/submit.sh jobs/tiny.toml -N 2 --ntasks-per-node=2 --parsable -o "$out" -- \
  --data.path="$T/data" --job.run_dir="$T/run" --train.steps=$steps --log.every=1) || { bad "submit failed"; finish; exit; }
ok "submitted job $id"
wait_job "$id" 180 || bad "job $id did not finish in 180 s"
cat "$out"
[ "$(job_state "$id")" = COMPLETED ] && ok "job COMPLETED" ||
  bad "job $(job_state "$id"): $(scontrol show job "$id" | grep -o 'ExitCode=[0-9:]*')"
grep -q "restart 0: jobs/tiny.toml" "$out" && ok "train.sbatch header (restart 0)" || bad "no train.sbatch header"
grep -q "(2 nodes x 2 tasks = 4 ranks)" "$out" && ok "2 nodes x 2 tasks" || bad "not 2 nodes x 2 tasks"
n=$(grep -cE "^step +[0-9]+/$steps \| loss [0-9.]+" "$out")
[ "$n" = "$steps" ] && ok "$n per-step lines" || bad "$n per-step lines, wanted $steps"
grep -qE "^step +$steps/$steps \| loss" "$out" && ok "reached step $steps" || bad "no 'step $steps/$steps' line"
grep -q '^done: ' "$out" && ok "summary: $(grep '^done: ' "$out")" || bad "no 'done:' line"
grep -q 'step exited 0$' "$out" && ok "step exited 0" || bad "step did not exit 0"
m=$(grep -c '"step"' "$T/run/metrics.jsonl" 2>/dev/null || echo 0)
[ "$m" -ge "$steps" ] && ok "metrics.jsonl: $m lines" || bad "metrics.jsonl has $m step lines"
[ -e "$T/run/ckpt/latest" ] && ok "checkpoint $T/run/ckpt/latest exists" || bad "no $T/run/ckpt/latest"
finish
