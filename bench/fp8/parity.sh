#!/usr/bin/env bash
# FP8 trains like bf16 (docs/fp8.md): GPT-2 (jobs/demo.toml) and LLaMA (jobs/llama-demo.toml) on the
# demo corpus (the fortunes, real English text; `make data`), STEPS steps each with
# train.precision = bf16 and = fp8 on the CPU backend (the FP8 recipe's emulation), one rank;
# the validation loss every 100 steps, the final difference, the FP8 statistics and the step
# times -> bench/results/fp8_parity.md.
#   bash bench/fp8/parity.sh            (STEPS=1000; BUILD=build; about 15 min on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
STEPS=${STEPS:-1000}
OUT=${OUT:-bench/results/fp8_parity.md}
[ -d data/demo ] || { echo "no data/demo: run make data" >&2; exit 1; }
runs=$(mktemp -d)
trap 'rm -rf "$runs"' EXIT
for job in demo llama-demo; do
  for prec in bf16 fp8; do
    echo "== $job $prec ($STEPS steps)"
    "$BUILD/mpitron" train "jobs/$job.toml" --train.steps="$STEPS" --train.precision=$prec --eval.every=100 \
      --log.every=100 --train.resume=never --checkpoint.every=0 --job.run_dir="$runs/${job}_$prec" \
      >"$runs/${job}_$prec.log" 2>&1 || { tail -20 "$runs/${job}_$prec.log"; exit 1; }
    grep -E "^step $STEPS/" "$runs/${job}_$prec.log" | cut -c1-100
  done
done
/usr/bin/python3 - "$runs" "$STEPS" "$OUT" <<'PY'
import json, platform, statistics, subprocess, sys, time
runs, steps, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def rows(n): return [json.loads(l) for l in open(f"{runs}/{n}/metrics.jsonl")]
cpu = next((l.split(":", 1)[1].strip() for l in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
            if l.startswith("Model name")), platform.processor())
layout = {}
for n in ("demo_bf16", "demo_fp8", "llama-demo_bf16", "llama-demo_fp8"):
    layout[n] = next(l for l in open(f"{runs}/{n}.log") if l.startswith("layout"))
lines = [f"# FP8 trains like bf16: {steps} steps on the demo corpus (CPU emulation)", "",
         f"`bash bench/fp8/parity.sh` (STEPS={steps}), {time.strftime('%Y-%m-%d')}, {cpu}, one rank, "
         "the CPU backend. bf16: train.precision = \"bf16\" (oneDNN bf16 GEMMs, fp32 accumulation); "
         "fp8: the blocks' four linear layers with FP8 operands (current scaling, E4M3 weights and "
         "activations, E5M2 gradients; the codes' values through the same bf16 GEMMs, scaled after), "
         "everything else as the bf16 run. Same seed, data order and schedule.", ""]
verdict = []
for job, name in (("demo", "GPT-2 (jobs/demo.toml: 4 layers, d_model 256, seq 128)"),
                  ("llama-demo", "LLaMA (jobs/llama-demo.toml: llama-small, 4 layers, d_model 256, GQA 8/2, SwiGLU)")):
    b, f = rows(f"{job}_bf16"), rows(f"{job}_fp8")
    vb = {r["step"]: r["val_loss"] for r in b if "val_loss" in r}
    vf = {r["step"]: r["val_loss"] for r in f if "val_loss" in r}
    tb = statistics.median(r["step_ms"] for r in b if "step_ms" in r and r["step"] > 10)
    tf = statistics.median(r["step_ms"] for r in f if "step_ms" in r and r["step"] > 10)
    lines += [f"## {name}", "", "| step | val loss bf16 | val loss fp8 | fp8 vs bf16 |", "|---|---|---|---|"]
    for s in sorted(vb):
        if s in vf:
            lines.append(f"| {s} | {vb[s]:.4f} | {vf[s]:.4f} | {100 * (vf[s] - vb[s]) / vb[s]:+.2f}% |")
    last = max(s for s in vb if s in vf)
    d = (vf[last] - vb[last]) / vb[last]
    verdict.append(f"{job}: final val loss {vf[last]:.4f} (fp8) vs {vb[last]:.4f} (bf16), {100 * d:+.2f}% "
                   f"({'within' if abs(d) <= 0.01 else 'OUTSIDE'} the 1% target)")
    st = [r for r in f if "fp8_act_amax" in r]
    lines += ["", "FP8 statistics (metrics.jsonl), steps 1, middle, last: amax and the fraction of the cast "
              "elements that underflowed to zero (none saturates under current scaling):", "",
              "| step | act amax | act underflow | weight amax | weight underflow | grad amax | grad underflow |",
              "|---|---|---|---|---|---|---|"]
    for r in (st[0], st[len(st) // 2], st[-1]):
        lines.append(f"| {r['step']} | " + " | ".join(f"{r[f'fp8_{k}_amax']:.3g} | {100 * r[f'fp8_{k}_underflow']:.4f}%"
                                                    for k in ("act", "weight", "grad")) + " |")
        assert all(r[f"fp8_{k}_saturated"] == 0 for k in ("act", "weight", "grad"))
    lines += ["", f"Median step time (steps > 10): bf16 {tb:.1f} ms, fp8 {tf:.1f} ms ({tf / tb:.2f}x: the casts "
              "are the emulation's cost on a CPU, which has no FP8 arithmetic; speed is the GPU's business)", ""]
lines += ["## Verdict", ""] + [f"- {v}" for v in verdict] + ["", "Layout lines:", ""] + \
         [f"    {layout[n].strip()}" for n in layout] + [""]
open(out, "w").write("\n".join(lines))
print("\n".join(verdict))
print(f"wrote {out}")
PY
