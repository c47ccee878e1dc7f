#!/usr/bin/env bash
# sanitizers: skip (a layout sweep, LLaMA: its block runs sanitized in the unit tests and e2e/test_document_mask; every layout against the single rank runs in the release build)
# LLaMA in every layout, the golden rule: losses, grad norms and lr at every
# step and every parameter within 1e-5 of the single-rank run (tests/e2e/compare_runs.py), for
# llama-tiny with 4 layers (4 query heads on 2 kv heads, SwiGLU, untied head): dp2 with ZeRO 0-3,
# tp2 (query and kv heads split), tp2 + sp, pp2 with gpipe / 1f1b / interleaved, full recompute,
# and dp2 x tp2 x pp2 with ZeRO-1 at np=8, whose checkpoint resumes at np=1 and under tp2 + sp.
# Generation with the KV cache matches the full recompute.
# Errors: kv heads not divisible by tp; a GPT-2-only key on a llama model and the reverse.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
prep_fortunes "$tmp/data" 200000 fortunes computers

# lr 1e-3: see test_3d.sh (Adam turns summation-order differences into lr-sized parameter noise).
common=(--data.path="$tmp/data" --train.steps=8 --model.n_layer=4 --train.micro_batch=2 --train.global_batch=8
        --optim.lr=1e-3 --eval.every=4 --eval.batches=1 --log.every=1 --train.peak_flops=1e11)
run() {  # name np extra...
  local name=$1 np=$2
  shift 2
  timeout -k 5 300 $MPIRUN -np "$np" "$MPITRON" train jobs/llama-tiny.toml "${common[@]}" --job.run_dir="$tmp/$name" \
    --train.dump_params="$tmp/$name.h5" "$@" >"$tmp/$name.log" 2>&1 || { cat "$tmp/$name.log"; fail "$name run failed"; }
}
golden() {  # name np extra...
  local name=$1
  run "$@"
  echo -n "$name: "
  local ref=${REF:-ref}
  /usr/bin/python3 tests/e2e/compare_runs.py --min-steps 8 "$tmp/$ref" "$tmp/$name" --params "$tmp/$ref.h5" "$tmp/$name.h5" ||
    { cat "$tmp/$name.log"; fail "$name does not reproduce the single-rank run"; }
}
run ref 1
grep -q "model llama-tiny+custom" "$tmp/ref.log" || grep -q "llama" "$tmp/ref.log" || fail "not a llama run: $(head "$tmp/ref.log")"
for z in 0 1 2 3; do golden "dp2_zero$z" 2 --parallel.dp=2 --parallel.zero=$z; done
# Buckets smaller than any tensor: q|k|v and gate|up must still share one (their GEMMs are fused).
golden dp2_zero2_tiny_buckets 2 --parallel.dp=2 --parallel.zero=2 --parallel.bucket_mb=0.001
golden tp2 2 --parallel.tp=2
golden tp2_sp 2 --parallel.tp=2 --parallel.sp=true
for s in gpipe 1f1b; do golden "pp2_$s" 2 --parallel.pp=2 --parallel.schedule=$s; done
golden pp2_interleaved 2 --parallel.pp=2 --parallel.schedule=interleaved --parallel.virtual_stages=2
golden recompute 1 --train.recompute=full
# A tied head (tie_embeddings = true): the last stage's copy of embed_tokens and the embedding group.
run ref_tied 1 --model.tie_embeddings=true
REF=ref_tied golden pp2_tied_zero1 4 --parallel.pp=2 --parallel.dp=2 --parallel.zero=1 --model.tie_embeddings=true
golden 3d 8 --parallel.dp=2 --parallel.tp=2 --parallel.pp=2 --parallel.zero=1 --checkpoint.every=4
grep -q "layout world 8 = dp 2 x tp 2 x pp 2" "$tmp/3d.log" || fail "not the 3D layout"

# The 3D run's step-4 checkpoint resumes at np=1 and under tp2 + sp; steps 5-8 match the 3D run.
ckpt="$tmp/3d/ckpt/step_00000004.h5"
/usr/bin/python3 - "$ckpt" <<'PY'
import sys, h5py
c = h5py.File(sys.argv[1])["config"].attrs
assert c["arch"] in (b"llama", "llama") and c["rope_pairing"] in (b"interleaved", "interleaved"), dict(c)
assert c["rope_theta"] == 10000.0 and abs(c["norm_eps"] - 1e-5) < 1e-12, dict(c)
PY
for layout in "1:" "2:--parallel.tp=2 --parallel.sp=true"; do
  np=${layout%%:*}
  # shellcheck disable=SC2086
  run "resume$np" "$np" ${layout#*:} --train.resume="$ckpt"
  grep -q "resumed from $ckpt" "$tmp/resume$np.log" || fail "np=$np did not resume"
  /usr/bin/python3 - "$tmp/3d" "$tmp/resume$np" "$np" <<'PY'
import json, sys
def steps(d):
    return {r["step"]: (r["loss"], r["grad_norm"], r["lr"]) for r in map(json.loads, open(f"{d}/metrics.jsonl")) if "loss" in r}
full, res = steps(sys.argv[1]), steps(sys.argv[2])
assert sorted(res) == [5, 6, 7, 8], sorted(res)
worst = max(abs(a - b) / abs(a) for s in res for a, b in zip(full[s], res[s]))
assert worst < 1e-5, f"resume at np={sys.argv[3]} differs: {worst:.3g}"
print(f"resume of the 3D llama checkpoint at np={sys.argv[3]}: steps 5-8 max rel diff {worst:.2e}")
PY
done

# Generation: the KV cache gives the same text as recomputing the context for every token, past
# the 64-token context too (it restarts from the latest 32 tokens), sampled and greedy.
for opts in "--seed 5" "--temperature 0"; do
  # shellcheck disable=SC2086
  a=$("$MPITRON" generate "$tmp/ref" --prompt "The cat " --max-tokens 150 $opts 2>/dev/null)
  # shellcheck disable=SC2086
  b=$("$MPITRON" generate "$tmp/ref" --prompt "The cat " --max-tokens 150 $opts --no-kv-cache 2>/dev/null)
  [ "$a" = "$b" ] || fail "generate $opts: KV cache '$a' vs no cache '$b'"
done
[ ${#a} -gt 100 ] || fail "greedy generation stopped early: '$a'"  # (sampling may draw end-of-text)
echo "generate (llama, KV cache = no cache, 150 tokens): ${a:0:60}..."

# Clear errors, before any training.
expect_error() {  # pattern np extra...
  local pat=$1 np=$2
  shift 2
  if timeout -k 5 60 $MPIRUN -np "$np" "$MPITRON" train jobs/llama-tiny.toml "${common[@]}" --job.run_dir="$tmp/err" "$@" \
      >"$tmp/err.log" 2>&1; then
    fail "expected an error ($pat) for: $*"
  fi
  grep -q -- "$pat" "$tmp/err.log" || { cat "$tmp/err.log"; fail "error for '$*' does not say '$pat'"; }
}
expect_error "must divide the query heads (4), the key/value heads (2)" 4 --parallel.tp=4
expect_error "model.n_kv_head (3) must divide model.n_head (4)" 1 --model.n_kv_head=3
if "$MPITRON" train jobs/tiny.toml --model.rope_theta=500000 --job.run_dir="$tmp/err2" >"$tmp/err2.log" 2>&1; then
  fail "rope_theta on a GPT-2 model was accepted"
fi
grep -q "model.rope_theta applies to LLaMA models only" "$tmp/err2.log" || fail "rope_theta on GPT-2: $(cat "$tmp/err2.log")"
echo "ok"
