#include <cmath>

#include "kernels.hpp"
#include "isa.hpp"  // last: see there

namespace mpitron::cpu::MPITRON_CPU_ISA {

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t rows, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = inp + r * C;
    float* y = out + r * C;
    float s = 0.f;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < C; ++i) s += x[i];
    float m = s / C;
    float v = 0.f;
#pragma omp simd reduction(+ : v)
    for (int64_t i = 0; i < C; ++i) v += (x[i] - m) * (x[i] - m);
    float rs = 1.f / std::sqrt(v / C + 1e-5f);
#pragma omp simd
    for (int64_t i = 0; i < C; ++i) y[i] = (x[i] - m) * rs * weight[i] + bias[i];
    mean[r] = m;
    rstd[r] = rs;
  }
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int64_t rows, int64_t C) {
#pragma omp parallel
  {
#pragma omp for schedule(static) nowait
    for (int64_t r = 0; r < rows; ++r) {
      const float* x = inp + r * C;
      const float* dy = dout + r * C;
      float* dx = dinp + r * C;
      float m = mean[r], rs = rstd[r];
      float a = 0.f, b = 0.f;
#pragma omp simd reduction(+ : a, b)
      for (int64_t i = 0; i < C; ++i) {
        float dn = weight[i] * dy[i];
        a += dn;
        b += dn * (x[i] - m) * rs;
      }
      a /= C;
      b /= C;
#pragma omp simd
      for (int64_t i = 0; i < C; ++i) {
        float n = (x[i] - m) * rs;
        dx[i] += (weight[i] * dy[i] - a - n * b) * rs;
      }
    }
    // Parameter gradients: columns split across threads, rows summed in order (deterministic).
    if (dweight || dbias) {
#pragma omp for schedule(static)
      for (int64_t c0 = 0; c0 < C; c0 += 16) {
        int64_t c1 = c0 + 16 < C ? c0 + 16 : C;
        float dw[16] = {}, db[16] = {};
        for (int64_t r = 0; r < rows; ++r) {
          const float* x = inp + r * C;
          const float* dy = dout + r * C;
          float m = mean[r], rs = rstd[r];
#pragma omp simd
          for (int64_t i = c0; i < c1; ++i) {
            dw[i - c0] += dy[i] * (x[i] - m) * rs;
            db[i - c0] += dy[i];
          }
        }
        for (int64_t i = c0; i < c1; ++i) {
          if (dweight) dweight[i] += dw[i - c0];
          if (dbias) dbias[i] += db[i - c0];
        }
      }
    }
  }
}

}  // namespace mpitron::cpu::MPITRON_CPU_ISA
