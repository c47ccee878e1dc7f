// gpu_check's kernel self-check (tests/cuda/self_check.cpp) on the CPU emulation of CudaOps
// (fake_cuda.cpp): runs the check code itself without a GPU, so a new op family's check (its
// shapes, index arrays, reference calls and bounds) is known to work before the first GPU run.
// The emulated ops are the CPU ops, so this says nothing of the kernels; bench/gpu_check.sh does.
//   emulated_self_check [FAMILY_PREFIX]   (prints every check; exit 1 when one of the named
//                                          prefix fails, or any when none is given)
#include <cstdio>
#include <string>

#include "../../../tests/cuda/self_check.hpp"
#include "mpitron/ops/ops.hpp"

using namespace mpitron;

int main(int argc, char** argv) {
  const std::string prefix = argc > 1 ? argv[1] : "";
  auto cpu = make_cpu_ops();
  SelfCheckShape shape;
  int failed = 0, counted = 0;
  for (const char* attention : {"cudnn", "naive"}) {  // documents and the ring: segments (cudnn) or masks (naive)
    CudaOpsOptions o;
    o.attention = attention;
    auto gpu = make_cuda_ops(o);
    for (const OpCheck& c : check_cuda_ops_against_cpu(*gpu, *cpu, shape)) {
      const bool mine = c.op.rfind(prefix, 0) == 0;
      std::printf("%-44s rel err %.3e bound %.0e %s%s\n", c.op.c_str(), c.rel_err, c.bound, c.pass() ? "ok" : "FAIL",
                  c.error.empty() ? "" : (" " + c.error).c_str());
      counted += mine;
      failed += mine && !c.pass();
    }
  }
  std::printf("%d of %d checks%s%s failed\n", failed, counted, prefix.empty() ? "" : " named ", prefix.c_str());
  return failed == 0 && counted > 0 ? 0 : 1;
}
