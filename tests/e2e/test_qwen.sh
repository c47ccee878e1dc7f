#!/usr/bin/env bash
# Qwen2 (LLaMA with q/k/v biases) and Qwen3 (LLaMA with an RMSNorm over each head's q and k before
# RoPE) in, through and out, against references nobody here tuned (the gradients of both against
# PyTorch fp64 are unit/test_gpt_reference's qwen2/qwen3 fixtures):
#   - tests/reference/hf_reference.py writes random Qwen2ForCausalLM / Qwen3ForCausalLM folders (f32;
#     bf16 in two shards; Qwen3 tied): imported, mpitron's log-probs equal the reference's fp64 model
#     within 1e-5 relative; the bf16 shards import bit-exactly (their fp32 export rounds back to
#     them, bit for bit);
#   - export --format hf writes model_type qwen2 / qwen3 and the exported folder gives the
#     reference's log-probs again;
#   - train.init_from = "hf:DIR" follows the single rank (golden rule, compare_runs.py) at tp 2 with
#     sequence parallel, cp 2, pp 2, dp 2 with ZeRO-3 and recompute;
#   - the imports as F32 GGUF (arch qwen2 / qwen3, q and k rows in rotate-half order) under llama.cpp
#     itself (npm node-llama-cpp 3.21.1): log-probs within 1e-5 of mpitron's, greedy choices equal;
#   - a model trained from the job keys (model.qkv_bias, model.qk_norm) exports to HF and gives
#     generate's log-probs under the reference; a checkpoint is refused under the other key;
#   - refusals: a sliding window, q/k/v biases on a head size that is not a multiple of 16, the keys
#     on GPT-2, a GGUF of LLaMA 3.1's scaling on qwen2 (llama.cpp's qwen2 reads no rope_freqs).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
text="Hello there, world! It's 42 o'clock; the end of it all."
prep_fortunes "$tmp/data" 40000 fortunes

logprobs_of() {  # CKPT OUT.json
  "$MPITRON" generate "$1" --prompt "$text" --max-tokens 0 --logprobs-out "$2" >/dev/null 2>&1 || fail "generate $1"
}

echo "== imports against the fp64 reference"
declare -A opts=([qwen2]="qwen2 --heads 2" [qwen2_bf16]="qwen2 --heads 2 --bf16 --shards 2" [qwen3]="qwen3"
                 [qwen3_tied]="qwen3 --tied --bf16 --shards 2")
for m in qwen2 qwen2_bf16 qwen3 qwen3_tied; do
  # shellcheck disable=SC2086
  $PY tests/reference/hf_reference.py write-random "$tmp/$m" ${opts[$m]} >/dev/null
  "$MPITRON" import "hf:$tmp/$m" --out "$tmp/$m.h5" 2>"$tmp/import.log" || { cat "$tmp/import.log"; fail "$m: import"; }
  grep -q "Qwen${m:4:1}," "$tmp/import.log" || fail "$m: import does not name the family: $(cat "$tmp/import.log")"
  logprobs_of "$tmp/$m.h5" "$tmp/$m.json"
  echo -n "$m imported: "
  $PY tests/reference/hf_reference.py logprobs "$tmp/$m" "$tmp/$m.json" || fail "$m: log-probs differ"
  "$MPITRON" export "$tmp/$m.h5" --format hf --out "$tmp/$m.out" --quiet 2>/dev/null || fail "$m: export hf"
  want=${m%%_*}
  $PY -c 'import json, sys; c = json.load(open(sys.argv[1])); assert c["model_type"] == sys.argv[2], c["model_type"]' \
    "$tmp/$m.out/config.json" "$want" || fail "$m: exported model_type"
  echo -n "$m exported: "
  $PY tests/reference/hf_reference.py logprobs "$tmp/$m.out" "$tmp/$m.json" || fail "$m: exported log-probs differ"
done
for m in qwen2_bf16 qwen3_tied; do  # bf16 in: the fp32 export rounds back to the source bit for bit
  echo -n "$m bit-exact: "
  $PY tests/reference/hf_reference.py rounded "$tmp/$m.out" "$tmp/$m" || fail "$m: not imported bit-exactly"
done

echo "== init_from hf: every layout follows the single rank"
train() {  # name np extra...
  local name=$1 np=$2
  shift 2
  timeout -k 5 120 $MPIRUN -np "$np" "$MPITRON" train jobs/llama-tiny.toml --data.path="$tmp/data" --train.steps=3 \
    --train.micro_batch=2 --train.global_batch=4 --eval.batches=0 --log.every=1 --train.peak_flops=1e11 \
    --job.run_dir="$tmp/$name" "$@" >"$tmp/$name.log" 2>&1 </dev/null || { cat "$tmp/$name.log"; fail "$name: training failed"; }
}
layouts=("tp2_sp:--parallel.tp=2 --parallel.sp=true" "cp2:--parallel.cp=2"
         "pp2:--parallel.pp=2 --train.micro_batch=1" "zero3_recompute:--parallel.zero=3 --train.recompute=full")
for m in qwen2 qwen3; do
  train "${m}_1" 1 --train.init_from="hf:$tmp/$m"
  for l in "${layouts[@]}"; do
    name=${l%%:*}
    # shellcheck disable=SC2086
    train "${m}_$name" 2 --train.init_from="hf:$tmp/$m" ${l#*:}
    echo -n "$m $name: "
    $PY tests/e2e/compare_runs.py --min-steps 3 "$tmp/${m}_1" "$tmp/${m}_$name" || fail "$m: $name does not follow"
  done
done

echo "== GGUF under llama.cpp (the imports above)"
mods=$(llama_cpp_modules)
for m in qwen2 qwen3; do
  "$MPITRON" export "$tmp/$m.h5" --format gguf --out "$tmp/$m.gguf" >"$tmp/export.log" 2>&1 ||
    { cat "$tmp/export.log"; fail "$m: export gguf"; }
  NODE_PATH="$mods" timeout -k 5 120 node tests/reference/llama_cpp_check.mjs logprobs "$tmp/$m.gguf" \
    "$tmp/$m.json" "$text" >"$tmp/res.json" 2>"$tmp/node.log" || { cat "$tmp/node.log"; fail "$m: llama.cpp"; }
  $PY - "$tmp/res.json" "$m" "$tmp/$m.gguf" <<'PY'
import json, sys
r, name, path = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
print(f"{name} GGUF f32: {r['positions']} positions x {r['vocab']} log-probs, max |llama.cpp - mpitron| = "
      f"{r['max_abs_logprob_diff']:.2e} (bound 1e-05); greedy agrees at {r['greedy_checked'] - r['greedy_disagree']}"
      f"/{r['greedy_checked']} clear positions")
assert r["max_abs_logprob_diff"] <= 1e-5 and r["greedy_checked"] > 0 and r["greedy_disagree"] == 0
assert (name + ".attention.head_count").encode() in open(path, "rb").read(), "general.architecture"
PY
done

echo "== the job keys: trained, exported, resumed"
train keys_qwen2 1 --model.qkv_bias=true --train.steps=2
train keys_qwen3 1 --model.qk_norm=true --model.tie_embeddings=true --train.steps=2
for m in qwen2 qwen3; do
  grep -q "Qwen${m:4:1} = llama + q/k" "$tmp/keys_$m.log" || fail "keys_$m: the model line does not name Qwen${m:4:1}"
  logprobs_of "$tmp/keys_$m" "$tmp/keys_$m.json"
  "$MPITRON" export "$tmp/keys_$m" --format hf --out "$tmp/keys_$m.hf" --quiet 2>/dev/null || fail "keys_$m: export"
  echo -n "keys_$m as HF: "
  $PY tests/reference/hf_reference.py logprobs "$tmp/keys_$m.hf" "$tmp/keys_$m.json" || fail "keys_$m: as HF"
done
expect "model.qk_norm = 0 there, 1 in this job" -- $MPIRUN -np 1 "$MPITRON" train jobs/llama-tiny.toml \
  --data.path="$tmp/data" --train.steps=3 --job.run_dir="$tmp/keys_qwen2" --model.qkv_bias=true --model.qk_norm=true

echo "== refusals"
one_step=(--data.path="$tmp/data" --train.steps=1 --eval.batches=0 --job.run_dir="$tmp/none")
expect "model.qkv_bias applies to LLaMA models only" -- "$MPITRON" train jobs/tiny.toml "${one_step[@]}" \
  --model.qkv_bias=true
expect "model.qkv_bias = true needs a head size (d_model / n_head = 8) that is a multiple of 16" -- \
  "$MPITRON" train jobs/llama-tiny.toml "${one_step[@]}" --model.qkv_bias=true --model.n_head=8 --model.n_kv_head=2
expect "a qwen2 with head size 8" -- "$MPITRON" import "hf:$(
  $PY tests/reference/hf_reference.py write-random "$tmp/narrow" qwen2 >/dev/null; echo "$tmp/narrow")" --out "$tmp/narrow.h5"
rm -rf "$tmp/window" && cp -r "$tmp/qwen2" "$tmp/window"
$PY -c 'import json, sys; c = json.load(open(sys.argv[1])); c["use_sliding_window"] = True; json.dump(c, open(sys.argv[1], "w"))' \
  "$tmp/window/config.json"
expect "use_sliding_window true is not supported" -- "$MPITRON" import "hf:$tmp/window" --out "$tmp/window.h5"
train scaled 1 --model.qkv_bias=true --model.rope_scaling=llama3 --model.rope_factor=8 --model.rope_original_max_pos=32 \
  --train.steps=1
expect "llama.cpp's qwen2 architecture reads no rope_freqs tensor" -- "$MPITRON" export "$tmp/scaled" --format gguf \
  --out "$tmp/scaled.gguf"
[ ! -e "$tmp/scaled.gguf" ] || fail "a refused GGUF export left its file"
echo "test_qwen: ok"
