#!/usr/bin/env bash
# train.reproducible on one GPU (docs/reproducible.md): the device kernels' determinism, which the
# CPU emulation of tests/e2e/test_reproducible.sh cannot show. On one GPU the layouts that must
# agree bit for bit are the same job run twice and its global batch split otherwise:
#   a   jobs/demo.toml, 30 steps, micro-batch 4 x accumulation 2 (train.global_batch = 8);
#   b   the same again;
#   c   the same from a step-15 checkpoint of a (resume);
# a = b = c bit for bit (losses, grad norms, val losses, final weights), and the step time against
# the same job without train.reproducible (the cost of the host staging).
#   bash bench/gpu/reproducible_check.sh [RESULTS.md] [RUNS_DIR]     (about a minute on an H200)
# Exit status: 0 all equal, 1 a difference or a failed run, 2 nothing could run.
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build-gpu}
OUT=${1:-bench/results/gpu_reproducible_check.md}
R=${2:-$BUILD/reproducible_check}
source bench/gpu/carried.sh
pick_mpitron reproducible_check
rm -rf "$R" && mkdir -p "$R" "$(dirname "$OUT")"
COMMON=(jobs/demo.toml --train.backend=nccl --model.attention=naive --train.steps=30 --train.micro_batch=4
        --train.global_batch=8 --log.every=1 --eval.every=15 --eval.batches=2 --checkpoint.every=15
        --optim.warmup_steps=0)
run() {  # NAME ARGS...
  local name=$1
  shift
  timeout 200 "${RUNENV[@]}" "$MPITRON" train "${COMMON[@]}" --data.path="$DATA" --job.run_dir="$R/$name" \
    --train.dump_params="$R/$name.h5" "$@" >"$R/$name.log" 2>&1 || { tail -n 12 "$R/$name.log"; exit 1; }
}
run a --train.reproducible=true
run b --train.reproducible=true
mkdir -p "$R/c/ckpt" && cp "$R/a/ckpt/step_00000015.h5" "$R/c/ckpt/"
run c --train.reproducible=true --train.resume="$R/c/ckpt/step_00000015.h5"
run fp32sums --train.reproducible=false
python3 - "$R" "$OUT" <<'PY'
import json, statistics, sys
import h5py
r, out = sys.argv[1:]
def rows(d):
    return [json.loads(l) for l in open(f"{r}/{d}/metrics.jsonl")]
def curve(d):  # steps 16-30 (c resumed at 15): training and validation records
    return [(x["step"], x.get("loss"), x.get("grad_norm"), x.get("val_loss")) for x in rows(d)
            if x.get("step", 0) > 15 and ("loss" in x or "val_loss" in x)]
def weights(d):
    with h5py.File(f"{r}/{d}.h5") as f:
        w = {}
        f.visititems(lambda k, v: w.__setitem__(k, v[()].tobytes()) if isinstance(v, h5py.Dataset) else None)
        return w
def step_ms(d):
    return statistics.median(x["step_ms"] for x in rows(d) if "step_ms" in x and x.get("step", 0) > 2)
lines, ok = [], True
for d in ("b", "c"):
    same = curve("a") == curve(d) and weights("a") == weights(d)
    ok &= same
    lines.append(f"- a = {d}: {'bit for bit' if same else 'DIFFERENT'} (steps 16-30: losses, grad norms, val losses; final weights)")
lines.append(f"- step time: {step_ms('a'):.1f} ms with train.reproducible, {step_ms('fp32sums'):.1f} ms without "
             f"({step_ms('a') / step_ms('fp32sums'):.2f}x)")
with open(out, "a") as f:
    f.write("## train.reproducible on one GPU (bench/gpu/reproducible_check.sh)\n\n" + "\n".join(lines) + "\n")
print("\n".join(lines))
sys.exit(0 if ok else 1)
PY
