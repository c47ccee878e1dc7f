#!/usr/bin/env bash
# The step-time model on layouts it was not tuned on (issue: a planner proven on held-out layouts).
# Calibrates once, as README tells a user (`mpirun -np 8 --bind-to none mpitron calibrate`), then
# for each seed draws layouts at random from the space `plan --advise` searches
# (bench/plan/heldout.py: PER_NP at np 1, 2 and 4, GPT-2 / LLaMA / MoE, every parallel dimension,
# schedule, ZeRO stage, recompute and micro-batch size; a layout the trainer refuses is replaced by
# the next of the draw), trains each STEPS steps REPEATS times (median step time of steps 2..) and
# asks `plan --predict --profile` for it. Writes bench/results/plan_heldout.md: per draw the table,
# median and worst error, Spearman's rho, the run-to-run spread and the spread between layouts.
# Usage: bench/plan/heldout.sh [BUILD dir]   (env: SEEDS="1 2 3", PER_NP=8, STEPS=6, REPEATS=2,
# PROFILE=an existing profile to reuse, OUT=the results file)
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-${BUILD:-build}}
SEEDS=${SEEDS:-1 2 3}
PER_NP=${PER_NP:-8}
STEPS=${STEPS:-6}
REPEATS=${REPEATS:-2}
OUT=${OUT:-bench/results/plan_heldout.md}
source bench/plan/setup.sh
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
{
  echo "# Step-time prediction on held-out layouts (bench/plan/heldout.sh)"
  echo
  echo "Machine: $cpu, $(nproc) cores; $(date -u '+%F'). Calibrated once at np 8 (README's command); per seed,"
  echo "$PER_NP layouts at each of np 1, 2, 4 drawn from \`plan --advise\`'s space (bench/plan/heldout.py), each"
  echo "trained $STEPS steps $REPEATS times (median step time of steps 2..$STEPS) against \`plan --predict --profile\`."
  echo "Global batch 16 sequences of 128 tokens, fp32, one thread per rank where ranks share the cores."
  echo
} >"$OUT"
for seed in $SEEDS; do
  results="$tmp/results.$seed.jsonl"
  : >"$results"
  declare -A taken=()
  while IFS='|' read -r name np model extra; do
    [ "${taken[$np]:-0}" -ge "$PER_NP" ] && continue
    case $model in gpt) m=("${gpt[@]}") ;; moe) m=("${moe[@]}") ;; *) m=("${llama[@]}") ;; esac
    # shellcheck disable=SC2206
    ov=(--data.path="$tmp/data" "${m[@]}" --train.precision=fp32 --train.global_batch=16 $extra)
    $MPIRUN -np "$np" "$MPITRON" train jobs/tiny.toml "${ov[@]}" --dry-run >"$tmp/dry.log" 2>&1 </dev/null || continue
    taken[$np]=$((${taken[$np]:-0} + 1))
    dir="$tmp/s$seed.$np.${taken[$np]}"
    for rep in $(seq "$REPEATS"); do
      $MPIRUN -np "$np" "$MPITRON" train jobs/tiny.toml "${ov[@]}" --train.steps="$STEPS" --eval.batches=0 \
        --eval.every=0 --job.run_dir="$dir.$rep" >"$dir.log" 2>&1 </dev/null || { echo "run $name failed:"; tail -5 "$dir.log"; exit 1; }
    done
    "$MPITRON" plan jobs/tiny.toml "${ov[@]}" --gpus "$np" --gpus-per-node 8 --predict --profile "$profile" >"$dir.plan"
    /usr/bin/python3 bench/plan/heldout.py result "$dir" "$name" "$np" >>"$results"
    tail -1 "$results"
  done < <(/usr/bin/python3 bench/plan/heldout.py draw "$seed" "$PER_NP")
  unset taken
  { echo "## Draw, seed $seed"; echo; /usr/bin/python3 bench/plan/heldout.py summary "$results" 2>>"$tmp/figures"; } >>"$OUT"
done
{ echo "## Calibration"; echo; echo '```'; cat "$tmp/calibrate.log"; echo '```'; } >>"$OUT"
cat "$tmp/figures"
