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
