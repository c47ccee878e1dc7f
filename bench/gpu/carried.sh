# Sourced by bench/gpu_check.sh, bench/gpu/demo_check.sh and bench/gpu/trainer_mfu.sh: use_carried
# switches BIN, MPITRON and RUNENV to gpu_check and mpitron as bench/gpu/prepare_carry.sh prebuilt
# them on the build machine (carried to this one as $CARRY/bundle.tar.gz): used when the build here
# fails (this image lacks oneDNN, fmt, Open MPI and HDF5), or at once with USE_CARRY=1.
CARRY=${GPU_CHECK_CARRY:-build-gpu-carry}
RUNENV=()  # the environment the carried programs run in (not exported: python3 here keeps its own libraries)
use_carried() {
  if [ -f "$CARRY/bundle.tar.gz" ] && [ ! -x "$CARRY/bench/gpu_check" ]; then
    tar -C "$CARRY" -xzf "$CARRY/bundle.tar.gz" || return 1
  fi
  [ -x "$CARRY/bench/gpu_check" ] || return 1
  BIN="$CARRY/bench/gpu_check"
  MPITRON="$CARRY/mpitron"
  local root extra d
  root=$(cd "$CARRY" && pwd)
  extra=$root/lib
  # The CUDA libraries: /usr/local/cuda, else the Python packages' nvidia/*/lib folders (cuDNN and
  # NCCL may be there alone).
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
      $(python3 -c 'import nvidia, os; [print(os.path.join(p, d, "lib")) for p in nvidia.__path__ for d in sorted(os.listdir(p))]' 2>/dev/null); do
    [ -d "$d" ] && extra="$extra:$d"
  done
  # Open MPI from the bundle: its components and help texts, one rank as an isolated singleton
  # (no mpirun, no orted).
  RUNENV=(env "LD_LIBRARY_PATH=$extra${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    "OMPI_MCA_mca_base_component_path=$root/ompi/openmpi3" "OPAL_PKGDATADIR=$root/ompi/openmpi"
    "OMPI_MCA_ess_singleton_isolated=1" "OMPI_MCA_mca_base_component_show_load_errors=0"
    "OMPI_MCA_pml=ob1" "OMPI_MCA_btl=self,vader" "PMIX_MCA_mca_base_component_path=$root/ompi/pmix")
  echo "gpu_check: using the carried $BIN and $MPITRON (${RUNENV[*]})"
  if "${RUNENV[@]}" ldd "$BIN" "$MPITRON" | grep "not found"; then
    echo "gpu_check: the carried programs still miss the libraries above"
    return 1
  fi
  return 0
}

# For the device scripts that run mpitron (demo_check.sh, trainer_mfu.sh): MPITRON is $BUILD/mpitron,
# or the carried one when that is missing or USE_CARRY=1 (exit 2 when neither is there); DATA is the
# demo corpus that goes with it.
pick_mpitron() {
  MPITRON="$BUILD/mpitron"
  if [ "${USE_CARRY:-0}" = 1 ] || [ ! -x "$MPITRON" ]; then
    use_carried || { echo "$1: no $MPITRON and no carried one"; exit 2; }
  fi
  DATA=data/demo
  if [ -d "$CARRY/data/demo" ] && [ "$MPITRON" = "$CARRY/mpitron" ]; then DATA="$CARRY/data/demo"; fi
}
