#!/usr/bin/env bash
# The step-time model against measured runs (issue: `plan` predicts step time). Calibrates this
# machine (`mpitron calibrate` at np 8), then for each layout below trains STEPS steps and takes
# the median step time of steps 2.. (step 1 pays for JIT and first touches), and asks
# `mpitron plan --predict --profile` for the same job. Writes bench/results/plan.md: the table
# (layout, predicted, measured, error, the dominant part), median and worst absolute error, and
# the Spearman rank correlation of predicted vs measured.
# Ranks run unbound (--bind-to none): OpenMPI binds np <= 2 to one core each, and the profile's
# one-rank rates are those of a rank with every core.
# Usage: bench/plan/run.sh [BUILD dir]   (env: STEPS=8, REPEATS=3 runs per layout, PROFILE=an existing
# profile to reuse, ONLY=a regex of the layouts to run, OUT=the results file, default bench/results/plan.md)
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-${BUILD:-build}}
STEPS=${STEPS:-8}
REPEATS=${REPEATS:-3}
source bench/plan/setup.sh
cp "$profile" "$tmp/profile.copy.toml"

ONLY=${ONLY:-.}
OUT=${OUT:-bench/results/plan.md}
# name | np | model | overrides. Global batch 16 sequences throughout; the layouts differ in what
# they cost on this machine: pipeline bubbles, recompute, micro-batch size, oversubscription.
layouts=(
  "single|1|gpt|--train.micro_batch=4"
  "single micro 1 x 16|1|gpt|--train.micro_batch=1"
  "single recompute|1|gpt|--train.micro_batch=4 --train.recompute=full"
  "dp2|2|gpt|--train.micro_batch=4"
  "dp2 zero1|2|gpt|--train.micro_batch=4 --parallel.zero=1"
  "dp2 zero2|2|gpt|--train.micro_batch=4 --parallel.zero=2"
  "dp2 zero3|2|gpt|--train.micro_batch=4 --parallel.zero=3"
  "dp2 zero3 64 KB buckets|2|gpt|--train.micro_batch=4 --parallel.zero=3 --parallel.bucket_mb=0.0625"
  "tp2|2|gpt|--train.micro_batch=4 --parallel.tp=2"
  "tp2 sp recompute|2|gpt|--train.micro_batch=4 --parallel.tp=2 --parallel.sp=true --train.recompute=full"
  "pp2 1f1b m4|2|gpt|--train.micro_batch=4 --parallel.pp=2"
  "pp2 1f1b m8|2|gpt|--train.micro_batch=2 --parallel.pp=2"
  "pp2 gpipe m1|2|gpt|--train.micro_batch=16 --parallel.pp=2 --parallel.schedule=gpipe"
  "pp2 gpipe m2|2|gpt|--train.micro_batch=8 --parallel.pp=2 --parallel.schedule=gpipe"
  "pp2 interleaved v2 m4|2|gpt|--train.micro_batch=4 --parallel.pp=2 --parallel.schedule=interleaved --parallel.virtual_stages=2"
  "cp2|2|gpt|--train.micro_batch=4 --parallel.cp=2"
  "dp2 x tp2|4|gpt|--train.micro_batch=4 --parallel.tp=2"
  "pp4 gpipe m4|4|gpt|--train.micro_batch=4 --parallel.pp=4 --parallel.schedule=gpipe"
  "dp4 zero1|4|gpt|--train.micro_batch=4 --parallel.zero=1"
  "dp8|8|gpt|--train.micro_batch=2"
  "dp2 x tp2 x pp2|8|gpt|--train.micro_batch=4 --parallel.tp=2 --parallel.pp=2"
  "llama single|1|llama|--train.micro_batch=4"
  "llama tp2 sp|2|llama|--train.micro_batch=4 --parallel.tp=2 --parallel.sp=true"
  "llama dp2 x pp2|4|llama|--train.micro_batch=4 --parallel.pp=2"
  "moe single|1|moe|--train.micro_batch=4"
  "moe dp2|2|moe|--train.micro_batch=4"
  "moe ep2|2|moe|--train.micro_batch=4 --parallel.ep=2"
  "moe ep2 recompute|2|moe|--train.micro_batch=4 --parallel.ep=2 --train.recompute=full"
  "moe tp2 sp|2|moe|--train.micro_batch=4 --parallel.tp=2 --parallel.sp=true"
  "moe ep4|4|moe|--train.micro_batch=4 --parallel.ep=4"
)
selected=()
for row in "${layouts[@]}"; do [[ "${row%%|*}" =~ $ONLY ]] && selected+=("$row"); done
layouts=("${selected[@]}")
# Round-robin over the repeats (every layout once, then again): a slow spell of the shared
# machine then falls on many layouts a little rather than on one layout wholly.
for rep in $(seq "$REPEATS"); do
  i=0
  for row in "${layouts[@]}"; do
    IFS='|' read -r name np model extra <<<"$row"
    i=$((i + 1))
    case $model in gpt) m=("${gpt[@]}") ;; moe) m=("${moe[@]}") ;; *) m=("${llama[@]}") ;; esac
    # shellcheck disable=SC2206
    ov=(--data.path="$tmp/data" "${m[@]}" --train.precision=fp32 --train.global_batch=16 $extra)
    dir="$tmp/run$i"
    $MPIRUN -np "$np" "$MPITRON" train jobs/tiny.toml "${ov[@]}" --train.steps="$STEPS" --eval.batches=0 \
      --eval.every=0 --job.run_dir="$dir.$rep" >"$dir.log" 2>&1 || { echo "run $name failed:"; tail -5 "$dir.log"; exit 1; }
    [ "$rep" -eq 1 ] && "$MPITRON" plan jobs/tiny.toml "${ov[@]}" --gpus "$np" --gpus-per-node 8 --predict \
      --profile "$profile" >"$dir.plan"
  done
  echo "repeat $rep of $REPEATS done"
done
results="$tmp/results.jsonl"
: >"$results"
i=0
for row in "${layouts[@]}"; do
  IFS='|' read -r name np model extra <<<"$row"
  i=$((i + 1))
  /usr/bin/python3 bench/plan/heldout.py result "$tmp/run$i" "$name" "$np" >>"$results"
  tail -1 "$results" | /usr/bin/python3 -c '
import json, sys
r = json.loads(sys.stdin.read())
e = 100 * (r["pred_ms"] / r["meas_ms"] - 1)
print("%-28s np %d  predicted %8.1f ms  measured %8.1f ms  %+6.1f%%" % (r["name"], r["np"], r["pred_ms"], r["meas_ms"], e))'
done
mkdir -p bench/results
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
/usr/bin/python3 - "$results" "$tmp/calibrate.log" "$cpu" "$(nproc)" "$STEPS" "$REPEATS" >"$OUT" <<'PY'
import json, statistics, sys
sys.path.insert(0, "bench/plan")
from heldout import spearman
rows = [json.loads(l) for l in open(sys.argv[1])]
cal, cpu, cores, steps, reps = open(sys.argv[2]).read(), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6]
errs = [abs(r["pred_ms"] / r["meas_ms"] - 1) for r in rows]
rho = spearman([r["pred_ms"] for r in rows], [r["meas_ms"] for r in rows])
print("# Step-time prediction against measured runs (bench/plan/run.sh)\n")
print(f"Machine: {cpu}, {cores} cores, one node; OpenMPI, CPU backend, fp32. Each layout trains {steps} steps {reps} times; "
      f"measured = median step time of steps 2..{steps} over the runs (metrics.jsonl step_ms); predicted = `mpitron plan JOB --predict "
      f"--profile P` on the profile `mpitron calibrate` wrote at np 8 in this run. GPT: 4 layers, d_model 256, 4 heads, "
      f"seq 128, byte vocabulary; LLaMA: the same with RMSNorm, RoPE, SwiGLU (d_ff 688) and 2 KV heads; MoE: that LLaMA with "
      f"4 experts of d_ff 352 in every block, top 2 (Mixtral's router). Global batch 16 "
      f"sequences. Layouts with more ranks than cores are oversubscribed (1 thread per rank): that is this machine's truth "
      f"and the profile's concurrency table measures it.\n")
print(f"**Median absolute error {100*statistics.median(errs):.1f}%, worst {100*max(errs):.1f}%, Spearman rho "
      f"{rho:.3f} over {len(rows)} layouts** (targets: <= 15%, <= 35%, >= 0.8).\n")
print("| layout | np | predicted ms | measured ms | error | run spread | dominant (predicted) |")
print("|---|---:|---:|---:|---:|---:|---|")
for r in rows:
    print(f"| {r['name']} | {r['np']} | {r['pred_ms']:.1f} | {r['meas_ms']:.1f} | {100*(r['pred_ms']/r['meas_ms']-1):+.1f}% | "
          f"{100*r['spread']:.0f}% | {r['dominant']} |")
print("\nrun spread: (max - min) / median of the repeats' own medians: the machine's run-to-run noise, the floor under "
      "any error here.\n")
print("## Calibration\n\n```\n" + cal.strip() + "\n```\n")
worst = sorted(rows, key=lambda r: -abs(r["pred_ms"] / r["meas_ms"] - 1))[:3]
print("## The three worst layouts: the model's breakdown\n")
for r in worst:
    print(f"### {r['name']} (np {r['np']}): predicted {r['pred_ms']:.1f} ms, measured {r['meas_ms']:.1f} ms\n\n```\n{r['plan'].strip()}\n```\n")
PY
sed -n 1,40p "$OUT"
