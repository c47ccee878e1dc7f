#!/usr/bin/env bash
# slurm/submit.sh derives --nodes / --ntasks-per-node / --gpus-per-node from the job's layout (read
# with the real `mpitron train JOB --dry-run`) and refuses layouts that do not fit whole nodes.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source tests/e2e/slurm/lib.sh

expect() {  # name want-regex args...
  local name=$1 want=$2 out
  shift 2
  out=$(slurm/submit.sh --print "$@" 2>&1) && grep -qE -- "$want" <<<"$out" && ok "$name: $(tail -n 1 <<<"$out")" ||
    bad "$name: wanted /$want/, got: $out"
}
expect_fail() {  # name want-substring args...
  local name=$1 want=$2 out rc=0
  shift 2
  out=$(slurm/submit.sh --print "$@" 2>&1) || rc=$?
  [ $rc -ne 0 ] && grep -qF -- "$want" <<<"$out" && ok "$name fails: $out" || bad "$name (rc=$rc): $out"
}
expect "124m: 1 node x 8 GPUs" '^sbatch --nodes=1 --ntasks-per-node=8 --gpus-per-node=8 .*train.sbatch jobs/gpt2-124m-1node-8gpu.toml' \
  jobs/gpt2-124m-1node-8gpu.toml
expect "1.5b 3D: 2 nodes x 8 GPUs" '^sbatch --nodes=2 --ntasks-per-node=8 --gpus-per-node=8 ' jobs/gpt2-1.5b-2node-16gpu.toml
expect "70b plan: 8 nodes x 8 GPUs" '^sbatch --nodes=8 --ntasks-per-node=8 --gpus-per-node=8 ' jobs/llama-style-70b.toml
expect "tiny on 2 x 2 (dp inferred)" 'world 4 = tp 2 x cp 1 x dp 1 x pp 2' jobs/tiny.toml -N 2 --ntasks-per-node=2 -- --parallel.tp=2 --parallel.pp=2
expect "small job on part of a node" '^sbatch --nodes=1 --ntasks-per-node=4 ' jobs/tiny.toml -- --parallel.dp=4
expect "job overrides reach the job" 'train.sbatch jobs/tiny.toml --train.steps=3$' jobs/tiny.toml -- --train.steps=3
expect "[env] warnings shown before queueing" 'did you mean NCCL_SOCKET_IFNAME\?' jobs/tiny.toml -- --env.NCCL_SOCKET_IFNAM=eth0
expect_fail "TP across nodes" "a TP group would span nodes" jobs/tiny.toml --ntasks-per-node=3 -- --parallel.tp=2
expect_fail "--nodes disagrees with dp" "the job's layout needs 16" jobs/gpt2-1.5b-2node-16gpu.toml --nodes=3
expect_fail "--ntasks" "not --ntasks" jobs/tiny.toml -n 4
expect_fail "typo in a job key" "stepz" jobs/tiny.toml -- --train.stepz=3
finish
