#!/usr/bin/env bash
# prep end to end: shards readable by h5dump and h5py with the tokenized input inside; BPE
# training + prep round trip; every bad input gives a message naming the file, a non-zero exit
# and no half-written output.
set -euo pipefail
MPITRON=${MPITRON:-build/mpitron}
PY=/usr/bin/python3   # Debian's python3-h5py (a pyenv python3 on PATH may lack h5py)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }

mkdir -p "$T/in"
printf 'first fortune\n%%\nsecond one\nwith two lines\n%%\n' >"$T/in/a.txt"
printf 'third\n%%\nfourth \xc3\xa9t\xc3\xa9\n%%\nfifth\n' >"$T/in/b.txt"

# --- byte tokenizer: h5dump + h5py read back ---
"$MPITRON" prep --input "$T/in/*.txt" --out "$T/byte" --doc-separator % --val-fraction 0 --quiet
h5dump -H "$T/byte/train_00000.h5" >"$T/dump.txt"
for want in 'DATASET "tokens"' 'DATASET "doc_offsets"' H5T_STD_U16LE 'ATTRIBUTE "vocab_size"' 'ATTRIBUTE "eot"' \
  'ATTRIBUTE "tokenizer"' 'ATTRIBUTE "num_tokens"' 'ATTRIBUTE "source"'; do
  grep -q "$want" "$T/dump.txt" && ok "h5dump shows $want" || bad "h5dump lacks $want"
done
"$PY" - "$T/byte/train_00000.h5" "$T/in" <<'PYEOF' && ok "h5py reads the byte tokens" || bad "h5py byte read-back"
import h5py, json, sys, glob
f = h5py.File(sys.argv[1], "r")
docs = []
for p in sorted(glob.glob(sys.argv[2] + "/*.txt")):
    cur = b""
    for line in open(p, "rb").read().splitlines(keepends=True):
        if line.rstrip(b"\r\n") == b"%":
            if cur: docs.append(cur)
            cur = b""
        else:
            cur += line
    if cur: docs.append(cur)
want = []
for d in docs:
    want += list(d) + [256]
tok = json.loads(f.attrs["tokenizer"])
assert tok["type"] == "byte" and tok["eot"] == 256, tok
assert f.attrs["vocab_size"] == 257 and f.attrs["eot"] == 256
assert f.attrs["num_tokens"] == len(want)
assert list(f["tokens"][:]) == want, "tokens differ"
offs = list(f["doc_offsets"][:])
assert len(offs) == len(docs) and offs[0] == 0
assert [s.decode() if isinstance(s, bytes) else s for s in f.attrs["source"]] == sorted(glob.glob(sys.argv[2] + "/*.txt"))
PYEOF

# --- BPE: train, prep, decode the shards in Python == the input text ---
"$MPITRON" tokenizer train --input "$T/in/*.txt" --vocab 300 --min-count 1 --out "$T/tok.json" >/dev/null
"$MPITRON" prep --input "$T/in/a.txt" "$T/in/b.txt" --tokenizer "$T/tok.json" --out "$T/bpe" --shard-tokens 8 --val-fraction 0 --quiet
"$PY" - "$T/bpe" "$T/tok.json" "$T/in" <<'PYEOF' && ok "h5py + tok.json decode the BPE shards to the input" || bad "BPE read-back"
import h5py, json, sys, glob
tok = json.load(open(sys.argv[2]))
table = [bytes([b]) for b in range(256)]
for a, b in tok["merges"]:
    table.append(table[a] + table[b])
eot = tok["eot"]
assert eot == len(table) == tok["vocab_size"] - 1
ids = []
for p in sorted(glob.glob(sys.argv[1] + "/train_*.h5")):
    f = h5py.File(p, "r")
    assert json.loads(f.attrs["tokenizer"])["merges"] == tok["merges"]
    ids += list(f["tokens"][:])
assert len(sorted(glob.glob(sys.argv[1] + "/train_*.h5"))) > 1
text = b"".join(table[i] for i in ids if i != eot)
want = b"".join(open(p, "rb").read() for p in sorted(glob.glob(sys.argv[3] + "/*.txt")))
assert text == want, (text, want)
assert sum(1 for i in ids if i == eot) == 2  # one document per file
PYEOF
"$MPITRON" prep --check "$T/bpe" --seq-len 4 >/dev/null && ok "prep --check accepts good shards" || bad "prep --check"

# --- bad inputs: message names the file, exit != 0, nothing half-written ---
expect_fail() {  # name expected-substring cmd...
  local name=$1 want=$2
  shift 2
  local out rc=0
  out=$("$@" 2>&1) || rc=$?
  if [ "$rc" -ne 0 ] && grep -qF -- "$want" <<<"$out"; then ok "$name -> $out"; else bad "$name (rc=$rc): $out"; fi
}
expect_fail "no input matches" "no input files match '$T/none/*.txt'" "$MPITRON" prep --input "$T/none/*.txt" --out "$T/o1"
: >"$T/in/empty.txt"
expect_fail "empty file" "$T/in/empty.txt' is empty" "$MPITRON" prep --input "$T/in/*.txt" --out "$T/o2"
rm "$T/in/empty.txt"
echo '{"format": "mpitron-tokenizer", "version": 1, "type": "bpe", "pretokenizer": "mpitron-v1", "merges": [[400, 1]]}' >"$T/badtok.json"
expect_fail "bad tokenizer" "$T/badtok.json" "$MPITRON" prep --input "$T/in/a.txt" --tokenizer "$T/badtok.json" --out "$T/o3"
# Numeric options: the value rules' wording (config/value_rules.hpp), refused before anything is written.
expect_fail "--val-fraction 1" "option --val-fraction: '1' is not allowed (allowed: 0 <= v < 1)" \
  "$MPITRON" prep --input "$T/in/a.txt" --out "$T/o4" --val-fraction 1
expect_fail "--shard-tokens 0.5" "option --shard-tokens: '0.5' is not allowed (allowed: an integer, >= 1, optionally" \
  "$MPITRON" prep --input "$T/in/a.txt" --out "$T/o5" --shard-tokens 0.5
expect_fail "--workers 0" "option --workers: '0' is not allowed (allowed: an integer, 1 <= v <= 256)" \
  "$MPITRON" prep --input "$T/in/a.txt" --out "$T/o6" --workers 0
expect_fail "--pack -1" "option --pack: '-1' is not allowed (allowed: an integer, 0 (off) or " \
  "$MPITRON" prep --input "$T/in/a.txt" --out "$T/o7" --pack -1
for o in o4 o5 o6 o7; do [ ! -e "$T/$o" ] && ok "$o: not made" || bad "$o was made"; done
# An output that would destroy an input: the input file itself, or a folder inside the tokenizer's.
sum_a=$(md5sum <"$T/in/a.txt")
expect_fail "--out is the input" "prep: --out '$T/in/a.txt' is the input '$T/in/a.txt'" \
  "$MPITRON" prep --input "$T/in/a.txt" --out "$T/in/a.txt"
[ "$(md5sum <"$T/in/a.txt")" = "$sum_a" ] && ok "the input is unchanged" || bad "prep changed its input"
mkdir -p "$T/tokdir" && cp "$T/badtok.json" "$T/tokdir/tokenizer.json"
expect_fail "--out inside the tokenizer folder" "lies inside the input folder '$T/tokdir'" \
  "$MPITRON" prep --input "$T/in/a.txt" --tokenizer "hf:$T/tokdir" --out "$T/tokdir/data"
[ ! -e "$T/tokdir/data" ] && ok "tokdir/data: not made" || bad "tokdir/data was made"
for o in o1 o2 o3; do
  [ -z "$(ls -A "$T/$o" 2>/dev/null)" ] && ok "$o: nothing written" || bad "$o has files: $(ls "$T/$o")"
done

mk() { rm -rf "$T/s" && mkdir -p "$T/s" && cp "$T/byte/train_00000.h5" "$T/s/train_00000.h5"; }
mk && echo "not hdf5" >"$T/s/train_00001.h5"
expect_fail "not HDF5" "$T/s/train_00001.h5: not an HDF5 file" "$MPITRON" prep --check "$T/s"
mk && head -c 3000 "$T/byte/train_00000.h5" >"$T/s/train_00001.h5"
expect_fail "truncated" "$T/s/train_00001.h5" "$MPITRON" prep --check "$T/s"
mk && "$PY" -c "import h5py,sys; h5py.File(sys.argv[1],'w').create_dataset('other', data=[1,2])" "$T/s/train_00001.h5"
expect_fail "no /tokens" "$T/s/train_00001.h5: no /tokens dataset" "$MPITRON" prep --check "$T/s"
mk && "$PY" -c "import h5py,sys; f=h5py.File(sys.argv[1],'r+'); f['tokens'][5]=300" "$T/s/train_00000.h5"
expect_fail "token >= vocab_size" "$T/s/train_00000.h5: token 300 at index 5 is >= vocab_size 257" "$MPITRON" prep --check "$T/s"
mk && cp "$T/bpe/train_00000.h5" "$T/s/train_00001.h5"
expect_fail "vocab disagrees" "$T/s/train_00001.h5 has vocab_size" "$MPITRON" prep --check "$T/s"
mk && "$PY" -c "
import h5py,sys,json
f=h5py.File(sys.argv[1],'r+'); t=json.loads(f.attrs['tokenizer']); t['type']='bpe'; t['pretokenizer']='mpitron-v1'; t['merges']=[]
f.attrs['tokenizer']=json.dumps(t)" "$T/s/train_00000.h5" && cp "$T/byte/train_00000.h5" "$T/s/train_00001.h5"
expect_fail "tokenizer disagrees" "different tokenizers" "$MPITRON" prep --check "$T/s"
mk
expect_fail "seq_len larger than the data" "seq_len 100000 is larger than the data" "$MPITRON" prep --check "$T/s" --seq-len 100000
expect_fail "no shards" "no train_*.h5 shards in '$T/in'" "$MPITRON" prep --check "$T/in"
expect_fail "--check --seq-len 1" "option --seq-len: '1' is not allowed (allowed: an integer, " "$MPITRON" prep --check "$T/s" --seq-len 1
"$MPITRON" prep --help | grep -- "--shard-tokens" >/dev/null && ok "prep --help" || bad "prep --help"
"$MPITRON" tokenizer --help | grep -- "--vocab" >/dev/null && ok "tokenizer --help" || bad "tokenizer --help"

echo "$fails failure(s)"
[ "$fails" -eq 0 ]
