#!/usr/bin/env bash
# sanitizers: skip (RoPE scaling: its frequency tables run sanitized in the unit tests (test_rope_scaling), its config.json keys in the hf_config fuzzer, the HF and GGUF writers in e2e/test_export_hf and e2e/test_export_gguf)
# RoPE scaling (LLaMA 3.1's "llama3" and YaRN) in, through and out, against references nobody here
# tuned. The tiny models have head size 16 (8 pairs at theta 1e4: wavelengths 6.3, 20, 63, ... 4e4)
# and an original context of 32-64, so pairs fall in every band of each scaling (kept, mixed,
# divided by the factor) and the text's 55 positions run past the original context.
#   - tests/reference/hf_reference.py writes random LLaMA folders with rope_scaling llama3, yarn (the
#     older "type" spelling) and yarn with beta_fast, beta_slow and attention_factor given, and llama3
#     as transformers 5's rope_parameters (rope_theta inside): imported,
#     mpitron's log-probs equal the reference's fp64 model (transformers' frequency formulas) within
#     1e-5 relative, and the reference without the scaling does not (the scaling matters);
#   - export --format hf of each writes rope_scaling back as it came (JSON-equal), and the exported
#     folder gives the reference's log-probs again;
#   - train.init_from = "hf:DIR" at tp 2 follows the single-rank run (golden rule, 1e-5), llama3 and
#     yarn, and yarn at cp 2 (each rank rotates other positions); a checkpoint resumes under the same
#     model.rope_* keys (at tp 2) and is refused under others;
#   - the imported llama3 and yarn models as F32 GGUF under llama.cpp itself (npm node-llama-cpp
#     3.21.1): llama3 as a rope_freqs.weight tensor and no rope.scaling.type key, YaRN as
#     rope.scaling.type/factor/original_context_length; log-probs within 1e-5 of mpitron's, greedy
#     choices equal (the reference without the scaling is 2-4e-2 relative away: llama.cpp applied it);
#   - models trained from the job keys (model.rope_scaling, rope_factor, rope_original_max_pos): the
#     start-up line names the scaling, and generate's log-probs equal the reference's on their HF export;
#   - refusals: another rope_type in config.json (named, with the file and key), a field out of
#     range, the keys on GPT-2, a llama3 without its factor, a YaRN GGUF llama.cpp would run otherwise.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
text="Hello there, world! It's 42 o'clock; the end of it all."
prep_fortunes "$tmp/data" 40000 fortunes

echo "== imports against the fp64 reference"
declare -A scaling=(
  [llama3]='{"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64, "rope_type": "llama3"}'
  [yarn]='{"factor": 4.0, "original_max_position_embeddings": 32, "type": "yarn"}'
  [yarn_opts]='{"factor": 3.0, "original_max_position_embeddings": 48, "beta_fast": 16.0, "beta_slow": 2.0, "attention_factor": 1.2, "rope_type": "yarn"}'
)
for m in llama3 yarn yarn_opts; do
  $PY tests/reference/hf_reference.py write-random "$tmp/$m" llama --heads 2 --rope-scaling "${scaling[$m]}" >/dev/null
  "$MPITRON" import "hf:$tmp/$m" --out "$tmp/$m.h5" 2>"$tmp/import.log" || { cat "$tmp/import.log"; fail "$m: import"; }
  "$MPITRON" generate "$tmp/$m.h5" --prompt "$text" --max-tokens 0 --logprobs-out "$tmp/$m.json" >/dev/null 2>&1 ||
    fail "$m: generate"
  echo -n "$m imported: "
  $PY tests/reference/hf_reference.py logprobs "$tmp/$m" "$tmp/$m.json" || fail "$m: log-probs differ"
  rm -rf "$tmp/plain" && cp -r "$tmp/$m" "$tmp/plain"
  $PY -c 'import json, sys; c = json.load(open(sys.argv[1])); del c["rope_scaling"]; json.dump(c, open(sys.argv[1], "w"))' \
    "$tmp/plain/config.json"
  plain=$($PY tests/reference/hf_reference.py logprobs "$tmp/plain" "$tmp/$m.json" --tol 1e9 |
    sed -n 's/.* = \([0-9.e+-]*\) (bound.*/\1/p')
  echo "$m: the reference without rope_scaling is $plain away"
  $PY -c 'import sys; sys.exit(float(sys.argv[1]) < 1e-3)' "$plain" || fail "$m: the scaling does not matter here"
  "$MPITRON" export "$tmp/$m.h5" --format hf --out "$tmp/$m.out" --quiet 2>/dev/null || fail "$m: export hf"
  $PY - "$tmp/$m/config.json" "$tmp/$m.out/config.json" <<'PY' || fail "$m: exported rope_scaling differs"
import json, sys
a, b = (json.load(open(p))["rope_scaling"] for p in sys.argv[1:])
a["rope_type"] = a.pop("type", a.get("rope_type"))  # the older spelling comes back as rope_type
assert a == b, (a, b)
PY
  echo -n "$m exported: "
  $PY tests/reference/hf_reference.py logprobs "$tmp/$m.out" "$tmp/$m.json" || fail "$m: exported log-probs differ"
done

# transformers 5 writes rope_parameters, with rope_theta inside (here 5e5, the top-level key gone).
$PY tests/reference/hf_reference.py write-random "$tmp/v5" llama --heads 2 --rope-scaling "${scaling[llama3]}" >/dev/null
$PY - "$tmp/v5/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["rope_parameters"] = dict(c.pop("rope_scaling"), rope_theta=500000.0)
del c["rope_theta"]
json.dump(c, open(sys.argv[1], "w"))
PY
"$MPITRON" import "hf:$tmp/v5" --out "$tmp/v5.h5" 2>"$tmp/import.log" || { cat "$tmp/import.log"; fail "v5: import"; }
"$MPITRON" generate "$tmp/v5.h5" --prompt "$text" --max-tokens 0 --logprobs-out "$tmp/v5.json" >/dev/null 2>&1
echo -n "llama3 as rope_parameters (theta 5e5): "
$PY tests/reference/hf_reference.py logprobs "$tmp/v5" "$tmp/v5.json" || fail "rope_parameters: log-probs differ"

echo "== init_from hf: tp 2 follows the single rank"
train() {  # name np extra...
  local name=$1 np=$2
  shift 2
  timeout -k 5 120 $MPIRUN -np "$np" "$MPITRON" train jobs/llama-tiny.toml --data.path="$tmp/data" --train.steps=3 \
    --train.micro_batch=2 --train.global_batch=4 --eval.batches=0 --log.every=1 --train.peak_flops=1e11 \
    --job.run_dir="$tmp/$name" "$@" >"$tmp/$name.log" 2>&1 || { cat "$tmp/$name.log"; fail "$name: training failed"; }
}
for m in llama3 yarn; do
  train "hf_$m" 1 --train.init_from="hf:$tmp/$m"
  train "hf_${m}_tp2" 2 --train.init_from="hf:$tmp/$m" --parallel.tp=2
  echo -n "$m tp 2: "
  $PY tests/e2e/compare_runs.py --min-steps 3 "$tmp/hf_$m" "$tmp/hf_${m}_tp2" || fail "$m: tp 2 does not follow"
done
train hf_yarn_cp2 2 --train.init_from="hf:$tmp/yarn" --parallel.cp=2  # each rank rotates other positions
echo -n "yarn cp 2: "
$PY tests/e2e/compare_runs.py --min-steps 3 "$tmp/hf_yarn" "$tmp/hf_yarn_cp2" || fail "yarn: cp 2 does not follow"

echo "== GGUF under llama.cpp (the imports above)"
for m in llama3 yarn; do
  llama_cpp_agrees "$m" "$tmp/$m.h5" "$tmp/$m.gguf" "$tmp/$m.json" "$text"
  # llama3 is only the tensor (a rope.scaling.type key would abort llama.cpp or scale twice); YaRN is keys.
  $PY -c 'import sys; raw, n = open(sys.argv[1], "rb").read(), sys.argv[2]
assert (b"rope_freqs.weight" in raw) == (n == "llama3"), "rope_freqs.weight"
assert (b"llama.rope.scaling.type" in raw) == (n == "yarn"), "rope.scaling.type"' "$tmp/$m.gguf" "$m" ||
    fail "$m: the GGUF's scaling is not llama.cpp's"
done

echo "== the job keys: trained, generated, exported"
keys_llama3=(--model.rope_scaling=llama3 --model.rope_factor=8 --model.rope_original_max_pos=64)
keys_yarn=(--model.rope_scaling=yarn --model.rope_factor=4 --model.rope_original_max_pos=32)
for m in llama3 yarn; do
  eval "keys=(\"\${keys_$m[@]}\")"
  train "keys_$m" 1 "${keys[@]}"
  grep -q "RoPE theta 10000, $m scaling x" "$tmp/keys_$m.log" || fail "keys_$m: no $m scaling on the model line"
  "$MPITRON" generate "$tmp/keys_$m" --prompt "$text" --max-tokens 0 --logprobs-out "$tmp/keys_$m.json" >/dev/null 2>&1 ||
    fail "keys_$m: generate"
  "$MPITRON" export "$tmp/keys_$m" --format hf --out "$tmp/keys_$m.hf" --quiet 2>/dev/null
  echo -n "keys_$m as HF: "
  $PY tests/reference/hf_reference.py logprobs "$tmp/keys_$m.hf" "$tmp/keys_$m.json" || fail "keys_$m: as HF"
done

echo "== refusals"
expect "holds a different model: RoPE scaling llama3" -- $MPIRUN -np 1 "$MPITRON" train jobs/llama-tiny.toml \
  --data.path="$tmp/data" --train.steps=4 --job.run_dir="$tmp/keys_llama3" "${keys_llama3[@]}" --model.rope_factor=4
train keys_llama3 2 "${keys_llama3[@]}" --train.steps=4 --parallel.tp=2  # the same keys resume (the file's scaling read back)
grep -q "resumed from .*step 3" "$tmp/keys_llama3.log" || fail "keys_llama3 did not resume: $(grep -i resum "$tmp/keys_llama3.log")"
one_step=(--data.path="$tmp/data" --train.steps=1 --eval.batches=0 --job.run_dir="$tmp/none")
expect "model.rope_factor applies to LLaMA models only" -- "$MPITRON" train jobs/tiny.toml "${one_step[@]}" \
  --model.rope_factor=8
expect 'model.rope_scaling = "llama3" needs model.rope_factor' -- "$MPITRON" train jobs/llama-tiny.toml \
  "${one_step[@]}" --model.rope_scaling=llama3
train beta 1 "${keys_yarn[@]}" --model.rope_beta_fast=16 --train.steps=1  # trains; llama.cpp would run beta 32
expect "model.rope_beta_fast = 16 (must be 32)" -- "$MPITRON" export "$tmp/beta" --format gguf --out "$tmp/beta.gguf"
[ ! -e "$tmp/beta.gguf" ] || fail "a refused GGUF export left its file"
cfg_case() {  # JSON-VALUE words...: the llama3 folder with config.json's rope_scaling replaced
  rm -rf "$tmp/bad" && cp -r "$tmp/llama3" "$tmp/bad"
  $PY -c 'import json, sys; c = json.load(open(sys.argv[1])); c["rope_scaling"] = json.loads(sys.argv[2]); json.dump(c, open(sys.argv[1], "w"))' \
    "$tmp/bad/config.json" "$1"
  shift
  expect "$tmp/bad/config.json" "$@" -- "$MPITRON" import "hf:$tmp/bad" --out "$tmp/x.h5"
  [ ! -e "$tmp/x.h5" ] || fail "a refused import left its output"
}
cfg_case '{"rope_type": "linear", "factor": 2.0}' "\"rope_scaling\": rope_type 'linear' is not supported (supported: llama3, yarn, default)"
cfg_case '{"type": "dynamic", "factor": 2.0}' "rope_type 'dynamic' is not supported"
cfg_case '{"rope_type": "longrope", "short_factor": [1], "long_factor": [1]}' "rope_type 'longrope' is not supported"
cfg_case '{"rope_type": "llama3", "factor": 8.0}' '"rope_scaling": no "low_freq_factor"'
cfg_case '{"rope_type": "llama3", "factor": 0.5, "low_freq_factor": 1, "high_freq_factor": 4, "original_max_position_embeddings": 64}' \
  "\"rope_scaling\": \"factor\": '0.5' is not allowed (allowed: finite, >= 1)"
cfg_case '{"rope_type": "llama3", "factor": 8, "low_freq_factor": 4, "high_freq_factor": 1, "original_max_position_embeddings": 64}' \
  "high_freq_factor 1 must be >= low_freq_factor 4"
cfg_case '{"rope_type": "yarn", "factor": 40, "mscale": 0.707, "mscale_all_dim": 0.707}' '"mscale" is not supported'
cfg_case '{"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 2.5}' \
  "\"original_max_position_embeddings\": '2.5' is not allowed"
cfg_case '"llama3"' '"rope_scaling" must be an object or null'
# null and {"rope_type": "default"} are plain RoPE.
for v in null '{"rope_type": "default"}'; do
  rm -rf "$tmp/ok" && cp -r "$tmp/llama3" "$tmp/ok"
  $PY -c 'import json, sys; c = json.load(open(sys.argv[1])); c["rope_scaling"] = json.loads(sys.argv[2]); json.dump(c, open(sys.argv[1], "w"))' \
    "$tmp/ok/config.json" "$v"
  "$MPITRON" import "hf:$tmp/ok" --out "$tmp/ok.h5" >/dev/null 2>&1 || fail "rope_scaling $v refused"
  $PY -c 'import h5py, sys; assert "rope_scaling" not in h5py.File(sys.argv[1])["config"].attrs' "$tmp/ok.h5" ||
    fail "rope_scaling $v: the checkpoint holds a scaling"
  rm -f "$tmp/ok.h5"
done
echo "PASS"
