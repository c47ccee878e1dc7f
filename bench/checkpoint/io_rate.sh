#!/usr/bin/env bash
# bench/checkpoint/io_rate.sh: a checkpoint's write and read rates against the disk's, in one run
# (issue: "recovery bounded by the disk, not by the code"). gpt2-124m at seq 64, micro-batch 1 (a
# 1.02 GB checkpoint: fp32 weights + AdamW m, v), one rank or two (dp 2: each writes half), two
# threads in all:
#   write: a synchronous save's checkpoint_blocked_ms (metrics.jsonl: NaN scan, HDF5, checksums,
#          MPI_File_sync, rename), against `dd bs=1M conv=fsync` of the same bytes to the same folder;
#   read:  the resume's read (its log line: the agreement check, the reads and the checksum
#          verification), from the disk (the file's pages dropped first with `dd iflag=nocache`,
#          what a restart on another node sees) against `cat` of the same file from the disk; and
#          from the page cache against a plain read() of the file into a buffer of its size that is
#          already touched (bench/checkpoint/read_into_buffer.py: the copy out of the page cache
#          that any reader pays; `cat` reuses one small buffer that stays in the cache, shown too),
#          by as many readers at once as there are ranks (dp 2 without ZeRO: each rank reads it all).
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
    resume() {  # the read time (s) of a resume of $r
      "${MPIRUN[@]}" -np "$np" -x OMP_NUM_THREADS=$((2 / np)) "$BIN" train "${args[@]}" --train.global_batch="$np" \
        --train.steps=2 --checkpoint.every=0 --job.run_dir="$r" >"$r.read.log" 2>&1 </dev/null
      grep -oE "read [0-9.]+ MB in [0-9.]+ s" "$r.read.log" | grep -oE "[0-9.]+ s" | grep -oE "[0-9.]+"
    }
    seconds() { local t0; t0=$(date +%s.%N); "$@" >/dev/null; echo "$(date +%s.%N) - $t0" | bc; }
    drop() { dd if="$f" iflag=nocache count=0 status=none; }
    drop; cold_read_s=$(resume)
    drop; cold_cat_s=$(seconds cat "$f")
    read_s=$(resume)
    # As many readers as ranks, at once: at dp 2 without ZeRO each rank holds, and reads, it all.
    for i in $(seq "$np"); do /usr/bin/python3 bench/checkpoint/read_into_buffer.py "$f" >"$DIR/reader$i.txt" & done
    wait
    buf_s=$(cat "$DIR"/reader*.txt | sort -n | tail -1)
    cat_s=$(seconds cat "$f")
    echo "$bytes $save_ms $dd_s $cold_read_s $cold_cat_s $read_s $buf_s $cat_s" >>"$DIR/np$np.txt"
    rm -rf "$r"
  done
  rows+=("$(/usr/bin/python3 - "$np" "$DIR/np$np.txt" <<'PY'
import statistics, sys
np, path = sys.argv[1:]
runs = [list(map(float, l.split())) for l in open(path)]
med = lambda i: statistics.median(r[i] for r in runs)
mb = runs[0][0] / 1e6
save, dd, cread, ccat, read, buf, cat = med(1) / 1e3, med(2), med(3), med(4), med(5), med(6), med(7)
rate = lambda s: f"{s:.2f} s ({mb / s:.0f} MB/s)"
print(f"| {np} | {mb:.0f} MB | {rate(save)} | {rate(dd)} | **{dd / save:.2f}x** | {rate(cread)} | {rate(ccat)} | "
      f"**{ccat / cread:.2f}x** | {rate(read)} | {rate(buf)} | **{buf / read:.2f}x** | {rate(cat)} |")
PY
)")
done
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
{
  echo "## Checkpoint write and read rates against the disk's (\`bash bench/checkpoint/io_rate.sh $REPEAT\`)"
  echo
  echo "$cpu, $(nproc) cores; $(df -h "$PWD" | tail -1 | awk '{print $1}') ($(stat -f -c %T "$PWD")); $(date -u '+%F'). gpt2-124m (seq 64,"
  echo "micro-batch 1), a synchronous save, then resumes from the disk and from the page cache; medians of $REPEAT"
  echo "runs, interleaved with the references (dd, cat, a read() into a buffer: np of them at once, as each rank"
  echo "at dp 2 without ZeRO holds, and reads, the whole state)."
  echo
  echo "| np | checkpoint | save | dd conv=fsync | save / dd | resume, disk | cat, disk | resume / cat | resume, page cache | read() into a buffer | resume / read() | cat, page cache |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
} >"$OUT"
cat "$OUT"
