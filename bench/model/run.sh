#!/usr/bin/env bash
# Builds bench/model/bench_model (make's rule, BUILD, default build), then runs it with 2 OpenMP
# threads. Extra arguments go to the program: --no-gemm, --no-breakdown, --only tiny|heldout|small|124m.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
make --no-print-directory BUILD="$BUILD" -j2 "$BUILD/bench/bench_model" >/dev/null
OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} "$BUILD/bench/bench_model" "$@"
