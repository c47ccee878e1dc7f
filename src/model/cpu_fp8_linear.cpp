// CpuDevice's FP8 linear GEMMs (cpu_device.hpp, train.precision = "fp8"): the GPU's FP8 GEMM
// D = scale_inv_a scale_inv_b (A B) + bias computed on the CPU, A and B holding the codes' values.
#include <algorithm>

#include "mpitron/model/cpu_device.hpp"

namespace mpitron {
namespace {

// The operand x[n] cast into `v` as kind k; returns its 1 / scale.
float cast_copy(Fp8Recipe& r, Fp8Operand k, DeviceVector<float>& v, const float* x, int64_t n) {
  v.resize(static_cast<size_t>(n));  // host workspace (DeviceVector's default)
  return r.quantize(k, x, v.data(), n);
}

}  // namespace

void CpuDevice::fp8_matmul_forward(Fp8Recipe& r, float* out, const float* inp, const float* w, const float* b,
                                   int64_t M, int64_t K, int64_t N, float* gelu_pre) {
  DeviceVector<float>&qi = fp8_ops_[0], &qw = fp8_ops_[1];
  const float s = cast_copy(r, Fp8Operand::activation, qi, inp, M * K) * cast_copy(r, Fp8Operand::weight, qw, w, N * K);
  float* y = gelu_pre ? gelu_pre : out;
  ops.matmul_forward(y, qi.data(), qw.data(), nullptr, M, K, N);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < M; ++i) {
    float* row = y + i * N;
    if (b)
      for (int64_t j = 0; j < N; ++j) row[j] = row[j] * s + b[j];
    else
      for (int64_t j = 0; j < N; ++j) row[j] *= s;
  }
  if (gelu_pre) ops.gelu_forward(out, gelu_pre, static_cast<size_t>(M * N));
}

void CpuDevice::fp8_matmul_backward(Fp8Recipe& r, float* dinp, float* dw, float* db, const float* dout,
                                    const float* inp, const float* w, int64_t M, int64_t K, int64_t N,
                                    const float* gelu_pre) {
  DeviceVector<float>&qd = fp8_ops_[2], &qi = fp8_ops_[0], &qw = fp8_ops_[1];
  const float sd = cast_copy(r, Fp8Operand::gradient, qd, dout, M * N);
  if (dinp) {  // dinp = (qd qw) sd sw
    const float s = sd * cast_copy(r, Fp8Operand::weight, qw, w, N * K);
    ops.matmul_backward(dinp, nullptr, nullptr, qd.data(), nullptr, qw.data(), M, K, N);
    ops.scale_inplace(dinp, s, static_cast<size_t>(M * K));
    if (gelu_pre) ops.gelu_backward(dinp, gelu_pre, dinp, static_cast<size_t>(M * K));
  }
  if (dw) {  // dw += (qd^T qi) sd si
    const float s = sd * cast_copy(r, Fp8Operand::activation, qi, inp, M * K);
    fp8_dw_.resize(static_cast<size_t>(N * K));
    std::fill(fp8_dw_.data(), fp8_dw_.data() + N * K, 0.f);
    ops.matmul_backward(nullptr, fp8_dw_.data(), nullptr, qd.data(), qi.data(), nullptr, M, K, N);
    ops.axpy(dw, s, fp8_dw_.data(), static_cast<size_t>(N * K));
  }
  if (db) ops.matmul_backward(nullptr, nullptr, db, dout, inp, w, M, K, N);
}

}  // namespace mpitron
