#!/usr/bin/env python3
"""Per-step figures from a train.trace_steps timeline (core/trace.hpp), read back from its files.

    python3 tools/trace_summary.py RUN_DIR/trace [--json]

For each rank and each traced step ("step N" on the compute track):
  comm ms     the time at least one data-parallel collective was in flight: the union of the comm
              lanes' events that ended inside the step (a collective counts in the step it ends in);
  exposed ms  the compute thread's waits for them ("waiting for ..." events, not the pipeline's
              or the ring's);
  overlap     1 - exposed / comm, the figure the log prints as "(N% overlapped)";
  pp idle     1 - (the forward and backward events of the micro-batches) / ("pipeline schedule"),
              the log's pp_idle_<stage> (metrics.jsonl);
  tp ms, cp wait ms, pp wait ms: tensor-parallel collectives, ring-hop waits, pipeline receive waits.
The same intervals the trainer measures, so the figures agree with metrics.jsonl to the
microsecond rounding of the files. Python's standard library only.
"""
import json
import os
import re
import sys


def union_ms(intervals):
    total, cur_b, cur_e = 0.0, None, None
    for b, e in sorted(intervals):
        if cur_e is not None and b <= cur_e:
            cur_e = max(cur_e, e)
            continue
        if cur_e is not None:
            total += cur_e - cur_b
        cur_b, cur_e = b, e
    if cur_e is not None:
        total += cur_e - cur_b
    return total / 1e3


def summarize(path):
    t = json.load(open(path))
    names = {e["tid"]: e["args"]["name"] for e in t["traceEvents"] if e.get("ph") == "M" and e["name"] == "thread_name"}
    ev = [e for e in t["traceEvents"] if e.get("ph") == "X"]
    rank = ev[0]["pid"] if ev else None
    track = lambda e: names.get(e["tid"], "")
    out = []
    for s in sorted((e for e in ev if track(e) == "compute" and re.fullmatch(r"step \d+", e["name"])), key=lambda e: e["ts"]):
        b, f = s["ts"], s["ts"] + s["dur"]
        inside = lambda e: b - 1e-3 <= e["ts"] and e["ts"] + e["dur"] <= f + 1e-3
        ends_inside = lambda e: b - 1e-3 <= e["ts"] + e["dur"] <= f + 1e-3
        comm = [(e["ts"], e["ts"] + e["dur"]) for e in ev if track(e).startswith("comm ") and ends_inside(e)]
        waits = [e for e in ev if track(e) == "compute" and e["name"].startswith("waiting for ") and inside(e)]
        dp_waits = [e for e in waits if not (e["name"].startswith("waiting for pp ") or e["name"].startswith("waiting for cp "))]
        comm_ms = union_ms(comm)
        exposed = min(sum(e["dur"] for e in dp_waits) / 1e3, comm_ms)
        row = {"rank": rank, "step": int(s["name"].split()[1]), "step_ms": s["dur"] / 1e3, "comm_ms": comm_ms,
               "exposed_ms": exposed, "overlap": 1 - exposed / comm_ms if comm_ms > 0 else 1.0,
               "tp_ms": sum(e["dur"] for e in ev if track(e) == "tp" and inside(e)) / 1e3,
               "cp_wait_ms": sum(e["dur"] for e in waits if e["name"].startswith("waiting for cp ")) / 1e3,
               "pp_wait_ms": sum(e["dur"] for e in waits if e["name"].startswith("waiting for pp ")) / 1e3}
        sched = [e for e in ev if track(e) == "compute" and e["name"] == "pipeline schedule" and inside(e)]
        if sched:
            work = sum(e["dur"] for e in ev if track(e) == "compute" and re.match(r"(forward|backward) mb \d+", e["name"])
                       and inside(e))
            total = sum(e["dur"] for e in sched)
            row["pp_idle"] = 1 - work / total if total > 0 else 0.0
        out.append(row)
    return out


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if len(args) != 1:
        sys.exit(__doc__)
    d = args[0]
    files = sorted((f for f in os.listdir(d) if re.fullmatch(r"rank_\d+\.json", f)), key=lambda f: int(f[5:-5]))
    if not files:
        sys.exit(f"trace_summary: no rank_<r>.json in {d}")
    rows = [r for f in files for r in summarize(os.path.join(d, f))]
    if "--json" in sys.argv:
        for r in rows:
            print(json.dumps(r))
        return
    print(f"{'rank':>4} {'step':>5} {'step ms':>9} {'comm ms':>8} {'exposed':>8} {'overlap':>8} {'pp idle':>8} "
          f"{'tp ms':>7} {'cp wait':>8} {'pp wait':>8}")
    for r in rows:
        idle = f"{100 * r['pp_idle']:.1f}%" if "pp_idle" in r else "-"
        print(f"{r['rank']:>4} {r['step']:>5} {r['step_ms']:>9.1f} {r['comm_ms']:>8.1f} {r['exposed_ms']:>8.1f} "
              f"{100 * r['overlap']:>7.1f}% {idle:>8} {r['tp_ms']:>7.1f} {r['cp_wait_ms']:>8.1f} {r['pp_wait_ms']:>8.1f}")


if __name__ == "__main__":
    main()
