#!/usr/bin/python3
"""Plot a run's loss curve from <run_dir>/metrics.jsonl (matplotlib, Debian python3-matplotlib).

usage: tools/plot_metrics.py runs/demo/metrics.jsonl [-o loss.png]
"""
import argparse
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("metrics", help="metrics.jsonl written by mpitron train")
    ap.add_argument("-o", "--out", default=None, help="output PNG (default: next to the metrics file)")
    a = ap.parse_args()
    train, val = [], []
    with open(a.metrics) as f:
        for line in f:
            r = json.loads(line)
            if r.get("loss") is not None:
                train.append((r["step"], r["loss"]))
            if r.get("val_loss") is not None:
                val.append((r["step"], r["val_loss"]))
    if not train and not val:
        sys.exit(f"{a.metrics}: no loss values")
    fig, ax = plt.subplots(figsize=(7, 4))
    if train:
        ax.plot(*zip(*train), label="train loss")
    if val:
        ax.plot(*zip(*val), "o-", label="val loss")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats/token)")
    ax.grid(alpha=0.3)
    ax.legend()
    out = a.out or a.metrics.rsplit("/", 1)[0] + "/loss.png"
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(out)


if __name__ == "__main__":
    main()
