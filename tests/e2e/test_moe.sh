#!/usr/bin/env bash
# sanitizers: skip (a layout sweep, MoE with ep: routing runs sanitized in the unit tests (test_moe_routing); every layout against the single rank runs in the release build)
# Mixture of experts (jobs/moe-tiny.toml: 4 experts top 2 per block, Mixtral's router, aux and z
# losses), the golden rule: losses, grad norms and every parameter within 1e-5 of the
# single-rank run for ep2, ep4, ep2 x tp2, ep2 x pp2, ep2 x dp2 with ZeRO 1 and 3, ep2 with
# full recompute, cp2, ep2 x cp2 (ep over the cp pair), ep4 over dp2 x cp2 and ep2 x tp2 with
# sequence parallel; a shared expert with topk_softmax and MoE every 2nd block under ep2 x tp2 and
# under tp2 with sequence parallel; a capacity factor (drops) under cp2 and ep2 x cp2 x tp2.
# Checkpoints written under ep2 resume at ep1 and ep4 (steps after the save match the ep2 run).
# Generation with the KV cache through MoE blocks matches recomputation. The routing metrics are logged; bad MoE settings fail with errors naming the keys.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
prep_fortunes "$tmp/data" 200000 fortunes computers

common=(--data.path="$tmp/data" --train.steps=6 --train.micro_batch=2 --train.global_batch=8 --optim.lr=1e-3
        --eval.every=3 --eval.batches=1 --log.every=1 --train.peak_flops=1e11)
run() {  # name np extra...
  local name=$1 np=$2
  shift 2
  timeout -k 5 300 $MPIRUN -np "$np" "$MPITRON" train jobs/moe-tiny.toml "${common[@]}" --job.run_dir="$tmp/$name" \
    --train.dump_params="$tmp/$name.h5" "$@" >"$tmp/$name.log" 2>&1 || { cat "$tmp/$name.log"; fail "$name run failed"; }
}
golden() {  # name np extra...
  local name=$1
  run "$@"
  echo -n "$name: "
  local ref=${REF:-ref}
  /usr/bin/python3 tests/e2e/compare_runs.py --min-steps 6 "$tmp/$ref" "$tmp/$name" --params "$tmp/$ref.h5" "$tmp/$name.h5" ||
    { cat "$tmp/$name.log"; fail "$name does not reproduce the single-rank run"; }
}
run ref 1
grep "MoE every 1 block(s): top 2 of 4 experts" "$tmp/ref.log" >/dev/null || fail "no MoE model line: $(head "$tmp/ref.log")"
golden ep2 2 --parallel.ep=2
grep "dp 2 (ep 2 x expert-dp 1)" "$tmp/ep2.log" >/dev/null || fail "ep2 layout line: $(grep layout "$tmp/ep2.log")"
golden ep4 4 --parallel.ep=4
golden ep2_tp2 4 --parallel.ep=2 --parallel.tp=2
golden ep2_pp2 4 --parallel.ep=2 --parallel.pp=2
golden ep2_dp2_zero1 4 --parallel.ep=2 --parallel.zero=1 --checkpoint.every=3 --checkpoint.async=true \
  --train.check_ledger=true
golden ep2_dp2_zero3 4 --parallel.ep=2 --parallel.zero=3 --checkpoint.every=3
golden ep2_recompute 2 --parallel.ep=2 --train.recompute=full
# Context parallel: the aux loss's per-sequence sums over the cp ranks; ep over a cp pair, and
# ep 4 over dp 2 x cp 2.
golden cp2 2 --parallel.cp=2
golden ep2_cp2 2 --parallel.ep=2 --parallel.cp=2
golden ep4_dp2_cp2 4 --parallel.ep=4 --parallel.cp=2
shared=(--model.moe.n_shared_experts=1 --model.moe.router=topk_softmax --model.moe.layer_freq=2 --model.n_layer=3)
run ref_shared 1 "${shared[@]}"
REF=ref_shared golden ep2_tp2_shared 4 --parallel.ep=2 --parallel.tp=2 "${shared[@]}"
# Sequence parallel: the block gathers the rows for the MoE and keeps its own.
golden ep2_tp2_sp 4 --parallel.ep=2 --parallel.tp=2 --parallel.sp=true
REF=ref_shared golden tp2_sp_shared 2 --parallel.tp=2 --parallel.sp=true "${shared[@]}"
# A capacity factor with context parallel: the copies dropped are those the single rank drops in
# the micro-batch's token order (each cp rank counts the other ranks' earlier chunks).
cap=(--model.moe.capacity_factor=1.0)
run ref_cap 1 "${cap[@]}"
/usr/bin/python3 - "$tmp/ref_cap/metrics.jsonl" <<'PY'
import json, sys
drops = sum(r.get("moe_l0_dropped", 0) + r.get("moe_l1_dropped", 0) for r in map(json.loads, open(sys.argv[1])))
assert drops > 0, "capacity factor 1.0 dropped nothing: the cp check below would not test drops"
print(f"capacity factor 1.0: {drops} copies dropped over 6 steps")
PY
REF=ref_cap golden cp2_cap 2 --parallel.cp=2 "${cap[@]}"
REF=ref_cap golden ep2_cp2_cap 4 --parallel.ep=2 --parallel.cp=2 --parallel.tp=2 "${cap[@]}"

# Routing metrics: per MoE block and step, in metrics.jsonl and the log.
/usr/bin/python3 - "$tmp/ep2/metrics.jsonl" <<'PY'
import json, sys
recs = [r for r in map(json.loads, open(sys.argv[1])) if "moe_l0_aux" in r]
assert [r["step"] for r in recs] == [1, 2, 3, 4, 5, 6], [r["step"] for r in recs]
for r in recs:
    for l in (0, 1):
        assert 0 <= r[f"moe_l{l}_tokens_min"] <= r[f"moe_l{l}_tokens_max"] <= 8 * 64 * 2, r
        assert r[f"moe_l{l}_dropped"] == 0 and r[f"moe_l{l}_aux"] >= 1.0 - 1e-9 and r[f"moe_l{l}_z"] > 0, r
print("routing metrics: 6 steps x 2 blocks, dropless, aux >= 1 (its minimum at perfect balance)")
PY
grep "step 6 moe | L0 tokens/expert" "$tmp/ep2.log" >/dev/null || fail "no MoE log line"

# Expert parallel splits the experts' parameters: each rank holds E / ep of them, after its dense
# parameters, synchronised (and ZeRO-sharded) over expert_dp; the memory ledger predicts the
# parameter, gradient, optimizer and snapshot bytes exactly.
/usr/bin/python3 - "$tmp" <<'PY'
import re, sys
def sets(name):
    log = open(f"{sys.argv[1]}/{name}.log").read()
    d = re.search(r"data parallel: the other parameters over dp x cp (\d+) .*? flat params (\d+) floats", log)
    e = re.search(r"data parallel: routed experts over expert_dp (\d+) .*? flat params (\d+) floats", log)
    assert d and e, f"{name}: no dense/expert data-parallel lines"
    return int(d[1]), int(d[2]), int(e[1]), int(e[2])
ep2, ep4, z1 = sets("ep2"), sets("ep4"), sets("ep2_dp2_zero1")
assert ep2[:2] == (2, ep4[1]) and ep4[0] == 4 and ep2[2] == 1 and ep4[2] == 1 and z1[2] == 2, (ep2, ep4, z1)
assert ep2[3] == 2 * ep4[3], f"experts per rank: ep2 {ep2[3]} floats, ep4 {ep4[3]}"
log = open(f"{sys.argv[1]}/ep2_dp2_zero1.log").read()
lines = [l for l in log.splitlines() if l.startswith("ledger rank")]
assert len(lines) >= 8, lines
for l in lines:
    for cat in ("params", "grads", "optim", "checkpoint snapshot"):
        assert re.search(cat + r" tracked (\d+) predicted \1 EXACT", l), f"{cat} not exact: {l}"
print(f"experts split: {ep2[3]} floats of experts per rank at ep2, {ep4[3]} at ep4; ledger exact at ep2 x dp2 ZeRO-1")
PY

# Checkpoints: the ep2 x dp2 ZeRO-3 run's step-3 checkpoint resumes at ep1 (np 1) and ep4 (np 4),
# the ZeRO-1 one (written in the background, each expert by the first rank of its expert_dp) at ep1.
for layout in "ep2_dp2_zero3:1:" "ep2_dp2_zero3:4:--parallel.ep=4" "ep2_dp2_zero1:1:"; do
  src=${layout%%:*} layout=${layout#*:}
  np=${layout%%:*}
  ckpt="$tmp/$src/ckpt/step_00000003.h5"
  # shellcheck disable=SC2086
  run "resume$np" "$np" ${layout#*:} --train.resume="$ckpt"
  grep "resumed from $ckpt" "$tmp/resume$np.log" >/dev/null || fail "np=$np did not resume"
  /usr/bin/python3 - "$tmp/$src" "$tmp/resume$np" "$np" <<'PY'
import json, sys
def steps(d):
    return {r["step"]: (r["loss"], r["grad_norm"]) for r in map(json.loads, open(f"{d}/metrics.jsonl")) if "loss" in r}
full, res = steps(sys.argv[1]), steps(sys.argv[2])
assert sorted(res) == [4, 5, 6], sorted(res)
worst = max(abs(a - b) / abs(a) for s in res for a, b in zip(full[s], res[s]))
assert worst < 1e-5, f"resume at np={sys.argv[3]} differs: {worst:.3g}"
print(f"{sys.argv[1].split('/')[-1]} checkpoint resumed at np={sys.argv[3]}: steps 4-6 max rel diff {worst:.2e}")
PY
done

# Generation through the MoE blocks (routed + shared experts, a dense block between): the KV cache
# gives the text that recomputing the context for every token gives.
for opts in "--seed 5" "--temperature 0"; do
  # shellcheck disable=SC2086
  a=$("$MPITRON" generate "$tmp/ref_shared" --prompt "The cat " --max-tokens 150 $opts 2>/dev/null)
  # shellcheck disable=SC2086
  b=$("$MPITRON" generate "$tmp/ref_shared" --prompt "The cat " --max-tokens 150 $opts --no-kv-cache 2>/dev/null)
  [ "$a" = "$b" ] || fail "generate $opts: KV cache '$a' vs no cache '$b'"
done
[ ${#a} -gt 100 ] || fail "greedy generation stopped early: '$a'"

# Bad input: errors that name the keys, non-zero exit, on every rank count.
expect_error() {  # np pattern extra...
  local np=$1 pat=$2
  shift 2
  if timeout -k 5 60 $MPIRUN -np "$np" "$MPITRON" train "${JOB:-jobs/moe-tiny.toml}" "${common[@]}" --job.run_dir="$tmp/err" "$@" \
    >"$tmp/err.log" 2>&1; then
    fail "expected an error for $*"
  fi
  grep -- "$pat" "$tmp/err.log" >/dev/null || { cat "$tmp/err.log"; fail "no '$pat' error for $*"; }
}
expect_error 1 "model.moe.top_k (5) must be <= model.moe.n_experts (4)" --model.moe.top_k=5
expect_error 3 "model.moe.n_experts = 4 must be divisible by parallel.ep = 3" --parallel.ep=3 --train.global_batch=6
expect_error 2 "parallel.ep = 4 must divide the data x context parallel ranks dp x cp = 2 x 1" --parallel.ep=4
JOB=jobs/llama-tiny.toml expect_error 2 "model 'llama-tiny' is dense" --parallel.ep=2
expect_error 1 "model.moe.\* keys need model.moe.n_experts >= 1" --model.preset=llama-tiny --model.moe.n_experts=0
expect_error 1 "need the llama architecture" --model.arch=gpt2
echo "moe: ok"
