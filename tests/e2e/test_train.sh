#!/usr/bin/env bash
# End-to-end: prep a small corpus, train the tiny model on 1 rank and on 2 data-parallel ranks.
# Checks: loss falls; the dp=2 run reproduces the 1-rank losses (the golden rule);
# metrics.jsonl is valid JSON with step/loss; --dry-run (with the [env] warnings); bad keys and layouts fail cleanly.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

prep_fortunes "$tmp/data" 400000 fortunes computers science wisdom

common=(--data.path="$tmp/data" --train.steps=12 --train.micro_batch=2 --train.global_batch=4
        --eval.every=0 --eval.batches=2 --log.every=1 --train.peak_flops=1e11)
run() {  # name np extra...
  local name=$1 np=$2
  shift 2
  timeout 300 $MPIRUN -np "$np" "$MPITRON" train jobs/tiny.toml "${common[@]}" --job.run_dir="$tmp/$name" "$@" \
    --train.dump_params="$tmp/$name.params.h5" >"$tmp/$name.log" 2>&1 || { cat "$tmp/$name.log"; fail "$name run failed"; }
}
run np1 1
run dp2 2

/usr/bin/python3 tests/e2e/compare_runs.py "$tmp/np1" "$tmp/dp2" --params "$tmp/np1.params.h5" "$tmp/dp2.params.h5" \
  || fail "dp=2 does not reproduce the single-rank run"
/usr/bin/python3 - "$tmp" <<'PY'
import json, sys, h5py
tmp = sys.argv[1]
rows = [json.loads(l) for l in open(f"{tmp}/np1/metrics.jsonl")]
loss = [r["loss"] for r in rows if "loss" in r]
assert loss[-1] < loss[0] - 0.5, f"loss did not fall: {loss[0]} -> {loss[-1]}"
p = h5py.File(f"{tmp}/np1.params.h5")
assert "wte.weight" in p and "h.1.mlp.c_fc.weight" in p, sorted(p)
assert p["wte.weight"].shape == (257, 64)  # byte vocab; padded rows trimmed
print(f"loss {loss[0]:.4f} -> {loss[-1]:.4f}")
PY

# --dry-run prints the resolved job and the layout without training.
out=$("$MPITRON" train jobs/tiny.toml --parallel.tp=1 --train.steps=3 --dry-run)
grep -q '^steps = 3$' <<<"$out" || fail "dry-run does not show the override"
grep -q '# layout: world 1' <<<"$out" || fail "dry-run does not show the layout"
# ... and the [env] warnings the run would print (as TOML comments), e.g. a misspelt NCCL variable.
out=$("$MPITRON" train jobs/tiny.toml --env.NCCL_SOCKET_IFNAM=eth0 --dry-run)
grep -qx '# warning: \[env\] NCCL_SOCKET_IFNAM is not an NCCL variable; did you mean NCCL_SOCKET_IFNAME?' <<<"$out" ||
  fail "dry-run does not warn about NCCL_SOCKET_IFNAM: $out"

# Bad input: unknown key (names the allowed ones), bad layout for the world size.
if "$MPITRON" train jobs/tiny.toml --train.stepz=3 >"$tmp/bad.log" 2>&1; then fail "unknown key accepted"; fi
grep -q "unknown job key 'train.stepz'" "$tmp/bad.log" || fail "unknown key message: $(cat "$tmp/bad.log")"
grep -q "train.steps" "$tmp/bad.log" || fail "allowed keys not listed"
if timeout 60 $MPIRUN -np 2 "$MPITRON" train jobs/tiny.toml --data.path="$tmp/data" --parallel.dp=3 \
    >"$tmp/layout.log" 2>&1; then fail "bad layout accepted"; fi
[ "$(grep -c 'error' "$tmp/layout.log")" -ge 1 ] || fail "no error message for a bad layout"
echo "ok"
