#include "mpitron/cli/commands.hpp"

namespace mpitron {

// One declaration per subcommand; each lives in its own src/cli/cmd_*.cpp.
int cmd_version(const Args& args);
int cmd_prep(const Args& args);
int cmd_tokenizer(const Args& args);

const std::vector<Command>& commands() {
  static const std::vector<Command> table = {
      {"version", cmd_version, "print the version and the build's backends"},
      {"prep", cmd_prep, "tokenize text files into HDF5 shards for training"},
      {"tokenizer", cmd_tokenizer, "train a byte-level BPE tokenizer; encode/decode text"},
  };
  return table;
}

}  // namespace mpitron
