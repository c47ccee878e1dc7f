#!/usr/bin/env bash
# bench/cp: context parallel on the CPU trainer. Part 1: step time, per-rank activation peak and
# the ring's exposed (not overlapped) wait per step for cp 1 / 2 / 4 at a fixed long sequence
# (tiny GPT-2 preset, 2 layers, seq 2048, one sequence per step, 1 thread per rank). Part 2: the
# longest sequence a memory cap allows: seq 8192 under `ulimit -v` on 1 rank, then on cp 4 ranks
# (each process under the same cap). Writes bench/results/cp.md.
#   bash bench/cp/run.sh [steps]
set -uo pipefail
cd "$(dirname "$0")/../.."
STEPS=${1:-6}
BIN=${MPITRON:-build/mpitron}
OUT=bench/results/cp.md
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[ -d data/demo ] || make data >/dev/null
MPIRUN="mpirun --oversubscribe -x OMP_NUM_THREADS=1 $([ "$(id -u)" -eq 0 ] && echo --allow-run-as-root)"
common=(--data.path=data/demo --model.n_layer=2 --train.micro_batch=1 --train.global_batch=1 --eval.every=0
        --eval.batches=0 --log.every=1 --train.peak_flops=1e11 --train.resume=never --checkpoint.every=0)

summary() {  # metrics.jsonl -> "step_ms act_peak_MiB cp_wait_ms" (medians over steps >= 2; rank 0's step-1 peak)
  /usr/bin/python3 - "$1" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
ms = statistics.median(r["step_ms"] for r in rows if "step_ms" in r and r["step"] >= 2)
act = [r["activations_peak"] for r in rows if r.get("memory") == "step 1" and r.get("rank") == 0][0]
w = [r["cp_wait_ms"] for r in rows if "cp_wait_ms" in r and r["step"] >= 2]
print(f"{ms:.1f} {act / 2**20:.2f} {statistics.median(w) if w else 0:.1f}")
PY
}

{
  echo "# Context parallel on the CPU trainer"
  echo
  echo "Measured $(date -u +%Y-%m-%d) on $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)),"
  echo "1 OpenMP thread per rank (cp 4 oversubscribes the 2 cores 2:1). Command: \`bash bench/cp/run.sh $STEPS\`."
  echo
  echo "## Fixed sequence: tiny GPT-2 (2 layers, d 64, 4 heads), seq 2048, one sequence per step"
  echo
  echo "| cp | ranks | ms/step (median) | activation peak per rank | ring wait ms/step (exposed) | share of the step |"
  echo "|---|---|---|---|---|---|"
} >"$OUT"
for cp in 1 2 4; do
  $MPIRUN -np $cp "$BIN" train jobs/tiny.toml "${common[@]}" --model.seq_len=2048 --parallel.cp=$cp \
    --train.steps="$STEPS" --job.run_dir="$tmp/cp$cp" >"$tmp/cp$cp.log" 2>&1 || { tail -5 "$tmp/cp$cp.log"; exit 1; }
  read -r ms act wait <<<"$(summary "$tmp/cp$cp/metrics.jsonl")"
  share=$(/usr/bin/python3 -c "print(f'{100 * $wait / $ms:.0f}%')")
  echo "| $cp | $cp | $ms | $act MiB | $wait | $share |" >>"$OUT"
  echo "done cp $cp"
done

# Part 2: the memory cap. Virtual memory, not resident: OpenMPI and the OpenMP runtime map a few
# hundred MB before any tensor, so the cap is set well above that baseline.
cap_kb=${CP_BENCH_CAP_KB:-2097152}  # 2 GiB per process
{
  echo
  echo "## Seq 8192 under \`ulimit -v $((cap_kb / 1024)) MiB\` per process (2 layers, one sequence)"
  echo
  echo "| cp | ranks | result | activation peak per rank |"
  echo "|---|---|---|---|"
} >>"$OUT"
for cp in 1 4; do
  if (ulimit -v "$cap_kb"; $MPIRUN -np $cp "$BIN" train jobs/tiny.toml "${common[@]}" --model.seq_len=8192 \
      --parallel.cp=$cp --train.steps=2 --job.run_dir="$tmp/cap$cp") >"$tmp/cap$cp.log" 2>&1; then
    read -r _ act _ <<<"$(summary "$tmp/cap$cp/metrics.jsonl" 2>/dev/null || echo "0 - 0")"
    echo "| $cp | $cp | trains | $act MiB |" >>"$OUT"
  else
    why=$(grep -m1 -o "error: .*" "$tmp/cap$cp.log" | cut -c1-140)
    echo "| $cp | $cp | fails: ${why:-see log} | - |" >>"$OUT"
  fi
  echo "done cap cp $cp"
done
cat "$OUT"
