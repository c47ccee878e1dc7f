#!/usr/bin/env bash
# `make fuzz-seeds`: rewrites the seeds that mpitron's own writers make (checkpoints by
# write_checkpoint_file, shards by prep, tokenizer JSON by train_bpe/to_json, machine profiles by
# profile_to_toml) in tests/fuzz/corpus/<target>/. Run it after a change to the shard, checkpoint
# or profile format and commit the result. The hand-written seeds next to them (edge cases, job
# files, texts, a calibrated profile) are left alone.
set -euo pipefail
cd "$(dirname "$0")/../.."
FUZZ_BUILD=${1:-build-fuzz}
export ASAN_OPTIONS=detect_leaks=0 OMPI_MCA_btl=self OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for t in checkpoint shard tokenizer safetensors profile; do
  MPITRON_FUZZ_WRITE_SEEDS=tests/fuzz/corpus/$t "$FUZZ_BUILD/fuzz_$t"
done
