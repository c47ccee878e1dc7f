#!/usr/bin/env bash
# Alternates PyTorch 1.13 (bench/train_cpu/torch_gpt.py, OpenMP OpenBLAS, 2 threads) and
# mpitron's bench_model on the three shapes, REPS times, printing the load average before each
# pair (the machines are shared: quote the quietest pairs). Run bench/model/run.sh first.
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
REPS=${REPS:-2}
torch_run() {
  LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp /usr/bin/python3 bench/train_cpu/torch_gpt.py "$@"
}
for rep in $(seq "$REPS"); do
  for cfg in tiny small 124m; do
    case $cfg in
      tiny) args="--vocab 256 --layers 4 --heads 4 --d 256 --seq 256 --batch 8 --steps 5" ;;
      small) args="--vocab 8192 --layers 6 --heads 6 --d 384 --seq 256 --batch 8 --steps 4" ;;
      124m) args="--vocab 50257 --layers 12 --heads 12 --d 768 --seq 256 --batch 4 --steps 3" ;;
    esac
    echo "# rep $rep $cfg load $(cut -d' ' -f1 /proc/loadavg)"
    torch_run $args
    OMP_NUM_THREADS=2 "$BUILD/bench/bench_model" --no-gemm --no-breakdown --only "$cfg" | tail -1
  done
done
