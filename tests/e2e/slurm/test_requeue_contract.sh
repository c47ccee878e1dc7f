#!/usr/bin/env bash
# slurm/train.sbatch's preemption contract with a stand-in trainer (no training, so a failure here
# is the script's, not mpitron's):
# `scancel -s USR1 --batch` reaches the batch shell, the trap forwards SIGUSR1 to every rank of the
# step, the step exits 75, the script requeues the job, which restarts with SLURM_RESTART_COUNT=1,
# appends to the same log and completes.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source tests/e2e/slurm/lib.sh

cat >"$T/fake-mpitron" <<'STUB'
#!/bin/bash
# Stand-in for `mpitron train`: on restart finish; else report up, exit 75 on SIGUSR1.
r=${SLURM_PROCID:-?}
echo "fake rank $r restart ${SLURM_RESTART_COUNT:-0} node ${SLURM_NODEID:-?} args: $*"
if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ]; then echo "fake rank $r resumed"; exit 0; fi
# The last rank takes longer to leave (as a rank still flushing its checkpoint part would).
trap 'echo "fake rank $r got SIGUSR1"; [ "$r" = 3 ] && sleep 3; exit 75' USR1
echo "fake rank $r up"
for i in $(seq 1 600); do sleep 0.1; done
echo "fake rank $r: no signal in 60 s"
exit 3
STUB
chmod +x "$T/fake-mpitron"
log="$T/job.out"
id=$(MPITRON="$T/fake-mpitron" sbatch --parsable -N2 --ntasks-per-node=2 -o "$log" slurm/train.sbatch jobs/tiny.toml --train.steps=5) ||
  { bad "sbatch failed"; finish; exit; }
ok "submitted job $id"
wait_lines "$log" 4 '^fake rank [0-3] up$' "$id" 60 && ok "4 ranks up" || bad "ranks not up in 60 s"
t0=$SECONDS
scancel -s USR1 --batch "$id" && ok "scancel -s USR1 --batch $id" || bad "scancel failed"
wait_job "$id" 90 || bad "job $id did not end within 90 s of the signal"
cat "$log"
info=$(scontrol show job "$id")
[ "$(job_state "$id")" = COMPLETED ] && ok "job COMPLETED after $((SECONDS - t0)) s" || bad "job state $(job_state "$id")"
grep -q 'Restarts=1 ' <<<"$info" && ok "Restarts=1" || bad "expected Restarts=1: $(grep -o 'Restarts=[0-9]*' <<<"$info")"
[ "$(grep -c 'got SIGUSR1' "$log")" = 4 ] && ok "SIGUSR1 forwarded to all 4 ranks" || bad "SIGUSR1 reached $(grep -c 'got SIGUSR1' "$log") ranks"
grep -q 'step exited 75 (checkpointed after SIGUSR1): scontrol requeue' "$log" && ok "requeue on exit 75" || bad "no requeue line"
grep -q 'restart 1: jobs/tiny.toml --train.steps=5' "$log" && ok "restart 1 logged (same log, appended)" || bad "no 'restart 1' line"
[ "$(grep -c 'resumed$' "$log")" = 4 ] && ok "4 ranks ran again with SLURM_RESTART_COUNT=1" || bad "resumed ranks: $(grep -c 'resumed$' "$log")"
grep -q 'step exited 0$' "$log" && ok "second run exited 0" || bad "second run did not exit 0"
finish
