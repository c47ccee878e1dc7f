#!/usr/bin/env bash
# The portable default build (ARCH=x86-64-v3, AVX-512 kernels picked at run time) against a
# build for this machine only (ARCH=native), in the same run: the same training shapes as
# bench/train_cpu (GPT-2 124M and the LLaMA d768 shape, fp32, AdamW, 2 threads), the two
# binaries alternately, ROUNDS times each, median step time of steps 2..STEPS per run.
# Writes bench/results/portable_isa.md. Needs both builds and the demo data:
#   make CUDA=0 -j2 && make BUILD=build-native ARCH=native CUDA=0 -j2 && make data CUDA=0
#   bash bench/portable_isa.sh [steps] [rounds]
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-6}
ROUNDS=${2:-2}
A=${PORTABLE_BIN:-build/mpitron}
B=${NATIVE_BIN:-build-native/mpitron}
OUT=bench/results/portable_isa.md
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[ -d data/demo ] || { echo "no data/demo: make data" >&2; exit 1; }

# name arch vocab layers heads kv_heads d d_ff seq batch (bench/train_cpu/run.sh's shapes)
shapes=(
  "gpt2-124m gpt2 50257 12 12 12 768 3072 256 4"
  "llama-d768 llama 32000 12 12 4 768 2048 256 4"
)
run() {  # bin name shape... -> median step_ms
  local bin=$1 name=$2 arch=$3 V=$4 L=$5 H=$6 KV=$7 D=$8 FF=$9 T=${10} Bt=${11}
  local keys=()
  [ "$arch" = llama ] && keys=(--model.arch=llama --model.n_kv_head="$KV" --model.d_ff="$FF")
  "$bin" train jobs/tiny.toml "${keys[@]}" --model.vocab_size="$V" --model.n_layer="$L" --model.n_head="$H" \
    --model.d_model="$D" --model.seq_len="$T" --train.micro_batch="$Bt" --train.global_batch="$Bt" \
    --train.steps="$STEPS" --train.threads=2 --eval.every=0 --eval.batches=0 --log.every=1 \
    --job.run_dir="$tmp/$name" >"$tmp/$name.log" 2>&1 || { tail "$tmp/$name.log" >&2; exit 1; }
  /usr/bin/python3 -c '
import json, statistics, sys
print(statistics.median(r["step_ms"] for r in map(json.loads, open(sys.argv[1])) if "step_ms" in r and r["step"] >= 2))' \
    "$tmp/$name/metrics.jsonl"
  rm -rf "${tmp:?}/$name"
}

declare -A ms
for r in $(seq 1 "$ROUNDS"); do
  for s in "${shapes[@]}"; do
    read -r name rest <<<"$s"
    # Alternate which binary goes first, so drift on the shared machine hits both alike.
    order=(portable native)
    [ $((r % 2)) = 0 ] && order=(native portable)
    for which in "${order[@]}"; do
      bin=$A
      [ "$which" = native ] && bin=$B
      ms[$name,$which,$r]=$(run "$bin" "$name" $rest)
      echo "round $r $name $which: ${ms[$name,$which,$r]} ms/step" >&2
    done
  done
done

cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
{
  echo "# Portable default build vs ARCH=native"
  echo
  echo "Measured $(date -u +%Y-%m-%d) on $(nproc) cores of an $cpu (lscpu flags include"
  echo "$(grep -o -w -E 'avx512f|avx512_bf16|avx512bw|avx512vl' /proc/cpuinfo | sort -u | xargs | sed 's/ /, /g'))."
  echo "Command: \`bash bench/portable_isa.sh $STEPS $ROUNDS\` after"
  echo "\`make CUDA=0 -j2\` (portable: $A, \`$("$A" --version)\`) and"
  echo "\`make BUILD=build-native ARCH=native CUDA=0 -j2\` ($B, \`$("$B" --version)\`)."
  echo "fp32, AdamW, 2 threads, jobs/tiny.toml with bench/train_cpu's shapes; each cell the median step"
  echo "time of steps 2..$STEPS of one run; the binaries alternate (order flipped every round)."
  echo
  echo "| shape | round | portable ms/step | native ms/step | portable / native |"
  echo "|---|---|---|---|---|"
  for s in "${shapes[@]}"; do
    read -r name _ <<<"$s"
    pa=() na=()
    for r in $(seq 1 "$ROUNDS"); do
      p=${ms[$name,portable,$r]} n=${ms[$name,native,$r]}
      pa+=("$p") na+=("$n")
      echo "| $name | $r | $(printf %.0f "$p") | $(printf %.0f "$n") | $(/usr/bin/python3 -c "print(f'{$p / $n:.3f}')") |"
    done
    /usr/bin/python3 - "$name" "${pa[*]}" "${na[*]}" <<'PY'
import statistics, sys
p = statistics.median(map(float, sys.argv[2].split())); n = statistics.median(map(float, sys.argv[3].split()))
print(f"| **{sys.argv[1]}** | median | **{p:.0f}** | **{n:.0f}** | **{p / n:.3f}** ({(p / n - 1) * 100:+.1f}%) |")
PY
  done
} >"$OUT"
cat "$OUT"
