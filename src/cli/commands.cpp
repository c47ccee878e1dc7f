#include "mpitron/cli/commands.hpp"

namespace mpitron {

// One declaration per subcommand; each lives in its own src/cli/cmd_*.cpp.
int cmd_version(const Args& args);
int cmd_env(const Args& args);
int cmd_bench_comm(const Args& args);
int cmd_prep(const Args& args);
int cmd_tokenizer(const Args& args);
int cmd_train(const Args& args);
int cmd_generate(const Args& args);
int cmd_inspect(const Args& args);
int cmd_export(const Args& args);
int cmd_import(const Args& args);
int cmd_plan(const Args& args);
int cmd_calibrate(const Args& args);

const std::vector<Command>& commands() {
  static const std::vector<Command> table = {
      {"train", cmd_train, "train a model from a job file (mpirun -np N for data parallel)"},
      {"plan", cmd_plan, "memory ledger per rank, layout advisor, strategies side by side (no MPI launch)"},
      {"calibrate", cmd_calibrate, "measure this machine for plan's step-time prediction (writes a profile)"},
      {"version", cmd_version, "print the version and the build's backends"},
      {"env", cmd_env, "who is who: ranks, nodes, devices, parallel groups, NCCL environment"},
      {"bench-comm", cmd_bench_comm, "collective bandwidth per group (nccl-tests style table)"},
      {"prep", cmd_prep, "tokenize text files into HDF5 shards for training"},
      {"generate", cmd_generate, "sample text from a checkpoint on one process (CPU)"},
      {"export", cmd_export, "write a checkpoint's model as a Hugging Face folder (safetensors + config)"},
      {"import", cmd_import, "write a Hugging Face model folder as an mpitron checkpoint"},
      {"inspect", cmd_inspect, "what a checkpoint or data shard holds: config, layout, step, tensors"},
      {"tokenizer", cmd_tokenizer, "train a byte-level BPE tokenizer; encode/decode text"},
  };
  return table;
}

}  // namespace mpitron
