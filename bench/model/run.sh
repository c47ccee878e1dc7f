#!/usr/bin/env bash
# Builds the library (BUILD, default build) and bench/model/bench_model, then runs it with 2
# OpenMP threads. Extra arguments go to the program: --no-gemm, --no-breakdown, --only tiny|small|124m.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
make --no-print-directory BUILD="$BUILD" -j2 "$BUILD/libmpitron.a" >/dev/null
mkdir -p "$BUILD/bench"
g++ -std=c++20 -O3 -march=native -fopenmp -Iinclude $(pkg-config --cflags hdf5-openmpi 2>/dev/null) \
  bench/model/bench_model.cpp "$BUILD/libmpitron.a" -ldnnl -lfmt -o "$BUILD/bench/bench_model"
OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} "$BUILD/bench/bench_model" "$@"
