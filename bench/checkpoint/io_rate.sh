#!/usr/bin/env bash
# bench/checkpoint/io_rate.sh: a checkpoint's write and read rates against the disk's, in one run
# (issue: "recovery bounded by the disk, not by the code"). gpt2-124m at seq 64, micro-batch 1 (a
# 1.02 GB checkpoint: fp32 weights + AdamW m, v), one rank or two (dp 2: each writes half), two
# threads in all:
#   write: a synchronous save's checkpoint_blocked_ms (metrics.jsonl: NaN scan, HDF5, checksums,
#          MPI_File_sync, rename), against `dd bs=1M conv=fsync` of the same bytes to the same folder;
#   read:  the resume's read (its log line: HDF5 reads and the checksum verification), against `cat`
#          of the same file; both right after the save, so from the page cache.
# REPEAT runs each, interleaved; medians.
#   bash bench/checkpoint/io_rate.sh [REPEAT]      -> bench/results/checkpoint_io.md
set -euo pipefail
cd "$(dirname "$0")/../.."
REPEAT=${1:-3}
OUT=${OUT:-bench/results/checkpoint_io.md}
BIN=${MPITRON:-build/mpitron}
DIR=${BENCH_DIR:-$PWD/runs/bench-checkpoint-io}  # on the disk checkpoints normally go to
rm -rf "$DIR" && mkdir -p "$DIR"
trap 'rm -rf "$DIR"' EXIT
[ -d data/demo ] || make data >/dev/null
MPIRUN=(mpirun --oversubscribe --bind-to none)
[ "$(id -u)" -eq 0 ] && MPIRUN+=(--allow-run-as-root)
args=(jobs/demo.toml --model.preset=gpt2-124m --model.n_layer=12 --model.n_head=12 --model.d_model=768
      --model.seq_len=64 --train.micro_batch=1 --log.every=1 --eval.every=0 --eval.batches=0)
rows=()
for np in 1 2; do
  : >"$DIR/np$np.txt"
  for i in $(seq "$REPEAT"); do
    r="$DIR/np$np-$i"
    "${MPIRUN[@]}" -np "$np" -x OMP_NUM_THREADS=$((2 / np)) "$BIN" train "${args[@]}" --train.global_batch="$np" \
      --train.steps=2 --checkpoint.every=2 --job.run_dir="$r" >"$r.save.log" 2>&1 </dev/null
    f="$r/ckpt/step_00000002.h5"
    bytes=$(stat -c %s "$f")
    save_ms=$(grep -o '"checkpoint_blocked_ms": [0-9.]*' "$r/metrics.jsonl" | grep -o '[0-9.]*$')
    dd_s=$(dd if=/dev/zero of="$DIR/dd.bin" bs=1M count=$((bytes / 1048576)) conv=fsync 2>&1 | tail -1 |
           awk '{print $(NF-3)}')
    rm -f "$DIR/dd.bin"
    "${MPIRUN[@]}" -np "$np" -x OMP_NUM_THREADS=$((2 / np)) "$BIN" train "${args[@]}" --train.global_batch="$np" \
      --train.steps=2 --checkpoint.every=0 --job.run_dir="$r" >"$r.read.log" 2>&1 </dev/null
    read_s=$(grep -oE "read [0-9.]+ MB in [0-9.]+ s" "$r.read.log" | grep -oE "[0-9.]+ s" | grep -oE "[0-9.]+")
    t0=$(date +%s.%N); cat "$f" >/dev/null; cat_s=$(echo "$(date +%s.%N) - $t0" | bc)
    echo "$bytes $save_ms $dd_s $read_s $cat_s" >>"$DIR/np$np.txt"
    rm -rf "$r"
  done
  rows+=("$(/usr/bin/python3 - "$np" "$DIR/np$np.txt" <<'PY'
import statistics, sys
np, path = sys.argv[1:]
runs = [list(map(float, l.split())) for l in open(path)]
med = lambda i: statistics.median(r[i] for r in runs)
mb = runs[0][0] / 1e6
save, dd, read, cat = med(1) / 1e3, med(2), med(3), med(4)
print(f"| {np} | {mb:.0f} MB | {save:.2f} s ({mb / save:.0f} MB/s) | {dd:.2f} s ({mb / dd:.0f} MB/s) | **{dd / save:.2f}x** | "
      f"{read:.2f} s ({mb / read:.0f} MB/s) | {cat:.2f} s ({mb / cat:.0f} MB/s) | {cat / read:.2f}x |")
PY
)")
done
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
{
  echo "## Checkpoint write and read rates against the disk's (\`bash bench/checkpoint/io_rate.sh $REPEAT\`)"
  echo
  echo "$cpu, $(nproc) cores; $(df -h "$PWD" | tail -1 | awk '{print $1}') ($(stat -f -c %T "$PWD")); $(date -u '+%F'). gpt2-124m (seq 64,"
  echo "micro-batch 1), a synchronous save, then a resume; medians of $REPEAT runs, interleaved with dd and cat."
  echo
  echo "| np | checkpoint | save | dd conv=fsync | save / dd rate | resume read | cat (page cache) | read / cat rate |"
  echo "|---|---|---|---|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
} >"$OUT"
cat "$OUT"
