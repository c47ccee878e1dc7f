#!/usr/bin/env bash
# A node lost mid-run and the job back by itself on the nodes that are left; a job that grows
# again when nodes are free (docs/slurm.md, "Losing a node"), all with train.reproducible = true,
# so every step's loss and gradient norm must equal, BIT FOR BIT, those of an uninterrupted run
# (mpirun here, 3 ranks; any dp gives the same bits). jobs/tiny.toml (d_model 128), global batch 12
# = micro 2 x dp x accumulation, 80 steps, a checkpoint every 20, 150 ms per step (MPITRON_FAULT's
# straggler) so that the kills land mid-run. checkpoint.timeout_s = 10 (the files are 5 MB): a
# rank that outlives its peer inside a save's collective write is stopped by the hang watchdog
# within 10 s, not by srun's --wait=60 s after the first rank's death.
#   Grow: MPITRON_MAX_NODES=3 sbatch --nodes=2 (n3 idle): after step 25 a SIGUSR1 (a preemption)
#   makes the job checkpoint and exit 75; train.sbatch sees a free node and submits the restart as
#   a new job on 3 nodes, which resumes at dp 3 and finishes.
#   Lose: sbatch --nodes=3: after step 25 node n3's slurmd is frozen (SIGSTOP: the node stops
#   answering) and its rank killed (SIGKILL). The step fails (the hang watchdog names the lost rank
#   within comm.timeout_s), train.sbatch's probe finds n3 silent and submits the restart as a new
#   job on the 2 nodes that answer (--exclude=n3), which resumes at dp 2 from the newest
#   checkpoint, says how the layout changed, and finishes. Steps recomputed <= checkpoint.every;
#   measured: from the kill to the first step after the restart.
#   Killed while saving: 2 nodes, rank 1 SIGKILLed in the middle of writing the step-40 checkpoint
#   (MPITRON_FAULT, first start only), synchronous and asynchronous: both nodes answer the probe,
#   so train.sbatch requeues the job as it is; the restart resumes from step 20 (the newest
#   checkpoint that verifies) and finishes step 60, bit for bit the uninterrupted run.
#   (A slurmd killed outright, or
#   frozen and thawed, leaves the dead job COMPLETING on its node for minutes on Slurm 22.05, so the
#   node is not idle again soon enough to grow back within one test: hence the two jobs.)
# slurm-test-timeout: 360
set -uo pipefail
cd "$(dirname "$0")/../../.."
source tests/e2e/slurm/lib.sh

make_data && ok "prepped $T/data" || { bad "prep failed"; finish; exit; }
steps=80 every=20
args=(--data.path="$T/data" --model.n_layer=2 --model.d_model=128 --train.micro_batch=2 --train.global_batch=12
      --train.steps=$steps --train.threads=1 --train.reproducible=true --log.every=1 --eval.every=0 --eval.batches=0
      --checkpoint.every=$every --comm.timeout_s=10 --checkpoint.timeout_s=10 --optim.lr=1e-3 --optim.min_lr=1e-3 --optim.warmup_steps=0)
export MPITRON_PROBE_S=10 MPITRON_FAULT="slow@step_begin,ms=150"
submit() {  # name nodes: prints the job id
  MPITRON_ELASTIC=1 sbatch --parsable --nodes="$2" --ntasks-per-node=1 --export=ALL -o "$T/$1.out" \
    slurm/train.sbatch jobs/tiny.toml "${args[@]}" --job.run_dir="$T/$1"
}
restart_id() { sed -n "s/.*restart $2 submitted as job \\([0-9]*\\).*/\\1/p" "$T/$1.out"; }
same_as_reference() {  # name [steps]: every step of its run equals the uninterrupted run's (a constant lr)
  /usr/bin/python3 - "$T" "$1" "${2:-$steps}" <<'PY'
import json, sys
t, name, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
def steps_of(d):  # the last record of each step (a recomputed step is logged again)
    return {r["step"]: (r["loss"], r["grad_norm"]) for r in map(json.loads, open(f"{t}/{d}/metrics.jsonl")) if "loss" in r}
a, b = steps_of(name), steps_of("ref")
assert sorted(a) == list(range(1, steps + 1)), (name, len(a))
b = {s: b[s] for s in a}
bad = [s for s in a if a[s] != b[s]]
print(f"{name}: {steps} steps compared with the uninterrupted run; differing: {bad[:5]}")
sys.exit(1 if bad else 0)
PY
}
mpirun --oversubscribe $([ "$(id -u)" = 0 ] && echo --allow-run-as-root) -np 3 -x MPITRON_FAULT= "$MPITRON" train \
  jobs/tiny.toml "${args[@]}" --job.run_dir="$T/ref" >"$T/ref.log" 2>&1 </dev/null || { tail "$T/ref.log"; bad "reference run failed"; }

# --- Grow: 2 nodes -> 3 on a preemption, n3 being idle (the earlier tests' jobs may still be completing).
for t in $(seq 1 120); do [ "$(sinfo -h -t idle -o %D | awk '{s += $1} END {print s + 0}')" = 3 ] && break; sleep 0.5; done
id=$(MPITRON_MAX_NODES=3 submit grow 2) || { bad "sbatch failed"; finish; exit; }
out="$T/grow.out"
wait_lines "$out" 1 "^step +25/$steps" "$id" 120 || { cat "$out"; bad "grow: no step 25 in 120 s"; finish; exit; }
scancel -s USR1 --batch "$id" && ok "grow: SIGUSR1 to job $id at step 25"
wait_lines "$out" 1 "restart 1 submitted as job" "$id" 60 || bad "grow: no restart submitted"
id2=$(restart_id grow 1)
[ -n "$id2" ] && wait_job "$id2" 120 || bad "grow: restart job ${id2:-?} did not end within 120 s"
grep -q "step exited 75 (checkpointed after SIGUSR1); nodes answering: n1 n2; not answering: none; idle: 1; restart 1 as a new job on 3 node(s)" \
  "$out" && ok "grow: the restart asked for 3 nodes (one idle)" || bad "grow: no growth line"
grep -q "(3 nodes x 1 tasks = 3 ranks)" "$out" && ok "grow: restart on 3 nodes" || bad "grow: the restart was not on 3 nodes"
grep -q "^layout changed since the checkpoint: tp 1 x cp 1 x dp 2 x pp 1 (2 ranks) -> tp 1 x cp 1 x dp 3 x pp 1 (3 ranks)" "$out" &&
  ok "grow: the layout change logged" || bad "grow: no layout change line"
[ "$(job_state "$id2")" = COMPLETED ] && grep -qE "^step +$steps/$steps" "$out" && ok "grow: job $id2 finished step $steps" ||
  bad "grow: job $id2 state $(job_state "$id2")"
same_as_reference grow && ok "grow: 2 -> 3 nodes, every loss and grad norm bit for bit the uninterrupted run's" ||
  bad "grow: off the uninterrupted run"

# --- Killed while saving (sync, async): 2 nodes, rank 1 killed inside its write of step 40's checkpoint.
cat >"$T/mpitron-first-start" <<STUB
#!/bin/bash
# The fault on the first start only (a requeued job has SLURM_RESTART_COUNT > 0).
if [ "\${SLURM_RESTART_COUNT:-0}" = 0 ]; then export MPITRON_FAULT="\$FIRST_START_FAULT"; else unset MPITRON_FAULT; fi
exec "$MPITRON" "\$@"
STUB
chmod +x "$T/mpitron-first-start"
for mode in sync async; do
  fault="kill@ckpt_write,rank=1,step=40"
  [ $mode = async ] && fault="kill@ckpt_write,rank=1,after=2"  # one write per save: the second is step 40's
  id=$(MPITRON="$T/mpitron-first-start" FIRST_START_FAULT="$fault" MPITRON_ELASTIC=1 sbatch --parsable --nodes=2 \
    --ntasks-per-node=1 --export=ALL -o "$T/$mode.out" slurm/train.sbatch jobs/tiny.toml "${args[@]}" --train.steps=60 \
    --checkpoint.async=$([ $mode = async ] && echo true || echo false) --job.run_dir="$T/$mode") || { bad "sbatch failed"; continue; }
  wait_job "$id" 150 || bad "$mode: job $id did not end within 150 s"
  o="$T/$mode.out"
  grep -q "MPITRON_FAULT: kill at ckpt_write" "$o" && ok "$mode: rank 1 killed inside the step-40 save" || bad "$mode: the fault did not fire"
  grep -qE "nodes answering: n1 n2; not answering: none; idle: [0-9]+; the same 2 node\(s\) again" "$o" &&
    grep -q "scontrol requeue $id" "$o" &&
    ok "$mode: both nodes answered: requeued as it is" || bad "$mode: not requeued as it is"
  grep -q "^resumed from .*step_00000020.h5: step 20 " "$o" && ok "$mode: resumed from step 20, the newest verified" ||
    bad "$mode: did not resume from step 20"
  [ "$(job_state "$id")" = COMPLETED ] && grep -qE "^step +60/60" "$o" && ok "$mode: finished step 60" ||
    bad "$mode: job $id state $(job_state "$id")"
  same_as_reference $mode 60 && ok "$mode: every loss and grad norm bit for bit the uninterrupted run's" ||
    bad "$mode: off the uninterrupted run"
done

# --- Lose: 3 nodes -> 2 when n3 stops answering.
id=$(submit lose 3) || { bad "sbatch failed"; finish; exit; }
out="$T/lose.out"
wait_lines "$out" 1 "^step +25/$steps" "$id" 120 || { cat "$out"; bad "lose: no step 25 in 120 s"; finish; exit; }
grep -q "(3 nodes x 1 tasks = 3 ranks)" "$out" && ok "lose: 3 nodes x 1 task" || bad "lose: not started on 3 nodes"
t0=$(date +%s.%N)
pkill -STOP -f "slurmd -D -N n3" && ok "lose: froze n3's slurmd" || bad "lose: no slurmd for n3"
for p in $(pgrep -x mpitron); do
  tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "SLURMD_NODENAME=n3" && kill -KILL "$p" && ok "lose: killed rank pid $p on n3"
done
lost_at=$(grep -oE "^step +[0-9]+/$steps" "$out" | tail -1 | grep -oE "[0-9]+" | head -1)
# The job's step ends; the job itself stays COMPLETING on n3, which no longer answers.
wait_lines "$out" 1 "restart 1 submitted as job" "$id" 120 || bad "lose: no restart submitted within 120 s"
id2=$(restart_id lose 1)
[ -n "$id2" ] && ok "lose: restart 1 submitted as job $id2" || { cat "$out"; bad "lose: no restart job"; finish; exit; }
pkill -CONT -f "slurmd -D -N n3"  # the restart excludes it; thawed now, it is cleaned up in the background
first_after=""
for t in $(seq 1 240); do
  if [ -n "$(sed -n '/^resumed from /,$p' "$out" | grep -m1 -E "^step +[0-9]+/$steps")" ]; then
    first_after=$(date +%s.%N); break
  fi
  sleep 0.5
done
wait_job "$id2" 120 || bad "lose: job $id2 did not end within 120 s"
grep -q "not answering: n3; idle: 0; restart 1 as a new job on 2 node(s)" "$out" && ok "lose: the probe found n3 silent" ||
  bad "lose: no probe line"
grep -q "(2 nodes x 1 tasks = 2 ranks)" "$out" && ok "lose: restart on 2 nodes" || bad "lose: the restart was not on 2 nodes"
grep -q "^layout changed since the checkpoint: tp 1 x cp 1 x dp 3 x pp 1 (3 ranks) -> tp 1 x cp 1 x dp 2 x pp 1 (2 ranks)" "$out" &&
  ok "lose: the layout change logged" || bad "lose: no layout change line"
resumed=$(grep -oE "^resumed from .*: step [0-9]+" "$out" | head -1 | grep -oE "[0-9]+$")
[ -n "$resumed" ] && [ -n "$lost_at" ] && [ $((lost_at - resumed)) -le $every ] &&
  ok "lose: resumed at step $resumed, lost at step $lost_at: $((lost_at - resumed)) steps recomputed (<= $every)" ||
  bad "lose: resumed at ${resumed:-?}, lost at ${lost_at:-?}"
[ -n "$first_after" ] && ok "lose: from the kill to the first step after the restart: $(echo "$first_after - $t0" | bc | xargs printf '%.1f') s" ||
  bad "lose: no step after the restart"
[ "$(job_state "$id2")" = COMPLETED ] && grep -qE "^step +$steps/$steps" "$out" && ok "lose: job $id2 finished step $steps" ||
  bad "lose: job $id2 state $(job_state "$id2")"
same_as_reference lose && ok "lose: 3 -> 2 nodes, every loss and grad norm bit for bit the uninterrupted run's" ||
  bad "lose: off the uninterrupted run"
grep -hE "^\[train.sbatch|^resumed from|^elastic|^layout changed|error|MPITRON_FAULT" "$T/grow.out" "$T/sync.out" \
  "$T/async.out" "$out" | cut -c1-300
finish
