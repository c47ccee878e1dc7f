#!/usr/bin/env bash
# A/B of two mpitron binaries on bench/train_cpu's GPT-2 124M and LLaMA shapes: runs alternate
# (A, B, A, B, ...) so both see the same machine noise; prints each run's median step_ms over
# steps >= 2 and the change of the medians. For refactors that must not cost step time.
#   bash bench/train_cpu/ab.sh OLD_BINARY NEW_BINARY [rounds] [steps]
#   AB_SHAPE=llama-d768 bash bench/train_cpu/ab.sh ...   only the shapes whose name contains it
set -euo pipefail
cd "$(dirname "$0")/../.."
A=$1 B=$2 ROUNDS=${3:-3} STEPS=${4:-6}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[ -d data/demo ] || make data >/dev/null
shapes=(
  "gpt2-124m gpt2 50257 12 12 12 768 3072 256 4"
  "llama-d768 llama 32000 12 12 4 768 2048 256 4"
)
median_ms() {
  /usr/bin/python3 -c '
import json, statistics, sys
ms = [r["step_ms"] for r in map(json.loads, open(sys.argv[1])) if "step_ms" in r and r["step"] >= 2]
print(round(statistics.median(ms), 1))' "$1"
}
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores; 2 threads; $STEPS steps, median of steps >= 2"
for s in "${shapes[@]}"; do
  read -r name ARCH V L H KV D FF T Bt <<<"$s"
  [[ "$name" == *"${AB_SHAPE:-}"* ]] || continue
  keys=()
  [ "$ARCH" = llama ] && keys=(--model.arch=llama --model.n_kv_head="$KV" --model.d_ff="$FF")
  a=() b=()
  for r in $(seq "$ROUNDS"); do
    for which in A B; do
      bin=${!which}
      "$bin" train jobs/tiny.toml "${keys[@]}" --model.vocab_size="$V" --model.n_layer="$L" --model.n_head="$H" \
        --model.d_model="$D" --model.seq_len="$T" --train.micro_batch="$Bt" --train.global_batch="$Bt" \
        --train.steps="$STEPS" --train.threads=2 --train.precision=fp32 --eval.every=0 --eval.batches=0 --log.every=1 \
        --checkpoint.every=0 --job.run_dir="$tmp/$name-$which-$r" >/dev/null 2>&1
      m=$(median_ms "$tmp/$name-$which-$r/metrics.jsonl")
      if [ $which = A ]; then a+=("$m"); else b+=("$m"); fi
    done
  done
  /usr/bin/python3 - "$name" "${a[*]}" "${b[*]}" <<'PY'
import statistics, sys
name, a, b = sys.argv[1], [float(x) for x in sys.argv[2].split()], [float(x) for x in sys.argv[3].split()]
ma, mb = statistics.median(a), statistics.median(b)
print(f"| {name} | {', '.join(map(str, a))} | {ma:.1f} | {', '.join(map(str, b))} | {mb:.1f} | {100 * (mb / ma - 1):+.1f}% |")
PY
done
