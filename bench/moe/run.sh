#!/usr/bin/env bash
# bench/moe: mixture of experts on the CPU trainer. (1) Grouped expert GEMMs: a MoE LLaMA (8
# experts of d_ff 512, top 2) against the dense LLaMA with the same active parameters (d_ff 1024),
# 1 rank: time per step and achieved GFLOP/s on the ACTIVE FLOPs (6 x active params + attention),
# target ratio >= 0.8. (2) Expert parallel: 2 ranks with ep 2 (each runs 4 experts, tokens
# exchanged by all-to-all) against 2 ranks of plain data parallel (every rank runs all 8
# experts on its own tokens) and against 1 rank (ideal: the 1-rank tokens/s per rank), 1 thread
# per rank. Round-robin over 3 repeats, medians over steps >= 3. Writes bench/results/moe.md.
#   bash bench/moe/run.sh [steps]
set -uo pipefail
cd "$(dirname "$0")/../.."
STEPS=${1:-8}
BIN=${MPITRON:-build/mpitron}
OUT=${OUT:-bench/results/moe.md}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[ -d data/demo ] || make data >/dev/null
MPIRUN="mpirun --oversubscribe -x OMP_NUM_THREADS=1 $([ "$(id -u)" -eq 0 ] && echo --allow-run-as-root)"
model=(--model.preset=llama-tiny --model.n_layer=4 --model.d_model=256 --model.n_head=8 --model.n_kv_head=4
       --model.seq_len=256)
moe=(--model.moe.n_experts=8 --model.moe.top_k=2 --model.moe.expert_d_ff=512)
common=(--data.path=data/demo --train.micro_batch=4 --eval.every=0 --log.every=1 --train.peak_flops=1e11
        --train.resume=never --checkpoint.every=0 --train.steps="$STEPS" --train.precision=fp32)

med() {  # metrics.jsonl -> "ms tok/s/rank gflops/rank ep_ms" medians over steps >= 3
  /usr/bin/python3 - "$1" "$2" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"step_ms"' in l]
rows = [r for r in rows if r["step"] >= 3]
m = lambda k: statistics.median(r[k] for r in rows)
ep = [json.loads(l)["ep_exchange_ms"] for l in open(sys.argv[1]) if '"ep_exchange_ms"' in l]
moe = [json.loads(l) for l in open(sys.argv[1]) if '"moe_l0_tokens_max"' in l]
imb = statistics.median(max(r[k] for k in r if k.endswith("tokens_max")) for r in moe[2:]) if moe else 0
print(f'{m("step_ms"):.1f} {m("tokens_per_s") / int(sys.argv[2]):.0f} {m("gflops_per_rank"):.2f} '
      f'{statistics.median(ep[2:]) if ep else 0:.1f} {imb:.0f}')
PY
}
frozen=(--optim.lr=1e-12 --optim.min_lr=1e-13)
declare -A res
runs=("dense:1:--model.d_ff=1024 --train.global_batch=4" "moe:1:${moe[*]} --train.global_batch=4"
      "moe_dp2:2:${moe[*]} --train.global_batch=8" "moe_ep2:2:${moe[*]} --parallel.ep=2 --train.global_batch=8"
      "moe_dp2_frozen:2:${moe[*]} --train.global_batch=8 ${frozen[*]}"
      "moe_ep2_frozen:2:${moe[*]} --parallel.ep=2 --train.global_batch=8 ${frozen[*]}")
# Routing as initialised (lr ~0): the experts' load stays as at step 1 instead of concentrating as
# training moves the router, so the exchange's own cost shows apart from the load imbalance.

for rep in 1 2 3; do
  for spec in "${runs[@]}"; do
    name=${spec%%:*}; r=${spec#*:}; np=${r%%:*}; extra=${r#*:}
    # shellcheck disable=SC2086
    $MPIRUN -np "$np" "$BIN" train jobs/llama-tiny.toml "${model[@]}" "${common[@]}" $extra \
      --job.run_dir="$tmp/$name.$rep" >"$tmp/$name.$rep.log" 2>&1 || { tail "$tmp/$name.$rep.log"; exit 1; }
    res[$name.$rep]=$(med "$tmp/$name.$rep/metrics.jsonl" "$np")
  done
done
pick() {  # name field -> the median over repeats
  for rep in 1 2 3; do echo "${res[$1.$rep]}" | cut -d' ' -f"$2"; done | sort -g | sed -n 2p
}
{
  echo "# Mixture of experts on the CPU trainer"
  echo
  echo "Measured $(date -u +%Y-%m-%d) on $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)),"
  echo "1 OpenMP thread per rank, fp32 GEMMs. Command: \`bash bench/moe/run.sh $STEPS\` (3 round-robin repeats, the"
  echo "median repeat of each run's median over steps >= 3)."
  echo
  echo "Model: LLaMA, 4 layers, d_model 256, 8 heads (4 kv), seq 256, micro-batch 4. MoE: 8 experts of d_ff 512,"
  echo "top 2, Mixtral router, every block. Dense peer: d_ff 1024, the same active parameters per token (the"
  echo "router's 8 x 256 aside). GFLOP/s count 6 x active parameters + attention per token (gpt_flops_per_token)."
  echo
  echo "| run | ranks | ms/step | tokens/s per rank | active GFLOP/s per rank | ep exchange ms/step (incl. waiting) | busiest expert's copies in a block per step (median; mean: 512 on 2 ranks, 256 on 1; 2048 / 1024: every token sends it a copy) |"
  echo "|---|---|---|---|---|---|---|"
  for spec in "${runs[@]}"; do
    name=${spec%%:*}; r=${spec#*:}; np=${r%%:*}
    echo "| $name | $np | $(pick "$name" 1) | $(pick "$name" 2) | $(pick "$name" 3) | $(pick "$name" 4) | $(pick "$name" 5) |"
  done
  echo
  d=$(pick dense 3); m=$(pick moe 3); t1=$(pick moe 2); te=$(pick moe_ep2 2); td=$(pick moe_dp2 2)
  /usr/bin/python3 -c "print(f'- MoE / dense, time per active FLOP: **{$m / $d:.2f}x** (target >= 0.8)')"
  /usr/bin/python3 -c "print(f'- ep2 on 2 ranks, tokens/s per rank vs 1 rank (ideal 1.0; the 2 ranks share 2 cores): **{$te / $t1:.2f}x**; plain dp2 (no token exchange): {$td / $t1:.2f}x; ep2 / dp2: {$te / $td:.2f}x')"
  tf=$(pick moe_ep2_frozen 2); tdf=$(pick moe_dp2_frozen 2)
  /usr/bin/python3 -c "print(f'- routing frozen at its initial load: ep2 / dp2 **{$tf / $tdf:.2f}x**, ep2 vs 1 rank {$tf / $t1:.2f}x')"
} | tee "$OUT"
