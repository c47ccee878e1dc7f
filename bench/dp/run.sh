#!/usr/bin/env bash
# bench/dp: data-parallel throughput on this host's 2 cores, the small GPT (V 8192, 6 layers,
# 6 heads, d 384, seq 256, micro-batch 8 per rank): one rank at 1 and 2 threads vs two ranks x 1
# thread for ZeRO 0..3 (and the DP progress modes), next to PyTorch DDP (gloo, 2 processes x 1
# thread, 25 MB buckets) on the same model and per-rank batch, in the same run. Every
# configuration runs REPEAT times, interleaved; the table quotes medians (shared, noisy machine).
#   bash bench/dp/run.sh [steps] [repeat]       -> bench/results/dp.md (+ dp_runs.jsonl, every run)
#   bash bench/dp/run.sh --render                -> dp.md again from dp_runs.jsonl
#   MPITRON_BEFORE=/path/to/older/mpitron [MPITRON_BEFORE_LABEL="commit abc1234"] bash bench/dp/run.sh ...
#     adds that binary's ZeRO-1/2 rows, interleaved with the others: before and after in one run
# Needs: make, make data, python3-torch (MPITRON_DEPS_TORCH=1 make deps).
set -euo pipefail
cd "$(dirname "$0")/../.."
RENDER=0
[ "${1:-}" = --render ] && { RENDER=1; shift; }
STEPS=${1:-8}
REPEAT=${2:-3}
RUNS=bench/results/dp_runs.jsonl
BIN=${MPITRON:-build/mpitron}
BEFORE=${MPITRON_BEFORE:-}
OUT=bench/results/dp.md
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[ -d data/demo ] || make data >/dev/null
MPIRUN=(mpirun --oversubscribe --bind-to none)
[ "$(id -u)" -eq 0 ] && MPIRUN+=(--allow-run-as-root)
V=8192 L=6 H=6 D=384 T=256 B=8
model=(--model.vocab_size=$V --model.n_layer=$L --model.n_head=$H --model.d_model=$D --model.seq_len=$T
       --train.micro_batch=$B --train.steps="$STEPS" --eval.every=0 --eval.batches=0 --log.every=1
       --train.peak_flops=1e11)

mpitron() {  # name np threads extra...   (BIN=... mpitron ...: another binary)
  local name=$1 np=$2 th=$3
  shift 3
  rm -rf "${tmp:?}/$name"  # a fresh run dir: an existing one would be resumed (checkpoints)
  "${MPIRUN[@]}" -np "$np" -x OMP_NUM_THREADS="$th" "${BIN_RUN:-$BIN}" train jobs/tiny.toml "${model[@]}" \
    --train.threads="$th" --train.global_batch=$((B * np)) --job.run_dir="$tmp/$name" "$@" >"$tmp/$name.log" 2>&1 ||
    { tail -20 "$tmp/$name.log"; exit 1; }
  /usr/bin/python3 - "$tmp/$name/metrics.jsonl" "$name" >>"$tmp/results.jsonl" <<'PY'
import json, statistics, sys
rows = [r for r in map(json.loads, open(sys.argv[1])) if "step_ms" in r and r["step"] >= 2]
med = lambda k: statistics.median(r[k] for r in rows)
for r in rows:
    r["exposed_ms"] = r["comm_ms"] * (1 - r["overlap"])
print(json.dumps({"name": sys.argv[2], "tokens_per_s": med("tokens_per_s"), "step_ms": med("step_ms"),
                  "comm_ms": med("comm_ms"), "exposed_ms": med("exposed_ms"), "overlap": med("overlap")}))
PY
}
torch_ddp() {  # name procs threads
  env LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp OMP_NUM_THREADS="$3" /usr/bin/python3 \
    bench/dp/torch_ddp.py --vocab $V --layers $L --heads $H --d $D --seq $T --batch $B --steps $((STEPS - 1)) \
    --procs "$2" --threads "$3" 2>"$tmp/$1.err" |
    /usr/bin/python3 -c 'import json,sys; r=json.loads(sys.stdin.read()); print(json.dumps({"name": sys.argv[1],
      "tokens_per_s": r["tokens_per_s"], "step_ms": r["ms_per_step"], "blas": r["blas"], "netlib": r["netlib"]}))' \
      "$1" >>"$tmp/results.jsonl"
}

if [ "$RENDER" = 1 ]; then
  cp "$RUNS" "$tmp/results.jsonl"
  read -r STEPS REPEAT < <(/usr/bin/python3 -c 'import json,sys; r=json.loads(open(sys.argv[1]).readline()); print(r.get("steps", 8), r.get("repeat", 3))' "$RUNS")
else
[ -d /usr/lib/x86_64-linux-gnu/openblas-openmp ] ||
  echo "bench/dp: no OpenMP OpenBLAS build for PyTorch (MPITRON_DEPS_TORCH=1 make deps installs libopenblas0-openmp); its rates will not be compared" >&2
load() { cut -d' ' -f1 /proc/loadavg; }
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
before_note=""
[ -n "$BEFORE" ] && before_note=", \"before\": \"${MPITRON_BEFORE_LABEL:-$BEFORE}\""
echo "{\"name\": \"meta\", \"steps\": $STEPS, \"repeat\": $REPEAT, \"cpu\": \"$cpu\", \"cores\": $(nproc), \"load_start\": $(load)$before_note}" \
  >"$tmp/results.jsonl"
for rep in $(seq "$REPEAT"); do
  mpitron np1_t1 1 1
  mpitron np1_t2 1 2
  for z in 0 1 2 3; do mpitron "np2_z$z" 2 1 --parallel.zero=$z; done
  if [ -n "$BEFORE" ]; then
    for z in 1 2; do BIN_RUN=$BEFORE mpitron "np2_z${z}_before" 2 1 --parallel.zero=$z; done
  fi
  mpitron np2_z0_25mb 2 1 --parallel.zero=0 --parallel.bucket_mb=25  # the former fixed cap
  mpitron np2_z0_poll 2 1 --parallel.zero=0 --parallel.dp_progress=poll
  mpitron np2_z0_none 2 1 --parallel.zero=0 --parallel.dp_progress=none
  torch_ddp torch_ddp_2x1 2 1
  torch_ddp torch_1x1 1 1
  echo "repetition $rep done" >&2
done
echo "{\"name\": \"meta_end\", \"load_end\": $(load)}" >>"$tmp/results.jsonl"
cp "$tmp/results.jsonl" "$RUNS"
fi

/usr/bin/python3 - "$tmp/results.jsonl" "$STEPS" "$REPEAT" >"$OUT" <<'PY'
import collections, datetime, json, statistics, sys
all_rows = list(map(json.loads, open(sys.argv[1])))
meta = {k: v for r in all_rows if r["name"].startswith("meta") for k, v in r.items()}
rows = [r for r in all_rows if not r["name"].startswith("meta")]
by = collections.defaultdict(list)
for r in rows:
    by[r["name"]].append(r)
med = lambda name, k: statistics.median(r[k] for r in by[name])
raw = lambda name, k: ", ".join(f"{r[k]:.0f}" for r in by[name])
ideal = 2 * med("np1_t1", "tokens_per_s")
torch_ideal = 2 * med("torch_1x1", "tokens_per_s")
print("# Data parallel on 2 CPU cores: mpitron DDP / ZeRO vs PyTorch DDP\n")
where = f"{meta['cpu']}, {meta['cores']} cores" if "cpu" in meta else "this host"
load = (f"; 1-minute load average {meta['load_start']} at the start and {meta['load_end']} at the end"
        if "load_start" in meta and "load_end" in meta else "")
print(f"Measured {datetime.date.today()} on {where}{load}.")
print(f"Small GPT: V 8192, 6 layers, 6 heads, d 384, seq 256, micro-batch 8 per rank,")
print(f"fp32, AdamW; per configuration the median over steps 2..{sys.argv[2]} of one run, then the median of")
print(f"{sys.argv[3]} interleaved repetitions (raw per-run values in the last column). `bash bench/dp/run.sh {sys.argv[2]} {sys.argv[3]}`.")
print("Ideal = 2 x the 1-rank, 1-thread rate of the same implementation.\n")
print("| configuration | tokens/s | vs ideal | step ms | comm ms | exposed ms | overlapped | runs (tokens/s) |")
print("|---|---|---|---|---|---|---|---|")
names = [("np1_t1", "mpitron 1 rank x 1 thread"), ("np1_t2", "mpitron 1 rank x 2 threads"),
         ("np2_z0", "mpitron 2 ranks x 1 thread, ZeRO-0 (DDP)"), ("np2_z1", "mpitron 2x1, ZeRO-1"),
         ("np2_z2", "mpitron 2x1, ZeRO-2"), ("np2_z3", "mpitron 2x1, ZeRO-3"),
         ("np2_z1_before", f"mpitron 2x1, ZeRO-1, before ({meta.get('before', 'an older build')})"),
         ("np2_z2_before", f"mpitron 2x1, ZeRO-2, before ({meta.get('before', 'an older build')})"),
         ("np2_z0_25mb", "mpitron 2x1, ZeRO-0, buckets of 25 MiB (the former default; now a quarter of the model)"),
         ("np2_z0_poll", "mpitron 2x1, ZeRO-0, progress: poll between layers"),
         ("np2_z0_none", "mpitron 2x1, ZeRO-0, progress: none (wait at the end)"),
         ("torch_1x1", "PyTorch 1 process x 1 thread"), ("torch_ddp_2x1", "PyTorch DDP (gloo) 2 processes x 1 thread")]
for key, label in names:
    if key not in by:
        continue
    tps = med(key, "tokens_per_s")
    ref = torch_ideal if key.startswith("torch") else ideal
    two = key.startswith("np2") or key == "torch_ddp_2x1"
    comm = f"{med(key, 'comm_ms'):.0f}" if "comm_ms" in by[key][0] and two else "-"
    ov = f"{100 * med(key, 'overlap'):.0f}%" if "overlap" in by[key][0] and two else "-"
    ex = f"{med(key, 'exposed_ms'):.0f}" if "exposed_ms" in by[key][0] and two else "-"
    print(f"| {label} | {tps:,.0f} | {f'{tps / ref:.2f}x' if two else '-'} | {med(key, 'step_ms'):.0f} | {comm} | {ex} | {ov} | "
          f"{raw(key, 'tokens_per_s')} |")
print()
blas = sorted({r.get("blas", "not recorded") for k in ("torch_1x1", "torch_ddp_2x1") for r in by.get(k, [])})
print(f"PyTorch's GEMMs called: {', '.join(blas)}.")
netlib = any(r.get("netlib", False) for k in ("torch_1x1", "torch_ddp_2x1") for r in by.get(k, []))
if "blas" not in by.get("torch_ddp_2x1", [{}])[0] or netlib:
    # Against the netlib reference BLAS (or an unrecorded one) a ratio says nothing about PyTorch.
    print("mpitron DDP (ZeRO-0) / PyTorch DDP: n/a (PyTorch did not run on an optimized BLAS)")
else:
    print(f"mpitron DDP (ZeRO-0) / PyTorch DDP: {med('np2_z0', 'tokens_per_s') / med('torch_ddp_2x1', 'tokens_per_s'):.2f}x")
PY
cat "$OUT"
