#!/usr/bin/env bash
# Mutation testing (tests/mutants/README.md): for every tests/mutants/*.patch, in a scratch copy
# of the tree, apply the patch, build CPU-only and run `make test` stopping at the first failure
# (MPITRON_TEST_FAILFAST=1). A mutant whose suite passes SURVIVED: a blind spot of the tests.
# Prints "mutant | killed? | first failing test | time"; exits non-zero when any mutant survived,
# no longer applies, or does not build. On demand (`make test-mutants`), never in CI.
#
#   MUTANT=03         only the patches whose name starts with (or contains) 03 (or: run.sh 03)
#   MUTANT_QUICK=1    run only each patch's expected killer (its first line), not the whole suite
#   MUTANT_BASE=REV   mutate that commit (git archive) instead of the working tree, e.g. to see
#                     which mutants an older test suite let through
#   MUTANT_DIR=DIR    scratch folder (default build-mutants/, ignored by git); it is kept between
#                     runs, so a second run only rebuilds what changed
#   MUTANT_JOBS=N     make -j for the builds (default 2)
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
only=${1:-${MUTANT:-}}  # `run.sh 03` or MUTANT=03
quick=${MUTANT_QUICK:-0}
base=${MUTANT_BASE:-}
jobs=${MUTANT_JOBS:-2}
dir=${MUTANT_DIR:-$root/build-mutants}
mkdir -p "$dir/logs"
dir=$(cd "$dir" && pwd)
tree="$dir/tree${base:+-$(git rev-parse --short "$base")}"
mbuild=build-cpu  # the scratch tree's build folder (CUDA=0)
# The scratch tree sits inside this repository's folder: keep git from finding this repository
# from there, so `git apply` patches the scratch files as a plain patch tool would.
export GIT_CEILING_DIRECTORIES="$dir"

exec 9>"$dir/lock"
flock -n 9 || { echo "another test-mutants run is using $dir (MUTANT_DIR=... for a second one)" >&2; exit 2; }

patches=()
for p in tests/mutants/*.patch; do
  [ -e "$p" ] || continue
  n=$(basename "$p" .patch)
  [ -z "$only" ] || [[ "$n" == "$only"* ]] || [[ "$n" == *"$only"* ]] || continue
  patches+=("$p")
done
[ ${#patches[@]} -gt 0 ] || { echo "no tests/mutants/*.patch matches '${only}'" >&2; exit 2; }

# The source files of the tree to mutate, one path a line, copied to $tree.src when the run
# starts (edits made while it runs do not reach later mutants): the working tree's tracked and
# untracked-but-not-ignored files, or the files of MUTANT_BASE.
src="$tree.src"
list="$tree.files"
rm -rf "$src" && mkdir -p "$src"
if [ -n "$base" ]; then
  git archive "$base" | tar -x -C "$src" || { echo "cannot unpack $base" >&2; exit 2; }
  (cd "$src" && find . -type f | sed 's|^\./||' | sort) >"$list"
else
  git ls-files -co --exclude-standard | sort | while IFS= read -r f; do [ -f "$f" ] && echo "$f"; done >"$list"
  tar -cf - -T "$list" | tar -x -C "$src"
fi

# sync: make $tree's sources equal $src's. Only files whose content differs are copied, and
# they get a new modification time, so make rebuilds exactly what changed (a patched file from
# the previous mutant included). Files gone from the list are deleted; build folders are kept.
sync_tree() {
  local f
  while IFS= read -r f; do
    [ -f "$src/$f" ] || continue
    if ! cmp -s "$src/$f" "$tree/$f"; then
      mkdir -p "$tree/$(dirname "$f")"
      cp --preserve=mode "$src/$f" "$tree/$f"
    fi
  done <"$list"
  (cd "$tree" && find . -path ./build-cpu -prune -o -path ./build-san -prune -o -path ./build -prune -o -path ./data -prune -o -path ./runs -prune -o -type f -print |
    sed 's|^\./||' | sort) | comm -23 - "$list" | while IFS= read -r f; do rm -f "$tree/$f"; done
}

if [ ! -d "$tree" ]; then
  mkdir -p "$tree"
  if [ -z "$base" ] && [ -d "$root/$mbuild" ]; then
    # First run on the working tree: the sources with their times plus this checkout's CPU build,
    # so the first build only redoes what that build lacks.
    tar -C "$src" -cf - -T "$list" | tar -C "$tree" -xf -
    cp -a "$root/$mbuild" "$tree/$mbuild"
    rm -rf "$tree/$mbuild/test-logs"
  fi
fi
sync_tree

echo "mutation testing: ${#patches[@]} mutant(s) on ${base:-the working tree} in $tree$([ "$quick" = 1 ] && echo ' (quick: expected killers only)')"
echo "building the unmutated tree (CUDA=0)..."
if ! make -C "$tree" -j"$jobs" CUDA=0 BUILD=$mbuild tests >"$dir/logs/base-build.log" 2>&1; then
  tail -20 "$dir/logs/base-build.log"
  echo "the unmutated tree does not build (log $dir/logs/base-build.log)" >&2
  exit 2
fi

rows=()
bad=0
for p in "${patches[@]}"; do
  name=$(basename "$p" .patch)
  log="$dir/logs/$name.log"
  killer=$(head -n 1 "$p" | sed -n 's/.*expected killer: *//p')
  # "needs SAN=address,undefined" on the first line: a bug only a sanitizer sees (its plain build
  # reads allocator padding); built and tested in the scratch tree's build-san/ instead.
  san=$(head -n 1 "$p" | sed -n 's/.*needs SAN=\([a-z,]*\).*/\1/p')
  bdir=$mbuild
  mk=(CUDA=0 BUILD=$bdir)
  [ -z "$san" ] || { bdir=build-san; mk=(SAN="$san" BUILD=$bdir); }
  # "needs CUDA=1": a bug in the GPU code, which only a CUDA build compiles and the emulated-GPU
  # tests run (bench/gpu/emulate, no GPU needed): built and tested in the scratch tree's build/.
  if head -n 1 "$p" | grep -q 'needs CUDA=1'; then
    [ -x /usr/local/cuda/bin/nvcc ] || { rows+=("$name|NO: needs CUDA=1|no CUDA toolkit here|0s"); bad=$((bad + 1)); continue; }
    bdir=build
    mk=(CUDA=1 BUILD=$bdir)
  fi
  sync_tree
  t0=$SECONDS
  if ! (cd "$tree" && git apply "$root/$p") >"$log" 2>&1; then
    rows+=("$name|NO: does not apply|$(head -n 1 "$log")|0s")
    bad=$((bad + 1))
    continue
  fi
  if ! make -C "$tree" -j"$jobs" "${mk[@]}" tests >>"$log" 2>&1; then
    rows+=("$name|NO: does not build|see $log|$((SECONDS - t0))s")
    bad=$((bad + 1))
    continue
  fi
  if [ "$quick" = 1 ]; then  # the killer's run_tests.sh name: its first word ("e2e/test_dp_zero")
    filter=${killer%%[ ;,]*}
    (cd "$tree" && MPITRON_TEST_FAILFAST=1 BUILD=$bdir SAN=$san bash tests/run_tests.sh all "$filter") >>"$log" 2>&1
  else
    (cd "$tree" && MPITRON_TEST_FAILFAST=1 make --no-print-directory "${mk[@]}" test) >>"$log" 2>&1
  fi
  rc=$?
  first=$(sed -n 's/^FAIL  \(.*[^ ]\) \+[0-9]\+s (exit.*/\1/p' "$log" | head -n 1)
  if [ $rc -eq 0 ] && grep -q '^0 passed, 0 failed' "$log"; then
    rows+=("$name|NO: no test ran|expected killer '${killer%%[ ;,]*}' names no run_tests.sh test|$((SECONDS - t0))s")
    bad=$((bad + 1))
  elif [ $rc -eq 0 ]; then
    rows+=("$name|SURVIVED|(expected: ${killer:-?})|$((SECONDS - t0))s")
    bad=$((bad + 1))
  else
    rows+=("$name|killed|${first:-make test failed, see $log}|$((SECONDS - t0))s")
  fi
  echo "  $name: ${rows[-1]#*|}" | tr '|' ' '
done
sync_tree  # leave the scratch tree unmutated

echo
{
  echo "mutant|killed?|first failing test|time"
  printf '%s\n' "${rows[@]}"
} | column -t -s '|'
echo "logs: $dir/logs/"
[ $bad -eq 0 ] && echo "all ${#patches[@]} mutant(s) killed"
[ $bad -eq 0 ]
