#include "kernels.hpp"
#include "vmath.hpp"

namespace mpitron::cpu {

namespace {
constexpr float kS2Pi = 0.7978845608028654f;  // sqrt(2/pi)
}

void gelu_forward(float* out, const float* inp, size_t n) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; ++i) {
    float x = inp[i];
    out[i] = 0.5f * x * (1.f + vtanh(kS2Pi * (x + 0.044715f * x * x * x)));
  }
}

void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; ++i) {
    float x = inp[i];
    float u = kS2Pi * (x + 0.044715f * x * x * x);
    float t = vtanh(u);
    float sech2 = 1.f - t * t;
    float g = 0.5f * (1.f + t) + 0.5f * x * sech2 * kS2Pi * (1.f + 3.f * 0.044715f * x * x);
    dinp[i] = g * dout[i];
  }
}

}  // namespace mpitron::cpu
