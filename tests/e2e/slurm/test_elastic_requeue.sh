#!/usr/bin/env bash
# slurm/train.sbatch's elastic contract (MPITRON_ELASTIC=1) with a stand-in trainer: a step that
# fails (exit 1, as when a rank or a node is lost) is requeued, and the restart runs with
# --train.elastic=true; a usage error (exit 2) is not requeued, nor is a failure without
# MPITRON_ELASTIC. The trainer's side (dp from the ranks there are, the global batch kept) is
# tests/e2e/test_elastic.sh's.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source tests/e2e/slurm/lib.sh

cat >"$T/fake-mpitron" <<'STUB'
#!/bin/bash
# Stand-in for `mpitron train`: the first run fails with $FAKE_RC, a restart finishes.
echo "fake rank ${SLURM_PROCID:-?} restart ${SLURM_RESTART_COUNT:-0} args: $*"
[ "${SLURM_RESTART_COUNT:-0}" -gt 0 ] && { echo "fake rank ${SLURM_PROCID:-?} resumed"; exit 0; }
exit "${FAKE_RC:-1}"
STUB
chmod +x "$T/fake-mpitron"
# run NAME ELASTIC RC: one job, its log in $T/NAME.out; prints the job id.
run() {
  MPITRON="$T/fake-mpitron" MPITRON_ELASTIC=$2 FAKE_RC=$3 sbatch --parsable -N1 --ntasks-per-node=2 \
    --export=ALL -o "$T/$1.out" slurm/train.sbatch jobs/tiny.toml --train.steps=5
}
id=$(run elastic 1 1) || { bad "sbatch failed"; finish; exit; }
wait_job "$id" 90 || bad "job $id did not end within 90 s"
cat "$T/elastic.out"
[ "$(job_state "$id")" = COMPLETED ] && ok "elastic: a failed step requeued, the restart COMPLETED" || bad "job state $(job_state "$id")"
grep -q 'step exited 1 (failed (a rank or node lost?); MPITRON_ELASTIC=1' "$T/elastic.out" && ok "requeue on exit 1 logged" ||
  bad "no requeue line for exit 1"
[ "$(grep -c 'restart 1 args: .*--train.elastic=true' "$T/elastic.out")" = 2 ] && ok "the restart's ranks got --train.elastic=true" ||
  bad "restart args: $(grep 'restart 1 args' "$T/elastic.out")"
id=$(run usage 1 2) || { bad "sbatch failed"; finish; exit; }
wait_job "$id" 60 || bad "job $id did not end"
grep -q 'step exited 2$' "$T/usage.out" && ! grep -q "restart 1" "$T/usage.out" && ok "elastic: a usage error (exit 2) is not requeued" ||
  { cat "$T/usage.out"; bad "a usage error was requeued"; }
id=$(run plain 0 1) || { bad "sbatch failed"; finish; exit; }
wait_job "$id" 60 || bad "job $id did not end"
grep -q 'step exited 1$' "$T/plain.out" && ! grep -q "restart 1" "$T/plain.out" && ok "not elastic: a failure is not requeued" ||
  { cat "$T/plain.out"; bad "a failure without MPITRON_ELASTIC was requeued"; }
finish
