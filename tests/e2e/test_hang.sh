#!/usr/bin/env bash
# sanitizers: skip (timing: the watchdog's deadlines, not memory)
# The hang watchdog on the MPI backend (distributed/watchdog.hpp). With comm.timeout_s = 4:
#  - a rank SIGSTOPped from outside (np 4, dp 2 x tp 2): every rank that can still run reports
#    the operation, group and world ranks, step and phase it waited in; the stopped rank is named
#    as not answering; the job exits 124 within timeout + 30 s (measured);
#  - a rank that sleeps forever inside a step (MPITRON_FAULT=hang): named as "did not arrive",
#    "not waiting on communication", with its step and phase;
#  - point-to-point (pp 2): the waiting stage names its peer;
#  - a rank stopped in the middle of a checkpoint save (collective parallel-HDF5 I/O): reported
#    after checkpoint.timeout_s;
#  - and no false alarm: a run with the same short timeouts that saves and evaluates finishes;
#  - the straggler report: a rank made slow (MPITRON_FAULT=slow) is named on every logged step.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
prep_fortunes "$tmp/data" 100000 fortunes

T=4
args=(--data.path="$tmp/data" --train.micro_batch=2 --model.seq_len=32 --log.every=1 --eval.every=0
      --checkpoint.every=0 --train.peak_flops=1e11 --comm.timeout_s=$T --checkpoint.timeout_s=$T)
descendants() { local c; for c in $(pgrep -P "$1"); do echo "$c"; descendants "$c"; done; }
rank_pid() {  # mpirun-pid world-rank
  local p
  for p in $(descendants "$1"); do
    [ "$(cat /proc/$p/comm 2>/dev/null)" = mpitron ] || continue
    tr '\0' '\n' </proc/$p/environ 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && { echo "$p"; return; }
  done
}
wait_for_step() {  # log pid step
  local i
  for i in $(seq 1 600); do
    grep -q "^step *$3/" "$1" 2>/dev/null && return 0
    kill -0 "$2" 2>/dev/null || { cat "$1"; fail "the run ended before step $3"; }
    sleep 0.1
  done
  cat "$1"; fail "no step $3 after 60 s"
}
# expect_hang LOG RC SECONDS: the job exited 124, within T + 30 s, and every line we need is there.
expect_hang() {
  local log=$1 rc=$2 secs=$3
  shift 3
  [ "$rc" -eq 124 ] || { cat "$log"; fail "exit $rc, not 124 (kExitHang)"; }
  [ "$secs" -le $((T + 30)) ] || fail "took $secs s to exit (limit $((T + 30)) s)"
  local pat
  for pat in "$@"; do grep -qE "$pat" "$log" || { cat "$log"; fail "no line matching: $pat"; }; done
}

echo "== SIGSTOP of world rank 3 (np 4, dp 2 x tp 2)"
$MPIRUN -np 4 "$MPITRON" train jobs/tiny.toml "${args[@]}" --parallel.tp=2 --train.steps=100000 \
  --job.run_dir="$tmp/stop" >"$tmp/stop.log" 2>&1 &
mp=$!
wait_for_step "$tmp/stop.log" $mp 5
victim=$(rank_pid $mp 3)
[ -n "$victim" ] || fail "no pid for world rank 3"
kill -STOP "$victim"
t0=$SECONDS
rc=0; wait $mp || rc=$?
secs=$((SECONDS - t0))
kill -9 "$victim" 2>/dev/null || true
expect_hang "$tmp/stop.log" $rc $secs \
  "rank [0-2] on .*: hang: MPI_[A-Za-z_]+.* on group '[a-z_]+' \(world ranks [0-9,]+; collective #[0-9]+.*has not completed after [0-9]+ s \(comm.timeout_s = $T s\); this rank is at step [0-9]+ \(phase '" \
  "hang: rank 3: no answer within [0-9]+ s \(stopped, dead or unreachable\)" \
  "hang: ranks that did not arrive in .*: 3$"
echo "stopped rank: job gone ${secs} s after the SIGSTOP (timeout $T s); reports:"
grep -E "hang: (ranks that|rank 3)" "$tmp/stop.log" | sort -u | sed 's/^/  /'
reporters=$(grep -oE "rank [0-9] on [^:]*: hang" "$tmp/stop.log" | sort -u | wc -l)
[ "$reporters" -ge 2 ] || fail "only $reporters rank(s) reported"

echo "== a rank that sleeps inside a step (MPITRON_FAULT=hang@forward,rank=2,step=4)"
t0=$SECONDS
rc=0
MPITRON_FAULT="hang@forward,rank=2,step=4" $MPIRUN -x MPITRON_FAULT -np 4 "$MPITRON" train jobs/tiny.toml \
  "${args[@]}" --parallel.tp=2 --train.steps=100 --job.run_dir="$tmp/sleep" >"$tmp/sleep.log" 2>&1 || rc=$?
secs=$((SECONDS - t0))
expect_hang "$tmp/sleep.log" $rc $secs \
  "hang: rank 2: did not arrive \([0-9]+ collectives started on '(tp|dp)'\): at step 4 \(phase 'forward/backward'\), not waiting on communication" \
  "hang: ranks that did not arrive in .*: 2$" \
  "rank 2 on .*: hang reported by rank [0-3] .*here: at step 4 \(phase 'forward/backward'\), not waiting on communication"
echo "sleeping rank named: $(grep -m1 -oE "hang: rank 2: did not arrive.*" "$tmp/sleep.log")"
echo "job gone after ${secs} s in all (start-up included)"

echo "== point-to-point: pp 2, stage 1 stopped"
t0=$SECONDS
rc=0
MPITRON_FAULT="stop@forward,rank=1,step=3" $MPIRUN -x MPITRON_FAULT -np 2 "$MPITRON" train jobs/tiny.toml \
  "${args[@]}" --parallel.pp=2 --train.global_batch=8 --train.steps=100 --job.run_dir="$tmp/pp" >"$tmp/pp.log" 2>&1 || rc=$?
secs=$((SECONDS - t0))
expect_hang "$tmp/pp.log" $rc $secs \
  "rank 0 on .*: hang: MPI_[A-Za-z_]+.* on group 'pp' \(world ranks 0,1; peer world rank 1" \
  "hang: rank 1: no answer within"
echo "p2p: $(grep -m1 -oE "hang: MPI_.* on group 'pp' \(world ranks 0,1; peer world rank 1[^)]*\)" "$tmp/pp.log")"

echo "== a rank stopped in the middle of a checkpoint save (checkpoint.timeout_s = $T)"
t0=$SECONDS
rc=0
MPITRON_FAULT="stop@ckpt_write,rank=1,step=3" $MPIRUN -x MPITRON_FAULT -np 2 "$MPITRON" train jobs/tiny.toml \
  "${args[@]}" --checkpoint.every=3 --train.steps=100 --job.run_dir="$tmp/ckpt" >"$tmp/ckpt.log" 2>&1 || rc=$?
secs=$((SECONDS - t0))
expect_hang "$tmp/ckpt.log" $rc $secs \
  "rank 0 on .*: hang: collective parallel-HDF5 write of a checkpoint has not completed after [0-9]+ s \(its limit = $T s\); this rank is at step 3 \(phase 'checkpoint save'\)" \
  "hang: rank 1: no answer within"
[ ! -e "$tmp/ckpt/ckpt/latest" ] || fail "latest exists after a save that never completed"
echo "save: $(grep -m1 -oE "hang: collective parallel-HDF5 write.*" "$tmp/ckpt.log")"

echo "== no false alarm with the same timeouts (np 2: checkpoints, evaluation, 30 steps)"
$MPIRUN -np 2 "$MPITRON" train jobs/tiny.toml "${args[@]}" --train.steps=30 --checkpoint.every=10 --eval.every=10 \
  --job.run_dir="$tmp/ok" >"$tmp/ok.log" 2>&1 || { cat "$tmp/ok.log"; fail "a healthy run failed"; }
! grep -q "hang" "$tmp/ok.log" || fail "false hang report"
echo "healthy run: no report"

echo "== straggler report: world rank 2 sleeps 30 ms in every forward (MPITRON_FAULT=slow)"
# Timeouts of 60 s, not the 4 s of the hang cases: this run checks the report, and its final
# checkpoint save once took more than 4 s on a loaded 2-core machine (the watchdog rightly fired).
MPITRON_FAULT="slow@forward,rank=2,ms=30" $MPIRUN -x MPITRON_FAULT -np 4 "$MPITRON" train jobs/tiny.toml "${args[@]}" \
  --comm.timeout_s=60 --checkpoint.timeout_s=60 \
  --parallel.tp=2 --train.steps=12 --log.every=4 --job.run_dir="$tmp/slow" >"$tmp/slow.log" 2>&1 ||
  { cat "$tmp/slow.log"; fail "straggler run failed"; }
/usr/bin/python3 - "$tmp/slow/metrics.jsonl" <<'PY' || { grep "^step" "$tmp/slow.log"; fail "straggler not named"; }
import json, sys
rows = [r for r in map(json.loads, open(sys.argv[1])) if "slowest_rank" in r and r["step"] > 1]
assert [r["step"] for r in rows] == [4, 8, 12], [r["step"] for r in rows]
for r in rows:
    assert r["slowest_rank"] == 2 and r["slowest_busy_ms"] >= 30 > r["median_busy_ms"], r
print("slowest rank named on steps 4, 8, 12: rank 2, busy", ", ".join(f'{r["slowest_busy_ms"]:.1f}' for r in rows),
      "ms vs median", ", ".join(f'{r["median_busy_ms"]:.1f}' for r in rows), "ms")
PY
grep "^step *4/" "$tmp/slow.log" | grep -o "slowest rank.*" | sed 's/^/log line of step 4: ... | /'
