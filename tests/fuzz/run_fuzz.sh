#!/usr/bin/env bash
# Runs libFuzzer targets (build-fuzz/fuzz_<target>, `make fuzz-build`): each over its committed
# seed corpus tests/fuzz/corpus/<target>/ plus FUZZ_RUNS mutated inputs from a fixed FUZZ_SEED,
# under ASan+UBSan, FUZZ_TIMEOUT seconds per input (a slower input is a hang: a failure).
# Prints one line per target and fails if any target crashed, hung or leaked memory.
#
# Usage: tests/fuzz/run_fuzz.sh TARGET...      (env: FUZZ_BUILD FUZZ_RUNS FUZZ_SEED FUZZ_TIMEOUT)
# A crash leaves the input in $FUZZ_BUILD/fuzz-artifacts/<target>/; `build-fuzz/fuzz_<target> FILE`
# reruns it alone (README "Fuzzing"). Inputs that found new coverage go to $FUZZ_BUILD/fuzz-corpus/
# (emptied at the start of every run, so a run depends only on the seed corpus and the seed).
set -uo pipefail
cd "$(dirname "$0")/../.."
FUZZ_BUILD=${FUZZ_BUILD:-build-fuzz}
FUZZ_RUNS=${FUZZ_RUNS:-10000}
FUZZ_SEED=${FUZZ_SEED:-1}
FUZZ_TIMEOUT=${FUZZ_TIMEOUT:-25}
# Largest input libFuzzer may build per target: room around the seeds (HDF5 files are ~10-30 KB),
# and long lines for prep.
declare -A MAX_LEN=([job_config]=4096 [tokenizer]=16384 [shard]=65536 [checkpoint]=65536 [prep]=32768)

# halt_on_error: the first report ends the run. detect_leaks: our code must not leak per input;
# the suppressions cover the MPI/HDF5 libraries' own start-up allocations (tests/fuzz/lsan.supp).
export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:detect_leaks=1:leak_check_at_exit=0:allocator_may_return_null=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tests/fuzz/lsan.supp:print_suppressions=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# Singleton MPI (the checkpoint target) without mpirun, on a host with no network set up.
export OMPI_MCA_btl=self OMPI_MCA_plm=isolated OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

failed=0
printf '%-11s %8s %8s %9s %9s %8s %7s\n' target inputs seeds rejected accepted crashes seconds
for t in "$@"; do
  bin=$FUZZ_BUILD/fuzz_$t
  seeds=tests/fuzz/corpus/$t
  work=$FUZZ_BUILD/fuzz-corpus/$t
  art=$FUZZ_BUILD/fuzz-artifacts/$t
  log=$FUZZ_BUILD/fuzz-logs/$t.log
  [ -x "$bin" ] || { echo "no $bin (make fuzz-build)" >&2; exit 1; }
  rm -rf "$work" "$art" && mkdir -p "$work" "$art" "$(dirname "$log")"
  nseeds=$(find "$seeds" -type f | wc -l)
  t0=$SECONDS
  # -runs counts the seed executions too: add them so that FUZZ_RUNS inputs are mutated ones.
  # -close_fd_mask=1: the targets' stdout (prep --check summaries) is noise here.
  timeout --kill-after=30 $((FUZZ_TIMEOUT * 4 + FUZZ_RUNS / 10 + 600)) \
    "$bin" "$work" "$seeds" -runs=$((FUZZ_RUNS + nseeds)) -seed="$FUZZ_SEED" -timeout="$FUZZ_TIMEOUT" \
    -max_len="${MAX_LEN[$t]:-16384}" -rss_limit_mb=2048 -malloc_limit_mb=512 -close_fd_mask=1 \
    -artifact_prefix="$art/" -print_final_stats=1 >"$log" 2>&1
  rc=$?
  secs=$((SECONDS - t0))
  stats=$(grep '^fuzz-stats ' "$log" | tail -n 1)
  get() { sed -n "s/.* $1=\([0-9]*\).*/\1/p" <<<"$stats"; }
  inputs=$(get inputs) rejected=$(get rejected) accepted=$(get accepted)
  crashes=0
  if [ $rc -ne 0 ] || [ -z "$stats" ] || [ "${inputs:-0}" -lt $((FUZZ_RUNS + nseeds)) ]; then
    crashes=1
    failed=1
  fi
  printf '%-11s %8s %8s %9s %9s %8s %7s\n' "$t" "${inputs:-?}" "$nseeds" "${rejected:-?}" "${accepted:-?}" "$crashes" "$secs"
  if [ $crashes -ne 0 ]; then
    echo "  FAILED (exit $rc); log $log; last lines:"
    grep -v '^#\|^INFO:\|^	NEW_FUNC' "$log" | tail -n 40 | sed 's/^/  | /'
    for a in "$art"/*; do [ -e "$a" ] && echo "  reproduce: $bin $a"; done
  fi
done
exit $failed
