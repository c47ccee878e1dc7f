#!/usr/bin/env bash
# CPU bf16 GEMMs (train.precision) against fp32, in one run on this machine:
#   - numerics: the demo job (jobs/demo.toml, np 2) 300 steps in fp32 and in bf16: the largest
#     relative loss difference over the logged steps and of the final validation loss;
#   - speed: gpt2-124m at seq 256 (micro-batch 4, one rank, this machine's cores) a few steps in
#     each precision, median step time, and the two start-up GEMM probes (train.precision=auto);
# appended to bench/results/train_cpu.md (or $1) with the CPU model. A benchmark, not a test.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${MPITRON:-build/mpitron}
OUT=${1:-bench/results/train_cpu.md}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[ -d data/demo ] || make data >/dev/null
MPIRUN=(mpirun --oversubscribe --bind-to none -x OMP_NUM_THREADS=1)
[ "$(id -u)" -eq 0 ] && MPIRUN+=(--allow-run-as-root)
for p in fp32 bf16; do
  "${MPIRUN[@]}" -np 2 "$BIN" train jobs/demo.toml --train.steps=300 --train.precision=$p --train.resume=never \
    --checkpoint.every=0 --job.run_dir="$tmp/demo_$p" >"$tmp/demo_$p.log" 2>&1 || { tail "$tmp/demo_$p.log"; exit 1; }
done
steps=8
for p in fp32 bf16 auto; do
  "$BIN" train jobs/tiny.toml --model.preset=gpt2-124m --model.n_layer=0 --model.n_head=0 --model.d_model=0 \
    --model.seq_len=256 --train.micro_batch=4 --train.global_batch=4 --train.steps=$([ $p = auto ] && echo 1 || echo $steps) \
    --train.precision=$p --eval.batches=0 --log.every=1 --checkpoint.every=0 --train.resume=never \
    --data.path=data/demo --job.run_dir="$tmp/g_$p" >"$tmp/g_$p.log" 2>&1 || { tail "$tmp/g_$p.log"; exit 1; }
done
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
/usr/bin/python3 - "$tmp" "$cpu" "$(nproc)" "$steps" >>"$OUT" <<'PY'
import json, re, statistics, sys
t, cpu, cores, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
def rows(n): return list(map(json.loads, open(f"{t}/{n}/metrics.jsonl")))
def losses(n): return {r["step"]: r["loss"] for r in rows(n) if "loss" in r}
def val(n): return [r["val_loss"] for r in rows(n) if "val_loss" in r][-1]
f, b = losses("demo_fp32"), losses("demo_bf16")
d = max(abs(b[s] - f[s]) / f[s] for s in f)
v = abs(val("demo_bf16") - val("demo_fp32")) / val("demo_fp32")
ms = {p: statistics.median(r["step_ms"] for r in rows(f"g_{p}") if "step_ms" in r and r["step"] >= 2) for p in ("fp32", "bf16")}
line = next(l for l in open(f"{t}/g_auto.log") if l.startswith("layout"))
m = re.search(r"(fp32|bf16 GEMMs) \(auto: bf16 GEMM probe (\d+) vs fp32 (\d+) GFLOP/s, ([0-9.]+)x", line)
print(f"\n## CPU bf16 GEMMs (`train.precision`, `bash bench/train_cpu/bf16.sh`)\n")
print(f"CPU: {cpu}, {cores} cores.\n")
print(f"- Numerics, demo job (np 2) 300 steps: bf16 losses within {100 * d:.2f}% of fp32 at every logged step "
      f"(bound 2%), final validation loss within {100 * v:.2f}% (bound 1%).")
print(f"- GEMM probes (1024 x 768 x 3072, this rank's threads): bf16 {m.group(2)} GFLOP/s, fp32 {m.group(3)} "
      f"({m.group(4)}x): `auto` picks {m.group(1)}.")
print(f"- gpt2-124m, seq 256, micro-batch 4, one rank: fp32 {ms['fp32']:.0f} ms/step, bf16 {ms['bf16']:.0f} ms/step "
      f"({ms['fp32'] / ms['bf16']:.2f}x the fp32 speed; median of steps 2..{steps}).")
PY
tail -7 "$OUT"
