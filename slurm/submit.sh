#!/bin/bash
# Submit a job file with the node/task counts its parallel layout needs.
#
#   slurm/submit.sh [--print] JOB.toml [sbatch args ...] [-- --section.key=value ...]
#
# The layout comes from `mpitron train JOB --dry-run` (the resolved TOML: [parallel] tp/cp/pp/dp
# and train.backend, after the job overrides given after `--`). Then:
#   tasks per node T = --ntasks-per-node if given, else $MPITRON_TASKS_PER_NODE, else 8
#                      (one task per GPU of an 8-GPU node)
#   dp > 0:  world W = tp*cp*dp*pp; nodes = W / T (W must be a multiple of T; a job smaller
#            than one node gets 1 node x W tasks); a --nodes that disagrees is an error
#   dp = 0:  nodes = --nodes if given, else 1; W = nodes*T must be a multiple of tp*cp*pp and
#            dp is inferred by the trainer as W/(tp*cp*pp)
#   tp must divide T, so every TP group sits inside one node (blocks of T ranks per node)
#   train.backend = "nccl" adds --gpus-per-node=T unless --gpus-per-node/--gpus/--gres is given
# --print shows the sbatch command instead of running it. MPITRON=path picks the binary used for
# the dry run and the job (default build/mpitron). Run from the repository root.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MPITRON=${MPITRON:-build/mpitron}

die() { echo "submit.sh: $*" >&2; exit 2; }

print_only=0
if [ "${1:-}" = --print ]; then print_only=1; shift; fi
[ $# -ge 1 ] && [ "${1:-}" != -h ] && [ "${1:-}" != --help ] ||
  { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; [ $# -ge 1 ]; exit $?; }
JOB=$1
shift
[ -f "$JOB" ] || die "job file '$JOB' not found"

sb_args=() overrides=()
while [ $# -gt 0 ]; do
  if [ "$1" = -- ]; then shift; overrides=("$@"); break; fi
  sb_args+=("$1")
  shift
done

# The sbatch options this script derives or respects (--opt=v, --opt v, -Xv, -X v).
opt_value() {  # long short -> value of the last occurrence in sb_args (empty if absent)
  local long=$1 short=$2 v= i
  for ((i = 0; i < ${#sb_args[@]}; i++)); do
    local a=${sb_args[i]}
    case $a in
      "$long"=*) v=${a#*=} ;;
      "$long") v=${sb_args[i + 1]:-} ;;
      "$short") [ -n "$short" ] && v=${sb_args[i + 1]:-} ;;
      "$short"?*) [ -n "$short" ] && v=${a#"$short"} ;;
    esac
  done
  echo "$v"
}
[ -z "$(opt_value --ntasks -n)" ] || die "give --nodes/--ntasks-per-node, not --ntasks/-n (the layout needs whole nodes)"
nodes_arg=$(opt_value --nodes -N)
tpn_arg=$(opt_value --ntasks-per-node '')
[[ "$nodes_arg" =~ ^[0-9]*$ ]] || die "--nodes=$nodes_arg: give a plain node count"

# --- the job's layout from the trainer's own resolution of the file ---
parse_layout() {  # resolved TOML on stdin -> "tp cp pp dp backend name"
  awk '
    /^\[/ { sec = $0; gsub(/[\[\] ]/, "", sec); next }
    /=/ {
      k = $0; sub(/=.*/, "", k); gsub(/ /, "", k)
      v = $0; sub(/^[^=]*=[ ]*/, "", v); sub(/[ ]*#.*$/, "", v); gsub(/"/, "", v)
      val[sec "." k] = v
    }
    END {
      if (val["parallel.tp"] == "") val["parallel.tp"] = 1
      if (val["parallel.cp"] == "") val["parallel.cp"] = 1
      if (val["parallel.pp"] == "") val["parallel.pp"] = 1
      if (val["parallel.dp"] == "") val["parallel.dp"] = 0
      if (val["train.backend"] == "") val["train.backend"] = "cpu"
      printf "%s %s %s %s %s %s\n", val["parallel.tp"], val["parallel.cp"], val["parallel.pp"], val["parallel.dp"],
        val["train.backend"], val["job.name"]
    }'
}
dry_out=$("$MPITRON" train "$JOB" "${overrides[@]}" --dry-run 2>"${TMPDIR:-/tmp}/submit.$$.err") || true
if ! grep -q '^\[parallel\]' <<<"$dry_out"; then
  # A dry run as one process cannot build a layout that needs more ranks; validate every other key
  # with a 1-rank layout, and read [parallel] from the file plus the overrides.
  "$MPITRON" train "$JOB" "${overrides[@]}" --parallel.tp=1 --parallel.cp=1 --parallel.pp=1 --parallel.dp=1 \
    --dry-run >/dev/null 2>"${TMPDIR:-/tmp}/submit.$$.err2" || {
    cat "${TMPDIR:-/tmp}/submit.$$.err" >&2
    rm -f "${TMPDIR:-/tmp}"/submit.$$.err*
    die "'$MPITRON train $JOB --dry-run' failed (see above)"
  }
  dry_out=$( (printf '[parallel]\ntp = 1\ncp = 1\npp = 1\ndp = 0\n[train]\nbackend = "cpu"\n[job]\nname = "run"\n'
    cat "$JOB"
    for o in "${overrides[@]}"; do
      [[ "$o" =~ ^--([a-z_]+)\.([a-z_]+)=(.*)$ ]] && printf '[%s]\n%s = %s\n' "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}" "${BASH_REMATCH[3]}"
    done))
fi
rm -f "${TMPDIR:-/tmp}"/submit.$$.err*
# The job's [env] warnings (a misspelt NCCL_* name, ...): here, before the job waits in the queue.
grep '^# warning: ' <<<"$dry_out" | sed 's/^# //' >&2 || true
read -r tp cp pp dp backend name < <(parse_layout <<<"$dry_out")
for v in tp cp pp dp; do [[ "${!v}" =~ ^[0-9]+$ ]] || die "could not read parallel.$v from the dry run"; done

mp=$((tp * cp * pp))
T=${tpn_arg:-${MPITRON_TASKS_PER_NODE:-8}}
[[ "$T" =~ ^[1-9][0-9]*$ ]] || die "tasks per node '$T' is not a positive number"
if [ "$dp" -gt 0 ]; then
  W=$((mp * dp))
  if [ -z "$tpn_arg" ] && [ "$W" -lt "$T" ] && [ -z "$nodes_arg" -o "$nodes_arg" = 1 ]; then
    T=$W
  fi
fi
[ $((T % tp)) -eq 0 ] || die "tp $tp does not divide $T tasks per node: a TP group would span nodes"
if [ "$dp" -gt 0 ]; then
  [ $((W % T)) -eq 0 ] || die "world $W (tp $tp x cp $cp x dp $dp x pp $pp) is not a multiple of $T tasks per node"
  N=$((W / T))
  [ -z "$nodes_arg" ] || [ "$nodes_arg" -eq "$N" ] ||
    die "--nodes=$nodes_arg x $T tasks = $((nodes_arg * T)) ranks, but the job's layout needs $W (set parallel.dp=0 to infer dp)"
else
  N=${nodes_arg:-1}
  W=$((N * T))
  [ $((W % mp)) -eq 0 ] ||
    die "$N nodes x $T tasks = $W ranks is not a multiple of tp $tp x cp $cp x pp $pp = $mp"
  dp=$((W / mp))
fi

extra=()
[ -n "$nodes_arg" ] || extra+=(--nodes="$N")
[ -n "$tpn_arg" ] || extra+=(--ntasks-per-node="$T")
if [ "$backend" = nccl ] && [ -z "$(opt_value --gpus-per-node '')$(opt_value --gpus -G)$(opt_value --gres '')" ]; then
  extra+=(--gpus-per-node="$T")
fi
[ -n "$(opt_value --job-name -J)" ] || extra+=(--job-name="mpitron-${name:-run}")

echo "submit.sh: $JOB: world $W = tp $tp x cp $cp x dp $dp x pp $pp on $N node(s) x $T task(s), backend ${backend:-cpu}" >&2
cmd=(sbatch "${extra[@]}" "${sb_args[@]}" "$HERE/train.sbatch" "$JOB" "${overrides[@]}")
if [ $print_only = 1 ]; then
  line=$(printf '%q ' "${cmd[@]}")
  echo "${line% }"
  exit 0
fi
MPITRON=$MPITRON exec "${cmd[@]}"
