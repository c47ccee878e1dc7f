#!/usr/bin/python3
"""Golden-rule comparison of two training runs (the golden rule: every parallel layout reproduces the
single-rank run). Used by the e2e tests.

usage: compare_runs.py REF_RUN_DIR RUN_DIR [--params REF.h5 RUN.h5] [--min-steps N] [--tol 1e-5] [--param-tol T]
                       [--first-step-tol T]

- losses: every step's loss in metrics.jsonl (and every val_loss) within tol relative;
- the gradient norm (grad_norm, before clipping) and the learning rate of every step within tol
  relative. The losses and parameters alone miss a wrongly scaled gradient: clipping rescales it
  to grad_clip and Adam's update is invariant to the gradient's scale, so a gradient that is 2x
  (or 1/2x) too large on every step trains exactly like the right one;
- parameters (files written by train.dump_params): the same names and shapes, and for each
  tensor the relative L2 error ||a - b|| / ||a|| within tol. L2 per tensor rather than the
  worst element: Adam divides by sqrt(v), so an element whose gradient is mostly cancellation
  (|g| near its fp32 rounding error) takes lr-sized steps whose sign depends on summation order;
  a few such elements move by ~lr while the tensor as a whole agrees to ~1e-7. The worst
  element's error is printed too. --param-tol (default: --tol) bounds them on its own where
  Adam's amplification makes parameters drift further than the losses (FP8: an element that
  crosses an FP8 rounding boundary moves a whole FP8 step).
- --first-step-tol: the first step's loss within T, for runs whose later steps are held to a
  looser --tol: the first forward runs on the same weights in both, so a layout's fault shows
  there before rounding noise has been amplified by the updates (or, in runs with bf16 GEMMs,
  by the backward's roundings).
"""
import argparse
import json
import sys

import numpy as np


# Per-step values compared besides the loss (metrics.jsonl keys, step_stats.cpp).
STEP_KEYS = ("grad_norm", "lr")


def records(run_dir):
    with open(f"{run_dir}/metrics.jsonl") as f:
        rows = [json.loads(line) for line in f]
    loss = {r["step"]: r["loss"] for r in rows if r.get("loss") is not None}
    val = {r["step"]: r["val_loss"] for r in rows if r.get("val_loss") is not None}
    per_step = {k: {r["step"]: r[k] for r in rows if r.get("loss") is not None and k in r} for k in STEP_KEYS}
    return loss, val, per_step


def rel(a, b):
    return abs(a - b) / max(abs(a), 1e-30)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ref")
    ap.add_argument("run")
    ap.add_argument("--params", nargs=2, metavar=("REF_H5", "RUN_H5"))
    ap.add_argument("--min-steps", type=int, default=10)
    ap.add_argument("--tol", type=float, default=1e-5)
    ap.add_argument("--param-tol", type=float)
    ap.add_argument("--first-step-tol", type=float)
    a = ap.parse_args()
    errors = []
    la, va, sa = records(a.ref)
    lb, vb, sb = records(a.run)
    if sorted(la) != sorted(lb):
        errors.append(f"logged steps differ: {sorted(la)} vs {sorted(lb)}")
    if len(la) < a.min_steps:
        errors.append(f"only {len(la)} steps logged (need {a.min_steps})")
    worst_loss = max((abs(la[s] - lb[s]) / abs(la[s]) for s in la if s in lb), default=0.0)
    if worst_loss > a.tol:
        errors.append(f"loss differs: max rel {worst_loss:.3g}\n  ref {[la[s] for s in sorted(la)]}\n"
                      f"  run {[lb.get(s) for s in sorted(la)]}")
    if sorted(va) != sorted(vb):
        errors.append(f"val steps differ: {sorted(va)} vs {sorted(vb)}")
    worst_val = max((abs(va[s] - vb[s]) / abs(va[s]) for s in va if s in vb), default=0.0)
    if worst_val > a.tol:
        errors.append(f"val loss differs: max rel {worst_val:.3g}")
    msg = f"losses: {len(la)} steps, max rel diff {worst_loss:.2e} (val {worst_val:.2e})"
    if a.first_step_tol is not None and la and sorted(la)[0] in lb:
        s0 = sorted(la)[0]
        worst_first = rel(la[s0], lb[s0])
        if worst_first > a.first_step_tol:
            errors.append(f"step {s0}'s loss differs: {la[s0]} vs {lb[s0]}, rel {worst_first:.3g}")
        msg += f"; step {s0} loss {worst_first:.2e}"
    for k in STEP_KEYS:
        if sorted(sa[k]) != sorted(la) or sorted(sb[k]) != sorted(lb):
            errors.append(f"{k} is not logged with every loss ({len(sa[k])} and {len(sb[k])} of {len(la)} steps)")
            continue
        common = [s for s in sorted(sa[k]) if s in sb[k]]
        worst = max((rel(sa[k][s], sb[k][s]) for s in common), default=0.0)
        if worst > a.tol:
            first = next(s for s in common if rel(sa[k][s], sb[k][s]) > a.tol)
            errors.append(f"{k} differs: max rel {worst:.3g}, first at step {first}\n  ref {[sa[k][s] for s in common]}\n"
                          f"  run {[sb[k][s] for s in common]}")
        msg += f"; {k} {worst:.2e}"
    if a.params:
        import h5py
        pa, pb = h5py.File(a.params[0], "r"), h5py.File(a.params[1], "r")
        if sorted(pa) != sorted(pb):
            errors.append(f"parameter names differ: {sorted(set(pa) ^ set(pb))}")
        worst_l2, worst_el, where = 0.0, 0.0, ""
        for k in sorted(set(pa) & set(pb)):
            x, y = pa[k][()], pb[k][()]
            if x.shape != y.shape:
                errors.append(f"{k}: shape {x.shape} vs {y.shape}")
                continue
            l2 = float(np.linalg.norm(x - y) / max(np.linalg.norm(x), 1e-30))
            el = float(np.abs(x - y).max() / max(np.abs(x).max(), 1e-30))
            if l2 > worst_l2:
                worst_l2, where = l2, k
            worst_el = max(worst_el, el)
        if worst_l2 > (a.tol if a.param_tol is None else a.param_tol):
            errors.append(f"parameters differ: {where} relative L2 error {worst_l2:.3g}")
        msg += f"; parameters: {len(pa)} tensors, max relative L2 {worst_l2:.2e} ({where}), worst element {worst_el:.2e}"
    if errors:
        print("\n".join(errors), file=sys.stderr)
        sys.exit(1)
    print(msg)


if __name__ == "__main__":
    main()
