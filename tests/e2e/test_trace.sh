#!/usr/bin/env bash
# train.trace_steps (core/trace.hpp): a dp 2 run (ZeRO-0 and ZeRO-3) traces steps 2-3; every
# rank's file is trace-event JSON that parses; on each track events nest or are disjoint (never
# a partial overlap), steps 2 and 3 are there with every block's forward and backward, the
# optimizer, the data wait, and the gradient all-reduces on the comm lanes inside their step; a
# run that ends inside the window still writes its file; a bad window is refused.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
prep_fortunes "$tmp/data" 200000 fortunes
common=(--data.path="$tmp/data" --train.steps=4 --train.micro_batch=2 --train.global_batch=8 --eval.batches=0
        --log.every=1 --train.peak_flops=1e11 --model.seq_len=32 --parallel.dp=2)
for z in 0 3; do
  timeout 120 $MPIRUN -np 2 "$MPITRON" train jobs/tiny.toml "${common[@]}" --parallel.zero=$z --job.run_dir="$tmp/z$z" \
    --train.trace_steps='[2, 3]' >"$tmp/z$z.log" 2>&1 || { tail -20 "$tmp/z$z.log"; fail "zero $z traced run"; }
  grep -q "^trace: steps 2-3 of every rank in .*/trace/rank_\*.json" "$tmp/z$z.log" || fail "zero $z: no trace line"
  /usr/bin/python3 - "$tmp/z$z/trace" "$z" <<'PY' || fail "zero $z: trace"
import json, sys, collections
d, z = sys.argv[1], sys.argv[2]
for rank in (0, 1):
    t = json.load(open(f"{d}/rank_{rank}.json"))
    ev = [e for e in t["traceEvents"] if e["ph"] == "X"]
    names = {e["tid"]: e["args"]["name"] for e in t["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    assert all(e["pid"] == rank and e["dur"] >= 0 for e in ev)
    by = collections.defaultdict(list)
    for e in ev:
        by[e["tid"]].append(e)
    for tid, es in by.items():  # nest or disjoint within a track (1 us of rounding)
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
    steps = sorted(e["name"] for e in ev if e["name"].startswith("step "))
    assert steps == ["step 2", "step 3"], steps
    have = collections.Counter(e["name"] for e in ev)
    for want in ("forward block 0", "forward block 1", "backward block 0", "backward block 1", "backward head",
                 "optimizer step", "finish backward (gradients reduced)"):
        assert have[want] >= 2, f"rank {rank}: {want!r} {have[want]} times"
    assert names[2] == "data" and have["next batches"] == 2
    comm = [e for e in ev if names[e["tid"]].startswith("comm")]
    kind = "MPI_Ireduce_scatter" if z == "3" else "MPI_Iallreduce"
    assert any(e["name"].startswith(kind) for e in comm), f"no {kind} on the comm lanes: {sorted({e['name'] for e in comm})}"
    win = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e["name"].startswith("step ")]
    for e in comm:
        assert any(b - 1e-3 <= e["ts"] and e["ts"] + e["dur"] <= f + 1e-3 for b, f in win), f"{e['name']} outside the steps"
    print(f"ok    zero {z} rank {rank}: {len(ev)} events on {len(by)} tracks nest; {len(comm)} collectives on "
          f"{len({e['tid'] for e in comm})} comm lanes")
PY
done
timeout 120 "$MPITRON" train jobs/tiny.toml "${common[@]}" --parallel.dp=1 --job.run_dir="$tmp/short" \
  --train.trace_steps='[3, 10]' >"$tmp/short.log" 2>&1 || { tail "$tmp/short.log"; fail "short run"; }
/usr/bin/python3 -c "import json,sys; t=json.load(open(sys.argv[1])); assert sum(e['name'].startswith('step ') for e in t['traceEvents']) == 2" \
  "$tmp/short/trace/rank_0.json" || fail "a run ending inside the window: steps 3-4 not written"
if "$MPITRON" train jobs/tiny.toml "${common[@]}" --parallel.dp=1 --job.run_dir="$tmp/bad" --train.trace_steps='[3, 2]' \
  >"$tmp/bad.log" 2>&1; then fail "trace_steps [3, 2] accepted"; fi
grep -q "train.trace_steps must be \[first, last\]" "$tmp/bad.log" || { cat "$tmp/bad.log"; fail "no clear error"; }
echo ok
