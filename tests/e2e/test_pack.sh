#!/usr/bin/env bash
# prep --pack SEQ_LEN, checked with h5py against the same input prepped unpacked:
#   - the documents, in order, are the unpacked ones (a split document's pieces put together);
#   - each block of SEQ_LEN tokens starts a document, and a document piece never crosses a block;
#     a document longer than a block is split into pieces flagged in /doc_continued;
#   - padding (the end-of-text id) and every block's first token are never trained (/loss_mask 0),
#     every other document token is; the stream is whole windows of SEQ_LEN + 1;
#   - the efficiency prep prints is the documents' share of the tokens;
#   - a packed corpus trains with document masking (the trained-target count in the log);
#   - the trained-token count prep prints is the number of ones in the shards' /loss_mask (train +
#     val), packed text and packed chat alike;
#   - --pack 1 (a block's only target would be masked) is refused before anything is written, and
#     --pack 0 is off: the same shards as no --pack;
#   - a folder mixing packed and unpacked shards, or two pack lengths, is refused whichever file
#     sorts first, naming both files, and nothing is written or changed.
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

# The trained-token count prep prints = the ones in the shards' /loss_mask, train + val.
trained_is_mask() {  # DIR LOG
  /usr/bin/python3 - "$1" "$2" <<'PY'
import glob, re, sys
import h5py
d, log = sys.argv[1], open(sys.argv[2]).read()
m = re.search(r": (\d+) of (\d+) tokens trained", log)
assert m, f"no trained-token count in: {log}"
shards = sorted(glob.glob(f"{d}/train_*.h5") + glob.glob(f"{d}/val_*.h5"))
assert any("/val_" in p for p in shards), "no val shard: the count must cover both splits"
ones = sum(int(h5py.File(p)["loss_mask"][:].astype("int64").sum()) for p in shards)
total = sum(len(h5py.File(p)["tokens"]) for p in shards)
assert (int(m.group(1)), int(m.group(2))) == (ones, total), f"prep says {m.group(1)} of {m.group(2)}, the masks hold {ones} of {total}"
print(f"    {d.rsplit('/', 1)[1]}: {ones} of {total} tokens trained = the ones in /loss_mask")
PY
}
trained_is_mask "$tmp/packed" "$tmp/pack.log" || fail "packed text: the trained-token count is not the loss mask's"
/usr/bin/python3 - "$tmp/chat.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for k in range(12):
        msgs = [{"role": "user", "content": f"question {k}: " + "why? " * k},
                {"role": "assistant", "content": f"answer {k}. " + "because. " * (2 * k)}]
        f.write(json.dumps({"messages": msgs}) + "\n")
PY
"$MPITRON" prep --input "$tmp/chat.jsonl" --format chat --chat-template chatml --out "$tmp/chat-packed" --pack 64 \
  --val-fraction 0.2 --quiet >"$tmp/chat-pack.log"
grep -q "chat template chatml, loss on assistant: " "$tmp/chat-pack.log" || fail "chat --pack: $(cat "$tmp/chat-pack.log")"
trained_is_mask "$tmp/chat-packed" "$tmp/chat-pack.log" || fail "packed chat: the trained-token count is not the loss mask's"

# --pack 1: refused (exit 2, naming the option), nothing written. --pack 0: off.
rc=0
"$MPITRON" prep --input "$tmp/chat.jsonl" --format chat --chat-template chatml --out "$tmp/pack1" --pack 1 --quiet \
  >"$tmp/pack1.log" 2>&1 || rc=$?
[ "$rc" = 2 ] || fail "--pack 1: exit $rc, not 2: $(cat "$tmp/pack1.log")"
grep -q "option --pack: '1' is not allowed (allowed: an integer, 0 (off) or " "$tmp/pack1.log" ||
  fail "--pack 1: $(cat "$tmp/pack1.log")"
[ ! -e "$tmp/pack1" ] || fail "--pack 1 wrote $(ls -A "$tmp/pack1")"
"$MPITRON" prep --input "$tmp/corpus.txt" --tokenizer byte --out "$tmp/pack0" --doc-separator % --val-fraction 0.05 \
  --pack 0 --quiet >"$tmp/pack0.log"
! grep -q "packed\|trained" "$tmp/pack0.log" || fail "--pack 0 packed: $(cat "$tmp/pack0.log")"
for split in train val; do
  cmp -s "$tmp/plain/${split}_00000.h5" "$tmp/pack0/${split}_00000.h5" ||  # prep writes the same bytes for the same input
    fail "--pack 0: $split differs from the unpacked shards"
done
echo "    --pack 1 refused: $(grep -o "option --pack.*" "$tmp/pack1.log"); --pack 0 = no --pack"

# Folders that mix packing: refused by training and by prep --check, whichever file sorts first,
# naming both files; nothing is written, no shard changes.
"$MPITRON" prep --input "$tmp/corpus.txt" --tokenizer byte --out "$tmp/packed64" --doc-separator % --val-fraction 0 \
  --pack 64 --quiet >/dev/null
mixed() {  # NAME FIRST SECOND WANT_FIRST WANT_SECOND: FIRST as train_00000.h5, SECOND as train_00001.h5
  local d="$tmp/mix-$1" rc=0
  mkdir -p "$d"
  cp "$2" "$d/train_00000.h5" && cp "$3" "$d/train_00001.h5"
  local sums
  sums=$(md5sum "$d"/*)
  "$MPITRON" prep --check "$d" >"$d.check.log" 2>&1 || rc=$?
  [ "$rc" = 2 ] || fail "$1: prep --check exit $rc, not 2: $(cat "$d.check.log")"
  grep -qF "shards disagree: $d/train_00000.h5 was $4, but $d/train_00001.h5 was $5" "$d.check.log" ||
    fail "$1: $(cat "$d.check.log")"
  rc=0
  timeout -k 5 120 "$MPITRON" train jobs/tiny.toml --data.path="$d" --model.seq_len=$T --train.steps=1 \
    --eval.every=0 --job.run_dir="$tmp/run-$1" >"$d.train.log" 2>&1 || rc=$?
  [ "$rc" = 2 ] || fail "$1: train exit $rc, not 2: $(tail -3 "$d.train.log")"
  grep -qF "$d/train_00000.h5 was $4, but $d/train_00001.h5 was $5" "$d.train.log" || fail "$1: $(tail -3 "$d.train.log")"
  [ ! -e "$tmp/run-$1" ] || fail "$1: training made its run directory"
  [ "$(md5sum "$d"/*)" = "$sums" ] && [ "$(ls "$d")" = "$(printf 'train_00000.h5\ntrain_00001.h5')" ] ||
    fail "$1: the folder changed"
  echo "    $1 refused: $(grep -o "shards disagree.*" "$d.check.log" | sed "s|$tmp/||g")"
}
P="packed for windows of $T + 1 tokens (prep --pack $T)" U="not packed (prep without --pack)"
mixed packed-first "$tmp/packed/train_00000.h5" "$tmp/plain/train_00000.h5" "$P" "$U"
mixed unpacked-first "$tmp/plain/train_00000.h5" "$tmp/packed/train_00000.h5" "$U" "$P"
mixed two-lengths "$tmp/packed/train_00000.h5" "$tmp/packed64/train_00000.h5" "$P" \
  "packed for windows of 64 + 1 tokens (prep --pack 64)"
