#!/usr/bin/env bash
# Runs libFuzzer targets (build-fuzz/fuzz_<target>, `make fuzz-build`): each over its committed
# seed corpus tests/fuzz/corpus/<target>/ plus FUZZ_RUNS mutated inputs from a fixed FUZZ_SEED,
# under ASan+UBSan, FUZZ_TIMEOUT seconds per input (a slower input is a hang: a failure).
# Prints one line per target and fails if any target crashed, hung, leaked or ran short.
#
# Usage: tests/fuzz/run_fuzz.sh TARGET...
#   env: FUZZ_BUILD (build-fuzz) FUZZ_RUNS (every target; default per target, RUNS below) FUZZ_SEED (1)
#        FUZZ_TIMEOUT (25 s)
#        FUZZ_JOBS (2: targets run side by side, one core each)
# A crash leaves the input in $FUZZ_BUILD/fuzz-artifacts/<target>/; `build-fuzz/fuzz_<target> FILE`
# reruns it alone (README "Fuzzing"). Inputs that found new coverage go to $FUZZ_BUILD/fuzz-corpus/
# (emptied at the start of every run, so a run depends only on the seed corpus and the seed).
set -uo pipefail
cd "$(dirname "$0")/../.."
FUZZ_BUILD=${FUZZ_BUILD:-build-fuzz}
FUZZ_RUNS=${FUZZ_RUNS:-}
# Mutated inputs per target when FUZZ_RUNS is not set: 10000, except the two targets whose every
# input writes and reads HDF5 files (prep: two preps and their shards, ~50 ms an input under ASan;
# checkpoint: a forked checking child, ~70 ms), which took 9 and 12 minutes of CI's 2 cores at
# 10000. At 3000 both reach 98.8% of the edges 10000 reach (seed 1, 2026-12-05: prep 2387 of
# 2415, checkpoint 1647 of 1667); a longer run is `make fuzz-checkpoint FUZZ_RUNS=100000`.
declare -A RUNS=([prep]=3000 [checkpoint]=3000)
runs_of() { echo "${FUZZ_RUNS:-${RUNS[$1]:-10000}}"; }
FUZZ_SEED=${FUZZ_SEED:-1}
FUZZ_TIMEOUT=${FUZZ_TIMEOUT:-25}
FUZZ_JOBS=${FUZZ_JOBS:-2}
# Largest input libFuzzer may build per target: room around the seeds (HDF5 files are 4-35 KB),
# and long lines for prep.
declare -A MAX_LEN=([job_config]=4096 [tokenizer]=16384 [shard]=65536 [checkpoint]=65536 [prep]=16384 [safetensors]=8192
  [profile]=8192 [hf_config]=4096)

# halt_on_error: the first report ends the run. allocator_may_return_null: a malloc that cannot
# be satisfied returns NULL as glibc's does (libhdf5 asks for terabytes when a corrupted size
# field says so, and handles NULL); our own absurd sizes still fail, through -malloc_limit_mb
# or operator new. detect_leaks: per input (libFuzzer reruns an input whose mallocs and frees
# do not match); not at exit, where MPI and HDF5 keep their start-up allocations.
# intercept_tls_get_addr=0: see tests/sanitizers/env.sh (a leak check that segfaults at random).
# quarantine_size_mb=16 (default 256): the checkpoint target forks a checking child per input, and
# fork copies the page tables of every resident page; a 256 MB quarantine kept the fuzzer at
# ~380 MB RSS and made fork 30% of its time (2000 inputs: 77 s -> 60 s, AMD EPYC).
export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:detect_leaks=1:leak_check_at_exit=0:allocator_may_return_null=1:intercept_tls_get_addr=0:quarantine_size_mb=16}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tests/fuzz/lsan.supp:print_suppressions=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# Singleton MPI (the checkpoint target) without mpirun, on a host with no network set up.
export OMPI_MCA_btl=self OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# One target; its summary line goes to $FUZZ_BUILD/fuzz-logs/<target>.result.
run_target() {
  local t=$1 bin=$FUZZ_BUILD/fuzz_$1 seeds=tests/fuzz/corpus/$1 work=$FUZZ_BUILD/fuzz-corpus/$1
  local art=$FUZZ_BUILD/fuzz-artifacts/$1 log=$FUZZ_BUILD/fuzz-logs/$1.log res=$FUZZ_BUILD/fuzz-logs/$1.result
  rm -rf "$work" "$art" && mkdir -p "$work" "$art"
  local nseeds t0=$SECONDS rc runs
  runs=$(runs_of "$t")
  nseeds=$(find "$seeds" -type f | wc -l)
  # -runs counts the seed executions too: add them so that FUZZ_RUNS inputs are mutated ones.
  # -close_fd_mask=1: the targets' stdout (prep --check summaries) is noise here.
  # bash's `time`: CPU seconds of the fuzzer and its children (on a shared machine the wall clock
  # says little).
  local TIMEFORMAT='%U %S' cpu
  { time timeout --kill-after=30 $((FUZZ_TIMEOUT * 4 + runs / 5 + 600)) \
    "$bin" "$work" "$seeds" -runs=$((runs + nseeds)) -seed="$FUZZ_SEED" -timeout="$FUZZ_TIMEOUT" \
    -max_len="${MAX_LEN[$t]:-16384}" -rss_limit_mb=2048 -malloc_limit_mb=512 -close_fd_mask=1 \
    -artifact_prefix="$art/" -print_final_stats=1 >"$log" 2>&1; } 2>"$res.cpu"
  rc=$?
  cpu=$(awk '{printf "%.0f", $1 + $2}' "$res.cpu" 2>/dev/null)
  local stats inputs rejected accepted crashes=0
  stats=$(grep '^fuzz-stats ' "$log" | tail -n 1)
  inputs=$(sed -n 's/.* inputs=\([0-9]*\).*/\1/p' <<<"$stats")
  rejected=$(sed -n 's/.* rejected=\([0-9]*\).*/\1/p' <<<"$stats")
  accepted=$(sed -n 's/.* accepted=\([0-9]*\).*/\1/p' <<<"$stats")
  [ $rc -eq 0 ] && [ -n "$stats" ] && [ "${inputs:-0}" -ge $((runs + nseeds)) ] || crashes=1
  printf '%-11s %8s %6s %9s %9s %8s %7s %7s %s\n' "$t" "${inputs:-?}" "$nseeds" "${rejected:-?}" "${accepted:-?}" \
    "$crashes" "$((SECONDS - t0))" "${cpu:-?}" "$rc" >"$res"
}

mkdir -p "$FUZZ_BUILD/fuzz-logs"
for t in "$@"; do
  [ -x "$FUZZ_BUILD/fuzz_$t" ] || { echo "no $FUZZ_BUILD/fuzz_$t (make fuzz-build)" >&2; exit 1; }
  rm -f "$FUZZ_BUILD/fuzz-logs/$t.result"
done
t_start=$SECONDS
for t in "$@"; do
  while [ "$(jobs -rp | wc -l)" -ge "$FUZZ_JOBS" ]; do wait -n; done
  run_target "$t" &
done
wait

failed=0
echo "fuzz: seed corpus + ${FUZZ_RUNS:-10000 (prep, checkpoint: 3000)} mutated inputs per target, seed $FUZZ_SEED, ASan+UBSan, ${FUZZ_TIMEOUT}s per input"
printf '%-11s %8s %6s %9s %9s %8s %7s %7s\n' target inputs seeds rejected accepted crashes wall_s cpu_s
for t in "$@"; do
  res=$FUZZ_BUILD/fuzz-logs/$t.result
  read -r name inputs seeds rejected accepted crashes secs cpu rc <"$res"
  printf '%-11s %8s %6s %9s %9s %8s %7s %7s\n' "$name" "$inputs" "$seeds" "$rejected" "$accepted" "$crashes" "$secs" "$cpu"
  [ "$crashes" = 0 ] && continue
  failed=1
  log=$FUZZ_BUILD/fuzz-logs/$t.log
  echo "  FAILED (exit $rc); log $log; the report:"
  grep -v '^#\|^INFO:\|^	NEW_FUNC\|^MS: \|^0x\|^Base64' "$log" | grep -v '^    #[1-9][0-9] ' | tail -n 40 | sed 's/^/  | /'
  for a in "$FUZZ_BUILD/fuzz-artifacts/$t"/*; do [ -e "$a" ] && echo "  reproduce: $FUZZ_BUILD/fuzz_$t $a"; done
done
[ $failed = 0 ] && echo "fuzz: 0 crashes, 0 hangs in $# targets ($((SECONDS - t_start)) s)" || echo "fuzz: FAILED"
exit $failed
