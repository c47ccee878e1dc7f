#!/usr/bin/env bash
# Qwen2 (LLaMA with q/k/v biases) and Qwen3 (LLaMA with an RMSNorm over each head's q and k before
# RoPE) in, through and out, against references nobody here tuned (the gradients of both against
# PyTorch fp64 are unit/test_gpt_reference's qwen2/qwen3 fixtures):
#   - tests/reference/hf_reference.py writes random Qwen2ForCausalLM / Qwen3ForCausalLM folders (f32;
#     bf16 in two shards; Qwen3 tied; Qwen3 with heads of 16 on a hidden size of 32, 4 heads, as
#     Qwen3-0.6B's 16 heads of 128 on 1024): imported, mpitron's log-probs equal the reference's fp64 model
#     within 1e-5 relative; the bf16 shards import bit-exactly (their fp32 export rounds back to
#     them, bit for bit);
#   - export --format hf writes model_type qwen2 / qwen3 and the exported folder gives the
#     reference's log-probs again;
#   - Qwen3-MoE (Qwen3MoeForCausalLM: mlp.gate, mlp.experts.E.*_proj; norm_topk_prob true and false)
#     in and out the same way;
#   - train.init_from = "hf:DIR" follows the single rank (golden rule, compare_runs.py) at tp 2 with
#     sequence parallel, cp 2, pp 2, dp 2 with ZeRO-3 and recompute, and (Qwen3-MoE) ep 2;
#   - the imports as F32 GGUF (arch qwen2 / qwen3, q and k rows in rotate-half order) under llama.cpp
#     itself (npm node-llama-cpp 3.21.1): log-probs within 1e-5 of mpitron's, greedy choices equal;
#   - the worked jobs: jobs/qwen3-continue.toml (tp 2, shorter windows than config.json's context)
#     and jobs/llama3.2-sft.toml (tied head, llama3 scaling, packed chats with document masking) on
#     folders written here;
#   - a model trained from the job keys (model.qkv_bias, model.qk_norm) exports to HF and gives
#     generate's log-probs under the reference; a checkpoint is refused under the other key;
#   - refusals: a sliding window, q/k/v biases on a head size that is not a multiple of 16, the keys
#     on GPT-2, a GGUF of LLaMA 3.1's scaling on qwen2 (llama.cpp's qwen2 reads no rope_freqs), a GGUF
#     of a Qwen3-MoE without norm_topk_prob (llama.cpp's qwen3moe renormalises).
# sanitizers: skip (the Qwen block runs sanitized in unit gpt_reference/qwen*, import and export in the fuzzers and e2e/test_export_hf)
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
                 [qwen3_tied]="qwen3 --tied --bf16 --shards 2" [qwen3_wide]="qwen3 --heads 4 --head-dim 16"
                 [qwen3_moe]="qwen3_moe" [qwen3_moe_softmax]="qwen3_moe --no-norm-topk")
for m in qwen2 qwen2_bf16 qwen3 qwen3_tied qwen3_wide qwen3_moe qwen3_moe_softmax; do
  # shellcheck disable=SC2086
  $PY tests/reference/hf_reference.py write-random "$tmp/$m" ${opts[$m]} >/dev/null
  "$MPITRON" import "hf:$tmp/$m" --out "$tmp/$m.h5" 2>"$tmp/import.log" || { cat "$tmp/import.log"; fail "$m: import"; }
  case $m in qwen3_moe*) family="Qwen3-MoE (4 experts, top 2)," ;; *) family="Qwen${m:4:1}," ;; esac
  grep -qF "$family" "$tmp/import.log" || fail "$m: import does not name the family: $(cat "$tmp/import.log")"
  logprobs_of "$tmp/$m.h5" "$tmp/$m.json"
  echo -n "$m imported: "
  $PY tests/reference/hf_reference.py logprobs "$tmp/$m" "$tmp/$m.json" || fail "$m: log-probs differ"
  "$MPITRON" export "$tmp/$m.h5" --format hf --out "$tmp/$m.out" --quiet 2>/dev/null || fail "$m: export hf"
  want=${m%%_*}
  case $m in qwen3_moe*) want=qwen3_moe ;; esac
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
  timeout -k 5 120 $MPIRUN -np "$np" "$MPITRON" train "${JOB:-jobs/llama-tiny.toml}" --data.path="$tmp/data" --train.steps=3 \
    --train.micro_batch=2 --train.global_batch=4 --eval.batches=0 --log.every=1 --train.peak_flops=1e11 \
    --job.run_dir="$tmp/$name" "$@" >"$tmp/$name.log" 2>&1 </dev/null || { cat "$tmp/$name.log"; fail "$name: training failed"; }
}
layouts=("tp2_sp:--parallel.tp=2 --parallel.sp=true" "cp2:--parallel.cp=2"
         "pp2:--parallel.pp=2 --train.micro_batch=1" "zero3_recompute:--parallel.zero=3 --train.recompute=full")
for m in qwen2 qwen3 qwen3_wide qwen3_moe; do
  [ "$m" = qwen3_moe ] && layouts+=("ep2:--parallel.ep=2")
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
for m in qwen2 qwen3 qwen3_wide qwen3_moe; do
  llama_cpp_agrees "$m" "$tmp/$m.h5" "$tmp/$m.gguf" "$tmp/$m.json" "$text"
  arch=$(case $m in qwen3_wide) echo qwen3 ;; qwen3_moe) echo qwen3moe ;; *) echo "$m" ;; esac)
  grep -q "$arch.attention.head_count" "$tmp/$m.gguf" || fail "$m: the GGUF is not arch $arch"
done

echo "== the worked jobs on tiny random folders"
# jobs/qwen3-continue.toml: continued pretraining from a Qwen3 folder at tp 2, on windows shorter than
# its max_position_embeddings (64 here); the result exports to HF and llama.cpp.
JOB=jobs/qwen3-continue.toml train job_qwen3 2 --train.init_from="hf:$tmp/qwen3" --model.seq_len=32 --train.steps=2 \
  --train.global_batch=4 --train.recompute=none --checkpoint.every=0 --eval.every=0
grep -q "layout world 2 = dp 1 x tp 2" "$tmp/job_qwen3.log" || fail "qwen3-continue is not tp 2"
grep -q "Qwen3 = llama + q/k RMSNorm.*seq 32" "$tmp/job_qwen3.log" || fail "qwen3-continue: $(grep '^model' "$tmp/job_qwen3.log")"
"$MPITRON" export "$tmp/job_qwen3" --format gguf --out "$tmp/job_qwen3.gguf" --quiet >/dev/null 2>&1 ||
  fail "qwen3-continue: export gguf"
expect "model.seq_len = 128 (config.json: max_position_embeddings 64, the most it may be)" -- $MPIRUN -np 2 \
  "$MPITRON" train jobs/qwen3-continue.toml --train.init_from="hf:$tmp/qwen3" --model.seq_len=128 \
  --data.path="$tmp/data" --job.run_dir="$tmp/none"
# jobs/llama3.2-sft.toml: a LLaMA 3.2-shaped folder (tied head, llama3 RoPE scaling), chat data packed
# with document masking, assistant-only loss, tp 2.
$PY tests/reference/hf_reference.py write-random "$tmp/l32" llama --tied --rope-scaling \
  '{"factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 32, "rope_type": "llama3"}' >/dev/null
$PY -c "
import json
for i in range(60):
    print(json.dumps({'messages': [{'role': 'user', 'content': f'What is {i} + {i}?'},
                                   {'role': 'assistant', 'content': f'{i} + {i} = {2 * i}.'}]}))" >"$tmp/chats.jsonl"
"$MPITRON" prep --input "$tmp/chats.jsonl" --format chat --chat-template chatml --tokenizer "hf:$tmp/l32" --pack 32 \
  --out "$tmp/sft" --val-fraction 0 --quiet >"$tmp/sft-prep.log" || fail "chat prep: $(cat "$tmp/sft-prep.log")"
JOB=jobs/llama3.2-sft.toml train job_sft 2 --train.init_from="hf:$tmp/l32" --model.seq_len=32 --data.path="$tmp/sft" \
  --train.steps=2 --train.global_batch=4 --train.micro_batch=2 --checkpoint.every=0 --eval.every=0
grep -q "layout world 2 = dp 1 x tp 2" "$tmp/job_sft.log" || fail "llama3.2-sft is not tp 2"
grep -q "llama3 scaling x32.*tied head" "$tmp/job_sft.log" || fail "llama3.2-sft: $(grep '^model' "$tmp/job_sft.log")"
grep -q "targets)" "$tmp/job_sft.log" || fail "llama3.2-sft does not train on the replies only"

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
expect "model.qkv_bias = true needs a head size (8) that is a multiple of 16" -- \
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
# llama.cpp's qwen3moe always renormalises the top-k weights: norm_topk_prob = false cannot go to GGUF.
expect "llama.cpp (GGUF arch qwen3moe) cannot express: model.moe.router = \"topk_softmax\" with norm_topk_prob = false" -- \
  "$MPITRON" export "$tmp/qwen3_moe_softmax.h5" --format gguf --out "$tmp/softmax.gguf"
echo "test_qwen: ok"
