#!/usr/bin/env bash
# Scale on paper: `mpitron plan` with the built-in datasheet profiles for the jobs whose
# published figures we can set beside it. Writes bench/results/plan_scale.md with each command's
# chosen layout, predicted step time and MFU. Deterministic (no measurement); about a minute.
# Usage: bench/plan/scale.sh [BUILD dir]
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-${BUILD:-build}}
MPITRON=$PWD/$BUILD/mpitron
out=bench/results/plan_scale.md
run() {  # title command...
  local title=$1
  shift
  echo "### $title"
  echo
  echo '```'
  echo "\$ mpitron ${*}"
  "$MPITRON" "$@" | sed -n '/^search:/,/^chosen:/p; /^predicted step time/,/dominant/p'
  echo '```'
  echo
}
gpt175=(--model.preset=gpt2-1.5b --model.n_layer=96 --model.d_model=12288 --model.n_head=96 --model.d_ff=49152
        --model.vocab_size=51200 --seq 2048)
gpt1t=(--model.preset=gpt2-1.5b --model.n_layer=128 --model.d_model=25600 --model.n_head=160 --model.d_ff=102400
       --model.vocab_size=51200 --seq 2048)
{
  echo "# Step time at scale, on datasheet profiles (bench/plan/scale.sh)"
  echo
  echo "Not measured: the h100 and a100 profiles are datasheet figures (dense bf16 peak x a GEMM efficiency of"
  echo "0.78x/(x+384) in the smallest GEMM dimension, attention at 30-45% of peak, elementwise at 80% of HBM,"
  echo "NVLink and 400/200 Gb/s InfiniBand bus bandwidths as published nccl-tests runs report). MFU counts model"
  echo "FLOPs, 6N + 12LTd per token (no recompute), against the dense bf16 peak."
  echo
  run "LLaMA-3 70B, 64 H100, seq 8192, 1M tokens per step" plan --advise --model llama3-70b --gpus 64 --seq 8192 \
    --global-batch 128 --profile h100 --top 3
  run "LLaMA-3 70B, 1024 H100, seq 8192, 4M tokens per step" plan --advise --model llama3-70b --gpus 1024 --seq 8192 \
    --tp 8 --global-batch 512 --profile h100 --top 3
  run "LLaMA-3 405B, 16384 H100, seq 8192, 16M tokens per step: the search" plan --advise --model llama3-405b \
    --gpus 16384 --seq 8192 --tp 8 --pp 16 --global-batch 2048 --profile h100 --top 3
  run "LLaMA-3 405B, 16384 H100: Meta's layout (tp 8, pp 16, dp 128, cp 1, interleaved)" plan --model llama3-405b \
    --gpus 16384 --seq 8192 --tp 8 --pp 16 --dp 128 --micro-batch 1 --global-batch 2048 --sp \
    --parallel.schedule=interleaved --parallel.virtual_stages=2 --predict --profile h100
  run "GPT-3 175B, 1024 A100, seq 2048, batch 1536 (Megatron-LM's)" plan --advise "${gpt175[@]}" --gpus 1024 \
    --global-batch 1536 --tp 8 --pp 8 --profile a100 --top 3
  run "Megatron-LM's 1T GPT on 3072 A100 (their layout: tp 8, pp 64, dp 6, batch 3072, full recompute)" plan \
    "${gpt1t[@]}" --gpus 3072 --tp 8 --pp 64 --dp 6 --micro-batch 1 --global-batch 3072 --recompute full --sp \
    --parallel.schedule=interleaved --parallel.virtual_stages=2 --predict --profile a100
} >"$out"
# The comparison with the published figures: each case's predicted MFU (top-ranked layout, or the
# fixed layout's --predict) beside what its authors measured.
/usr/bin/python3 - "$out" >>"$out" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
cases = re.split(r"^### ", text, flags=re.M)[1:]
mfu = {}
for c in cases:
    title = c.splitlines()[0]
    m = re.search(r"% of [0-9]+ GFLOP/s peak", c)
    if m:
        mfu[title] = float(re.search(r"([0-9.]+)% of [0-9]+ GFLOP/s peak", c).group(1))
    else:
        row = re.search(r"^\s+1\s+.*?\s([0-9.]+)%\s+[0-9.]+ GB$", c, flags=re.M)
        mfu[title] = float(row.group(1)) if row else float("nan")
def get(prefix):
    return next(v for k, v in mfu.items() if k.startswith(prefix))
print("## Beside the published figures\n")
print("| job | predicted (model-FLOPs MFU) | published | gap and why |")
print("|---|---:|---:|---|")
print(f"| LLaMA-3 405B, 16K H100, Meta's layout | {get('LLaMA-3 405B, 16384 H100: Meta'):.1f}% | 38-43% BF16 MFU "
      "(LLaMA-3 paper, 8K-16K GPUs; 41% at 16K, seq 8192) | the datasheet profile has no stragglers, no "
      "network congestion across a 16K-GPU Clos and no checkpoint or data stalls; Meta's pipeline schedule "
      "(tuned interleaving, first/last stages balanced) has a smaller bubble than the plain interleaved one "
      "mpitron models (30% of the step here) |")
print(f"| LLaMA-3 405B, 16K H100, best layout found | {get('LLaMA-3 405B, 16384 H100, seq 8192, 16M'):.1f}% | (same) | "
      "the search adds cp 2 to halve the pipeline's share; same caveats |")
print(f"| LLaMA-3 70B, 64 H100 | {get('LLaMA-3 70B, 64 H100'):.1f}% | no published run at this size | "
      "what the 405B row says about the datasheet profile applies |")
print(f"| LLaMA-3 70B, 1024 H100 | {get('LLaMA-3 70B, 1024 H100'):.1f}% | no published run at this size | (same) |")
m1t = get("Megatron-LM's 1T")
print(f"| Megatron-LM 1T GPT, 3072 A100, their layout, full recompute | {m1t:.1f}% | 163 TFLOP/s per GPU = 52% of "
      f"peak counting the recomputed forward (Narayanan et al. 2021); 52% x 3/4 = 39% in model FLOPs | "
      f"{m1t - 39:+.1f} points: the A100 profile's GEMM efficiency at these shapes and its NVLink/IB busbw are "
      "datasheet guesses, and their runs include data loading and logging |")
print(f"| GPT-3 175B, 1024 A100, best layout found | {get('GPT-3 175B'):.1f}% | 140 TFLOP/s per GPU = 45% with "
      "recompute (34% in model FLOPs) in the same paper | the search picks SP without recompute (fits with SP), "
      "which Megatron of 2021 did not have; Korthikanti et al. 2022 report the gain SP and selective recompute brought |")
PY
cat "$out"
