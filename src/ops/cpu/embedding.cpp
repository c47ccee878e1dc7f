#include "kernels.hpp"
#include "isa.hpp"  // last: see there

namespace mpitron::cpu::MPITRON_CPU_ISA {

void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B, int T, int C,
                       int64_t vocab_begin, int64_t vocab_end) {
#pragma omp parallel for schedule(static)
  for (int64_t bt = 0; bt < static_cast<int64_t>(B) * T; ++bt) {
    float* o = out + bt * C;
    int64_t tok = tokens[bt];
    const float* e = (tok >= vocab_begin && tok < vocab_end) ? wte + (tok - vocab_begin) * C : nullptr;
    const float* p = wpe ? wpe + (bt % T) * C : nullptr;
#pragma omp simd
    for (int i = 0; i < C; ++i) o[i] = (e ? e[i] : 0.f) + (p ? p[i] : 0.f);
  }
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B, int T, int C,
                        int64_t vocab_begin, int64_t vocab_end) {
  const int64_t BT = static_cast<int64_t>(B) * T;
  // Columns split across threads; tokens visited in order: the same sums in the same order
  // whatever the thread count.
#pragma omp parallel
  {
    if (dwte) {
#pragma omp for schedule(static)
      for (int c0 = 0; c0 < C; c0 += 16) {
        int c1 = c0 + 16 < C ? c0 + 16 : C;
        for (int64_t bt = 0; bt < BT; ++bt) {
          int64_t tok = tokens[bt];
          if (tok < vocab_begin || tok >= vocab_end) continue;
          float* d = dwte + (tok - vocab_begin) * C;
          const float* g = dout + bt * C;
#pragma omp simd
          for (int i = c0; i < c1; ++i) d[i] += g[i];
        }
      }
    }
    if (dwpe) {
#pragma omp for schedule(static)
      for (int t = 0; t < T; ++t) {
        float* d = dwpe + static_cast<int64_t>(t) * C;
        for (int b = 0; b < B; ++b) {
          const float* g = dout + (static_cast<int64_t>(b) * T + t) * C;
#pragma omp simd
          for (int i = 0; i < C; ++i) d[i] += g[i];
        }
      }
    }
  }
}

}  // namespace mpitron::cpu::MPITRON_CPU_ISA
