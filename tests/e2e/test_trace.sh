#!/usr/bin/env bash
# train.trace_steps (core/trace.hpp): a dp 2 run (ZeRO-0 and ZeRO-3) traces steps 2-3; every
# rank's file is trace-event JSON that parses; on each track events nest or are disjoint (never
# a partial overlap), steps 2 and 3 are there with every block's forward and backward, the
# optimizer, the data wait, and the gradient all-reduces on the comm lanes inside their step; a
# run that ends inside the window still writes its file; a bad window is refused. The summary
# tool (tools/trace_summary.py) gives the log's overlap and pipeline idle figures from the
# events; pipeline (pp 2), tensor- and context-parallel (tp 2 x cp 2) runs put their transfers
# on their own tracks.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
prep_fortunes "$tmp/data" 200000 fortunes
common=(--data.path="$tmp/data" --train.steps=4 --train.micro_batch=2 --train.global_batch=8 --eval.batches=0
        --log.every=1 --train.peak_flops=1e11 --model.seq_len=32 --parallel.dp=2)
for z in 0 3; do
  timeout 120 $MPIRUN -np 2 "$MPITRON" train jobs/tiny.toml "${common[@]}" --parallel.zero=$z --job.run_dir="$tmp/z$z" \
    --train.trace_steps='[2, 3]' >"$tmp/z$z.log" 2>&1 || { tail -20 "$tmp/z$z.log"; fail "zero $z traced run"; }
  grep -q "^trace: steps 2-3 of every rank in .*/trace/rank_\*.json" "$tmp/z$z.log" || fail "zero $z: no trace line"
  /usr/bin/python3 tests/e2e/check_trace_nesting.py "$tmp/z$z/trace" 2 || fail "zero $z: events overlap partly"
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
    print(f"ok    zero {z} rank {rank}: {len(ev)} events on {len(by)} tracks; {len(comm)} collectives on "
          f"{len({e['tid'] for e in comm})} comm lanes")
PY
done
# The figures come from the same events: tools/trace_summary.py's data-parallel comm time and
# overlap of the ZeRO-0 run equal the log's (metrics.jsonl, rank 0) for both traced steps.
/usr/bin/python3 tools/trace_summary.py "$tmp/z0/trace" --json >"$tmp/z0.summary" || fail "trace_summary"
/usr/bin/python3 - "$tmp/z0.summary" "$tmp/z0/metrics.jsonl" <<'PY' || fail "trace_summary vs the log"
import json, sys
summ = {r["step"]: r for r in map(json.loads, open(sys.argv[1])) if r["rank"] == 0}
logged = {r["step"]: r for r in map(json.loads, open(sys.argv[2])) if "overlap" in r}
assert sorted(summ) == [2, 3], sorted(summ)
for step, r in summ.items():
    m = logged[step]
    assert abs(r["comm_ms"] - m["comm_ms"]) <= 0.01 + 1e-3 * m["comm_ms"], (step, r["comm_ms"], m["comm_ms"])
    assert abs(r["overlap"] - m["overlap"]) <= 2e-3, (step, r["overlap"], m["overlap"])
    print(f"ok    step {step}: comm {r['comm_ms']:.3f} ms, overlap {r['overlap']:.4f} from the trace; "
          f"{m['comm_ms']:.3f} ms, {m['overlap']:.4f} logged")
PY
# Pipeline (pp 2, gpipe, 4 micro-batches): every forward and backward of a micro-batch inside the
# schedule, the receives and sends on their tracks, and each stage's idle fraction from the trace
# equal to the log's pp_idle_<stage>.
timeout 120 $MPIRUN -np 2 "$MPITRON" train jobs/tiny.toml "${common[@]}" --parallel.dp=1 --parallel.pp=2 \
  --parallel.schedule=gpipe --job.run_dir="$tmp/pp" --train.trace_steps='[2, 3]' >"$tmp/pp.log" 2>&1 ||
  { tail -20 "$tmp/pp.log"; fail "pp traced run"; }
/usr/bin/python3 tests/e2e/check_trace_nesting.py "$tmp/pp/trace" 2 || fail "pp: events overlap partly"
/usr/bin/python3 tools/trace_summary.py "$tmp/pp/trace" --json >"$tmp/pp.summary" || fail "trace_summary pp"
/usr/bin/python3 - "$tmp/pp" "$tmp/pp.summary" <<'PY' || fail "pipeline trace"
import json, sys, collections
d = sys.argv[1]
summ = list(map(json.loads, open(sys.argv[2])))
logged = {r["step"]: r for r in map(json.loads, open(f"{d}/metrics.jsonl")) if "pp_idle_0" in r}
for rank in (0, 1):
    t = json.load(open(f"{d}/trace/rank_{rank}.json"))
    names = {e["tid"]: e["args"]["name"] for e in t["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    have = collections.Counter((names[e["tid"]].rstrip("0123456789 "), e["name"]) for e in t["traceEvents"] if e["ph"] == "X")
    for mb in range(4):
        for what in ("forward", "backward"):
            assert have[("compute", f"{what} mb {mb}")] == 2, (rank, what, mb)
        if rank == 0:
            assert have[("pp send", f"pp send act mb {mb}")] == 2 and have[("pp recv", f"pp recv grad mb {mb}")] == 2, rank
        else:
            assert have[("pp recv", f"pp recv act mb {mb}")] == 2 and have[("pp send", f"pp send grad mb {mb}")] == 2, rank
    assert have[("compute", "pipeline schedule")] == 2
    for r in (r for r in summ if r["rank"] == rank):
        want = logged[r["step"]][f"pp_idle_{rank}"]
        assert abs(r["pp_idle"] - want) <= 2e-3, (rank, r["step"], r["pp_idle"], want)
        print(f"ok    stage {rank} step {r['step']}: pp idle {r['pp_idle']:.4f} from the trace, {want:.4f} logged")
PY
# Tensor and context parallel (tp 2 x cp 2): the TP collectives and the ring hops on their tracks.
timeout 120 $MPIRUN -np 4 "$MPITRON" train jobs/tiny.toml "${common[@]}" --parallel.dp=1 --parallel.tp=2 \
  --parallel.cp=2 --job.run_dir="$tmp/tpcp" --train.trace_steps='[2, 2]' >"$tmp/tpcp.log" 2>&1 ||
  { tail -20 "$tmp/tpcp.log"; fail "tp x cp traced run"; }
/usr/bin/python3 tests/e2e/check_trace_nesting.py "$tmp/tpcp/trace" 4 || fail "tp x cp: events overlap partly"
/usr/bin/python3 - "$tmp/tpcp/trace" <<'PY' || fail "tp x cp trace"
import json, sys, collections
for rank in range(4):
    t = json.load(open(f"{sys.argv[1]}/rank_{rank}.json"))
    names = {e["tid"]: e["args"]["name"] for e in t["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    have = collections.Counter((names[e["tid"]].rstrip("0123456789 "), e["name"]) for e in t["traceEvents"] if e["ph"] == "X")
    assert have[("tp", "tp collective")] > 0 and have[("cp", "cp k|v hop")] > 0 and have[("cp", "cp dk|dv hop")] > 0, have
    assert have[("compute", "waiting for cp k|v hop")] > 0, have
print("ok    tp and cp tracks on every rank")
PY
timeout 120 "$MPITRON" train jobs/tiny.toml "${common[@]}" --parallel.dp=1 --job.run_dir="$tmp/short" \
  --train.trace_steps='[3, 10]' >"$tmp/short.log" 2>&1 || { tail "$tmp/short.log"; fail "short run"; }
/usr/bin/python3 -c "import json,sys; t=json.load(open(sys.argv[1])); assert sum(e['name'].startswith('step ') for e in t['traceEvents']) == 2" \
  "$tmp/short/trace/rank_0.json" || fail "a run ending inside the window: steps 3-4 not written"
if "$MPITRON" train jobs/tiny.toml "${common[@]}" --parallel.dp=1 --job.run_dir="$tmp/bad" --train.trace_steps='[3, 2]' \
  >"$tmp/bad.log" 2>&1; then fail "trace_steps [3, 2] accepted"; fi
grep -q "bad value for 'train.trace_steps': \[3, 2\] (allowed: \[first, last\]" "$tmp/bad.log" || { cat "$tmp/bad.log"; fail "no clear error"; }
grep -q "warning: train.trace_steps = \[3, 10\] ends after the last step: the trace covers steps 3..4" "$tmp/short.log" ||
  { cat "$tmp/short.log"; fail "no warning for a window past the run"; }
echo ok
