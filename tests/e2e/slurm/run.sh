#!/usr/bin/env bash
# `make test-slurm`: starts one private Slurm cluster (cluster.sh: slurmctld + slurmd n1, n2, n3 on
# this host, everything under a temp dir), runs tests/e2e/slurm/test_*.sh against it one at a time,
# stops the daemons by PID (also on failure or Ctrl-C) and prints PASS/FAIL/SKIP per test and
# "N passed, N failed, N skipped". A test exits 77 to skip; it prints "SKIP: reason" lines for
# checks it leaves out (shown here too).
# Usage: tests/e2e/slurm/run.sh [name-filter]     (BUILD=dir picks the build, default build)
set -uo pipefail
cd "$(dirname "$0")/../../.."
BUILD=${BUILD:-build}
filter=${1:-}
export MPITRON="$PWD/$BUILD/mpitron" BUILD
[ -x "$MPITRON" ] || { echo "no $MPITRON (make BUILD=$BUILD first)" >&2; exit 1; }
logdir="$BUILD/test-logs/slurm"
rm -rf "$logdir" && mkdir -p "$logdir"

source tests/e2e/slurm/cluster.sh
CLUSTER_TMP=$(mktemp -d /tmp/mpitron-slurm.XXXXXX)
cleanup() {
  cluster_stop
  # Keep the daemons' logs next to the test logs, then drop the temp dir.
  cp -r "$CLUSTER_TMP/cluster/log" "$logdir/daemons" 2>/dev/null || true
  rm -rf "$CLUSTER_TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
if ! cluster_start "$CLUSTER_TMP/cluster" >"$logdir/cluster.log" 2>&1; then
  cat "$logdir/cluster.log"
  echo "FAIL  cluster start (log $logdir/cluster.log)"
  echo "0 passed, 1 failed, 0 skipped"
  exit 1
fi
cat "$logdir/cluster.log"

passed=0 failed=0 skipped=0 failures=()
for t in tests/e2e/slurm/test_*.sh; do
  name=slurm/$(basename "$t" .sh)
  [ -n "$filter" ] && [[ "$name" != *"$filter"* ]] && continue
  log="$logdir/$(basename "$t" .sh).log" t0=$SECONDS
  # 240 s unless the test says otherwise in a line "# slurm-test-timeout: SECONDS".
  limit=$(sed -n 's/^# slurm-test-timeout: *\([0-9]*\).*/\1/p' "$t" | head -1)
  timeout --kill-after=10 "${limit:-240}" bash "$t" >"$log" 2>&1
  rc=$?
  if [ $rc -eq 0 ]; then
    passed=$((passed + 1))
    printf 'PASS  %-40s %4ds\n' "$name" $((SECONDS - t0))
  elif [ $rc -eq 77 ]; then
    skipped=$((skipped + 1))
    printf 'SKIP  %-40s %4ds  %s\n' "$name" $((SECONDS - t0)) "$(grep -m1 '^SKIP:' "$log" | cut -c7-)"
  else
    failed=$((failed + 1))
    failures+=("$name")
    printf 'FAIL  %-40s %4ds (exit %d; log %s)\n' "$name" $((SECONDS - t0)) $rc "$log"
    tail -n 40 "$log" | sed 's/^/      | /'
  fi
  [ $rc -ne 77 ] && grep '^SKIP:' "$log" | sed 's/^/      partial /'
  # Leave the cluster empty for the next test.
  ids=$(squeue -h -o %i 2>/dev/null)
  [ -n "$ids" ] && scancel --full $ids 2>/dev/null
done

echo
[ ${#failures[@]} -gt 0 ] && printf 'failed: %s\n' "${failures[@]}"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
