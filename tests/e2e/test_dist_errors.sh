#!/usr/bin/env bash
# Error paths of the distributed layer: each must end every rank within seconds with one clear
# message. Needs $MPITRON and $MPIRUN (exported by tests/run_tests.sh).
set -uo pipefail
: "${MPITRON:?}" "${MPIRUN:?}"
fails=0
out=$(mktemp)
trap 'rm -f "$out"' EXIT

# expect NAME WANT_RC PATTERN COUNT -- command...   (WANT_RC "nz" = any non-zero but not a timeout)
expect() {
  local name=$1 want=$2 pat=$3 count=$4
  shift 5
  local t0=$SECONDS
  timeout -k 5 30 "$@" >"$out" 2>&1
  local rc=$? dt=$((SECONDS - t0)) n
  n=$(grep -c -- "$pat" "$out")
  local ok=1
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then ok=0; fi
  if [ "$want" = nz ]; then [ "$rc" -ne 0 ] || ok=0; else [ "$rc" -eq "$want" ] || ok=0; fi
  [ "$n" -eq "$count" ] || ok=0
  [ "$dt" -le 15 ] || ok=0
  if [ $ok = 1 ]; then
    echo "ok   $name (exit $rc, ${dt}s)"
  else
    echo "FAIL $name: exit $rc (want $want), '$pat' seen $n times (want $count), ${dt}s"
    sed 's/^/     | /' "$out"
    fails=$((fails + 1))
  fi
}

expect "layout does not divide world (np 4)" 2 "does not divide the world size 4" 1 -- \
  $MPIRUN -np 4 "$MPITRON" env --parallel.tp=3
expect "explicit dp disagrees with world (np 4)" 2 "but the job has 4 ranks" 1 -- \
  $MPIRUN -np 4 "$MPITRON" env --parallel.dp=3 --parallel.tp=2
expect "unknown env option (np 2)" 2 "unknown option '--bogus'.*allowed" 1 -- \
  $MPIRUN -np 2 "$MPITRON" env --bogus
expect "unknown bench-comm option (np 2)" 2 "unknown option '--sizes'.*allowed: --op" 1 -- \
  $MPIRUN -np 2 "$MPITRON" bench-comm --sizes 8
expect "bad bench-comm group (np 2)" 2 "unknown group 'xp'" 1 -- \
  $MPIRUN -np 2 "$MPITRON" bench-comm --group xp
expect "unknown job key (np 2)" 2 "parallel.tpp" 1 -- \
  $MPIRUN -np 2 "$MPITRON" env --parallel.tpp=2
expect "unknown subcommand (np 4)" 2 "unknown command 'frobnicate'" 1 -- \
  $MPIRUN -np 4 "$MPITRON" frobnicate
expect "nccl backend without a GPU (np 2)" 2 "backend 'nccl' needs" 1 -- \
  $MPIRUN -np 2 "$MPITRON" env --train.backend=nccl
expect "fake nodes beyond ranks (np 2)" 2 "MPITRON_FAKE_NODES=4" 1 -- \
  env MPITRON_FAKE_NODES=4 $MPIRUN -np 2 -x MPITRON_FAKE_NODES "$MPITRON" env
expect "fatal error on one rank aborts the job (np 4)" nz "rank 2 on .*: error: injected failure" 1 -- \
  env MPITRON_TEST_FAIL_RANK=2 $MPIRUN -np 4 -x MPITRON_TEST_FAIL_RANK "$MPITRON" env
expect "help works under mpirun (np 2)" 0 "usage: mpirun -np N mpitron env" 1 -- \
  $MPIRUN -np 2 "$MPITRON" env --help
expect "bench-comm help" 0 "Avg bus bandwidth" 1 -- "$MPITRON" bench-comm --help
expect "env prints one row per rank (np 4, fake 2 nodes)" 0 "^[0-3] .*(.,.,.,.)" 4 -- \
  env MPITRON_FAKE_NODES=2 $MPIRUN -np 4 -x MPITRON_FAKE_NODES "$MPITRON" env --parallel.tp=2
expect "TP across fake nodes warns with ranks (np 4)" 0 "warning: TP group \[0,1,2,3\] spans nodes" 1 -- \
  env MPITRON_FAKE_NODES=2 $MPIRUN -np 4 -x MPITRON_FAKE_NODES "$MPITRON" env --parallel.tp=4

[ "$fails" -eq 0 ] && echo "all dist error paths ok"
exit "$fails"
