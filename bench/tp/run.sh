#!/usr/bin/env bash
# Tensor parallel on the small config (vocab 8192, 6 layers, 6 heads, d 384, seq 256) on this
# machine's CPU cores: tokens/s and TP communication time per step at tp=1 vs tp=2 (with and
# without sequence parallel), next to the other ways of using the same 2 cores (2 OpenMP threads
# on one rank; dp=2). Each layout runs REPS times (the machine is shared and noisy); the table
# gives medians over runs of the median step (first step excluded).
# usage: bench/tp/run.sh [out.md]     (needs build/mpitron and `make data`)
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${BUILD:=build}" "${REPS:=3}" "${STEPS:=6}"
out=${1:-bench/results/tp.md}
MPITRON=$BUILD/mpitron
[ -x "$MPITRON" ] || { echo "no $MPITRON (make first)" >&2; exit 1; }
[ -e data/demo/train_00000.h5 ] || { echo "no data/demo (make data first)" >&2; exit 1; }
MPIRUN="mpirun --oversubscribe --bind-to none"
[ "$(id -u)" -eq 0 ] && MPIRUN="$MPIRUN --allow-run-as-root"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
model=(--model.vocab_size=8192 --model.n_layer=6 --model.n_head=6 --model.d_model=384 --model.seq_len=256)
common=(--data.path=data/demo --train.steps="$STEPS" --train.micro_batch=4 --train.global_batch=8
        --eval.batches=0 --log.every=1 --train.peak_flops=1e11)

layouts=(
  "tp1 1x1thread|1|1|"
  "tp1 1x2threads|1|2|"
  "dp2|2|1|--parallel.dp=2"
  "tp2|2|1|--parallel.tp=2"
  "tp2 sp|2|1|--parallel.tp=2 --parallel.sp=true"
)
for rep in $(seq "$REPS"); do
  for l in "${layouts[@]}"; do
    IFS='|' read -r name np thr extra <<<"$l"
    log="$tmp/${name// /_}.$rep.log"
    # shellcheck disable=SC2086
    $MPIRUN -np "$np" -x OMP_NUM_THREADS="$thr" "$MPITRON" train jobs/tiny.toml "${model[@]}" "${common[@]}" \
      --job.run_dir="$tmp/run_${name// /_}_$rep" $extra >"$log" 2>&1 || { tail -20 "$log"; exit 1; }
    echo "rep $rep $name: $(grep -c '^step' "$log") step lines"
  done
done

/usr/bin/python3 - "$tmp" "$out" "$REPS" "${layouts[@]}" <<'PY'
import re, statistics as st, sys, subprocess, datetime
tmp, out, reps, layouts = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
rows = []
for l in layouts:
    name = l.split("|")[0]
    tok, step, tpc, mem = [], [], [], ""
    for rep in range(1, reps + 1):
        text = open(f"{tmp}/{name.replace(' ', '_')}.{rep}.log").read()
        ms = [float(m) for m in re.findall(r"^step\s+(?:\d+)/\d+ .*?(\d+(?:\.\d+)?) ms", text, re.M)]
        ts = [float(t) for t in re.findall(r"tp comm (\d+(?:\.\d+)?) ms/step", text)]
        if len(ms) > 1:
            step.append(st.median(ms[1:]))
        if ts:
            tpc.append(ts[-1])
        m = re.findall(r"^memory at start rank 0: (.*)$", text, re.M)
        mem = m[0] if m else mem
    tokens = 8 * 256
    s = st.median(step) if step else float("nan")
    rows.append((name, s, tokens / (s / 1e3), st.median(tpc) if tpc else 0.0, mem))
with open(out, "w") as f:
    f.write("# Tensor parallel on CPU: tp=1 vs tp=2 (bench/tp/run.sh)\n\n")
    f.write(f"{datetime.date.today()}, {subprocess.run(['nproc'], capture_output=True, text=True).stdout.strip()} cores"
            f" (shared, noisy: medians over {reps} runs of the median step, first step excluded). Model: GPT-2, vocab 8192, "
            "6 layers, 6 heads, d_model 384, seq 256; global batch 8 x 256 tokens (micro-batch 4).\n\n")
    f.write("| layout | step ms | tokens/s | TP comm ms/step | TP comm share |\n|---|---:|---:|---:|---:|\n")
    for name, s, t, c, _ in rows:
        f.write(f"| {name} | {s:.0f} | {t:.0f} | {c:.0f} | {100 * c / s if s == s and s > 0 else 0:.0f}% |\n")
    f.write("\nRank 0 memory at start (tracked allocator):\n\n")
    for name, *_, mem in rows:
        f.write(f"- {name}: `{mem}`\n")
print(open(out).read())
PY
