#!/usr/bin/env bash
# sanitizers: skip (machine-profile values: the parser runs sanitized in the fuzzers and the unit tests)
# Machine profiles (`plan --profile FILE`, train.profile) and plan's numeric options checked where
# they enter. A profile `mpitron calibrate --quick` writes at np 2 is accepted; copies of it, each
# broken in one place, are refused before anything is written (exit 2, `--emit-job` leaves no
# file), with a message naming the file, the line and the table and key:
#   - TOML errors (a table header toml++ 3.3 used to assert on, a syntax error, a quote inside a
#     bare value followed by a non-ASCII character: undefined behaviour in toml++ 3.3) with line
#     and column;
#   - values out of their range (inf, nan, a negative count), a collective the step-time model
#     does not know, an unknown key or table;
#   - --mfu, --headroom, --gpu-mem, --peak-tflops outside their ranges.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=1
n=0

prof="$tmp/profile.toml"
timeout 300 $MPIRUN -np 2 "$MPITRON" calibrate --quick --out "$prof" </dev/null >"$tmp/cal.log" 2>&1 ||
  { cat "$tmp/cal.log"; fail "calibrate failed"; }
grep -q '^op = "all_reduce"' "$prof" || fail "the np 2 profile has no [[comm]] all_reduce entry"
plan=("$MPITRON" plan --model tiny --gpus 2 --advise --top 1 --emit-job "$tmp/out.toml")
"${plan[@]}" --profile "$prof" >"$tmp/ok.log" 2>&1 || { cat "$tmp/ok.log"; fail "the calibrated profile was refused"; }
[ -s "$tmp/out.toml" ] || fail "--emit-job wrote nothing for the calibrated profile"
rm -f "$tmp/out.toml"

# refused NEEDLE... -- cmd...: exit 2, every NEEDLE in the output, no --emit-job file.
refused() {
  local needles=() rc=0
  while [ "$1" != -- ]; do needles+=("$1"); shift; done
  shift
  timeout -k 5 60 "$@" >"$tmp/err.log" 2>&1 || rc=$?
  [ "$rc" = 2 ] || { cat "$tmp/err.log"; fail "exit $rc, not 2: $*"; }
  local s
  for s in "${needles[@]}"; do
    grep -qF -- "$s" "$tmp/err.log" || { cat "$tmp/err.log"; fail "no '$s' in the output of: $*"; }
  done
  [ ! -e "$tmp/out.toml" ] || fail "a file was written before the refusal: $*"
  n=$((n + 1))
}

# broken NAME SED_SCRIPT LINE_TEXT NEEDLE: the profile with SED_SCRIPT applied is refused naming
# "FILE:LINE" (LINE: where LINE_TEXT first appears in the broken file) and NEEDLE.
broken() {
  local bad="$tmp/$1.toml" line
  sed "$2" "$prof" >"$bad"
  ! cmp -s "$bad" "$prof" || fail "$1: the sed script changed nothing"
  line=$(grep -nF -m1 -- "$3" "$bad" | cut -d: -f1)
  [ -n "$line" ] || fail "$1: no '$3' in the broken profile"
  refused "$bad:$line:" "$4" -- "${plan[@]}" --profile "$bad"
}

broken header 's/^\[grid\]$/[+grid]/' '[+grid]' "2: TOML error: unexpected character '+'"
broken syntax 's/^nodes = 1$/nodes = = 1/' 'nodes = = 1' "9: TOML error:"
broken quote $'s/^nodes = 1$/nodes = 1\'\xca\x82\'/' 'nodes = 1' "TOML error: a quote where no string can start"
broken inf_rate '0,/^stream_gbs = .*/s//stream_gbs = inf/' 'stream_gbs = inf' \
  "[[rates]] entry 1: stream_gbs: 'inf' is not allowed (allowed: finite, > 0)"
broken nan_axis 's/^m = \[/m = [nan, /' 'm = [nan' "[grid] m[0]: 'nan' is not allowed (allowed: finite, > 0)"
broken negative_cores 's/^cores_per_node = .*/cores_per_node = -4/' 'cores_per_node = -4' \
  "[machine] cores_per_node: '-4' is not allowed (allowed: an integer, "
broken fraction_count 's/^ranks = 2$/ranks = 2.5/' 'ranks = 2.5' "[machine] ranks: '2.5' is not allowed (allowed: an integer, "
broken group_of_one '0,/^group = 2$/s//group = 1/' 'group = 1' "[[comm]] entry 1: group: '1' is not allowed"
broken alpha '0,/^alpha_us = .*/s//alpha_us = -inf/' 'alpha_us = -inf' \
  "[[comm]] entry 1: alpha_us: '-inf' is not allowed (allowed: finite, >= 0)"
broken misspelled_op '0,/^op = "all_reduce"$/s//op = "all_reduse"/' 'all_reduse' \
  "[[comm]] entry 1: op: 'all_reduse' is not allowed (allowed: all_reduce, all_gather, reduce_scatter, broadcast, sendrecv, all_to_all)"
broken unknown_key 's/^\[concurrency\]$/&\nactive_ranks = 2/' 'active_ranks' \
  "[concurrency]: unknown key 'active_ranks' (allowed: active, compute_scale, stream_scale, overlap_slowdown)"
broken unknown_table '$a [machine_extra]\nx = 1' '[machine_extra]' \
  "unknown table [machine_extra] (allowed: [machine], [grid], [[rates]], [concurrency], [[comm]])"
broken missing_key '/^stream_scale = /d' '[concurrency]' "[concurrency] stream_scale is missing"
echo "ok    $n broken profiles refused with the file, line and key"

# train.profile reads the same way, on every rank: refused once, before the first step.
prep_fortunes "$tmp/data" 20000 fortunes
refused "$tmp/misspelled_op.toml:" "'all_reduse' is not allowed" -- $MPIRUN -np 2 "$MPITRON" train jobs/tiny.toml \
  --data.path="$tmp/data" --train.steps=1 --train.profile="$tmp/misspelled_op.toml" --train.check_prediction=true \
  --job.run_dir="$tmp/run"
[ "$(grep -c "all_reduse" "$tmp/err.log")" = 1 ] || { cat "$tmp/err.log"; fail "np 2: the message is not said once"; }
! grep -q "^step " "$tmp/err.log" || { cat "$tmp/err.log"; fail "train took a step before refusing the profile"; }

# plan's numeric options.
while IFS='|' read -r opt value allowed; do
  [ -n "$opt" ] || continue
  refused "option $opt: '$value' is not allowed (allowed: $allowed)" -- "${plan[@]}" --profile "$prof" "$opt" "$value"
done <<'OPTIONS'
--mfu|2|0 < v <= 1
--mfu|0|0 < v <= 1
--mfu|nan|0 < v <= 1
--headroom|1|0 <= v < 1
--headroom|-0.1|0 <= v < 1
--gpu-mem|inf|finite, > 0
--peak-tflops|-1|finite, > 0
--nvlink-gbs|0|finite, > 0
--ib-gbps|1e400|finite, > 0
OPTIONS
echo "test_profile_values: $n checks passed"
