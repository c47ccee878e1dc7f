#!/usr/bin/env bash
# sanitizers: skip (a ZeRO sweep: its buckets and shards run sanitized in the unit tests (test_dp_buckets); every stage against the single rank runs in the release build)
# Golden rule for data parallelism and ZeRO: same seed, same data, same global batch (8
# sequences), 10 steps of the tiny model. dp=2 and dp=4, each with zero 0/1/2/3, without and with
# gradient accumulation, reproduce the single-rank run: every step's loss within 1e-5 relative and
# every parameter after the last step within 1e-5 (relative L2 per tensor, compare_runs.py).
# Also: buckets smaller than any tensor and larger than the model; dp=3, whose ZeRO shards are
# uneven; and the per-rank memory by category equals the formulas of
# include/mpitron/parallel/data_parallel.hpp.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
here=$(cd "$(dirname "$0")" && pwd)
export OMP_NUM_THREADS=1

prep_fortunes "$tmp/data" 400000 fortunes computers science wisdom

common=(--data.path="$tmp/data" --train.steps=10 --train.global_batch=8 --eval.every=5 --eval.batches=1
        --log.every=1 --train.peak_flops=1e11)
run() {  # name np extra...
  local name=$1 np=$2
  shift 2
  timeout 120 $MPIRUN -np "$np" "$MPITRON" train jobs/tiny.toml "${common[@]}" --job.run_dir="$tmp/$name" \
    --train.dump_params="$tmp/$name.h5" "$@" >"$tmp/$name.log" 2>&1 || { tail -30 "$tmp/$name.log"; fail "$name run failed"; }
}
compare() {  # ref run
  /usr/bin/python3 "$here/compare_runs.py" "$tmp/$1" "$tmp/$2" --params "$tmp/$1.h5" "$tmp/$2.h5" --min-steps 10 \
    >"$tmp/$2.cmp" 2>&1 || { cat "$tmp/$2.cmp"; fail "$2 differs from $1"; }
  echo "$2: $(tail -1 "$tmp/$2.cmp")"
}

run ref 1 --train.micro_batch=2
for z in 0 1 2 3; do
  run "dp2_z${z}" 2 --parallel.zero=$z --train.micro_batch=4            # accumulation 1
  run "dp2_z${z}_acc" 2 --parallel.zero=$z --train.micro_batch=2        # accumulation 2
  run "dp4_z${z}" 4 --parallel.zero=$z --train.micro_batch=2            # accumulation 1
  run "dp4_z${z}_acc" 4 --parallel.zero=$z --train.micro_batch=1        # accumulation 2
  for r in "dp2_z${z}" "dp2_z${z}_acc" "dp4_z${z}" "dp4_z${z}_acc"; do compare ref "$r"; done
done
# ZeRO-1/2's parameter gathers (param_gather.hpp) with nothing arriving before its unit's forward
# waits for it (MPITRON_FAULT=late@param_gather posts each gather at its wait): a forward that read
# a unit's weights before waiting would train on the last step's values.
MPITRON_FAULT=late@param_gather run dp2_z1_late 2 --parallel.zero=1 --train.micro_batch=4
MPITRON_FAULT=late@param_gather run dp4_z2_late 4 --parallel.zero=2 --train.micro_batch=1
for r in dp2_z1_late dp4_z2_late; do compare ref "$r"; done
grep -q "parameters all-gathered in 4 units, each awaited at its next forward" "$tmp/dp2_z1_late.log" ||
  fail "ZeRO-1 gather: $(grep '^data parallel' "$tmp/dp2_z1_late.log")"
# Buckets: 1e-5 MiB (every one of the 28 tensors a bucket of its own) and 1000 MiB (one bucket for the model).
run dp2_z0_small 2 --parallel.zero=0 --train.micro_batch=2 --parallel.bucket_mb=1e-5
run dp2_z2_small 2 --parallel.zero=2 --train.micro_batch=2 --parallel.bucket_mb=1e-5
run dp2_z1_big 2 --parallel.zero=1 --train.micro_batch=4 --parallel.bucket_mb=1000
for r in dp2_z0_small dp2_z2_small dp2_z1_big; do compare ref "$r"; done
grep -q "^data parallel: dp 2 zero 0 | 28 gradient bucket(s)" "$tmp/dp2_z0_small.log" ||
  fail "small buckets: $(grep '^data parallel' "$tmp/dp2_z0_small.log")"
grep -q "^data parallel: dp 2 zero 1 | 1 gradient bucket(s)" "$tmp/dp2_z1_big.log" ||
  fail "big bucket: $(grep '^data parallel' "$tmp/dp2_z1_big.log")"
# Uneven shards: dp 3 (global batch 6) against its own single-rank reference; the flat size
# (124,672 floats = 7,792 x 16) is not a multiple of 3 x 16, so the shards are 41,568, 41,568 and
# 41,536 floats. The dp=3 runs also use the other two progress modes.
run ref6 1 --train.global_batch=6 --train.micro_batch=2
run dp3_z2 3 --train.global_batch=6 --train.micro_batch=2 --parallel.zero=2 --parallel.dp_progress=poll
run dp3_z3 3 --train.global_batch=6 --train.micro_batch=2 --parallel.zero=3 --parallel.dp_progress=none
for r in dp3_z2 dp3_z3; do compare ref6 "$r"; done
# ZeRO-3 with 4 blocks over dp 4: shard + gathered working set < the full model (memory check).
run ref_l4 1 --model.n_layer=4 --train.micro_batch=2
run dp4_z3_l4 4 --model.n_layer=4 --train.micro_batch=2 --parallel.zero=3
compare ref_l4 dp4_z3_l4

# Memory by category, per rank, against the formulas (bytes; n = flat parameter floats, S_r =
# rank r's shard). At start: params 4n (ZeRO-3: 4S_r), grads 4n (ZeRO-2/3: 4S_r), AdamW moments
# 8n (ZeRO-1/2/3: 8S_r). During step 1 under ZeRO-3 the params peak is at most the shard plus the
# working set (embedding unit + final LN + two blocks); with 4 blocks over dp 4 that is below 4n.
/usr/bin/python3 - "$tmp" <<'PY'
import json, re, sys
tmp = sys.argv[1]
def shard(n, size, r):
    s = -(-n // (16 * size)) * 16
    return min(n, s * (r + 1)) - min(n, s * r)
checked = 0
for name, dp, z, layers in [(f"dp{d}_z{z}{a}", d, z, 2) for d in (2, 4) for z in range(4) for a in ("", "_acc")] + \
        [("dp3_z2", 3, 2, 2), ("dp3_z3", 3, 3, 2), ("dp4_z3_l4", 4, 3, 4)]:
    log = open(f"{tmp}/{name}.log").read()
    n = int(re.search(r"flat params (\d+) floats", log).group(1))
    rows = [json.loads(l) for l in open(f"{tmp}/{name}/metrics.jsonl")]
    start = {r["rank"]: r for r in rows if r.get("memory") == "at start"}
    step1 = {r["rank"]: r for r in rows if r.get("memory") == "step 1"}
    assert sorted(start) == list(range(dp)) and sorted(step1) == list(range(dp)), (name, sorted(start))
    C, V, T = 64, 320, 64   # tiny: d 64, byte vocab 256+1 padded to 320, seq 64
    block, emb, head = 12 * C * C + 13 * C, V * C + T * C, 2 * C
    sizes = [shard(n, dp, r) for r in range(dp)]
    assert sum(sizes) == n, (name, sizes, n)
    if name.startswith("dp3"):
        assert len(set(sizes)) > 1, f"{name}: shards {sizes} are even; the test wants uneven ones"
    for r in range(dp):
        S, m = sizes[r], start[r]
        want = {"params": 4 * (S if z == 3 else n), "grads": 4 * (S if z >= 2 else n),
                "optim": 8 * (S if z >= 1 else n)}
        for k, v in want.items():
            assert m[k] == v, f"{name} rank {r}: {k} {m[k]} B at start, formula {v} B (n {n}, S {S})"
        if z == 3:
            peak, bound = step1[r]["params_peak"], 4 * (S + emb + head + 2 * block)
            assert 4 * S < peak <= bound, f"{name} rank {r}: params peak {peak} not in (4S, {bound}]"
            if layers == 4:
                assert peak < 4 * n, f"{name} rank {r}: params peak {peak} >= full model {4 * n}"
        checked += 1
print(f"memory formulas hold on {checked} ranks")
PY
echo ok
