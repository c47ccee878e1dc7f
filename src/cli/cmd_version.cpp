#include <cstdio>

#include "mpitron/cli/commands.hpp"
#include "mpitron/core/version.hpp"
#include "mpitron/ops/cpu_isa.hpp"

namespace mpitron {

int cmd_version(const Args&) {
  std::printf("mpitron %s (backends: cpu%s; cpu kernels: %s)\n", kVersion, built_with_cuda() ? ", cuda" : "",
              cpu::kernel_isa());
  return 0;
}

}  // namespace mpitron
