#!/usr/bin/env bash
# Builds the library (BUILD, default build) and bench/model/bench_model, then runs it with 2
# OpenMP threads. Extra arguments go to the program: --no-gemm, --no-breakdown, --only tiny|heldout|small|124m.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
make --no-print-directory BUILD="$BUILD" -j2 "$BUILD/libmpitron.a" >/dev/null
mkdir -p "$BUILD/bench"
# The library's objects reference MPI, HDF5 and the tokenizers' libraries: the binary's link line.
g++ -std=c++20 -O3 -march=native -fopenmp -Iinclude $(mpicc --showme:compile) $(pkg-config --cflags hdf5-openmpi) \
  bench/model/bench_model.cpp "$BUILD/libmpitron.a" -ldnnl -lfmt -lpthread -lpcre2-8 -lutf8proc -lz -lzstd \
  -lsentencepiece $(pkg-config --libs hdf5-openmpi) $(mpicc --showme:link) -o "$BUILD/bench/bench_model"
OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} "$BUILD/bench/bench_model" "$@"
