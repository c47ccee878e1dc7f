#!/usr/bin/env bash
# The emulated cluster is a real 2-node allocation: a 2 nodes x 2 tasks batch job running
# `srun --mpi=pmix mpitron env --parallel.tp=2` sees ranks 0-1 on one node and 2-3 on the other,
# and every TP group inside one node.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source tests/e2e/slurm/lib.sh

cat >"$T/env.sbatch" <<'JOB'
#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=2
#SBATCH --distribution=block:block
export SLURM_PMIX_FENCE=ring  # MPI_Init's closing fence a barrier across nodes (docs/slurm.md)
srun --mpi=pmix --kill-on-bad-exit=1 "$MPITRON" env --parallel.tp=2
JOB
id=$(sbatch --parsable -o "$T/env.out" "$T/env.sbatch") || { bad "sbatch failed"; finish; exit; }
wait_job "$id" 60 || bad "env job $id did not end in 60 s"
cat "$T/env.out"
state=$(scontrol show job "$id" | grep -o 'JobState=[A-Z]* .*' | head -n 1)
[[ "$(job_state "$id")" == COMPLETED ]] && ok "job $id COMPLETED" || bad "job $id: $state"
grep -q '^mpitron env: 4 ranks on 2 nodes' "$T/env.out" && ok "4 ranks on 2 nodes" || bad "expected '4 ranks on 2 nodes'"

# Table rows: rank local node host device (tp,cp,dp,pp) tp-group ...
awk '$1 ~ /^[0-9]+$/ && NF >= 7 { print $1, $3, $7 }' "$T/env.out" >"$T/rows"
[ "$(wc -l <"$T/rows")" = 4 ] && ok "4 rank rows" || bad "expected 4 rank rows, got $(wc -l <"$T/rows")"
declare -A node
while read -r r n g; do node[$r]=$n; done <"$T/rows"
[ "${node[0]:-x}" = "${node[1]:-y}" ] && ok "ranks 0,1 on node ${node[0]:-?}" || bad "ranks 0,1 on nodes ${node[0]:-?},${node[1]:-?}"
[ "${node[2]:-x}" = "${node[3]:-y}" ] && ok "ranks 2,3 on node ${node[2]:-?}" || bad "ranks 2,3 on nodes ${node[2]:-?},${node[3]:-?}"
[ "${node[0]:-x}" != "${node[2]:-x}" ] && ok "ranks 0-1 and 2-3 on different nodes" || bad "ranks 0 and 2 share node ${node[0]:-?}"
while read -r r n g; do
  for m in $(tr -d '[]' <<<"$g" | tr ',' ' '); do
    [ "${node[$m]:-x}" = "$n" ] || bad "rank $r's TP group $g spans nodes (rank $m on node ${node[$m]:-?})"
  done
done <"$T/rows"
awk '{print $3}' "$T/rows" | sort -u | tr '\n' ' ' | grep -qx '\[0,1\] \[2,3\] ' && ok "TP groups [0,1] [2,3] inside nodes" ||
  bad "TP groups: $(awk '{print $3}' "$T/rows" | sort -u | tr '\n' ' ')"
grep -qi 'warning:.*span' "$T/env.out" && bad "a node-spanning warning was printed" || ok "no node-spanning warning"
finish
