#include "mpitron/core/version.hpp"
namespace mpitron {
bool built_with_cuda() {
#if MPITRON_CUDA
  return true;
#else
  return false;
#endif
}
}  // namespace mpitron
