# Helpers shared by tests/e2e/slurm/test_*.sh. Sourcing it joins the cluster run.sh started (or
# starts a private one when a test runs alone: `bash tests/e2e/slurm/test_cluster.sh`), makes the
# scratch dir $T and removes both on exit.
source "$(dirname "${BASH_SOURCE[0]}")/cluster.sh"
CLUSTER_TMP=
T=$(mktemp -d /tmp/mpitron-slurmtest.XXXXXX)
trap 'cluster_stop; rm -rf "$T" ${CLUSTER_TMP:+"$CLUSTER_TMP"}' EXIT
cluster_ensure || { echo "FAIL: cannot start the test cluster"; exit 1; }
fails=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }
skip() { echo "SKIP: $*"; exit 77; }
finish() { echo "$fails failure(s)"; [ "$fails" -eq 0 ]; }
MPITRON=${MPITRON:-$PWD/build/mpitron}
export MPITRON


# A small byte-level dataset in $T/data (a few hundred KB of fortunes, or generated text).
make_data() {
  local src=() f
  for f in /usr/share/games/fortunes/{fortunes,literature,riddles,science,wisdom}; do [ -f "$f" ] && src+=("$f"); done
  if [ ${#src[@]} -eq 0 ]; then
    for i in $(seq 1 4000); do echo "line $i: the quick brown fox jumps over the lazy dog $((i * 7919 % 1000))"; done >"$T/corpus.txt"
    src=("$T/corpus.txt")
  fi
  "$MPITRON" prep --input "${src[@]}" --tokenizer byte --out "$T/data" --val-fraction 0.05 --quiet
}

# Wait until file $1 has at least $2 lines matching regex $3 (or job $4 left the queue); 1 on timeout $5.
wait_lines() {
  local file=$1 n=$2 re=$3 id=$4 limit=$5 t c
  for t in $(seq 1 $((limit * 2))); do
    c=$(grep -cE "$re" "$file" 2>/dev/null)  # nothing while the job has not created the file yet
    [ "${c:-0}" -ge "$n" ] && return 0
    case $(job_state "$id") in PENDING | RUNNING | CONFIGURING | COMPLETING | REQUEUED) ;; *) return 1 ;; esac
    sleep 0.5
  done
  return 1
}
