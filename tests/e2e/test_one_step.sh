#!/usr/bin/env bash
# One training step against an independent computation (the golden rule compares layouts with
# each other, so it cannot see a bug every layout shares: clipping that clips nothing, weight
# decay on the wrong tensors, a logged gradient norm that is not the norm of the gradient used).
#
# AdamW's first step (torch.optim.AdamW, bias-corrected) moves each parameter by
#   p1 = p0 (1 - lr wd) - lr g / (|g| + eps)        (m_hat = g, sqrt(v_hat) = |g| at step 1)
# so with wd = 0 the applied gradient is recovered element by element from the parameters before
# and after: |g| = eps d / (1 - d), d = |p0 - p1| / lr. With eps of the order of the gradient
# norm, d stays below 1/2 and the recovery is well conditioned. Checks:
#   1. no clipping: ||recovered g|| = the logged grad_norm (np 1, and tp2 x pp2, where the norm
#      sums TP shards and pipeline stages and must count replicated tensors and the tied wte once);
#   2. grad_clip = grad_norm / 4: ||recovered g|| = grad_clip (torch's clip_grad_norm_);
#   3. weight decay: the same step with wd changes exactly the 2-D tensors, by -lr wd p0, and
#      leaves every 1-D tensor (biases, LayerNorms) bit-identical (decay on matrices only).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=1

prep_fortunes "$tmp/data" 100000 fortunes computers

# One step, no warmup, lr = min_lr (a one-step run is its own last step, lr_schedule.hpp).
common=(--data.path="$tmp/data" --train.steps=1 --train.micro_batch=2 --train.global_batch=4 --eval.every=0
        --eval.batches=0 --log.every=1 --train.peak_flops=1e11 --model.n_layer=2 --optim.warmup_steps=0
        --optim.beta1=0.9 --optim.beta2=0.95)
run() {  # name np extra...
  local name=$1 np=$2
  shift 2
  timeout -k 5 300 $MPIRUN -np "$np" "$MPITRON" train jobs/tiny.toml "${common[@]}" --job.run_dir="$tmp/$name" \
    --train.dump_params="$tmp/$name.h5" "$@" >"$tmp/$name.log" 2>&1 || { cat "$tmp/$name.log"; fail "$name run failed"; }
}
gnorm() { /usr/bin/python3 -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1]) if "\"loss\"" in l][0]["grad_norm"])' "$tmp/$1/metrics.jsonl"; }

# p0: lr 0 leaves every parameter at its initial value; its log has the step-1 gradient norm.
run p0 1 --optim.lr=0 --optim.min_lr=0 --optim.grad_clip=0 --optim.weight_decay=0
g=$(gnorm p0)
clip=$(/usr/bin/python3 -c "print($g / 4)")
step=(--optim.lr=1 --optim.min_lr=1)
run free 1 "${step[@]}" --optim.eps="$g" --optim.grad_clip=0 --optim.weight_decay=0
run free_tp2pp2 4 "${step[@]}" --optim.eps="$g" --optim.grad_clip=0 --optim.weight_decay=0 --parallel.tp=2 --parallel.pp=2
run clipped 1 "${step[@]}" --optim.eps="$clip" --optim.grad_clip="$clip" --optim.weight_decay=0
run decayed 1 "${step[@]}" --optim.eps="$clip" --optim.grad_clip="$clip" --optim.weight_decay=0.1

/usr/bin/python3 - "$tmp" "$g" "$clip" <<'PY'
import json, sys
import h5py, numpy as np
tmp, g, clip = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
lr, wd = 1.0, 0.1
def params(name):
    with h5py.File(f"{tmp}/{name}.h5", "r") as f:
        return {k: f[k][()].astype(np.float64) for k in f}
def logged(name):
    return [json.loads(l) for l in open(f"{tmp}/{name}/metrics.jsonl") if '"loss"' in l][0]
p0 = params("p0")
def applied_norm(name, eps):  # || g || recovered from p0 -> p1 with wd = 0
    p1, sq = params(name), 0.0
    assert sorted(p1) == sorted(p0), sorted(set(p1) ^ set(p0))
    for k in p0:
        d = np.abs(p0[k] - p1[k]) / lr
        assert d.max() < 1, f"{name} {k}: |p0 - p1| / lr = {d.max()} >= 1"
        sq += float(np.sum((eps * d / (1 - d)) ** 2))
    return sq ** 0.5
bad = []
for name, eps in (("free", g), ("free_tp2pp2", g)):
    rec, log = applied_norm(name, eps), logged(name)
    print(f"{name}: logged grad_norm {log['grad_norm']:.6g}, norm of the applied gradient {rec:.6g} "
          f"(rel diff {abs(rec - log['grad_norm']) / rec:.1e})")
    if abs(log["grad_norm"] - g) > 1e-5 * g:
        bad.append(f"{name}: logged grad_norm {log['grad_norm']} differs from the single-rank {g}")
    if abs(rec - log["grad_norm"]) > 1e-4 * rec:
        bad.append(f"{name}: the logged grad_norm {log['grad_norm']} is not the norm of the gradient the step used ({rec})")
rec = applied_norm("clipped", clip)
print(f"clipped: grad_clip {clip:.6g}, norm of the applied gradient {rec:.6g} (rel diff {abs(rec - clip) / clip:.1e}; "
      f"unclipped {g:.6g})")
if abs(rec - clip) > 1e-4 * clip:
    bad.append(f"clipped: the applied gradient's norm is {rec}, not grad_clip {clip} (grad_norm {g})")
pc, pd = params("clipped"), params("decayed")
for k in p0:
    diff = pd[k] - pc[k]
    if p0[k].ndim == 2:
        want = -lr * wd * p0[k]
        err = np.linalg.norm(diff - want) / np.linalg.norm(want)
        if err > 1e-5:
            bad.append(f"weight decay on {k} (2-D): off by {err:.3g} relative to -lr wd p0")
    elif np.any(diff != 0):
        bad.append(f"weight decay changed {k} ({p0[k].ndim}-D) by up to {np.abs(diff).max():.3g}: only matrices decay")
print(f"weight decay: {sum(p.ndim == 2 for p in p0.values())} matrices decayed by lr wd p0, "
      f"{sum(p.ndim != 2 for p in p0.values())} vectors untouched" if not bad else "")
if bad:
    sys.exit("FAIL:\n  " + "\n  ".join(bad))
PY
echo ok
