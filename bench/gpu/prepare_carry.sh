#!/usr/bin/env bash
# Prebuilds gpu_check and mpitron on THIS machine (the project's build machine, with oneDNN, fmt,
# Open MPI, HDF5, cuDNN and NCCL installed) for a GPU machine whose image lacks most of them: the
# device image ('cuda') is a different one, and nothing can be installed there.
#   bash bench/gpu/prepare_carry.sh   -> build-gpu-carry/bundle.tar.gz (about 40 MB)
# then name build-gpu-carry in the device call's carry list. bench/gpu_check.sh unpacks the bundle
# and uses it when its own build fails there (or at once with USE_CARRY=1).
# The bundle holds:
#   bench/gpu_check, mpitron        the two programs (CUDA_ARCH=90: one H100/H200 build, quick here)
#   libmpitron-cuda.so              the CUDA backend mpitron loads (next to it, where it looks)
#   lib/                            every shared library they and Open MPI's components need, except
#                                   glibc, libstdc++/libgcc and the CUDA libraries (those are the GPU
#                                   image's: /usr/local/cuda or the Python packages' nvidia/*/lib)
#   ompi/openmpi3, ompi/openmpi     Open MPI's components and help texts (mpitron runs there as an
#                                   isolated singleton, one rank, no mpirun: carried_env in gpu_check.sh)
#   data/demo                       the demo corpus (make data), for the 200-step device runs
# Host code is built for x86-64-v4 (AVX-512), not -march=native: the GPU machine's CPU is another
# one (H200 hosts: Sapphire/Emerald Rapids or Zen 4/5, all v4).
set -euo pipefail
cd "$(dirname "$0")/../.."
DIR=${CARRY_BUILD:-build-gpu-carry}  # what travels: bundle.tar.gz only
OBJ="$DIR-obj"                        # the build itself (objects), stays here
make --no-print-directory BUILD="$OBJ" CUDA=1 CUDA_ARCH="${CUDA_ARCH:-90}" ARCH=-march=x86-64-v4 -j"$(nproc)" \
  "$OBJ/bench/gpu_check" "$OBJ/mpitron" "$OBJ/libmpitron-cuda.so"
ls data/demo/*.h5 >/dev/null 2>&1 || make --no-print-directory data
STAGE="$DIR-stage"
rm -rf "$STAGE" && mkdir -p "$STAGE/bench" "$STAGE/lib" "$STAGE/ompi" "$STAGE/data"
cp "$OBJ/bench/gpu_check" "$STAGE/bench/gpu_check"
cp "$OBJ/mpitron" "$OBJ/libmpitron-cuda.so" "$STAGE/"
strip --strip-debug "$STAGE/bench/gpu_check" "$STAGE/mpitron" "$STAGE/libmpitron-cuda.so"  # line tables: 25 MB that need not travel
OMPI_LIB=/usr/lib/x86_64-linux-gnu/openmpi/lib
cp -r "$OMPI_LIB/openmpi3" "$STAGE/ompi/openmpi3"
cp -r /usr/share/openmpi "$STAGE/ompi/openmpi"
cp -r data/demo "$STAGE/data/demo"
# The libraries: the closure of the programs and the components, less what every Linux image has
# (glibc, the C++ runtime) and the CUDA libraries, which must be the GPU image's own (driver match).
for lib in $(ldd "$STAGE/bench/gpu_check" "$STAGE/mpitron" "$STAGE/libmpitron-cuda.so" "$STAGE"/ompi/openmpi3/*.so 2>/dev/null |
             awk '/=> \// {print $3}' | sort -u); do
  case "$(basename "$lib")" in
    libc.so* | libm.so* | libdl.so* | librt.so* | libpthread.so* | ld-linux* | libstdc++.so* | libgcc_s.so* | \
      libcud* | libcublas* | libnccl* | libnvrtc* | libnvJitLink*) ;;
    *) cp -L "$lib" "$STAGE/lib/" ;;
  esac
done
# pmix's own plugins (Open MPI's pmix component loads libpmix, which loads these).
[ -d /usr/lib/x86_64-linux-gnu/pmix2/lib/pmix ] && cp -r /usr/lib/x86_64-linux-gnu/pmix2/lib/pmix "$STAGE/ompi/pmix"
mkdir -p "$DIR"
tar -C "$STAGE" -czf "$DIR/bundle.tar.gz" .
rm -rf "$STAGE"
du -sh "$DIR/bundle.tar.gz"
echo "carry: $DIR (bench/gpu_check.sh unpacks and uses it when its own build fails there, or with USE_CARRY=1)"
