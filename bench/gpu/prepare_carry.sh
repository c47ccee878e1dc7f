#!/usr/bin/env bash
# Prebuilds gpu_check on THIS machine (the project's build machine, with oneDNN, fmt, cuDNN and
# NCCL installed) for a GPU machine whose image may lack them: the device image ('cuda') is a
# different one, and nothing can be installed there. bench/gpu_check.sh falls back to this build
# when its own build fails there.
#   bash bench/gpu/prepare_carry.sh          -> build-gpu-carry/bench/gpu_check + build-gpu-carry/lib
# then name build-gpu-carry in the device call's carry list (about 45 MB of the 64 MiB allowed).
# Host code is built for x86-64-v4 (AVX-512, which the CPU backend needs), not -march=native: the
# GPU machine's CPU is another one (H200 hosts: Sapphire/Emerald Rapids or Zen 4/5, all v4).
# The CUDA libraries are not carried: gpu_check.sh finds them in /usr/local/cuda there, or else in
# the Python packages' nvidia/*/lib folders (cuDNN, NCCL, cuBLAS wheels beside PyTorch).
set -euo pipefail
cd "$(dirname "$0")/../.."
DIR=${CARRY_BUILD:-build-gpu-carry}  # what travels: bench/gpu_check and lib/ only
OBJ="$DIR-obj"                        # the build itself (objects), stays here
make --no-print-directory BUILD="$OBJ" CUDA=1 ARCH=-march=x86-64-v4 -j"$(nproc)" "$OBJ/bench/gpu_check"
rm -rf "$DIR" && mkdir -p "$DIR/bench" "$DIR/lib"
cp "$OBJ/bench/gpu_check" "$DIR/bench/gpu_check"
# The non-CUDA, non-libc shared libraries gpu_check needs (oneDNN and what it pulls in, fmt, OpenMP).
for lib in $(ldd "$DIR/bench/gpu_check" | awk '/=> \// {print $3}'); do
  case "$(basename "$lib")" in
    libdnnl.so* | libfmt.so* | libOpenCL.so* | libgomp.so*) cp -L "$lib" "$DIR/lib/" ;;
  esac
done
ls -la "$DIR/lib"
du -sh "$DIR"
echo "carry: $DIR (bench/gpu_check.sh uses it when its own build fails there)"
