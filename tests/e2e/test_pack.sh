#!/usr/bin/env bash
# prep --pack SEQ_LEN, checked with h5py against the same input prepped unpacked:
#   - the documents, in order, are the unpacked ones (a split document's pieces put together);
#   - each block of SEQ_LEN tokens starts a document, and a document piece never crosses a block;
#     a document longer than a block is split into pieces flagged in /doc_continued;
#   - padding (the end-of-text id) and every block's first token are never trained (/loss_mask 0),
#     every other document token is; the stream is whole windows of SEQ_LEN + 1;
#   - the efficiency prep prints is the documents' share of the tokens;
#   - a packed corpus trains with document masking (the trained-target count in the log).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
head -c 40000 /usr/share/games/fortunes/fortunes >"$tmp/corpus.txt"
printf '%%\n%s\n' "$(head -c 700 /usr/share/games/fortunes/fortunes | tr '\n%' '  ')" >>"$tmp/corpus.txt"  # a long document
T=128
"$MPITRON" prep --input "$tmp/corpus.txt" --tokenizer byte --out "$tmp/plain" --doc-separator % --val-fraction 0.05 --quiet
"$MPITRON" prep --input "$tmp/corpus.txt" --tokenizer byte --out "$tmp/packed" --doc-separator % --val-fraction 0.05 \
  --pack $T --quiet >"$tmp/pack.log"
cat "$tmp/pack.log"
/usr/bin/python3 - "$tmp" $T <<'PY'
import re, sys
import h5py, numpy as np
tmp, T = sys.argv[1], int(sys.argv[2])
EOT = 256
log = open(f"{tmp}/pack.log").read()
eff = float(re.search(r"efficiency ([0-9.]+)%", log).group(1))
real = alltok = 0
for split in ("train", "val"):
    p = h5py.File(f"{tmp}/plain/{split}_00000.h5")
    tok = p["tokens"][:]; offs = list(p["doc_offsets"][:]) + [len(tok)]
    want = [tok[a:b] for a, b in zip(offs, offs[1:])]
    f = h5py.File(f"{tmp}/packed/{split}_00000.h5")
    assert f.attrs["packed_seq_len"] == T
    ptok, mask, cont = f["tokens"][:], f["loss_mask"][:], f["doc_continued"][:]
    starts = [int(x) for x in f["doc_offsets"][:]]
    assert (len(ptok) - 1) % T == 0, f"{split}: {len(ptok)} tokens are not whole windows of {T} + 1"
    docs, trained = [], np.zeros(len(ptok), bool)
    for i, s in enumerate(starts):
        # A piece runs to the next start, to the padding after its end-of-text, or to its block's end.
        e = starts[i + 1] if i + 1 < len(starts) else len(ptok)
        e = min(e, (s // T + 1) * T)
        piece = ptok[s:e]
        if not (i + 1 < len(starts) and cont[i + 1]):  # the document ends in this piece: at its end-of-text
            end = s + int(np.flatnonzero(piece == EOT)[0]) + 1
        else:
            end = e
            assert e == (s // T + 1) * T, f"{split}: a continued document's piece does not fill its block"
        assert end <= (s // T + 1) * T, f"{split}: document {i} crosses a block"
        assert cont[i] == 0 or s % T == 0, f"{split}: a continuation does not start a block"
        if cont[i]: docs[-1] = np.concatenate([docs[-1], ptok[s:end]])
        else: docs.append(ptok[s:end])
        trained[s:end] = True
    trained[::T] = False  # a block's first token is never a target
    assert len(docs) == len(want) and all(np.array_equal(a, b) for a, b in zip(docs, want)), f"{split}: documents differ"
    assert np.array_equal(mask.astype(bool), trained), f"{split}: loss mask is not documents minus block starts"
    pad = len(ptok) - sum(len(d) for d in docs)
    assert np.all(ptok[~trained & (np.arange(len(ptok)) % T != 0)] == EOT), f"{split}: padding is not the end-of-text id"
    real += len(ptok) - pad; alltok += len(ptok)
    if split == "train":
        n_split = int(cont.sum())
        assert n_split >= 5, f"the long document was not split ({n_split} continuations)"
        print(f"    {split}: {len(docs)} documents = the unpacked ones, {len(ptok) // T} windows, {n_split} continuation pieces")
assert abs(eff - 100 * real / alltok) < 0.06, (eff, 100 * real / alltok)
print(f"    efficiency {eff}% = document tokens / all")
PY
timeout -k 5 120 "$MPITRON" train jobs/tiny.toml --data.path="$tmp/packed" --model.seq_len=$T --data.document_mask=true \
  --train.steps=2 --train.micro_batch=2 --eval.every=0 --job.run_dir="$tmp/run" >"$tmp/train.log" 2>&1 ||
  { tail -5 "$tmp/train.log"; fail "training on packed data"; }
grep -q "targets)" "$tmp/train.log" || fail "the packed run does not log its trained targets"
! "$MPITRON" train jobs/tiny.toml --data.path="$tmp/packed" --model.seq_len=64 --train.steps=1 --job.run_dir="$tmp/bad" \
  >"$tmp/bad.log" 2>&1 || fail "a seq_len other than the packed one was accepted"
grep -q "was packed for windows of $T + 1 tokens (prep --pack $T), but model.seq_len is 64" "$tmp/bad.log" ||
  fail "no packed-length error: $(tail -2 "$tmp/bad.log")"
echo "    trains: $(grep -m1 '^step 2' "$tmp/train.log" | cut -d'|' -f2)"
