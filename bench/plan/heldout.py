"""Held-out layouts for bench/plan/heldout.sh: a seeded draw from the space `plan --advise`
searches (src/plan/advisor.cpp), and the summary of what was measured.
    heldout.py draw SEED PER_NP      -> lines "name|np|model|overrides", PER_NP layouts at np 1, 2, 4
    heldout.py summary RESULTS.jsonl  -> the markdown of one draw (stdout), its figures (stderr)
    heldout.py advice RESULTS ADVISE  -> plan --advise's first choice per model and np (ADVISE.jsonl)
                                         against the fastest measured layout of the draw (stdout, stderr)
    heldout.py result DIR NAME NP     -> one layout's JSON line: DIR.*/metrics.jsonl (its runs) against
                                         DIR.plan (`plan --predict`); bench/plan/run.sh uses it too
The space: tp, pp, cp dividing np, dp the rest; micro-batch 1, 2, 4, 8 dividing the global batch's
share of a dp rank, and at least pp micro-batches under a pipeline; ZeRO 0-3 where dp x cp > 1;
sp where tp > 1; recompute none or full; 1F1B, GPipe or interleaved (2 virtual stages, when the
layers split so) under pp; GPT-2, LLaMA and MoE (ep dividing dp x cp). Layouts the trainer
refuses are dropped by the caller (`train --dry-run`), which takes the first PER_NP that run."""
import glob
import json
import random
import re
import statistics
import sys

GLOBAL = 16
N_LAYER = 4


def divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def space(np_):
    for model in ("gpt", "llama", "moe"):
        for tp in divisors(np_):
            for pp in divisors(np_ // tp):
                for cp in divisors(np_ // tp // pp):
                    dp = np_ // tp // pp // cp
                    for micro in (1, 2, 4, 8):
                        if (GLOBAL // dp) % micro or (pp > 1 and GLOBAL // dp // micro < pp):
                            continue
                        for ep in divisors(dp * cp) if model == "moe" else [1]:
                            for zero in range(4 if dp * cp > 1 else 1):
                                for sp in (0, 1) if tp > 1 else (0,):
                                    for rc in (0, 1):
                                        scheds = ["1f1b", "gpipe"] if pp > 1 else [""]
                                        if pp > 1 and N_LAYER % (2 * pp) == 0:
                                            scheds.append("interleaved")
                                        for s in scheds:
                                            yield model, dict(dp=dp, tp=tp, pp=pp, cp=cp, ep=ep, zero=zero, sp=sp,
                                                              rc=rc, micro=micro, sched=s)


def describe(model, l):
    parts = [model, f"dp{l['dp']}"]
    for k in ("tp", "pp", "cp", "ep"):
        if l[k] > 1:
            parts.append(f"{k}{l[k]}")
    if l["sched"]:
        parts.append(l["sched"])
    if l["sp"]:
        parts.append("sp")
    if l["zero"]:
        parts.append(f"zero{l['zero']}")
    if l["rc"]:
        parts.append("recompute")
    parts.append(f"m{l['micro']}")
    return " ".join(parts)


def overrides(l):
    o = [f"--train.micro_batch={l['micro']}", f"--parallel.tp={l['tp']}", f"--parallel.pp={l['pp']}",
         f"--parallel.cp={l['cp']}", f"--parallel.zero={l['zero']}", f"--parallel.sp={'true' if l['sp'] else 'false'}",
         f"--train.recompute={'full' if l['rc'] else 'none'}"]
    if l["ep"] > 1:
        o.append(f"--parallel.ep={l['ep']}")
    if l["sched"]:
        o.append(f"--parallel.schedule={l['sched']}")
        if l["sched"] == "interleaved":
            o.append("--parallel.virtual_stages=2")
    return " ".join(o)


def draw(seed, per_np):
    rng = random.Random(seed)
    for np_ in (1, 2, 4):
        cands = list(space(np_))
        rng.shuffle(cands)
        # More than PER_NP: the caller keeps the first PER_NP the trainer accepts.
        for model, l in cands[:3 * per_np]:
            print(f"{describe(model, l)}|{np_}|{model}|{overrides(l)}")


def ranks(v):
    order = sorted(range(len(v)), key=lambda i: v[i])
    r = [0.0] * len(v)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
            j += 1
        for k in range(i, j + 1):
            r[order[k]] = (i + j) / 2
        i = j + 1
    return r


def spearman(a, b):
    ra, rb = ranks(a), ranks(b)
    ma, mb = statistics.mean(ra), statistics.mean(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    return cov / (sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb)) ** 0.5


def figures(rows, key):
    errs = [abs(r["pred_ms"] / r[key] - 1) for r in rows]
    meas = [r[key] for r in rows]
    return {"median_err": statistics.median(errs), "worst_err": max(errs),
            "spearman": spearman([r["pred_ms"] for r in rows], meas), "n": len(rows),
            "layout_spread": (max(meas) - min(meas)) / statistics.median(meas)}


def summary(path):
    rows = [json.loads(l) for l in open(path)]
    fig = figures(rows, "meas_ms")
    pooled = figures(rows, "median_ms")
    fig["run_spread"] = statistics.median(r["spread"] for r in rows)
    fig["pooled"] = pooled
    print(f"**{len(rows)} layouts, best round: median absolute error {100 * fig['median_err']:.1f}%, worst "
          f"{100 * fig['worst_err']:.1f}%, Spearman rho {fig['spearman']:.3f}**; against the median of all rounds: "
          f"{100 * pooled['median_err']:.1f}%, {100 * pooled['worst_err']:.1f}%, {pooled['spearman']:.3f}. "
          f"Run-to-run spread (worst round over the best, median over the layouts) {100 * fig['run_spread']:.0f}%, "
          f"spread between layouts (max - min over the median) {100 * fig['layout_spread']:.0f}%.\n")
    print("| layout | np | predicted ms | best round ms | error | median ms | error | run spread | dominant (predicted) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in sorted(rows, key=lambda r: (r["np"], r["name"])):
        print(f"| {r['name']} | {r['np']} | {r['pred_ms']:.1f} | {r['meas_ms']:.1f} | "
              f"{100 * (r['pred_ms'] / r['meas_ms'] - 1):+.1f}% | {r['median_ms']:.1f} | "
              f"{100 * (r['pred_ms'] / r['median_ms'] - 1):+.1f}% | {100 * r['spread']:.0f}% | {r['dominant']} |")
    print()
    print(json.dumps(fig), file=sys.stderr)


def advice(path, adv_path):
    """plan --advise's first choice per model and np, measured, against the draw's fastest."""
    rows = [json.loads(l) for l in open(path)]
    picks = [json.loads(l) for l in open(adv_path)]
    print("`plan --advise --profile`'s first choice for each model and np of the draw, run in the same rounds, "
          "against the fastest measured layout of the draw with that model and np:\n")
    print("| model | np | advise's choice | measured ms | fastest drawn | measured ms | choice / fastest |")
    print("|---|---:|---|---:|---|---:|---:|")
    ratios = []
    for a in sorted(picks, key=lambda r: (r["name"].split()[0], r["np"])):
        model = a["name"].split()[0]
        drawn = [r for r in rows if r["np"] == a["np"] and r["name"].split()[0] == model]
        best = min(drawn, key=lambda r: r["meas_ms"])
        ratios.append(a["meas_ms"] / best["meas_ms"])
        print(f"| {model} | {a['np']} | {a['name'].split(': ', 1)[1]} | {a['meas_ms']:.1f} | {best['name']} | "
              f"{best['meas_ms']:.1f} | {ratios[-1]:.2f} |")
    within = sum(r <= 1.10 for r in ratios)
    print(f"\n**advise's choice within 10% of the fastest drawn (or faster): {within} of {len(ratios)}**; "
          f"worst ratio {max(ratios):.2f}.\n")
    print(json.dumps({"advise_within_10pct": within, "advise_n": len(ratios), "advise_worst_ratio": max(ratios)}),
          file=sys.stderr)


def result(d, name, np_, warmup="0"):
    """Per layout: each round's median step time (steps 2.., or those after `warmup` more), their
    best and the median of all the rounds' steps, and the prediction. The machine's slowdowns are
    one-sided (a shared host takes cycles, never gives them), so the best round is the layout on
    the undisturbed machine the planner predicts; the pooled median is reported beside it."""
    ms, per_run = [], []
    for f in sorted(glob.glob(f"{d}.*/metrics.jsonl")):
        run = [json.loads(l)["step_ms"] for l in open(f) if '"step_ms"' in l][1 + int(warmup):]
        ms += run
        per_run.append(statistics.median(run))
    plan = open(f"{d}.plan").read()
    pred = float(re.search(r"predicted step time .*?: ([0-9.e+-]+) s", plan).group(1)) * 1e3
    med = statistics.median(ms)
    print(json.dumps({"name": name, "np": int(np_), "pred_ms": pred, "meas_ms": min(per_run), "median_ms": med,
                      "spread": (max(per_run) - min(per_run)) / min(per_run),
                      "dominant": re.search(r"dominant: (.*)", plan).group(1), "plan": plan}))


if __name__ == "__main__":
    if sys.argv[1] == "draw":
        draw(int(sys.argv[2]), int(sys.argv[3]))
    elif sys.argv[1] == "advice":
        advice(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "result":
        result(*sys.argv[2:6])
    else:
        summary(sys.argv[2])
