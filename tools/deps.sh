#!/usr/bin/env bash
# `make deps`: install the Debian packages mpitron needs (quiet and idempotent when present).
# `tools/deps.sh check`: the same, but only prints what is missing (used by make test / demo):
# as root it installs them; otherwise it prints the exact apt-get line and fails.
# `tools/deps.sh slurm` (`make deps-slurm`): only the packages of the private test cluster that
# `make test-slurm` starts (slurmctld, slurmd, client tools, munge, PMIx headers); plain `make deps` stays lean.
# `tools/deps.sh stress` (`make deps-stress`, run by `make test-stress`): the usual packages plus
# clang-14 and libclang-rt-14-dev (libFuzzer and clang's ASan/UBSan runtimes) for tests/fuzz.
# `tools/deps.sh all` (.ci/run): every package of the three, in one apt-get run.
set -euo pipefail
SLURM_PKGS=(slurmctld slurmd slurm-client munge openmpi-bin libpmix-dev)  # libpmix-dev: test_pmix_fence.sh builds a PMIx probe
if [ "${1:-install}" = slurm ]; then
  PKGS=("${SLURM_PKGS[@]}")
else
PKGS=(
  g++ make pkg-config
  openmpi-bin libopenmpi-dev libhdf5-openmpi-dev hdf5-tools
  libdnnl-dev libboost-test-dev libfmt-dev libtomlplusplus-dev nlohmann-json3-dev
  zlib1g-dev libzstd-dev libpcre2-dev libutf8proc-dev libonig5 zstd libsentencepiece-dev sentencepiece python3-sentencepiece nodejs  # libonig5: tests/reference/tokenizer_texts.py (Oniguruma, as HF runs its regexes)
  fortunes fortunes-min
  python3 python3-numpy python3-h5py python3-matplotlib python3-jinja2  # jinja2: tests/e2e/test_chat_prep.sh
  qemu-user  # tests/e2e/test_portable_isa.sh runs the default build on an emulated CPU without AVX-512
)
# PyTorch is needed only to regenerate test fixtures and for bench/ comparisons.
[ "${MPITRON_DEPS_TORCH:-0}" = 1 ] && PKGS+=(python3-torch libopenblas0-openmp)
case "${1:-install}" in
  stress) PKGS+=(clang-14 libclang-rt-14-dev) ;;
  all) PKGS+=(clang-14 libclang-rt-14-dev "${SLURM_PKGS[@]}") ;;
esac
fi

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

line="apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -eq 0 ]; then
  echo "mpitron deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  echo "mpitron deps: done"
else
  echo "mpitron deps: missing Debian packages; run as root:" >&2
  echo "  $line" >&2
  exit 1
fi
