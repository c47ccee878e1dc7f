#!/usr/bin/env bash
# sanitizers: skip (import runs sanitized in the safetensors and hf_config fuzzers and e2e/test_export_hf's round trip)
# Hugging Face folders in: `mpitron import hf:DIR` and `train.init_from`.
#   - Round trips are exact: fp32 export -> import gives bit-identical parameters (h5py), the same
#     model config and tokenizer; bf16 export -> import equals the parameters rounded to bf16 (GPT-2,
#     LLaMA, and a MoE through Mixtral's layout).
#   - A run started from the HF folder (init_from = hf:DIR) repeats, bit for bit, the run started
#     from the original checkpoint's parameters (init_from = FILE), at np 1 and at tp 2; and the
#     HF start under tp 2, pp 2, dp 2 + ZeRO-3 (LLaMA), tp 2 (GPT-2) and ep 2 (Mixtral) follows the single-rank
#     HF start within the golden rule's 1e-5 (tests/e2e/compare_runs.py).
#   - tests/reference/hf_reference.py writes random models with its own safetensors writer (GPT-2
#     in bf16 named as the Hub's gpt2, LLaMA with GQA in 3 shards, Mixtral in 2): imported, mpitron's log-probs
#     equal the reference's fp64 HF-convention model within 1e-5.
#   - jobs/llama-continue.toml runs (tp 2, the model from config.json); so does jobs/llama-sft.toml
#     on chat data prepped with the folder's tokenizer, packed, and generate --chat answers after it.
#   - Bad folders and disagreeing jobs are clear errors naming the file, tensor or key.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
prep_fortunes "$tmp/data" 60000 fortunes
common=(--data.path="$tmp/data" --eval.batches=0 --log.every=1 --optim.lr=1e-3 --train.peak_flops=1e11
        --train.micro_batch=2 --train.global_batch=8)
train() {  # name np job extra...
  local name=$1 np=$2 job=$3
  shift 3
  timeout -k 5 180 $MPIRUN -np "$np" "$MPITRON" train "$job" "${common[@]}" --job.run_dir="$tmp/$name" "$@" \
    >"$tmp/$name.log" 2>&1 || { cat "$tmp/$name.log"; fail "$name: training failed"; }
}
same_params() {  # A.h5 B.h5 [bf16]
  $PY - "$@" <<'PY'
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1]), h5py.File(sys.argv[2])
bf16 = len(sys.argv) > 3
assert set(a["model"]) == set(b["model"]), (set(a["model"]) ^ set(b["model"]))
for n in a["model"]:
    x, y = a["model"][n][()].astype(np.float32), b["model"][n][()]
    if bf16:
        u = x.view(np.uint32).astype(np.uint64)
        x = (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)
    assert x.shape == y.shape and np.array_equal(x.view(np.uint32), y.view(np.uint32)), f"{n} differs"
print(f"{len(a['model'])} tensors {'equal the bf16 rounding' if bf16 else 'bit-identical'}")
PY
}
ckpt_of() { readlink -f "$tmp/$1/ckpt/latest"; }

echo "== round trips"
train llama 1 jobs/llama-tiny.toml --train.steps=3
train gpt2 1 jobs/tiny.toml --train.steps=3
train moe 1 jobs/moe-tiny.toml --train.steps=3
for m in llama gpt2 moe; do
  "$MPITRON" export "$tmp/$m" --format hf --out "$tmp/$m.hf" --quiet 2>/dev/null
  "$MPITRON" import "hf:$tmp/$m.hf" --out "$tmp/$m.imported.h5" 2>"$tmp/import.log" ||
    { cat "$tmp/import.log"; fail "$m: import failed"; }
  echo -n "$m fp32 export -> import: "
  same_params "$(ckpt_of $m)" "$tmp/$m.imported.h5"
  "$MPITRON" export "$tmp/$m" --format hf --out "$tmp/$m.bf16" --dtype bf16 --quiet 2>/dev/null
  "$MPITRON" import "hf:$tmp/$m.bf16" --out "$tmp/$m.bf16.h5" 2>/dev/null
  echo -n "$m bf16 export -> import: "
  same_params "$(ckpt_of $m)" "$tmp/$m.bf16.h5" bf16
  $PY - "$(ckpt_of $m)" "$tmp/$m.imported.h5" <<'PY'
import json, sys, h5py
a, b = (h5py.File(p) for p in sys.argv[1:])
ca, cb = a["config"].attrs, b["config"].attrs
assert set(ca) == set(cb), set(ca) ^ set(cb)
# The name is the preset's there, "hf" here; a MoE model's dense d_ff is unused (every block is
# MoE) and not in Mixtral's config.json (intermediate_size is the experts' width).
for k in set(ca) - {"name"} - ({"d_ff"} if "moe_n_experts" in ca else set()):
    assert ca[k] == cb[k], (k, ca[k], cb[k])
ta, tb = (json.loads(f["tokenizer_json"][()]) for f in (a, b))
assert ta["vocab_size"] == tb["vocab_size"] and ta["eot"] == tb["eot"], (ta, tb)
PY
done

echo "== init_from: the HF folder starts the same run as the checkpoint it came from"
exact() {  # A B
  $PY tests/e2e/compare_runs.py --min-steps 4 --tol 0 "$tmp/$1" "$tmp/$2" >/dev/null || fail "$2 is not $1 bit for bit"
  echo "$2 = $1 bit for bit"
}
train from_ckpt 1 jobs/llama-tiny.toml --train.steps=4 --train.init_from="$(ckpt_of llama)"
train from_hf 1 jobs/llama-tiny.toml --train.steps=4 --train.init_from="hf:$tmp/llama.hf"
grep -q "initialized from hf:" "$tmp/from_hf.log" || fail "no 'initialized from' line"
exact from_ckpt from_hf
train from_ckpt_tp2 2 jobs/llama-tiny.toml --train.steps=4 --train.init_from="$(ckpt_of llama)" --parallel.tp=2
train from_hf_tp2 2 jobs/llama-tiny.toml --train.steps=4 --train.init_from="hf:$tmp/llama.hf" --parallel.tp=2
exact from_ckpt_tp2 from_hf_tp2
golden() {  # ref name np job extra...
  local ref=$1 name=$2
  shift 2
  train "$name" "$@" --train.steps=4
  echo -n "$name: "
  $PY tests/e2e/compare_runs.py --min-steps 4 "$tmp/$ref" "$tmp/$name" || fail "$name does not follow $ref"
}
golden from_hf hf_pp2 2 jobs/llama-tiny.toml --train.init_from="hf:$tmp/llama.hf" --parallel.pp=2
golden from_hf hf_zero3 2 jobs/llama-tiny.toml --train.init_from="hf:$tmp/llama.hf" --parallel.dp=2 --parallel.zero=3
train gpt2_from_hf 1 jobs/tiny.toml --train.steps=4 --train.init_from="hf:$tmp/gpt2.hf"
train moe_from_hf 1 jobs/moe-tiny.toml --train.steps=4 --train.init_from="hf:$tmp/moe.hf"
golden moe_from_hf moe_hf_ep2 2 jobs/moe-tiny.toml --train.init_from="hf:$tmp/moe.hf" --parallel.ep=2
golden gpt2_from_hf gpt2_hf_tp2 2 jobs/tiny.toml --train.init_from="hf:$tmp/gpt2.hf" --parallel.tp=2

echo "== models written by the reference's own writer"
$PY tests/reference/hf_reference.py write-random "$tmp/ref_gpt2" gpt2 --bf16
$PY tests/reference/hf_reference.py write-random "$tmp/ref_llama" llama --shards 3
$PY tests/reference/hf_reference.py write-random "$tmp/ref_mixtral" mixtral --shards 2
text="Hello there, world! It's 42 o'clock; the end of it all."
for m in ref_gpt2 ref_llama ref_mixtral; do
  "$MPITRON" import "hf:$tmp/$m" --out "$tmp/$m.h5" 2>"$tmp/import.log" || { cat "$tmp/import.log"; fail "$m: import"; }
  "$MPITRON" generate "$tmp/$m.h5" --prompt "$text" --max-tokens 0 --logprobs-out "$tmp/$m.json" >/dev/null 2>&1
  echo -n "$m imported: "
  $PY tests/reference/hf_reference.py logprobs "$tmp/$m" "$tmp/$m.json" --hub-names || fail "$m: log-probs differ"
done

echo "== jobs/llama-continue.toml (tp 2, the model from config.json)"
train continue 2 jobs/llama-continue.toml --train.init_from="hf:$tmp/ref_llama" --train.steps=2 \
  --data.path="$tmp/data" --job.run_dir="$tmp/continue" --checkpoint.every=0
grep -q "initialized from hf:$tmp/ref_llama" "$tmp/continue.log" || fail "llama-continue did not start from the folder"
grep -q "layout world 2 = dp 1 x tp 2" "$tmp/continue.log" || fail "llama-continue is not tp 2: $(grep layout "$tmp/continue.log")"

echo "== jobs/llama-sft.toml (tp 2, chat data with the folder's tokenizer, packed, assistant-only loss)"
/usr/bin/python3 -c "
import json
for i in range(60):
    print(json.dumps({'messages': [{'role': 'system', 'content': 'Be brief.'}, {'role': 'user', 'content': f'What is {i} + {i}?'},
                                   {'role': 'assistant', 'content': f'{i} + {i} = {2 * i}.'}]}))" >"$tmp/chats.jsonl"
seq=$(/usr/bin/python3 -c "import json; print(json.load(open('$tmp/ref_llama/config.json'))['max_position_embeddings'])")
"$MPITRON" prep --input "$tmp/chats.jsonl" --format chat --chat-template chatml --tokenizer "hf:$tmp/ref_llama" \
  --pack "$seq" --out "$tmp/sft" --val-fraction 0 --quiet >"$tmp/sft-prep.log"
grep -q "tokens trained" "$tmp/sft-prep.log" || fail "chat prep: $(cat "$tmp/sft-prep.log")"
train sft 2 jobs/llama-sft.toml --train.init_from="hf:$tmp/ref_llama" --train.steps=2 --data.path="$tmp/sft" \
  --job.run_dir="$tmp/sft" --checkpoint.every=0 --train.global_batch=4 --train.micro_batch=2
grep -q "initialized from hf:$tmp/ref_llama" "$tmp/sft.log" || fail "llama-sft did not start from the folder"
grep -q "layout world 2 = dp 1 x tp 2" "$tmp/sft.log" || fail "llama-sft is not tp 2"
grep -q "targets)" "$tmp/sft.log" || fail "llama-sft does not train on the assistant replies only: $(grep '^step' "$tmp/sft.log")"
"$MPITRON" generate "$tmp/sft" --chat chatml --prompt "What is 2 + 2?" --max-tokens 4 >"$tmp/sft-gen.log" 2>&1 ||
  { cat "$tmp/sft-gen.log"; fail "generate --chat on the fine-tuned model"; }
grep -q "<|im_start|>user" "$tmp/sft-gen.log" || fail "generate --chat did not render the prompt: $(cat "$tmp/sft-gen.log")"

echo "== errors"
bad() { rm -rf "$tmp/bad" && cp -r "$tmp/llama.hf" "$tmp/bad"; }
bad && truncate -s 100 "$tmp/bad/model.safetensors"
expect "model.safetensors" "runs past the end" -- "$MPITRON" import "hf:$tmp/bad" --out "$tmp/x.h5"
bad && $PY - "$tmp/bad/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["num_hidden_layers"] = 3; json.dump(c, open(sys.argv[1], "w"))
PY
expect "tensors missing: model.layers.2." -- "$MPITRON" import "hf:$tmp/bad" --out "$tmp/x.h5"
bad && $PY - "$tmp/bad/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["intermediate_size"] = 64; json.dump(c, open(sys.argv[1], "w"))
PY
expect "tensor 'model.layers.0.mlp.gate_proj.weight' is [192, 64], config.json's model needs [64, 64]" -- \
  "$MPITRON" import "hf:$tmp/bad" --out "$tmp/x.h5"
bad && $PY - "$tmp/bad/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["model_type"] = "mistral"; json.dump(c, open(sys.argv[1], "w"))
PY
expect "model_type 'mistral' is not supported (allowed: gpt2, llama, mixtral, qwen2, qwen3, qwen3_moe)" -- "$MPITRON" import "hf:$tmp/bad" --out "$tmp/x.h5"
rm -rf "$tmp/bad" && cp -r "$tmp/ref_llama" "$tmp/bad" && rm "$tmp/bad/model-00002-of-00003.safetensors"
expect "model.safetensors.index.json: names 'model-00002-of-00003.safetensors'" "which is not in the folder" -- \
  "$MPITRON" import "hf:$tmp/bad" --out "$tmp/x.h5"
expect "the job's [model] keys disagree" "model.n_layer = 4 (config.json: 2)" "model.d_model = 128 (config.json: 64)" -- \
  "$MPITRON" train jobs/llama-tiny.toml "${common[@]}" --job.run_dir="$tmp/x" --train.init_from="hf:$tmp/llama.hf" \
  --model.n_layer=4 --model.d_model=128
# Values compared as the model holds them: the job's norm_eps equal to config.json's agrees, though
# the model keeps it as float (1e-06 is not exactly representable).
for eps in 1e-05 1e-06; do
  rm -rf "$tmp/eps.hf" && cp -r "$tmp/llama.hf" "$tmp/eps.hf"
  $PY - "$tmp/eps.hf/config.json" "$eps" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["rms_norm_eps"] = float(sys.argv[2]); c["rope_theta"] = 500000.0
open(sys.argv[1], "w").write(json.dumps(c))
PY
  "$MPITRON" train jobs/llama-tiny.toml "${common[@]}" --job.run_dir="$tmp/eps$eps" --train.init_from="hf:$tmp/eps.hf" \
    --model.norm_eps="$eps" --model.rope_theta=500000.0 --train.steps=1 --checkpoint.every=0 >"$tmp/eps.log" 2>&1 ||
    { cat "$tmp/eps.log"; fail "norm_eps $eps equal to config.json's was refused"; }
done
expect "model.norm_eps = 2e-06 (config.json: 1e-06)" -- "$MPITRON" train jobs/llama-tiny.toml "${common[@]}" \
  --job.run_dir="$tmp/eps2" --train.init_from="hf:$tmp/eps.hf" --model.norm_eps=2e-6 --train.steps=1
rm -rf "$tmp/bad" && cp -r "$tmp/moe.hf" "$tmp/bad" && $PY - "$tmp/bad/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["num_experts_per_tok"] = 5; json.dump(c, open(sys.argv[1], "w"))
PY
expect 'config.json: "num_experts_per_tok": '"'5'"' is not allowed (allowed: an integer, 1 <= v <= 4)' -- "$MPITRON" import "hf:$tmp/bad" --out "$tmp/x.h5"
expect "the job's [model] keys disagree" "model.moe.n_experts = 8 (config.json: 4)" -- \
  "$MPITRON" train jobs/moe-tiny.toml "${common[@]}" --job.run_dir="$tmp/x" --train.init_from="hf:$tmp/moe.hf" \
  --model.moe.n_experts=8
expect "import: unknown source 'gguf:x' (allowed: hf:DIR)" -- "$MPITRON" import gguf:x --out "$tmp/x.h5"
[ ! -e "$tmp/x.h5" ] || fail "a failed import left $tmp/x.h5"

echo "== the doors: malformed inputs refused by name, nothing written, no input changed"
# Each case: a non-zero exit, the words naming the file, key or tensor, no output, and the input
# (a folder or file) byte for byte as before.
tree_sum() { find "$@" -type f -print0 2>/dev/null | sort -z | xargs -0 md5sum 2>/dev/null | md5sum; }
ncase=0
door() {  # input out words... -- command...
  local input=$1 out=$2 before
  shift 2
  before=$(tree_sum "$input")
  expect "$@"
  [ ! -e "$out" ] || fail "a refused command left $out: $*"
  [ "$(tree_sum "$input")" = "$before" ] || fail "a refused command changed its input $input: $*"
  if ls -a "$(dirname "$out")" | grep -q '\.tmp$'; then fail "a refused command left a .tmp beside $out"; fi
  ncase=$((ncase + 1))
}
cfg_case() {  # SRC KEY JSON-VALUE (null: remove) words...: config.json of a copy of SRC with KEY set
  local src=$1 key=$2 value=$3
  shift 3
  rm -rf "$tmp/bad" && cp -r "$tmp/$src" "$tmp/bad"
  $PY - "$tmp/bad/config.json" "$key" "$value" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
v = json.loads(sys.argv[3])
if v is None: c.pop(sys.argv[2], None)
else: c[sys.argv[2]] = v
open(sys.argv[1], "w").write(json.dumps(c))
PY
  door "$tmp/bad" "$tmp/x.h5" "$tmp/bad/config.json" "$@" -- "$MPITRON" import "hf:$tmp/bad" --out "$tmp/x.h5"
}
# config.json numbers by kind and range, and the model they describe.
while IFS='|' read -r src key value words; do
  [ -n "$src" ] || continue
  cfg_case "$src" "$key" "$value" "$words"
done <<'CORPUS'
llama.hf|num_hidden_layers|2.5|"num_hidden_layers": '2.5' is not allowed (allowed: an integer, >= 1)
llama.hf|num_hidden_layers|4294967298|"num_hidden_layers": '4294967298' is not allowed (allowed: an integer, 1 <= v <= 2147483647)
llama.hf|num_hidden_layers|-1|"num_hidden_layers": '-1' is not allowed
llama.hf|num_hidden_layers|"2"|"num_hidden_layers": '"2"' is not allowed
llama.hf|hidden_size|1e400|not JSON
llama.hf|rope_theta|-10000.0|"rope_theta": '-10000.0' is not allowed (allowed: finite, > 1)
llama.hf|rope_theta|0.5|"rope_theta": '0.5' is not allowed
llama.hf|rms_norm_eps|-1e-05|"rms_norm_eps": '-1e-05' is not allowed (allowed: 1e-30 <= v < 1)
llama.hf|rms_norm_eps|0|"rms_norm_eps": '0' is not allowed
llama.hf|max_position_embeddings|1|"max_position_embeddings": '1' is not allowed (allowed: an integer, >= 2)
llama.hf|vocab_size|0|"vocab_size": '0' is not allowed
llama.hf|num_key_value_heads|3|"num_attention_heads" 4 is not a multiple of "num_key_value_heads" 3
llama.hf|num_attention_heads|3|"num_attention_heads" 3 is not a multiple of "num_key_value_heads" 2
llama.hf|tie_word_embeddings|"no"|"tie_word_embeddings" must be true or false
llama.hf|hidden_act|7|"hidden_act" must be a string
llama.hf|rope_scaling|{"rope_type": "linear", "factor": 8.0}|"rope_scaling": rope_type 'linear' is not supported (supported: llama3, yarn, default)
llama.hf|num_hidden_layers|null|no "num_hidden_layers"
moe.hf|router_aux_loss_coef|-0.01|"router_aux_loss_coef": '-0.01' is not allowed (allowed: finite, >= 0)
moe.hf|num_local_experts|0|"num_local_experts": '0' is not allowed
moe.hf|sliding_window|1.5|"sliding_window": '1.5' is not allowed
gpt2.hf|n_layer|true|"n_layer": 'true' is not allowed
gpt2.hf|n_positions|1e3|"n_positions": '1000.0' is not allowed
gpt2.hf|n_inner|-4|"n_inner": '-4' is not allowed
CORPUS
# A head size RoPE cannot split (hidden 64 over 64 heads: 1 each; the heads still divide).
rm -rf "$tmp/bad" && cp -r "$tmp/llama.hf" "$tmp/bad" && $PY - "$tmp/bad/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["num_attention_heads"] = 64; c["num_key_value_heads"] = 64; del c["head_dim"]
open(sys.argv[1], "w").write(json.dumps(c))
PY
door "$tmp/bad" "$tmp/x.h5" 'head size 1 is odd' -- \
  "$MPITRON" import "hf:$tmp/bad" --out "$tmp/x.h5"
# A tokenizer with more ids than the embedding has rows.
cfg_case llama.hf vocab_size 200 "$tmp/bad/tokenizer.json" "more than" '"vocab_size" 200'
# Tensor values: a NaN or inf in an F32 and in a BF16 tensor (the element named).
poison() {  # SRC TENSOR VALUE
  rm -rf "$tmp/bad" && cp -r "$tmp/$1" "$tmp/bad"
  $PY - "$tmp/bad/model.safetensors" "$2" "$3" <<'PY'
import json, struct, sys, numpy as np
path, name, value = sys.argv[1], sys.argv[2], float(sys.argv[3])
raw = bytearray(open(path, "rb").read())
n = struct.unpack("<Q", raw[:8])[0]
e = json.loads(raw[8:8 + n])[name]
at = 8 + n + e["data_offsets"][0] + 3 * (2 if e["dtype"] == "BF16" else 4)
x = np.array([value], np.float32).view(np.uint32)[0]
raw[at:at + (2 if e["dtype"] == "BF16" else 4)] = struct.pack("<H", x >> 16) if e["dtype"] == "BF16" else struct.pack("<I", x)
open(path, "wb").write(raw)
PY
}
poison llama.hf model.layers.1.mlp.down_proj.weight nan
door "$tmp/bad" "$tmp/x.h5" "tensor 'model.layers.1.mlp.down_proj.weight' holds nan at element 3 (F32)" -- \
  "$MPITRON" import "hf:$tmp/bad" --out "$tmp/x.h5"
poison llama.bf16 model.norm.weight -inf
door "$tmp/bad" "$tmp/x.h5" "tensor 'model.norm.weight' holds -inf at element 3 (BF16)" -- \
  "$MPITRON" import "hf:$tmp/bad" --out "$tmp/x.h5"
door "$tmp/bad" "$tmp/none" "tensor 'model.norm.weight' holds -inf" -- \
  $MPIRUN -np 2 "$MPITRON" train jobs/llama-tiny.toml "${common[@]}" --job.run_dir="$tmp/x/run" \
  --train.init_from="hf:$tmp/bad" --train.steps=1
rm -rf "$tmp/x"
expect 'train.init_from = "hf:": no folder after' -- "$MPITRON" train jobs/llama-tiny.toml "${common[@]}" \
  --job.run_dir="$tmp/x" --train.init_from="hf:" --train.steps=1
ncase=$((ncase + 1))
# Outputs that would destroy an input.
ck=$(ckpt_of llama)
door "$ck" "$tmp/none" "--out '$ck' is the input" -- "$MPITRON" export "$ck" --format gguf --out "$ck"
door "$ck" "$tmp/none" "--out '$ck' is the input" -- "$MPITRON" export "$tmp/llama" --format hf --out "$ck"
ln -sf "$ck" "$tmp/alias.gguf"
door "$ck" "$tmp/none" "is the input" -- "$MPITRON" export "$tmp/llama" --format gguf --out "$tmp/alias.gguf"
rm -f "$tmp/alias.gguf"
door "$tmp/llama.hf" "$tmp/none" "lies inside the input folder" -- \
  "$MPITRON" import "hf:$tmp/llama.hf" --out "$tmp/llama.hf/model.safetensors"
# Half outputs: a sharded export of a checkpoint with a tensor missing leaves no shard, no index,
# no staging folder; into an existing export, that export stays as it was.
cp "$ck" "$tmp/broken.h5" && $PY - "$tmp/broken.h5" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "a") as f: del f["model"][sorted(f["model"])[-1]]
PY
door "$tmp/broken.h5" "$tmp/shards" "broken.h5" -- \
  "$MPITRON" export "$tmp/broken.h5" --format hf --out "$tmp/shards" --max-shard-size 20KB --quiet
door "$tmp/llama.hf" "$tmp/none" "broken.h5" -- \
  "$MPITRON" export "$tmp/broken.h5" --format hf --out "$tmp/llama.hf" --max-shard-size 20KB --quiet
[ ! -e "$tmp/llama.hf/.mpitron-export.partial" ] || fail "a failed export left its staging folder"
door "$tmp/broken.h5" "$tmp/broken.gguf" "broken.h5" -- "$MPITRON" export "$tmp/broken.h5" --format gguf --out "$tmp/broken.gguf"
mkdir -p "$tmp/prof"
door "$tmp/prof" "$tmp/none" "calibrate: --out '$tmp/prof' is a folder" -- "$MPITRON" calibrate --quick --out "$tmp/prof"
[ ! -e "$tmp/prof.tmp" ] || fail "calibrate left $tmp/prof.tmp"
echo "the doors: $ncase cases refused, nothing written"
echo "PASS"
