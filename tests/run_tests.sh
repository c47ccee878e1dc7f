#!/usr/bin/env bash
# Runs the test suites; prints one PASS/FAIL line per run and "N passed, N failed" at the end.
#   unit: build/tests/unit_tests (one process)
#   mpi:  every build/tests/mpi/test_X under mpirun at each rank count its source lists on a
#         line "// np: 1 2 4 8" (default: 2). Serial: one MPI job at a time (2 cores here).
#   e2e:  tests/e2e/test_*.sh (lib.sh is their shared set-up) with MPITRON=build/mpitron and MPIRUN="mpirun <flags>" exported.
#   stress: tests/stress/test_*.sh (make test-stress; not part of `all`): minutes of randomized runs.
# Usage: tests/run_tests.sh all|unit|mpi|e2e|stress [name-filter]
# MPITRON_TEST_FAILFAST=1 stops at the first failing run (tests/mutants/run.sh uses it).
# A sanitizer build (`make test SAN=address,undefined`, or BUILD=build-san: a binary linked with
# libasan/libubsan is recognised) runs with tests/sanitizers/env.sh's options, passed to every rank;
# any sanitizer report fails its test and lands in the test's log.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
what=${1:-all}
filter=${2:-}
MPIRUN="mpirun --oversubscribe -x OMP_NUM_THREADS=1"
[ "$(id -u)" -eq 0 ] && MPIRUN="$MPIRUN --allow-run-as-root"
export MPIRUN MPITRON="$PWD/$BUILD/mpitron" BUILD
export OMPI_MCA_rmaps_base_oversubscribe=1
# OpenMPI 4.1 sometimes hung in its show_help aggregation ("Data unpack would read past end of
# buffer" in show_help.c) after an MPI_Abort under heavy load; per-message help avoids that path.
# (Not every teardown hang after an abort: see the note in tests/e2e/test_dist_errors.sh.)
export OMPI_MCA_orte_base_help_aggregate=0
# When a rank exits non-zero (a refused layout, a usage error, exit 75 after a preemption), mpirun
# kills the job's other processes: SIGTERM, then this many seconds, then SIGKILL, and it waits out
# those seconds even when every rank has exited already. The default 1 made each such run take
# 1.1-2.1 s instead of 0.1 (`mpirun -np 2 sh -c 'exit 2'`), ~half of e2e/test_layout_rules (43 s ->
# 21 s). Our ranks need no grace: every rank prints and flushes before MPI_Finalize's fence, and
# an error on one rank is an MPI_Abort, which kills the others anyway.
export OMPI_MCA_odls_base_sigkill_timeout=0

SAN=${SAN:-}
if [ -z "$SAN" ]; then
  for bin in "$BUILD/mpitron" "$BUILD/tests/unit_tests"; do
    [ -e "$bin" ] || continue
    readelf -d "$bin" 2>/dev/null | grep 'NEEDED.*lib\(asan\|ubsan\)\.so' >/dev/null && SAN=detected
    break
  done
fi
# Exported: an e2e test may leave out, under the sanitizers, the parts that run no code of ours
# (a reference program reading what mpitron wrote: the release run checks it).
export SAN
time_scale=1
if [ -n "$SAN" ]; then
  source tests/sanitizers/env.sh
  MPIRUN="$MPIRUN -x ASAN_OPTIONS -x LSAN_OPTIONS -x UBSAN_OPTIONS"
  # OpenMPI's collective MPI-IO (OMPIO, fcoll vulcan) mallocs and frees a 32 MiB aggregation
  # buffer in every collective read or write, one per checkpoint dataset; ASan's allocator maps
  # and fills each such block, so mpi/test_checkpoint at np 4 took 212 s (7 s without ASan).
  # 1 MiB still holds a whole test dataset (and runs more aggregation cycles, not fewer paths).
  export OMPI_MCA_io_ompio_bytes_per_agg=1048576
  # An ASan + UBSan build runs our code 2-3x slower (oneDNN's GEMMs are not instrumented):
  # the per-test limits scale instead of the tests shrinking.
  time_scale=3
fi
logdir="$BUILD/test-logs"
mkdir -p "$logdir"
passed=0
failed=0
skipped=0
failures=()
# CPU seconds of the finished children of this shell (user + system, /proc/PID/stat fields 16-17):
# each line says how much of its wall time a test kept the cores busy.
HZ=$(getconf CLK_TCK)
child_cpu_ticks() {
  local f
  read -r -a f </proc/$$/stat
  # Field 2 (the command name) holds no space here (bash), so the array index is the field number - 1.
  echo $((f[15] + f[16]))
}
cpu_ticks_total=0
t_start=$SECONDS

run_one() {  # name timeout cmd...
  local name=$1 limit=$2
  shift 2
  [ -n "$filter" ] && [[ "$name" != *"$filter"* ]] && return
  local log="$logdir/${name//[\/ ]/_}.log" t0=$SECONDS rc=0 reports="" c0 ticks
  c0=$(child_cpu_ticks)
  # Sanitizer option values end at ':', ',' or a space: the folder name keeps none of them.
  local sandir="$PWD/$logdir/san/${name//[^A-Za-z0-9_.=-]/_}"
  if [ -n "$SAN" ]; then
    rm -rf "$sandir" "$sandir.contained" && mkdir -p "$sandir"
    san_options "$sandir"
  fi
  timeout --kill-after=10 $((limit * time_scale)) "$@" >"$log" 2>&1 || rc=$?
  ticks=$(($(child_cpu_ticks) - c0))
  cpu_ticks_total=$((cpu_ticks_total + ticks))
  if [ -n "$SAN" ]; then  # contained HDF5 faults (env.sh) are kept aside and named, not counted
    for f in "$sandir"/*; do
      [ -f "$f" ] && san_contained_hdf5_fault "$f" || continue
      mkdir -p "$sandir.contained" && mv "$f" "$sandir.contained/"
      printf '\n==== contained (libhdf5 in the checkpoint check child, not a finding): %s\n' "$sandir.contained/${f##*/}" >>"$log"
    done
  fi
  if [ -n "$SAN" ] && [ -n "$(ls -A "$sandir")" ]; then
    reports=$(ls "$sandir" | tr '\n' ' ')
    for f in "$sandir"/*; do printf '\n==== sanitizer report %s\n' "$f"; cat "$f"; done >>"$log"
  fi
  if [ "$rc" -eq 0 ] && [ -z "$reports" ]; then
    passed=$((passed + 1))
    printf 'PASS  %-50s %4ds  (cpu %ds)\n' "$name" $((SECONDS - t0)) $((ticks / HZ))
  else
    failed=$((failed + 1))
    failures+=("$name")
    printf 'FAIL  %-50s %4ds (exit %d; log %s)\n' "$name" $((SECONDS - t0)) "$rc" "$log"
    if [ -n "$reports" ]; then
      echo "      sanitizer reports: $reports(in $sandir, appended to the log)"
      # The report itself, not the log's last lines: the first error with its stack.
      sed -n '/^==== sanitizer report/,$p' "$log" | head -n 60 | sed 's/^/      | /'
    else
      tail -n 30 "$log" | sed 's/^/      | /'
    fi
    if [ "${MPITRON_TEST_FAILFAST:-0}" = 1 ]; then
      printf '\nfailed: %s (stopped there: MPITRON_TEST_FAILFAST=1)\n%d passed, %d failed\n' "$name" "$passed" "$failed"
      exit 1
    fi
  fi
}

if [ "$what" = all ] || [ "$what" = unit ]; then
  run_one unit 900 "$BUILD/tests/unit_tests" --log_level=test_suite --report_level=short --color_output=no
fi

if [ "$what" = all ] || [ "$what" = mpi ]; then
  for src in tests/mpi/test_*.cpp; do
    [ -e "$src" ] || continue
    base=$(basename "$src" .cpp)
    nps=$(sed -n 's|^// np:\(.*\)$|\1|p' "$src" | head -n 1)
    [ -n "$nps" ] || nps=2
    # A test may run at fewer rank counts under the sanitizers: "// np under the sanitizers: 1 2".
    if [ -n "$SAN" ]; then
      san_nps=$(sed -n 's|^// np under the sanitizers:\(.*\)$|\1|p' "$src" | head -n 1)
      [ -z "$san_nps" ] || nps=$san_nps
    fi
    for np in $nps; do
      run_one "mpi/$base np=$np" 300 $MPIRUN -np "$np" "$BUILD/tests/mpi/$base" --report_level=short --color_output=no
    done
  done
fi

if [ "$what" = all ] || [ "$what" = e2e ]; then
  for t in tests/e2e/test_*.sh; do
    [ -e "$t" ] || continue
    name="e2e/$(basename "$t" .sh)"
    # Under the sanitizers, a test whose subject is timing, faults or arithmetic that other tests
    # already run through the same code says so in a line "# sanitizers: skip (why)" and runs in
    # the release build only (README "Running the tests"): the sanitized suite has to fit CI.
    why=$(sed -n 's/^# sanitizers: skip //p' "$t" | head -n 1)
    if [ -n "$SAN" ] && [ -n "$why" ]; then
      [ -z "$filter" ] || [[ "$name" == *"$filter"* ]] || continue
      skipped=$((skipped + 1))
      printf 'SKIP  %-50s %s\n' "$name" "$why"
      continue
    fi
    run_one "$name" 600 bash "$t"
  done
fi

if [ "$what" = stress ]; then
  for t in tests/stress/test_*.sh; do
    [ -e "$t" ] || continue
    run_one "stress/$(basename "$t" .sh)" 1800 bash "$t"
  done
fi

echo
[ ${#failures[@]} -gt 0 ] && printf 'failed: %s\n' "${failures[@]}"
echo "$passed passed, $failed failed$([ "$skipped" -gt 0 ] && echo ", $skipped skipped under the sanitizers")"
echo "wall $((SECONDS - t_start)) s, cpu $((cpu_ticks_total / HZ)) s (the tests' processes, user + system)"
[ "$failed" -eq 0 ]
