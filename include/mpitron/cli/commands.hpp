// Subcommands. Each takes its arguments (after the subcommand name) and returns the exit code;
// errors are thrown (core/error.hpp) and turned into a message + exit code by main.
#pragma once
#include <string>
#include <vector>

namespace mpitron {

using Args = std::vector<std::string>;

struct Command {
  const char* name;
  int (*run)(const Args& args);
  const char* summary;
};

// The table main dispatches on (src/cli/commands.cpp).
const std::vector<Command>& commands();

}  // namespace mpitron
