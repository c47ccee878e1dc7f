#!/usr/bin/env bash
# sanitizers: skip (a sweep of plan, dry-run and train verdicts over 18 layouts: the rules run sanitized in the unit tests (test_layout_rules))
# One home for the layout rules (parallel/layout_rules.hpp): over a sweep of small layouts (cp with
# odd sequence lengths, sequence parallel, heads and kv heads tp does not divide, more stages than
# layers, batches that do not split, experts ep does not divide, a dense model with ep, pp_layers),
# `mpitron plan JOB --gpus N`, `mpirun -np N mpitron train JOB --dry-run` and a real one-step
# `mpirun -np N mpitron train JOB` accept exactly the same layouts, and refuse the others with the
# same message.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
prep_fortunes "$tmp/data" 30000 fortunes >/dev/null
base=(--data.path="$tmp/data" --eval.every=0 --eval.batches=0 --checkpoint.every=0 --log.every=1
      --train.peak_flops=1e11 --train.micro_batch=1)

verdict() {  # LOG RC -> "ok" or the error message
  if [ "$2" -eq 0 ]; then echo ok; return; fi
  local line
  line=$(grep -m1 -oE 'error: .*' "$1" || true)
  echo "${line:-exit $2 without an error line}"
}

cases=(
  "4|tiny|--parallel.cp=4 --model.seq_len=100"
  "2|tiny|--parallel.cp=2 --model.seq_len=100"
  "4|tiny|--parallel.tp=4 --parallel.sp=true --model.seq_len=66"
  "4|tiny|--parallel.tp=4 --parallel.sp=true --model.seq_len=68"
  "1|tiny|--parallel.sp=true"
  "4|llama-tiny|--parallel.tp=4"
  "2|llama-tiny|--parallel.tp=2 --parallel.sp=true"
  "4|tiny|--parallel.pp=4"
  "2|tiny|--parallel.pp=2 --train.global_batch=1"
  "2|tiny|--parallel.pp=2 --parallel.schedule=gpipe --train.global_batch=1"
  "4|tiny|--parallel.pp=2 --parallel.schedule=interleaved --parallel.virtual_stages=2 --train.global_batch=8"
  "2|tiny|--parallel.pp=2 --parallel.pp_layers=[1,2] --train.global_batch=2"
  "2|tiny|--train.global_batch=3"
  "2|tiny|--parallel.microbatches=3"
  "2|tiny|--parallel.ep=2"
  "3|moe-tiny|--parallel.ep=3"
  "2|moe-tiny|--parallel.ep=2"
  "4|tiny|--parallel.dp=2 --parallel.tp=2 --parallel.zero=1 --train.global_batch=4"
)
accepted=0 refused=0
for c in "${cases[@]}"; do
  IFS='|' read -r np job args <<<"$c"
  read -ra extra <<<"$args"
  job=jobs/$job.toml
  rc=0; "$MPITRON" plan "$job" --gpus "$np" "${base[@]}" "${extra[@]}" >"$tmp/plan.log" 2>&1 || rc=$?
  p=$(verdict "$tmp/plan.log" $rc)
  rc=0; timeout 60 $MPIRUN -np "$np" "$MPITRON" train "$job" "${base[@]}" "${extra[@]}" --dry-run >"$tmp/dry.log" 2>&1 || rc=$?
  d=$(verdict "$tmp/dry.log" $rc)
  rm -rf "$tmp/run"
  rc=0; timeout 120 $MPIRUN -np "$np" "$MPITRON" train "$job" "${base[@]}" "${extra[@]}" --train.steps=1 \
    --job.run_dir="$tmp/run" >"$tmp/train.log" 2>&1 || rc=$?
  [ $rc -ne 124 ] || fail "np $np $job $args: train hung"
  t=$(verdict "$tmp/train.log" $rc)
  if [ "$p" != "$t" ] || [ "$d" != "$t" ]; then
    fail "np $np $job $args: train says '$t', plan '$p', train --dry-run '$d'"
  fi
  [ "$t" = ok ] && accepted=$((accepted + 1)) || refused=$((refused + 1))
  printf '%-8s np %d %-14s %-75s %s\n' "$([ "$t" = ok ] && echo accepted || echo refused)" "$np" "$(basename "$job" .toml)" "$args" \
    "$([ "$t" = ok ] || echo "${t:0:90}")"
done
[ $accepted -ge 6 ] && [ $refused -ge 10 ] || fail "the sweep should hold both kinds ($accepted accepted, $refused refused)"
echo "ok    $((accepted + refused)) layouts: plan, train --dry-run and train agree ($accepted accepted, $refused refused with train's message)"
