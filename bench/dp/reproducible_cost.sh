#!/usr/bin/env bash
# bench/dp/reproducible_cost.sh: what train.reproducible costs (docs/reproducible.md), against the
# fp32 path in the same run: bench/dp's small GPT (V 8192, 6 layers, d 384, seq 256, micro-batch 8,
# 2 micro-batches per rank and step) at 1 rank x 2 threads and 2 ranks x 1 thread, ZeRO 0 and 2.
# Each configuration REPEAT times, interleaved; medians of steps 2..STEPS.
#   bash bench/dp/reproducible_cost.sh [steps] [repeat]   -> bench/results/reproducible.md
set -euo pipefail
cd "$(dirname "$0")/../.."
STEPS=${1:-6}
REPEAT=${2:-2}
BIN=${MPITRON:-build/mpitron}
OUT=bench/results/reproducible.md
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[ -d data/demo ] || make data >/dev/null
MPIRUN=(mpirun --oversubscribe --bind-to none)
[ "$(id -u)" -eq 0 ] && MPIRUN+=(--allow-run-as-root)
B=8
model=(--model.vocab_size=8192 --model.n_layer=6 --model.n_head=6 --model.d_model=384 --model.seq_len=256
       --train.micro_batch=$B --train.steps="$STEPS" --eval.every=0 --eval.batches=0 --log.every=1 --checkpoint.every=0
       --train.precision=fp32)
run() {  # name np threads extra...
  local name=$1 np=$2 th=$3
  shift 3
  rm -rf "${tmp:?}/$name"
  "${MPIRUN[@]}" -np "$np" "$BIN" train jobs/tiny.toml "${model[@]}" --train.threads="$th" \
    --train.global_batch=$((2 * B * np)) --parallel.dp="$np" --job.run_dir="$tmp/$name" "$@" >"$tmp/$name.log" 2>&1 ||
    { tail -20 "$tmp/$name.log"; exit 1; }
  /usr/bin/python3 - "$tmp/$name/metrics.jsonl" "$name" "$tmp/$name.log" >>"$tmp/results.jsonl" <<'PY'
import json, re, statistics, sys
rows = [r for r in map(json.loads, open(sys.argv[1])) if "step_ms" in r and r["step"] >= 2]
params = int(re.search(r"flat params ([0-9]+) floats", open(sys.argv[3]).read()).group(1))
print(json.dumps({"name": sys.argv[2], "step_ms": statistics.median(r["step_ms"] for r in rows),
                  "comm_ms": statistics.median(r["comm_ms"] for r in rows), "params": params}))
PY
}
configs=("fp32_np1 1 2" "repro_np1 1 2 --train.reproducible=true"
         "fp32_np2_z0 2 1" "repro_np2_z0 2 1 --train.reproducible=true"
         "fp32_np2_z2 2 1 --parallel.zero=2" "repro_np2_z2 2 1 --parallel.zero=2 --train.reproducible=true")
for ((r = 0; r < REPEAT; ++r)); do
  for c in "${configs[@]}"; do
    # shellcheck disable=SC2086
    run $c
  done
done
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
/usr/bin/python3 - "$tmp/results.jsonl" "$cpu" "$STEPS" "$REPEAT" >"$OUT" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
cpu, steps, repeat = sys.argv[2], sys.argv[3], sys.argv[4]
by = {}
for r in rows: by.setdefault(r["name"], []).append(r)
med = lambda n, k: statistics.median(r[k] for r in by[n])
P = rows[0]["params"]
print("# train.reproducible: its cost against the fp32 path\n")
print(f"`bash bench/dp/reproducible_cost.sh {steps} {repeat}` on {cpu} (2 cores); bench/dp's small GPT "
      f"({P:,} parameters), micro-batch 8, 2 micro-batches per rank and step, fp32 GEMMs; medians of steps 2-{steps} "
      f"over {repeat} interleaved runs.\n")
print("| layout | fp32 path step (ms) | reproducible step (ms) | ratio | fp32 comm (ms) | reproducible comm (ms) | "
      "gradient bytes on the wire per rank and step, fp32 -> reproducible |")
print("|---|---|---|---|---|---|---|")
for lay, a, b, wire in (("1 rank x 2 threads", "fp32_np1", "repro_np1", "none"),
                        ("dp 2 x 1 thread, ZeRO 0", "fp32_np2_z0", "repro_np2_z0", f"{4*P/1e6:.1f} MB -> {17*P/1e6:.1f} MB"),
                        ("dp 2 x 1 thread, ZeRO 2", "fp32_np2_z2", "repro_np2_z2", f"{4*P/1e6:.1f} MB (2 reduce-scatters) -> {9*P/1e6:.1f} MB")):
    sa, sb = med(a, "step_ms"), med(b, "step_ms")
    print(f"| {lay} | {sa:.0f} | {sb:.0f} | {sb/sa:.2f}x | {med(a, 'comm_ms'):.0f} | {med(b, 'comm_ms'):.0f} | {wire} |")
print("\nWire bytes are the ring algorithms' at dp n = 2 (an all-reduce sends 2 (n-1)/n of its buffer per rank, a "
      "reduce-scatter (n-1)/n): fp32 ZeRO 0 all-reduces 4 B per parameter once, ZeRO 2 reduce-scatters 4 B per "
      "parameter per micro-batch; reproducible all-reduces the int8 top-bin max (1 B) and then all-reduces (ZeRO 0) "
      "or reduce-scatters (ZeRO 2) the two int64 bins (16 B), once per step. The comm column is the time spent in "
      "collectives and waits that the backward did not hide, with the reproducible path's conversion of the fixed-point "
      "sums to fp32 inside it (hence its 1-rank figure).")
PY
cat "$OUT"
