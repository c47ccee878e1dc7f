#!/usr/bin/env bash
# bench/checkpoint: what a checkpoint save costs the training step, synchronous vs background
# (checkpoint.async), on this host, in one run. Two models, one thread per rank:
#   demo       jobs/demo.toml's GPT (4 layers, d 256, seq 128, micro-batch 8): 3.3M parameters,
#              at np 2 (dp 2: both cores train) and np 1 (one core trains, one is free)
#   gpt2-124m  the 124M GPT-2 at seq 256, micro-batch 1: a 1.5 GB checkpoint (fp32 weights + m, v),
#              at np 2
# Each model runs three ways, interleaved REPEAT times: no periodic saves, sync saves, async saves
# every EVERY steps. Per run, from metrics.jsonl (rank 0): the median step_ms of steps without a
# save, and per save step its step_ms + checkpoint_blocked_ms (the save, or the wait for the one in
# flight, held the step up that long); the async write's own time from the log. Against the
# disk: dd of the same bytes (conv=fsync) to the same folder.
#   bash bench/checkpoint/run.sh [REPEAT]            -> bench/results/checkpoint.md
#   ONLY=demo bash bench/checkpoint/run.sh           one model
# Needs: make, make data.
set -euo pipefail
cd "$(dirname "$0")/../.."
REPEAT=${1:-2}
ONLY=${ONLY:-}
OUT=${OUT:-bench/results/checkpoint.md}
BIN=${MPITRON:-build/mpitron}
DIR=${BENCH_DIR:-$PWD/runs/bench-checkpoint}  # on the disk checkpoints normally go to
rm -rf "$DIR" && mkdir -p "$DIR"
trap 'rm -rf "$DIR"' EXIT
[ -d data/demo ] || make data >/dev/null
MPIRUN=(mpirun --oversubscribe --bind-to none)
[ "$(id -u)" -eq 0 ] && MPIRUN+=(--allow-run-as-root)

declare -A ARGS EVERY NP MB
ARGS[demo]="jobs/demo.toml --train.steps=24 --log.every=1 --eval.every=0 --eval.batches=0"
EVERY[demo]=4
MB[demo]=8
NP[demo]="2 1"
ARGS[gpt2-124m]="jobs/demo.toml --model.preset=gpt2-124m --model.n_layer=12 --model.n_head=12 --model.d_model=768 --model.seq_len=256 --train.micro_batch=1 --train.steps=10 --log.every=1 --eval.every=0 --eval.batches=0"
EVERY[gpt2-124m]=3
MB[gpt2-124m]=1
NP[gpt2-124m]=2
models=(demo gpt2-124m)
[ -z "$ONLY" ] || models=("$ONLY")

run() {  # model np mode rep
  local m=$1 np=$2 mode=$3 name="$1-$2-$3-$4" extra=()
  case $mode in
    none) extra=(--checkpoint.every=0) ;;  # only the last step's save
    sync) extra=(--checkpoint.every=${EVERY[$m]}) ;;
    async) extra=(--checkpoint.every=${EVERY[$m]} --checkpoint.async=true) ;;
  esac
  rm -rf "${DIR:?}/$name"
  # shellcheck disable=SC2086
  "${MPIRUN[@]}" -np "$np" -x OMP_NUM_THREADS=1 "$BIN" train ${ARGS[$m]} --train.global_batch=$((np * MB[$m])) \
    --train.threads=1 --train.peak_flops=1e11 \
    --train.resume=never --checkpoint.keep=2 --job.run_dir="$DIR/$name" "${extra[@]}" >"$DIR/$name.log" 2>&1 ||
    { tail -20 "$DIR/$name.log"; exit 1; }
  /usr/bin/python3 - "$DIR/$name/metrics.jsonl" "$DIR/$name.log" "$m" "$mode" "$(du -b "$DIR/$name/ckpt/latest" -L | cut -f1)" "$np" \
    >>"$DIR/results.jsonl" <<'PY'
import json, re, statistics, sys
rows = list(map(json.loads, open(sys.argv[1])))
steps = {r["step"]: r for r in rows if "step_ms" in r}
blocked = {r["step"]: r["checkpoint_blocked_ms"] for r in rows if "checkpoint_blocked_ms" in r}
last = max(steps)
normal = [steps[s]["step_ms"] for s in steps if s not in blocked and s > 1]
save = [steps[s]["step_ms"] + blocked[s] for s in blocked if s != last]
writes = [float(x) for x in re.findall(r"written in the background in ([0-9.]+) s", open(sys.argv[2]).read())]
# Every step but the first and the last (whose saves are the same in all modes), saves included.
mean = statistics.mean(steps[s]["step_ms"] + blocked.get(s, 0) for s in steps if 1 < s < last)
print(json.dumps({"model": sys.argv[3], "np": int(sys.argv[6]), "mode": sys.argv[4], "normal_ms": statistics.median(normal),
                  "mean_ms": mean,
                  "save_step_ms": statistics.median(save) if save else None,
                  "blocked_ms": statistics.median(blocked[s] for s in blocked if s != last) if save else None,
                  "final_save_ms": blocked.get(last), "bg_write_s": statistics.median(writes) if writes else None,
                  "file_bytes": int(sys.argv[5]), "saves": len(save)}))
PY
  rm -rf "${DIR:?}/$name"
}

for m in "${models[@]}"; do
  for rep in $(seq 1 "$REPEAT"); do
    for np in ${NP[$m]}; do
      for mode in none sync async; do run "$m" "$np" $mode "$rep"; done
    done
  done
done
# The disk: dd of one checkpoint's bytes, synced, into the same folder (median of 3).
for m in "${models[@]}"; do
  bytes=$(/usr/bin/python3 -c 'import json,sys; print(max(r["file_bytes"] for r in map(json.loads, open(sys.argv[1])) if r["model"] == sys.argv[2]))' "$DIR/results.jsonl" "$m")
  for i in 1 2 3; do
    t0=$(date +%s%N)
    dd if=/dev/zero of="$DIR/dd.bin" bs=1M count=$(( (bytes + 1048575) / 1048576 )) conv=fsync status=none
    echo "{\"model\": \"$m\", \"dd_s\": $(( ($(date +%s%N) - t0) / 1000 ))e-6, \"dd_bytes\": $(stat -c %s "$DIR/dd.bin")}" >>"$DIR/results.jsonl"
    rm -f "$DIR/dd.bin"
  done
done

cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
/usr/bin/python3 - "$DIR/results.jsonl" "$cpu" "$(nproc)" "$REPEAT" >"$OUT" <<'PY'
import json, statistics, sys
rows = list(map(json.loads, open(sys.argv[1])))
med = lambda xs: statistics.median(xs) if xs else float("nan")
print("# Checkpoint saves: synchronous vs background (checkpoint.async)\n")
print(f"`bash bench/checkpoint/run.sh {sys.argv[4]}` on {sys.argv[2]} ({sys.argv[3]} cores), np 2 (dp 2), one thread "
      "per rank; medians over the repeats and the save steps. *normal step*: step_ms of steps without a save; "
      "*save step*: step_ms + the time the save (or the wait for the previous background one) held the step up; "
      "*write*: the save's own time (sync: the blocked time; async: the background thread's, from the log); "
      "*dd*: the same bytes written with `dd conv=fsync` to the same folder.\n")
print("*save / normal*: the save step against a normal step of the run without periodic saves; *all steps*: the "
      "mean time of every step but the first and the last, saves and waits included, against that run's.\n")
print("| model | np | checkpoint | mode | normal step | save step | save / normal | blocked | write | write MB/s | dd MB/s | all steps |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for m, np in dict.fromkeys((r["model"], r["np"]) for r in rows if "mode" in r):
    rs = [r for r in rows if r.get("model") == m and r.get("np") == np and "mode" in r]
    dd = [r for r in rows if r.get("model") == m and "dd_s" in r]
    dd_mbs = med([r["dd_bytes"] / r["dd_s"] / 1e6 for r in dd])
    size = max(r["file_bytes"] for r in rs)
    base = med([r["normal_ms"] for r in rs if r["mode"] == "none"])
    base_all = med([r["mean_ms"] for r in rs if r["mode"] == "none"])
    for mode in ("none", "sync", "async"):
        x = [r for r in rs if r["mode"] == mode]
        normal = med([r["normal_ms"] for r in x])
        mean = med([r["mean_ms"] for r in x])
        if mode == "none":
            print(f"| {m} | {np} | {size / 1e6:.1f} MB | no periodic saves | {normal:.1f} ms | | | | | | {dd_mbs:.0f} | "
                  f"{mean:.1f} ms |")
            continue
        save = med([r["save_step_ms"] for r in x])
        blocked = med([r["blocked_ms"] for r in x])
        write_s = med([r["bg_write_s"] for r in x]) if mode == "async" else blocked / 1e3
        print(f"| {m} | {np} | {size / 1e6:.1f} MB | {mode} | {normal:.1f} ms | {save:.1f} ms | {save / base:.2f}x | "
              f"{blocked:.1f} ms | {write_s * 1e3:.0f} ms | {size / write_s / 1e6:.0f} | {dd_mbs:.0f} | "
              f"{mean:.1f} ms ({mean / base_all:.2f}x) |")
PY
cat "$OUT"
