#!/usr/bin/env bash
# Export and import speed and memory, written to bench/results/export.md.
#   1. a random llama-1b-shaped HF folder (22 layers, 1.1B parameters, 4.4 GB F32; LAYERS=N for
#      fewer), then with the page cache warm for every reader (no root to drop it):
#      `cp` of model.safetensors (the disk's ceiling, same bytes, same disk), `dd bs=4M` of it
#      (the same through user space), `mpitron import`,
#      `mpitron export --format hf` (fp32 and bf16) and `--format gguf` (f32), each: seconds,
#      GB/s of model bytes, peak RSS (/usr/bin/time);
#   2. train.init_from = hf:DIR at tp 2 on a 4-layer cut of the same shape (one step, seq 128):
#      peak RSS per rank against the same run initialised from scratch; the difference is what
#      the import holds (target: one tensor, the largest here being 262 MB).
# Usage: bench/export/run.sh [WORKDIR]   (default /tmp/mpitron-bench-export; needs ~20 GB free)
set -euo pipefail
cd "$(dirname "$0")/../.."
W=${1:-/tmp/mpitron-bench-export}
L=${LAYERS:-22}
M=${MPITRON:-build/mpitron}
PY=/usr/bin/python3
rm -rf "$W" && mkdir -p "$W"
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
timed() {  # label bytes cmd... -> one table row
  local label=$1 bytes=$2
  shift 2
  local t0 t1 rss
  t0=$(date +%s.%N)
  /usr/bin/time -f "%M" -o "$W/rss" "$@" >"$W/out.log" 2>&1 || { cat "$W/out.log"; exit 1; }
  t1=$(date +%s.%N)
  rss=$(tail -1 "$W/rss")
  awk -v l="$label" -v b="$bytes" -v t0="$t0" -v t1="$t1" -v r="$rss" \
    'BEGIN { s = t1 - t0; printf "| %s | %.2f | %.2f | %.2f | %.2f |\n", l, b / 1e9, s, b / 1e9 / s, r / 1048576 }'
}
$PY bench/export/random_hf.py "$W/hf" "$L"
bytes=$(stat -c %s "$W/hf/model.safetensors")
cat "$W/hf/model.safetensors" >/dev/null  # warm
{
  echo "## Export and import, llama-1b shape ($L layers), $(date -u +%Y-%m-%d), $cpu, $(nproc) cores"
  echo
  echo "Page cache warm for every reader; one process each; GB/s of model bytes (fp32 unless said)."
  echo
  echo "| step | GB | s | GB/s | peak RSS GB |"
  echo "|---|---|---|---|---|"
  timed "cp model.safetensors (ceiling)" "$bytes" cp "$W/hf/model.safetensors" "$W/copy.safetensors"
  rm -f "$W/copy.safetensors"
  # cp copies inside the kernel (copy_file_range); anything that converts the data passes it
  # through user space, as dd does: read into a 4 MB buffer, write it out.
  timed "dd bs=4M model.safetensors (user-space ceiling)" "$bytes" dd if="$W/hf/model.safetensors" of="$W/copy.safetensors" bs=4M status=none
  rm -f "$W/copy.safetensors"
  timed "import hf -> mpitron checkpoint" "$bytes" $M import "hf:$W/hf" --out "$W/ck.h5"
  timed "export --format hf (fp32)" "$bytes" $M export "$W/ck.h5" --format hf --out "$W/out_hf" --quiet
  rm -rf "$W/out_hf"
  timed "export --format hf --dtype bf16" "$bytes" $M export "$W/ck.h5" --format hf --out "$W/out_bf16" --quiet
  rm -rf "$W/out_bf16"
  timed "export --format gguf (f32)" "$bytes" $M export "$W/ck.h5" --format gguf --out "$W/out.gguf" --quiet
  rm -f "$W/out.gguf" "$W/ck.h5"
} | tee "$W/table.md"

# 2. init_from at tp 2: RSS with and without the import.
rm -rf "$W/hf" && $PY bench/export/random_hf.py "$W/hf4" 4 128 >/dev/null
$M prep --input /usr/share/games/fortunes/fortunes --tokenizer byte --out "$W/data" --doc-separator % --quiet
run() {  # name extra...
  local name=$1
  shift
  # Each rank's peak RSS to its own file (the two ranks' stderr interleave).
  mpirun --allow-run-as-root --oversubscribe -np 2 -x OMP_NUM_THREADS=1 \
    sh -c '/usr/bin/time -f %M -o "$0.$OMPI_COMM_WORLD_RANK" "$@"' "$W/$name.rss" $M train jobs/llama-tiny.toml --model.seq_len=128 --data.path="$W/data" --train.steps=1 --train.micro_batch=1 \
    --eval.batches=0 \
    --parallel.tp=2 --job.run_dir="$W/$name" --checkpoint.every=0 --train.precision=fp32 "$@" >"$W/$name.log" 2>&1
  cat "$W/$name".rss.* | sort -n | tail -1
}
scratch=$(run scratch --model.preset=llama-1b --model.n_layer=4 --model.vocab_size=32000)
hf=$(run from_hf --train.init_from="hf:$W/hf4")  # the same shape, from config.json
{
  echo
  echo "train.init_from = hf:DIR at tp 2, one step (llama-1b shape cut to 4 layers, 311M parameters, seq 128):"
  echo "peak RSS of the larger rank $((scratch / 1024)) MB from scratch, $((hf / 1024)) MB from hf:DIR"
  echo "(+$(((hf - scratch) / 1024)) MB; the largest tensor, embed_tokens / lm_head, is 262 MB)."
} | tee -a "$W/table.md"
echo "table: $W/table.md"
