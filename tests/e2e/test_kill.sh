#!/usr/bin/env bash
# sanitizers: skip (timing: kills at random moments; the same resume paths run sanitized in e2e/test_checkpoint)
# Kill -9 at random (reliability issue, item 5). Trials alternate np 2 and np 4, and pairs of them
# synchronous and background (checkpoint.async) saves; each one starts a
# run, waits for a random step, sleeps a random moment into it (training, a save in progress, the
# step log) and SIGKILLs a random rank from outside, as a node failure would. Then:
#   - every process (mpirun and all ranks) is gone within 30 s, mpirun exits non-zero, and its
#     message names the dead rank;
#   - `latest` names a complete checkpoint (or none yet); the resumed run (train.resume = auto,
#     same layout) starts at that checkpoint's step + 1, having removed a save the kill cut short;
#   - metrics.jsonl then holds every step exactly once (none repeated, none skipped) and every
#     loss is bit-identical to an uninterrupted run of the same layout (log.every = 1).
# KILL_SEED=N repeats a sequence of trials (the seed is printed); KILL_TRIALS=N (default 10; 4
# in a sanitizer build: one of each np x save kind, the same code paths; the random moments are
# the plain run's job, and each trial there takes 2-3x as long).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
say() { echo "== $*"; }
# A failure must not leave a training job behind.
live=()
cleanup() {
  local p
  for p in "${live[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT

seed=${KILL_SEED:-$(( $(date +%s%N) % 1000000 ))}
trials=${KILL_TRIALS:-$([ -n "${SAN:-}" ] && echo 4 || echo 10)}
RANDOM=$seed
echo "seed $seed (KILL_SEED=$seed repeats these trials), $trials trials"

prep_fortunes "$tmp/data" 200000 fortunes computers science

steps=32
common=(--data.path="$tmp/data" --train.steps=$steps --train.micro_batch=1 --train.global_batch=4
        --checkpoint.every=4 --checkpoint.keep=2 --eval.every=0 --eval.batches=0 --log.every=1
        --train.peak_flops=1e11 --model.seq_len=32)
async=()  # trials 2, 3, 6, 7, ...: checkpoint.async = true (saves written by a background thread)
train() {  # np run_dir log
  timeout 120 $MPIRUN -np "$1" "$MPITRON" train jobs/tiny.toml "${common[@]}" "${async[@]}" --job.run_dir="$2" >"$3" 2>&1 ||
    { cat "$3"; fail "$2: exit $?"; }
}

say "uninterrupted references, np 2 and np 4"
for np in 2 4; do train $np "$tmp/ref$np" "$tmp/ref$np.log"; done

# rank_pid MPIRUN_PID RANK: the pid of that rank (a child of mpirun with OMPI_COMM_WORLD_RANK=RANK).
rank_pid() {
  local c
  for c in $(pgrep -P "$1"); do
    if tr '\0' '\n' <"/proc/$c/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2"; then
      echo "$c"
      return
    fi
  done
}

times=()
summary=()
t=0
attempts=0
while [ $t -lt "$trials" ]; do
  attempts=$((attempts + 1))
  [ $attempts -le $((trials * 2)) ] || fail "too many runs finished before they could be killed"
  np=$(( t % 2 == 0 ? 2 : 4 ))
  async=()
  [ $(( t / 2 % 2 )) -eq 0 ] || async=(--checkpoint.async=true)
  rank=$(( RANDOM % np ))
  target=$(( 2 + RANDOM % (steps / 2) ))
  delay_ms=$(( RANDOM % 120 ))
  run="$tmp/trial$t"
  rm -rf "$run"
  # Each step sleeps 40 ms more (MPITRON_FAULT=slow, timing only): a tiny step takes a few ms, and
  # mpirun forwards the step lines late enough under load that the whole run could be over before
  # the kill, with nothing left to resume.
  MPITRON_FAULT="slow@step_begin,ms=40" \
    $MPIRUN -np $np -x MPITRON_FAULT "$MPITRON" train jobs/tiny.toml "${common[@]}" "${async[@]}" --job.run_dir="$run" >"$run.log" 2>&1 &
  mp=$!
  live=("$mp")
  for _ in $(seq 1 600); do
    grep -qE "^step +$target/" "$run.log" 2>/dev/null && break
    kill -0 $mp 2>/dev/null || break
    sleep 0.05
  done
  sleep "$(printf '0.%03d' $delay_ms)"
  victim=$(rank_pid $mp $rank || true)
  ranks=$(pgrep -P $mp || true)
  if [ -z "$victim" ] || ! kill -KILL "$victim" 2>/dev/null; then
    # Too late: the run finished (or is finishing) first. Not a trial; draw again.
    wait $mp || true
    echo "(np $np: run over before step $target + ${delay_ms} ms could be hit; drawing again)"
    continue
  fi
  t0=$(date +%s%N)
  gone=0
  for _ in $(seq 1 300); do
    if ! kill -0 $mp 2>/dev/null; then
      gone=1
      for p in $ranks; do kill -0 "$p" 2>/dev/null && gone=0; done
      [ $gone -eq 1 ] && break
    fi
    sleep 0.1
  done
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  [ $gone -eq 1 ] || { cat "$run.log"; fail "trial $t: processes left 30 s after SIGKILL of rank $rank: $(ps -o pid,args -p "$mp $ranks" || true)"; }
  rc=0
  wait $mp || rc=$?
  live=()
  [ $rc -ne 0 ] || fail "trial $t: mpirun exited 0 after rank $rank was killed"
  grep -qE "process rank $rank with PID [0-9]+ on node .* exited on signal 9" "$run.log" ||
    { cat "$run.log"; fail "trial $t: no message naming the dead rank $rank"; }
  last=$(grep -oE "^step +[0-9]+/" "$run.log" | tail -1 | grep -oE "[0-9]+" || echo 0)
  latest=$(readlink "$run/ckpt/latest" 2>/dev/null || true)
  kstep=0
  [ -z "$latest" ] || kstep=$((10#$(echo "$latest" | grep -oE "[0-9]{8}")))
  partial=$(ls -a "$run/ckpt" 2>/dev/null | grep -c '\.tmp$' || true)
  if [ "$kstep" -eq $steps ]; then
    # The last checkpoint was complete: the kill hit the run's teardown, nothing is left to resume.
    echo "(np $np: run over, its final checkpoint written, before step $target + ${delay_ms} ms could be hit; drawing again)"
    continue
  fi

  train $np "$run" "$run.resume.log"
  first=$(grep -oE "^step +[0-9]+/" "$run.resume.log" | head -1 | grep -oE "[0-9]+" || true)
  [ "$first" = $((kstep + 1)) ] || fail "trial $t: resumed at step $first, the last complete checkpoint is step $kstep"
  if [ $kstep -gt 0 ]; then
    grep -qE "^resumed from .*/$latest: step $kstep " "$run.resume.log" || fail "trial $t: no resume from $latest"
  fi
  ! grep -q '\.tmp' <(ls -a "$run/ckpt") || fail "trial $t: a partial checkpoint is left after the resume"
  # A save the kill interrupted: the resume removes its file first (a redo of that step's save
  # would also replace it, but a save at another step would not).
  if [ "$partial" -gt 0 ]; then
    grep -qE "^removed .*/\.step_[0-9]{8}\.h5\.tmp \(a partial checkpoint" "$run.resume.log" ||
      fail "trial $t: the partial save was not cleaned up on resume"
  fi
  /usr/bin/python3 - "$tmp/ref$np/metrics.jsonl" "$run/metrics.jsonl" $steps <<'PY' || fail "trial $t: metrics.jsonl"
import collections, json, sys
def rows(p):
    return [r for r in map(json.loads, open(p)) if "loss" in r]
ref = {r["step"]: r["loss"] for r in rows(sys.argv[1])}
run = rows(sys.argv[2])
count = collections.Counter(r["step"] for r in run)
assert not [s for s, n in count.items() if n > 1], f"steps logged twice: {sorted(s for s, n in count.items() if n > 1)}"
want = set(range(1, int(sys.argv[3]) + 1))
assert set(count) == want, f"steps missing: {sorted(want - set(count))}, extra: {sorted(set(count) - want)}"
bad = {r["step"]: (r["loss"], ref[r["step"]]) for r in run if r["loss"] != ref[r["step"]]}
assert not bad, f"losses differ from the uninterrupted run: {bad}"
PY
  times+=("$ms")
  summary+=("$(printf 'trial %2d: np %d%s, rank %d killed after step %2d (+%3d ms) -> all gone in %5d ms, exit %3d; latest step %2d%s; resumed at %2d, steps 1-%d once, bit-identical' \
    $t $np "$([ ${#async[@]} -gt 0 ] && echo ' async')" $rank "$last" $delay_ms "$ms" $rc $kstep "$([ "$partial" -gt 0 ] && echo ' (+ a partial save, removed on resume)')" "$first" $steps)")
  echo "${summary[-1]}"
  rm -rf "$run" "$run.log" "$run.resume.log"
  t=$((t + 1))
done
sorted=$(printf '%s\n' "${times[@]}" | sort -n)
echo "exit times after SIGKILL (ms): min $(echo "$sorted" | head -1), median $(echo "$sorted" | sed -n "$(( (trials + 1) / 2 ))p"), max $(echo "$sorted" | tail -1)"
echo "ok"
