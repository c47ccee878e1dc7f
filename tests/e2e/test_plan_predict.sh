#!/usr/bin/env bash
# sanitizers: skip (the planner's predictions against measured runs: arithmetic; its parsing runs sanitized in the unit tests)
# End-to-end: the step-time prediction's plumbing (its accuracy is bench/plan's business, never
# a test's). `mpitron calibrate --quick` at np 2 writes a profile that Python's own TOML reader
# (tomllib) parses with every part present and positive; `plan --predict` and `plan --advise
# --profile --emit-job` use it and the built-in h100 profile; a run with train.check_prediction
# prints measured beside predicted for each step after the first and the median's error at the
# end, and on a MoE model under ep the routing it had against the balanced one priced; bad inputs (no profile, an unknown one, a profile with a key missing, check_prediction
# without a profile) stop with a message naming what is wrong and the usage exit code.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

prep_fortunes "$tmp/data" 100000 fortunes
prof="$tmp/profile.toml"
timeout 300 $MPIRUN -np 2 "$MPITRON" calibrate --quick --out "$prof" >"$tmp/cal.log" 2>&1 || { cat "$tmp/cal.log"; fail "calibrate failed"; }
grep -q "wrote $prof" "$tmp/cal.log" || fail "calibrate did not say it wrote the profile"
[ ! -e "$prof.tmp" ] || fail "calibrate left $prof.tmp behind"
/usr/bin/python3 - "$prof" <<'PY' || fail "the profile does not hold what plan needs"
import sys, tomllib
p = tomllib.load(open(sys.argv[1], "rb"))
m, g = p["machine"], p["grid"]
assert m["source"] == "calibrated" and m["ranks"] == 2 and m["cores_per_node"] >= 1 and m["mpi"], m
cells = len(g["m"]) * len(g["n"]) * len(g["k"])
assert p["rates"], "no [[rates]]"
for r in p["rates"]:
    for key in ("gemm_fwd_f32", "gemm_bwd_f32"):
        assert len(r[key]) == cells and min(r[key]) > 0, key
    assert len(r["attn_fwd"]) == len(g["attn_t"]) and r["stream_gbs"] > 0
c = p["concurrency"]
assert c["active"][0] == 1 and c["active"][-1] == 2 and len(c["compute_scale"]) == len(c["active"])
ops = {(x["op"], x["group"]) for x in p["comm"]}
for op in ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "sendrecv", "all_to_all"):
    assert (op, 2) in ops, op
assert all(x["busbw_gbs"] > 0 and x["alpha_us"] >= 0 for x in p["comm"])
PY
echo "ok    calibrate --quick at np 2: $(sed -n 's/^profile: //p' "$tmp/cal.log")"

job=(jobs/tiny.toml --data.path="$tmp/data" --model.n_layer=2 --train.micro_batch=2 --train.global_batch=8)
out=$("$MPITRON" plan "${job[@]}" --gpus 2 --parallel.pp=2 --predict --profile "$prof")
echo "$out" | grep -q "^predicted step time on" || fail "plan --predict printed no step time: $out"
echo "$out" | grep -q "pipeline bubble" || fail "plan --predict with pp 2 shows no bubble: $out"
echo "ok    plan --predict: $(echo "$out" | head -n 1 | cut -c1-100)"
out=$("$MPITRON" plan --model llama3-8b --gpus 16 --seq 4096 --global-batch 64 --tp 8 --predict --profile h100)
echo "$out" | grep -q "datasheet" || fail "the h100 profile is not said to be a datasheet one: $out"
"$MPITRON" plan "${job[@]}" --gpus 2 --advise --profile "$prof" --emit-job "$tmp/best.toml" >"$tmp/advise.log"
grep -q "ranked by predicted step time" "$tmp/advise.log" || fail "--advise --profile did not rank by the prediction"
grep -q "check_prediction = true" "$tmp/best.toml" && grep -q "profile = \"$prof\"" "$tmp/best.toml" ||
  fail "the emitted job does not check its prediction: $(cat "$tmp/best.toml")"
echo "ok    plan --advise --profile --emit-job"

# MoE: the ep all-to-all in the prediction, ep searched by the advisor and kept in the emitted job.
moe=(jobs/moe-tiny.toml --data.path="$tmp/data" --train.global_batch=8)
out=$("$MPITRON" plan "${moe[@]}" --gpus 2 --ep 2 --predict --profile "$prof")
echo "$out" | grep -q "EP all-to-all .* sent per step" || fail "plan --predict --ep 2 shows no all-to-all: $out"
"$MPITRON" plan "${moe[@]}" --gpus 4 --advise --top 1000 --profile "$prof" --emit-job "$tmp/moe.toml" >"$tmp/moe-advise.log"
grep -q "(ep 2)" "$tmp/moe-advise.log" && grep -q "(ep 4)" "$tmp/moe-advise.log" ||
  fail "--advise on a MoE model did not try ep 2 and 4: $(head -c 3000 "$tmp/moe-advise.log")"
grep -q "^\[model.moe\]" "$tmp/moe.toml" && grep -q "^n_experts = 4" "$tmp/moe.toml" ||
  fail "the emitted MoE job lost its experts: $(cat "$tmp/moe.toml")"
echo "ok    MoE: plan --predict --ep 2 counts the all-to-all; --advise searches ep"

log="$tmp/train.log"
timeout 120 $MPIRUN -np 2 "$MPITRON" train "${job[@]}" --train.steps=4 --eval.every=0 --eval.batches=0 \
  --train.profile="$prof" --train.check_prediction=true --job.run_dir="$tmp/run" >"$log" 2>&1 || { cat "$log"; fail "training failed"; }
n=$(grep -c "^prediction check step [0-9]*: measured .* ms | predicted .* ms | error" "$log" || true)
[ "$n" -eq 3 ] || { cat "$log"; fail "expected 3 per-step prediction checks (steps 2..4), got $n"; }
grep -q "^prediction check: median step .* over steps 2..4 vs predicted" "$log" || fail "no closing prediction check"
grep -q '"predicted_step_ms"' "$tmp/run/metrics.jsonl" || fail "metrics.jsonl has no predicted_step_ms record"
echo "ok    train.check_prediction: $(grep '^prediction check:' "$log")"

# MoE under ep 2: the closing check reports the routing the run had against the balanced routing
# the prediction prices; the busiest expert's share, recomputed here from metrics.jsonl's per-block
# tokens_max and dropped copies (tokens per step x top_k kept, over the 4 experts).
log="$tmp/moe-train.log"
timeout 120 $MPIRUN -np 2 "$MPITRON" train "${moe[@]}" --parallel.ep=2 --train.micro_batch=2 --train.steps=4 --eval.every=0 \
  --eval.batches=0 --train.profile="$prof" --train.check_prediction=true --job.run_dir="$tmp/moe-run" >"$log" 2>&1 ||
  { cat "$log"; fail "MoE training failed"; }
line=$(grep "^prediction check: MoE routing" "$log") || { cat "$log"; fail "no MoE routing beside the prediction check"; }
echo "$line" | grep -q "on the busiest expert-parallel rank" || fail "ep 2 and no busiest expert-parallel rank: $line"
/usr/bin/python3 - "$tmp/moe-run/metrics.jsonl" "$line" <<'PY' || fail "the MoE routing line disagrees with metrics.jsonl: $line"
import json, re, sys
tokens_per_step, top_k, experts = 8 * 64, 2, 4
loads = []
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r.get("step", 0) < 2 or not any(k.endswith("tokens_max") for k in r):
        continue
    for k, hi in r.items():
        if k.endswith("_tokens_max"):
            kept = tokens_per_step * top_k - r[k.replace("tokens_max", "dropped")]
            loads.append(hi / (kept / experts))
want = sum(loads) / len(loads)
got = float(re.search(r"kept ([0-9.]+)x the balanced share on the busiest expert", sys.argv[2]).group(1))
assert len(loads) == 3 * 2 and abs(got - want) < 0.006, (got, want, len(loads))
PY
echo "ok    train.check_prediction on MoE, ep 2: ${line#prediction check: }"

expect_usage() {  # what-to-find command...
  local want=$1 rc=0
  shift
  "$@" >"$tmp/err.log" 2>&1 || rc=$?
  [ "$rc" -eq 2 ] || { cat "$tmp/err.log"; fail "exit $rc (want 2, usage) for: $*"; }
  grep -q -- "$want" "$tmp/err.log" || { cat "$tmp/err.log"; fail "the message does not name '$want'"; }
}
expect_usage "--predict needs --profile" "$MPITRON" plan "${job[@]}" --predict
expect_usage "model.moe.n_experts = 4 must be divisible by parallel.ep = 3" "$MPITRON" plan "${moe[@]}" --gpus 3 --ep 3
expect_usage "parallel.ep = 2 splits a mixture-of-experts model's experts, but model 'tiny' is dense" "$MPITRON" plan "${job[@]}" --gpus 2 --ep 2
expect_usage "no-such-profile" "$MPITRON" plan "${job[@]}" --predict --profile no-such-profile
sed 's/^stream_gbs/stream_gbz/' "$prof" >"$tmp/bad.toml"
rc=0
"$MPITRON" plan "${job[@]}" --predict --profile "$tmp/bad.toml" >"$tmp/err.log" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && grep -q "stream_gbs" "$tmp/err.log" && grep -q "bad.toml" "$tmp/err.log" ||
  { cat "$tmp/err.log"; fail "a profile without stream_gbs: exit $rc"; }
expect_usage "train.check_prediction needs train.profile" timeout 60 $MPIRUN -np 2 "$MPITRON" train "${job[@]}" \
  --train.steps=1 --train.check_prediction=true --job.run_dir="$tmp/run2"
echo "ok    bad inputs: clear messages, non-zero exits"
