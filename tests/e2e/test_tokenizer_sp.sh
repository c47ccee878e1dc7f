#!/usr/bin/env bash
# SentencePiece models: `prep --tokenizer sp:FILE.model` through Debian's
# libsentencepiece, against python3-sentencepiece on models trained here with spm_train from the
# fortune files: BPE with byte fallback and unigram (unknown characters -> <unk>), on ~4500
# nasty texts (tests/reference/gpt2_texts.py: emoji, CJK, RTL, whitespace runs the models never
# saw) and the fortunes; the shard stores the model itself (base64 in the tokenizer JSON), which
# decodes the shard's documents back with python3-sentencepiece; a tiny model trains on it and
# `generate` decodes with it. A file that is not a model is named in the error.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
cat /usr/share/games/fortunes/fortunes /usr/share/games/fortunes/computers >"$tmp/corpus.txt"
spm_train --input="$tmp/corpus.txt" --model_prefix="$tmp/bpe" --vocab_size=600 --model_type=bpe --byte_fallback=true \
  --minloglevel=2 >"$tmp/spm.log" 2>&1 || { cat "$tmp/spm.log"; fail "spm_train bpe"; }
spm_train --input="$tmp/corpus.txt" --model_prefix="$tmp/uni" --vocab_size=600 --model_type=unigram \
  --minloglevel=2 >"$tmp/spm.log" 2>&1 || { cat "$tmp/spm.log"; fail "spm_train unigram"; }
$PY tests/reference/gpt2_texts.py "$tmp/texts.jsonl" 2 /usr/share/games/fortunes/fortunes >/dev/null
for m in bpe uni; do
  "$MPITRON" prep --input "$tmp/texts.jsonl" --tokenizer "sp:$tmp/$m.model" --out "$tmp/$m" --val-fraction 0 \
    --workers 2 --quiet >/dev/null
  $PY - "$tmp/$m.model" "$tmp/texts.jsonl" "$tmp/$m" "$m" <<'PY' || fail "$m: SentencePiece ids or the stored model"
import base64, glob, json, sys
import h5py, numpy as np
import sentencepiece as spm
model, texts_path, out, name = sys.argv[1:]
sp = spm.SentencePieceProcessor(model_file=model)
texts = [json.loads(l)["text"] for l in open(texts_path, encoding="utf-8")]
texts = [t for t in texts if t]
files = sorted(glob.glob(out + "/train_*.h5"))
ids = np.concatenate([h5py.File(p)["tokens"][()].astype(np.int64) for p in files])
attrs = h5py.File(files[0]).attrs
tok = json.loads(attrs["tokenizer"])
eos = sp.eos_id()
assert tok["type"] == "sentencepiece" and tok["eot"] == eos == attrs["eot"] and tok["vocab_size"] == sp.get_piece_size()
stored = spm.SentencePieceProcessor(model_proto=base64.b64decode(tok["model"]))
ends = np.flatnonzero(ids == eos)
docs, start = [], 0
for e in ends:
    docs.append(ids[start:e].tolist()); start = e + 1
assert start == len(ids) and len(docs) == len(texts), f"{len(docs)} documents, {len(texts)} texts"
bad = [i for i, t in enumerate(texts) if docs[i] != sp.encode(t)]
for i in bad[:5]:
    print(f"text {i} {texts[i][:50]!r}: mpitron {docs[i][:12]} python {sp.encode(texts[i])[:12]}")
assert not bad, f"{len(bad)} of {len(texts)} texts differ"
back = sum(stored.decode(d) == sp.decode(sp.encode(t)) for d, t in zip(docs, texts))
assert back == len(texts), f"the stored model decodes {back} of {len(texts)} documents as the original"
unk = sum(d.count(sp.unk_id()) for d in docs)
print(f"ok    {name}: {len(texts)} texts, {len(ids)} tokens identical to python3-sentencepiece; the stored model "
      f"decodes them ({unk} <unk>)")
PY
done
timeout 300 "$MPITRON" train jobs/tiny.toml --data.path="$tmp/bpe" --train.steps=4 --train.micro_batch=2 \
  --train.global_batch=2 --eval.every=0 --eval.batches=0 --checkpoint.every=4 --job.run_dir="$tmp/run" >"$tmp/train.log" 2>&1 ||
  { tail -20 "$tmp/train.log"; fail "training on SentencePiece tokens"; }
"$MPITRON" generate "$tmp/run" --prompt "The computer" --max-tokens 8 --seed 1 >"$tmp/gen.log" 2>&1 ||
  { cat "$tmp/gen.log"; fail "generate"; }
grep -q "^The computer" "$tmp/gen.log" || { cat "$tmp/gen.log"; fail "generate did not decode the prompt"; }
echo "ok    trained on SentencePiece tokens; generate: $(head -c 60 "$tmp/gen.log" | tr '\n' ' ')"
# Exported to Hugging Face, the model folder carries the SentencePiece model as tokenizer.model:
# the same bytes, the same ids through hf:DIR, and a GGUF export says it cannot write it yet.
"$MPITRON" export "$tmp/run" --format hf --out "$tmp/run.hf" --quiet 2>/dev/null || fail "export of the SP model"
cmp -s "$tmp/bpe.model" "$tmp/run.hf/tokenizer.model" || fail "tokenizer.model is not the SentencePiece model"
grep -q '"tokenizer_class": "LlamaTokenizer"' "$tmp/run.hf/tokenizer_config.json" || fail "tokenizer_config.json"
txt="Grüße, the computer said 42."
[ "$("$MPITRON" tokenizer encode --tokenizer "hf:$tmp/run.hf" --text "$txt")" = \
  "$("$MPITRON" tokenizer encode --tokenizer "sp:$tmp/bpe.model" --text "$txt")" ] || fail "hf:DIR ids differ from sp:"
if "$MPITRON" export "$tmp/run" --format gguf --out "$tmp/run.gguf" >"$tmp/err.log" 2>&1; then fail "SP GGUF"; fi
grep -q "GGUF with a SentencePiece tokenizer is not written yet" "$tmp/err.log" || { cat "$tmp/err.log"; fail "SP GGUF msg"; }
echo "ok    exported: tokenizer.model is the model's, hf:DIR reads it"
printf 'not a model' >"$tmp/fake.model"
if "$MPITRON" prep --input "$tmp/texts.jsonl" --tokenizer "sp:$tmp/fake.model" --out "$tmp/bad" >"$tmp/err.log" 2>&1; then
  fail "a file that is not a model was accepted"
fi
grep -q "fake.model: not a SentencePiece model" "$tmp/err.log" || { cat "$tmp/err.log"; fail "the error does not name the model"; }
echo ok
