#!/usr/bin/env bash
# sanitizers: skip (dataset blending: the loader runs sanitized in mpi/test_sampler_mpi and e2e/test_train)
# Dataset blends (data.paths): two corpora (the fortunes and the computers
# fortune files, byte tokenizer) at 0.7 / 0.3.
#   - the golden rule with a blend: dp 2 and dp 2 ZeRO-1 reproduce the single-rank run (losses,
#     grad norms, val losses and every parameter within 1e-5, compare_runs.py);
#   - Megatron's flat form [0.7, "a", 0.3, "b"] is the same blend (bit-identical losses);
#   - resume: a run stopped at step 4 continues with steps 5-8 bit-identical (the blend position
#     is the sampler state);
#   - the log's data line shows the realised mix; a corpus with another tokenizer, a missing
#     folder and bad values are clear errors.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
here=$(dirname "$0")
prep_fortunes "$tmp/web" 200000 fortunes
prep_fortunes "$tmp/code" 200000 computers
blend="[{ path = \"$tmp/web\", weight = 0.7 }, { path = \"$tmp/code\", weight = 0.3 }]"
common=(--train.steps=8 --train.micro_batch=2 --train.global_batch=8 --eval.every=4 --eval.batches=1 --log.every=1
        --model.seq_len=32 --checkpoint.every=4 --checkpoint.keep=0)
run() {  # name np extra...
  local name=$1 np=$2
  shift 2
  timeout 180 $MPIRUN -np "$np" "$MPITRON" train jobs/tiny.toml "${common[@]}" --job.run_dir="$tmp/$name" "$@" \
    >"$tmp/$name.log" 2>&1 || { tail -20 "$tmp/$name.log"; fail "$name"; }
}
run np1 1 --data.paths="$blend" --train.dump_params="$tmp/np1.h5"
grep -q "^data blend of 2 corpora" "$tmp/np1.log" || { grep "^data" "$tmp/np1.log"; fail "no blend data line"; }
grep -o "weight 0.700 -> 0.70[0-9]\|weight 0.300 -> 0.30[0-9]" "$tmp/np1.log" | sort -u | wc -l | grep -q 2 ||
  { grep "^data" "$tmp/np1.log"; fail "the realised mix is not 0.7 / 0.3"; }
echo "    $(grep '^data blend' "$tmp/np1.log" | sed "s|$tmp/||g")"
run dp2 2 --data.paths="$blend" --parallel.dp=2 --train.dump_params="$tmp/dp2.h5"
run dp2_zero1 2 --data.paths="$blend" --parallel.dp=2 --parallel.zero=1 --train.dump_params="$tmp/dp2_zero1.h5"
for r in dp2 dp2_zero1; do
  /usr/bin/python3 "$here/compare_runs.py" "$tmp/np1" "$tmp/$r" --params "$tmp/np1.h5" "$tmp/$r.h5" --min-steps 8 --tol 1e-5 ||
    fail "$r with a blend differs from the single-rank run"
done
run flat 1 --data.paths="[0.7, \"$tmp/web\", 0.3, \"$tmp/code\"]"
run resumed 1 --data.paths="$blend" --train.resume="$tmp/np1/ckpt/step_00000004.h5"
run only_web 1 --data.path="$tmp/web"
/usr/bin/python3 - "$tmp" <<'PY'
import json, sys
t = sys.argv[1]
def losses(n): return {r["step"]: r["loss"] for r in map(json.loads, open(f"{t}/{n}/metrics.jsonl")) if "loss" in r}
ref = losses("np1")
assert losses("flat") == ref, "the flat form is not the same blend"
res = losses("resumed")
assert all(res[s] == ref[s] for s in range(5, 9)), f"resumed steps 5-8 differ: {res} vs {ref}"
assert losses("only_web") != ref, "the blend trained like one corpus"
print("ok    flat form identical; resume at step 4: steps 5-8 bit-identical; the blend differs from one corpus")
PY
expect_fail() {  # pattern extra...
  local pattern=$1
  shift
  if timeout 60 "$MPITRON" train jobs/tiny.toml "${common[@]}" --job.run_dir="$tmp/bad" "$@" >"$tmp/bad.log" 2>&1; then
    fail "accepted: $*"
  fi
  grep -q -- "$pattern" "$tmp/bad.log" || { cat "$tmp/bad.log"; fail "no '$pattern' for: $*"; }
}
mkdir -p "$tmp/bytes_bpe"
printf 'some text for a tokenizer to learn from, some text, some text\n' >"$tmp/tok.txt"
"$MPITRON" tokenizer train --input "$tmp/tok.txt" --vocab 300 --out "$tmp/tok.json" >/dev/null
"$MPITRON" prep --input /usr/share/games/fortunes/computers --tokenizer "$tmp/tok.json" --out "$tmp/other" \
  --doc-separator % --quiet >/dev/null
expect_fail "were made with different tokenizers" --data.paths="[0.5, \"$tmp/web\", 0.5, \"$tmp/other\"]"
expect_fail "no train_\*.h5\|no shards\|$tmp/nowhere" --data.paths="[0.5, \"$tmp/web\", 0.5, \"$tmp/nowhere\"]"
expect_fail "weight 0 of" --data.paths="[0, \"$tmp/web\"]"
echo "ok    different tokenizers, a missing corpus and a zero weight are refused"
echo ok
