#!/usr/bin/env bash
# The step-time model on layouts it was not tuned on (issue: a planner proven on held-out layouts).
# Calibrates once, as README tells a user (`mpirun -np 8 --bind-to none mpitron calibrate`; again
# while calibrate warns that the machine's speed moved, as the warning says: bench/plan/setup.sh), then
# for each seed draws layouts at random from the space `plan --advise` searches
# (bench/plan/heldout.py: PER_NP at np 1, 2 and 4, GPT-2 / LLaMA / MoE, every parallel dimension,
# schedule, ZeRO stage, recompute and micro-batch size; a layout the trainer refuses is replaced by
# the next of the draw), trains each STEPS steps in each of REPEATS rounds over all the draws'
# layouts (per round the median step time of steps 2..; a layout's best round, and the median of
# all its rounds' steps beside it) and asks `plan --predict --profile` for it. A MoE layout trains
# MOE_WARMUP steps more and is timed after them: the planner prices balanced routing, and the
# router starts collapsed (from step 2 to about 11 of the bench's MoE, one expert gets a copy of
# nearly every token, 2.0x its balanced share, the trainer's moe_l*_tokens_max), and under expert
# parallelism the ranks wait on each other in the exchange while the routing moves. Writes
# bench/results/plan_heldout.md: per draw the table, median and worst error, Spearman's rho, the
# run-to-run spread and the spread between layouts.
# Usage: bench/plan/heldout.sh [BUILD dir]   (env: SEEDS="1 2 3", PER_NP=8, STEPS=6, REPEATS=3,
# MOE_WARMUP=14, PROFILE=an existing profile to reuse, OUT=the results file)
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-${BUILD:-build}}
SEEDS=${SEEDS:-1 2 3}
PER_NP=${PER_NP:-8}
STEPS=${STEPS:-6}
REPEATS=${REPEATS:-3}
MOE_WARMUP=${MOE_WARMUP:-14}
OUT=${OUT:-bench/results/plan_heldout.md}
source bench/plan/setup.sh
# The trainer's overrides of one layout: MODEL (gpt, llama, moe) and the draw's flags.
overrides() {
  local -n m=$1
  echo --data.path="$tmp/data" "${m[@]}" --train.precision=fp32 --train.global_batch=16 $2
}
# The untimed steps before a layout's STEPS: MOE_WARMUP for MoE, none for the dense models.
warmup() { [ "$1" = moe ] && echo "$MOE_WARMUP" || echo 0; }
# The job of a list entry: jobs/tiny.toml with the overrides, or "@FILE" (plan --advise's
# --emit-job) with the data.
job_args() {
  case $2 in @*) echo "${2#@}" --data.path="$tmp/data" ;; *) echo jobs/tiny.toml $(overrides "$1" "$2") ;; esac
}
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
{
  echo "# Step-time prediction on held-out layouts (bench/plan/heldout.sh)"
  echo
  echo "Machine: $cpu, $(nproc) cores; $(date -u '+%F'). Calibrated once at np 8 (README's command; again, at most 3 times in all, while calibrate warned that the machine's speed moved); per seed,"
  echo "$PER_NP layouts at each of np 1, 2, 4 drawn from \`plan --advise\`'s space (bench/plan/heldout.py), each"
  echo "trained $STEPS steps in each of $REPEATS rounds over all the layouts (per round the median step time of steps 2..$STEPS; the best"
  echo "round, and the median of all rounds' steps beside it) against \`plan --predict --profile\`. MoE layouts first train $MOE_WARMUP"
  echo "steps more, untimed: the router starts collapsed (one expert takes a copy of nearly every token) and the planner prices balanced routing."
  echo "Global batch 16 sequences of 128 tokens, fp32, one thread per rank where ranks share the cores."
  echo
} >"$OUT"
# Which layouts: per seed, the first PER_NP of its draw at each np that the trainer accepts.
list="$tmp/layouts"
: >"$list"
for seed in $SEEDS; do
  declare -A taken=()
  while IFS='|' read -r name np model extra; do
    [ "${taken[$np]:-0}" -ge "$PER_NP" ] && continue
    $MPIRUN -np "$np" "$MPITRON" train jobs/tiny.toml $(overrides "$model" "$extra") --dry-run >"$tmp/dry.log" 2>&1 </dev/null || continue
    taken[$np]=$((${taken[$np]:-0} + 1))
    echo "$seed|$np.${taken[$np]}|$name|$np|$model|$extra" >>"$list"
  done < <(/usr/bin/python3 bench/plan/heldout.py draw "$seed" "$PER_NP")
  unset taken
  # plan --advise's first choice for each model and np of the draw, run beside it (apart from
  # the accuracy figures: the model chose it).
  for pair in $(grep "^$seed|" "$list" | cut -d'|' -f4,5 | sort -u); do
    np=${pair%|*} model=${pair#*|}
    job="$tmp/advise.$seed.$np.$model.toml"
    "$MPITRON" plan jobs/tiny.toml $(overrides "$model" "") --gpus "$np" --gpus-per-node 8 --advise \
      --profile "$profile" --emit-job "$job" >"$job.log"
    echo "$seed|adv.$np.$model|$model advise: $(sed -n 's/^chosen: //p' "$job.log")|$np|$model|@$job" >>"$list"
  done
done
# Round robin: every layout of every draw once per round, REPEATS rounds. The machine's speed
# drifts over minutes (a shared host); rounds spread that drift over all the layouts alike, and a
# layout's run spread (over its rounds) shows it.
n=$(wc -l <"$list")
for rep in $(seq "$REPEATS"); do
  i=0
  while IFS='|' read -r seed id name np model extra; do
    i=$((i + 1))
    echo "round $rep/$REPEATS, $i/$n: seed $seed $name (np $np)"
    dir="$tmp/s$seed.$id"
    $MPIRUN -np "$np" "$MPITRON" train $(job_args "$model" "$extra") --train.steps="$(($STEPS + $(warmup "$model")))" \
      --eval.batches=0 --eval.every=0 --job.run_dir="$dir.$rep" >"$dir.log" 2>&1 </dev/null ||
      { echo "run $name failed:"; tail -5 "$dir.log"; exit 1; }
  done <"$list"
done
for seed in $SEEDS; do
  results="$tmp/results.$seed.jsonl"
  : >"$results" && : >"$results.advise"
  while IFS='|' read -r s id name np model extra; do
    [ "$s" = "$seed" ] || continue
    dir="$tmp/s$seed.$id"
    "$MPITRON" plan $(job_args "$model" "$extra") --gpus "$np" --gpus-per-node 8 --predict --profile "$profile" >"$dir.plan"
    case $extra in @*) to="$results.advise" ;; *) to="$results" ;; esac
    /usr/bin/python3 bench/plan/heldout.py result "$dir" "$name" "$np" "$(warmup "$model")" >>"$to"
  done <"$list"
  { echo "## Draw, seed $seed"; echo; /usr/bin/python3 bench/plan/heldout.py summary "$results" 2>>"$tmp/figures"
    /usr/bin/python3 bench/plan/heldout.py advice "$results" "$results.advise" 2>>"$tmp/figures"; } >>"$OUT"
done
{ echo "## Calibration"; echo; echo '```'; cat "$tmp/calibrate.log"; echo '```'; } >>"$OUT"
cat "$tmp/figures"
