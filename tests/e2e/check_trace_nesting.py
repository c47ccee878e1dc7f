#!/usr/bin/env python3
"""Every rank_<r>.json of a train.trace_steps directory parses, and on every track its events nest
or are disjoint (never a partial overlap; 1 us of rounding). Usage: check_trace_nesting.py DIR N"""
import collections
import json
import sys

d, n = sys.argv[1], int(sys.argv[2])
for rank in range(n):
    t = json.load(open(f"{d}/rank_{rank}.json"))
    names = {e["tid"]: e["args"]["name"] for e in t["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    ev = [e for e in t["traceEvents"] if e["ph"] == "X"]
    assert all(e["pid"] == rank and e["dur"] >= 0 for e in ev)
    by = collections.defaultdict(list)
    for e in ev:
        by[e["tid"]].append(e)
    for tid, es in by.items():
        es.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []
        for e in es:
            while stack and e["ts"] >= stack[-1]["ts"] + stack[-1]["dur"] - 1e-3:
                stack.pop()
            if stack:
                top = stack[-1]
                assert e["ts"] + e["dur"] <= top["ts"] + top["dur"] + 1e-3, \
                    f"rank {rank} track {names.get(tid)}: '{e['name']}' overlaps '{top['name']}' partly"
            stack.append(e)
    print(f"ok    rank {rank}: {len(ev)} events on {len(by)} tracks ({', '.join(sorted(set(names.values())))}) nest")
