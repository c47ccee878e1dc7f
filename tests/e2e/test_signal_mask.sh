#!/usr/bin/env bash
# sanitizers: skip (signal delivery on threads, not memory)
# Job-control signals are blocked in EVERY thread of a training rank (core/signals.hpp: an
# asynchronous handler running on a oneDNN GEMM thread corrupts the heap), and taken by the
# watcher thread: /proc/PID/task/*/status SigBlk of every thread of every rank, read while the
# ranks train with an OpenMP pool, the DDP progress thread and the data prefetch thread running,
# must have SIGINT (2), SIGUSR1 (10) and SIGTERM (15) set. Then: SIGUSR1 -> exit 75; one Ctrl-C
# (SIGINT) -> checkpoint and exit 130; two -> gone at once; a non-training command dies of the
# signal as before.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
prep_fortunes "$tmp/data" 100000 fortunes

args=(--data.path="$tmp/data" --train.steps=100000 --train.micro_batch=2 --model.seq_len=32 --log.every=1
      --eval.every=0 --checkpoint.every=0 --train.peak_flops=1e11 --train.threads=2)
wait_for_step() {  # log pid step
  local i
  for i in $(seq 1 600); do
    grep -q "^step *$3/" "$1" 2>/dev/null && return 0
    kill -0 "$2" 2>/dev/null || { cat "$1"; fail "the run ended before step $3"; }
    sleep 0.1
  done
  cat "$1"; fail "no step $3 after 60 s"
}
descendants() { local c; for c in $(pgrep -P "$1"); do echo "$c"; descendants "$c"; done; }

$MPIRUN -np 2 "$MPITRON" train jobs/tiny.toml "${args[@]}" --job.run_dir="$tmp/mask" >"$tmp/mask.log" 2>&1 &
mp=$!
wait_for_step "$tmp/mask.log" $mp 5
ranks=$(for p in $(descendants $mp); do [ "$(cat /proc/$p/comm 2>/dev/null)" = mpitron ] && echo "$p"; done)
[ "$(echo "$ranks" | wc -w)" -eq 2 ] || fail "expected 2 rank processes, found: $ranks"
/usr/bin/python3 - $ranks <<'PY' || { kill -9 $ranks; fail "a thread does not block the job signals"; }
import glob, sys
need = {2: "SIGINT", 10: "SIGUSR1", 15: "SIGTERM"}
bad = []
for pid in sys.argv[1:]:
    names = []
    for task in sorted(glob.glob(f"/proc/{pid}/task/*")):
        try:
            status = dict(l.split(":\t", 1) for l in open(f"{task}/status").read().splitlines() if ":\t" in l)
            comm = open(f"{task}/comm").read().strip()
        except FileNotFoundError:
            continue  # the thread ended meanwhile
        blocked = int(status["SigBlk"], 16)
        names.append(comm)
        for sig, name in need.items():
            if not blocked >> (sig - 1) & 1:
                bad.append(f"pid {pid} thread {task.rsplit('/', 1)[1]} ({comm}): {name} not blocked (SigBlk {status['SigBlk'].strip()})")
    print(f"rank pid {pid}: {len(names)} threads, all block SIGINT/SIGUSR1/SIGTERM: {' '.join(names)}")
    assert "mpitron-signals" in names, f"pid {pid}: no signal watcher thread"
    assert len(names) >= 5, f"pid {pid}: only {len(names)} threads (expected main, watcher, OpenMP, DDP progress, prefetch, MPI)"
for b in bad:
    print(b)
sys.exit(1 if bad else 0)
PY
kill -USR1 $ranks
rc=0; wait $mp || rc=$?
[ $rc -eq 75 ] || { tail "$tmp/mask.log"; fail "SIGUSR1: exit $rc, not 75"; }
grep -q "preempted (signal 10" "$tmp/mask.log" || fail "no preemption line"
echo "SIGUSR1 to both ranks: checkpoint, exit 75"

# Ctrl-C on a workstation run (one process, no mpirun): checkpoint at the step's end, exit 130.
"$MPITRON" train jobs/tiny.toml "${args[@]}" --job.run_dir="$tmp/int" >"$tmp/int.log" 2>&1 &
pid=$!
wait_for_step "$tmp/int.log" $pid 3
kill -INT $pid
rc=0; wait $pid || rc=$?
[ $rc -eq 130 ] || { tail "$tmp/int.log"; fail "one SIGINT: exit $rc, not 130"; }
grep -q "interrupt: checkpointing" "$tmp/int.log" && grep -q "preempted (signal 2" "$tmp/int.log" &&
  [ -e "$tmp/int/ckpt/latest" ] || { tail "$tmp/int.log"; fail "one SIGINT: no checkpoint"; }
echo "one Ctrl-C: checkpoint, exit 130"

# Twice: quit at once (killed by SIGINT: the shell reports 130 too, but without the checkpoint).
# Steps made 3 s long (MPITRON_FAULT=slow), so the first Ctrl-C is still waiting for the step's
# end when the second comes (two signals sent back to back would merge into one).
MPITRON_FAULT="slow@forward,ms=3000" "$MPITRON" train jobs/tiny.toml "${args[@]}" --job.run_dir="$tmp/int2" \
  --train.resume=never >"$tmp/int2.log" 2>&1 &
pid=$!
wait_for_step "$tmp/int2.log" $pid 1
kill -INT $pid
sleep 0.5
kill -INT $pid
rc=0; wait $pid || rc=$?
[ $rc -eq 130 ] || fail "two SIGINTs: exit $rc, not 130"
! grep -q "preempted" "$tmp/int2.log" || fail "two SIGINTs: it still waited for the step to checkpoint"
echo "two Ctrl-C: gone at once"

# After the last step boundary (the final evaluation, the 3rd: steps 0, 3, 6): nothing to
# requeue; the run says so and exits 0.
rc=0
MPITRON_FAULT="usr1@eval,after=3" "$MPITRON" train jobs/tiny.toml "${args[@]}" \
  --train.steps=6 --eval.every=3 --job.run_dir="$tmp/late" >"$tmp/late.log" 2>&1 || rc=$?
[ $rc -eq 0 ] || { tail "$tmp/late.log"; fail "SIGUSR1 after the last step: exit $rc, not 0"; }
grep -q "rank 0: signal 10 (User defined signal 1) after the last step" "$tmp/late.log" &&
  grep -q "^done: 6 steps" "$tmp/late.log" || { cat "$tmp/late.log"; fail "SIGUSR1 after the last step: not said"; }
echo "SIGUSR1 after the last step: exit 0, said so"

# Not training: the signal's default action, as before (prep of a large input, killed by SIGTERM).
head -c 30000000 /dev/urandom | base64 >"$tmp/big.txt"
"$MPITRON" prep --input "$tmp/big.txt" --tokenizer byte --out "$tmp/bigdata" --quiet >/dev/null 2>&1 &
pid=$!
sleep 0.3
kill -TERM $pid
rc=0; wait $pid || rc=$?
[ $rc -eq 143 ] || [ $rc -eq 0 ] || fail "prep after SIGTERM: exit $rc (expected death by SIGTERM, 143)"
echo "prep: SIGTERM -> exit $rc"
