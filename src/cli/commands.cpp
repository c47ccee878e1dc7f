#include "mpitron/cli/commands.hpp"

namespace mpitron {

// One declaration per subcommand; each lives in its own src/cli/cmd_*.cpp.
int cmd_version(const Args& args);

const std::vector<Command>& commands() {
  static const std::vector<Command> table = {
      {"version", cmd_version, "print the version and the build's backends"},
  };
  return table;
}

}  // namespace mpitron
