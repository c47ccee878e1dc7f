#!/usr/bin/env bash
# bench/train_cpu: mpitron's CPU trainer vs PyTorch 1.13 (Debian python3-torch) on the same GPT-2
# and LLaMA shapes, same batch, AdamW, 2 threads, measured in the same run. PyTorch reports which
# library its GEMMs call; against the netlib reference BLAS no speed-up is printed. Writes
# bench/results/train_cpu.md. Needs: make, make data, MPITRON_DEPS_TORCH=1 make deps.
#   bash bench/train_cpu/run.sh [steps]
# Quote medians: the machines are shared and noisy.
set -euo pipefail
cd "$(dirname "$0")/../.."
STEPS=${1:-8}
BIN=${MPITRON:-build/mpitron}
OUT=bench/results/train_cpu.md
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[ -d data/demo ] || make data >/dev/null
TORCH_ENV=(env LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp)

# name arch vocab layers heads kv_heads d d_ff seq batch (d_ff: LLaMA's, 2/3 of 4d rounded to 256)
shapes=(
  "tiny gpt2 320 4 4 4 256 1024 256 8"  # V 320: the byte-level demo data needs >= 257
  "small gpt2 8192 6 6 6 384 1536 256 8"
  "gpt2-124m gpt2 50257 12 12 12 768 3072 256 4"
  "llama-d768 llama 32000 12 12 4 768 2048 256 4"  # GQA 12/4, SwiGLU, untied head
)

median_ms() {  # metrics.jsonl -> median step_ms over steps >= 2
  /usr/bin/python3 -c '
import json, statistics, sys
ms = [r["step_ms"] for r in map(json.loads, open(sys.argv[1])) if "step_ms" in r and r["step"] >= 2]
print(statistics.median(ms))' "$1"
}

peak=$("$BIN" train jobs/tiny.toml --train.steps=1 --train.threads=2 --eval.every=0 --eval.batches=0 \
  --job.run_dir="$tmp/probe" 2>/dev/null | sed -n 's/.*peak \([0-9.]*\) GFLOP.*/\1/p' | head -1)

{
  echo "# CPU training throughput: mpitron vs PyTorch"
  echo
  echo "Measured $(date -u +%Y-%m-%d) on $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)),"
  echo "2 threads each, fp32, AdamW, median of steps 2..$STEPS. Command: \`bash bench/train_cpu/run.sh $STEPS\`."
  echo "PyTorch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)') with the OpenMP OpenBLAS build"
  echo "(LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp), OPENBLAS_CORETYPE as the environment sets it."
  echo "mpitron's fp32 GEMM probe (1024x768x3072, 2 threads): ${peak} GFLOP/s."
  echo
  echo "| shape | arch | V | L | H | KV | d | F | T | B | mpitron ms/step | mpitron tok/s | mpitron GFLOP/s | % of GEMM probe | torch ms/step | torch tok/s | speed-up |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
} >"$OUT"

for s in "${shapes[@]}"; do
  read -r name ARCH V L H KV D FF T B <<<"$s"
  arch_keys=()
  [ "$ARCH" = llama ] && arch_keys=(--model.arch=llama --model.n_kv_head="$KV" --model.d_ff="$FF")
  "$BIN" train jobs/tiny.toml "${arch_keys[@]}" --model.vocab_size="$V" --model.n_layer="$L" --model.n_head="$H" \
    --model.d_model="$D" --model.seq_len="$T" --train.micro_batch="$B" --train.global_batch="$B" \
    --train.steps="$STEPS" --train.threads=2 --eval.every=0 --eval.batches=0 --log.every=1 \
    --job.run_dir="$tmp/$name" >"$tmp/$name.log" 2>&1
  ms=$(median_ms "$tmp/$name/metrics.jsonl")
  gflops=$(/usr/bin/python3 -c '
import json, sys, statistics
rows=[r for r in map(json.loads, open(sys.argv[1])) if "gflops_per_rank" in r and r["step"] >= 2]
print(round(statistics.median(r["gflops_per_rank"] for r in rows), 1))' "$tmp/$name/metrics.jsonl")
  tj=$("${TORCH_ENV[@]}" /usr/bin/python3 bench/train_cpu/torch_gpt.py --arch "$ARCH" --vocab "$V" --layers "$L" \
    --heads "$H" --kv-heads "$KV" --d-ff "$FF" --d "$D" --seq "$T" --batch "$B" --steps $((STEPS - 1)) --threads 2)
  /usr/bin/python3 - "$name" "$ARCH" "$V" "$L" "$H" "$KV" "$D" "$FF" "$T" "$B" "$ms" "$gflops" "$peak" "$tj" >>"$OUT" <<'PY'
import json, sys
name, arch, V, L, H, KV, D, FF, T, B, ms, gf, peak, tj = sys.argv[1:]
t = json.loads(tj)
ms, gf, peak, tms = float(ms), float(gf), float(peak or 0), float(t["ms_per_step"])
tok = int(B) * int(T)
pct = f"{100 * gf / peak:.0f}%" if peak else "-"
# Against the netlib reference BLAS a speed-up says nothing about PyTorch: refuse to print one.
ratio = f"n/a: torch on netlib BLAS ({t['blas']})" if t["netlib"] else f"{tms / ms:.2f}x"
print(f"| {name} | {arch} | {V} | {L} | {H} | {KV} | {D} | {FF} | {T} | {B} | {ms:.1f} | {tok / ms * 1e3:,.0f} | {gf} | "
      f"{pct} | {tms:.1f} | {tok / tms * 1e3:,.0f} | {ratio} |")
PY
  echo "torch GEMMs: $(/usr/bin/python3 -c 'import json,sys; print(json.loads(sys.argv[1])["blas"])' "$tj")" >>"$tmp/blas.txt"
  echo "done $name"
done
echo >>"$OUT"
echo "PyTorch's GEMMs called: $(sort -u "$tmp/blas.txt" | sed 's/torch GEMMs: //' | paste -sd, -)." >>"$OUT"
cat "$OUT"
