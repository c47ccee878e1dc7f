#!/usr/bin/env bash
# Loss masks and document masking in training (data.document_mask, a shard's /loss_mask):
#   - a /loss_mask of all ones (written by h5py, not by mpitron) reproduces the unmasked run's
#     losses bit for bit;
#   - a mask dropping every 4th token of the train shard (by index) trains exactly 3/4 of each
#     step's targets: the log line and metrics' trained_tokens say so;
#   - with a random loss mask and document masking on, dp2 (ZeRO-1), tp2 + sp, pp2 (1F1B) and
#     cp2 (the ring's blocks take the documents) reproduce the single-rank run (the golden rule,
#     compare_runs.py), for GPT-2 and LLaMA (tp2, pp2, cp2): the loss is normalised by the global
#     batch's trained targets in every layout. (On the GPU backend document masking is refused;
#     this machine's processes never reach that check: no GPU is refused first.)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
prep_fortunes "$tmp/data" 120000 fortunes

# Copies of the data with a /loss_mask: all ones, every 4th token masked, random (p 0.7).
/usr/bin/python3 - "$tmp" <<'PY'
import glob, os, shutil, sys
import h5py, numpy as np
tmp = sys.argv[1]
rng = np.random.default_rng(7)
for name, make in (("ones", lambda n, i: np.ones(n, np.uint8)),
                   ("quarter", lambda n, i: (np.arange(n) % 4 != 0).astype(np.uint8)),
                   ("random", lambda n, i: (rng.random(n) < 0.7).astype(np.uint8))):
    shutil.copytree(f"{tmp}/data", f"{tmp}/{name}")
    for i, path in enumerate(sorted(glob.glob(f"{tmp}/{name}/*.h5"))):
        with h5py.File(path, "a") as f:
            f.create_dataset("loss_mask", data=make(f["tokens"].shape[0], i))
PY

common=(--train.steps=6 --train.micro_batch=2 --train.global_batch=8 --model.seq_len=64 --optim.lr=1e-3
        --eval.every=3 --eval.batches=1 --log.every=1 --train.peak_flops=1e11)
run() {  # name job np extra...
  local name=$1 job=$2 np=$3
  shift 3
  timeout -k 5 180 $MPIRUN -np "$np" "$MPITRON" train "jobs/$job.toml" "${common[@]}" --job.run_dir="$tmp/$name" \
    --train.dump_params="$tmp/$name.h5" "$@" >"$tmp/$name.log" 2>&1 || { tail -20 "$tmp/$name.log"; fail "$name run failed"; }
}
golden() {  # ref name job np extra...
  local ref=$1 name=$2
  shift
  run "$@"
  echo -n "    $name: "
  /usr/bin/python3 tests/e2e/compare_runs.py --min-steps 6 "$tmp/$ref" "$tmp/$name" --params "$tmp/$ref.h5" "$tmp/$name.h5" ||
    { tail -20 "$tmp/$name.log"; fail "$name does not reproduce the single-rank run"; }
}

# All ones = no mask, bit for bit (losses, validation losses, parameters).
run plain tiny 1 --data.path="$tmp/data"
run ones tiny 1 --data.path="$tmp/ones"
/usr/bin/python3 tests/e2e/compare_runs.py --min-steps 6 --tol 0 "$tmp/plain" "$tmp/ones" --params "$tmp/plain.h5" "$tmp/ones.h5" >/dev/null ||
  fail "an all-ones loss mask changed the run"
echo "    all-ones /loss_mask: the unmasked run bit for bit"

# Every 4th token masked: 3/4 of the 8 x 64 targets of every step, in the log and the metrics.
run quarter tiny 1 --data.path="$tmp/quarter" --train.steps=2
grep -q "loss [0-9.]* (384 of 512 targets)" "$tmp/quarter.log" || { grep "^step" "$tmp/quarter.log"; fail "no '384 of 512 targets'"; }
/usr/bin/python3 - "$tmp/quarter/metrics.jsonl" <<'PY'
import json, sys
n = [r["trained_tokens"] for r in map(json.loads, open(sys.argv[1])) if "loss" in r]
assert n == [384, 384], n
PY

# The golden rule with a random mask and document masking, GPT-2 and LLaMA.
masked=(--data.path="$tmp/random" --data.document_mask=true)
run ref tiny 1 "${masked[@]}"
grep -q "targets)" "$tmp/ref.log" || fail "the masked run does not log its trained targets"
golden ref dp2_zero1 tiny 2 "${masked[@]}" --parallel.dp=2 --parallel.zero=1
golden ref tp2_sp tiny 2 "${masked[@]}" --parallel.tp=2 --parallel.sp=true
golden ref pp2 tiny 2 "${masked[@]}" --parallel.pp=2 --parallel.schedule=1f1b
golden ref cp2 tiny 2 "${masked[@]}" --parallel.cp=2
run ref_llama llama-tiny 1 "${masked[@]}"
golden ref_llama llama_tp2 llama-tiny 2 "${masked[@]}" --parallel.tp=2
golden ref_llama llama_pp2 llama-tiny 2 "${masked[@]}" --parallel.pp=2
golden ref_llama llama_cp2 llama-tiny 2 "${masked[@]}" --parallel.cp=2
# The mask matters: the same run without document masking trains differently.
run open tiny 1 --data.path="$tmp/random"
! /usr/bin/python3 tests/e2e/compare_runs.py --min-steps 6 "$tmp/ref" "$tmp/open" >/dev/null 2>&1 ||
  fail "document masking changed nothing"
