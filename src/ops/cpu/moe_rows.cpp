// The mixture-of-experts row kernels (kernels.hpp; the MoE MLP of moe_mlp.hpp): rows copied by
// index between token order and the experts' sorted order, the routing-weighted combine of each
// token's expert outputs, and its backward. Row-wise, OpenMP over rows; each output row is
// written by one thread, its terms summed in the copies' order (deterministic).
#include <cstring>

#include "kernels.hpp"
#include "isa.hpp"  // last: see there

namespace mpitron::cpu::MPITRON_CPU_ISA {

void moe_gather_rows(float* dst, const float* src, const int64_t* idx, int64_t n, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * C, src + idx[i] * C, sizeof(float) * C);
}

void moe_scatter_rows(float* dst, const float* src, const int64_t* idx, int64_t n, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) std::memcpy(dst + idx[i] * C, src + i * C, sizeof(float) * C);
}

void moe_combine(float* out, const float* ys, const int64_t* pos, const float* weight, int64_t R, int k, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < R; ++t) {
    float* o = out + t * C;
    std::memset(o, 0, sizeof(float) * C);
    for (int j = 0; j < k; ++j) {
      const int64_t p = pos[t * k + j];
      if (p < 0) continue;
      const float w = weight[t * k + j];
      const float* y = ys + p * C;
      for (int64_t c = 0; c < C; ++c) o[c] += w * y[c];
    }
  }
}

void moe_combine_backward(float* dys, float* dweight, const float* dout, const float* ys, const int64_t* pos,
                          const float* weight, int64_t R, int k, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < R; ++t)
    for (int j = 0; j < k; ++j) {
      const int64_t p = pos[t * k + j];
      if (p < 0) {
        dweight[t * k + j] = 0.f;
        continue;
      }
      const float* d = dout + t * C;
      const float* y = ys + p * C;
      float* dy = dys + p * C;
      const float w = weight[t * k + j];
      double s = 0;
      for (int64_t c = 0; c < C; ++c) s += double(d[c]) * y[c], dy[c] = w * d[c];
      dweight[t * k + j] = static_cast<float>(s);
    }
}

void moe_uncombine_add(float* dx, const float* dxs, const int64_t* pos, int64_t R, int k, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < R; ++t)
    for (int j = 0; j < k; ++j) {
      const int64_t p = pos[t * k + j];
      if (p < 0) continue;
      float* o = dx + t * C;
      const float* s = dxs + p * C;
      for (int64_t c = 0; c < C; ++c) o[c] += s[c];
    }
}

}  // namespace mpitron::cpu::MPITRON_CPU_ISA
