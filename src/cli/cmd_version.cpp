#include <cstdio>

#include "mpitron/cli/commands.hpp"
#include "mpitron/core/version.hpp"

namespace mpitron {

int cmd_version(const Args&) {
  std::printf("mpitron %s (backends: cpu%s)\n", kVersion, built_with_cuda() ? ", cuda" : "");
  return 0;
}

}  // namespace mpitron
