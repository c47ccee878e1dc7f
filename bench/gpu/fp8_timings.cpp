// gpu_check's fp8 section (fp8_timings.hpp).
#include "fp8_timings.hpp"

#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "device_timing.hpp"
#include "mpitron/model/cuda/cuda_device.hpp"

namespace mpitron::gpu_check {
namespace {

struct Linear {
  const char* name;
  int64_t K, N;
};
struct Shape {
  const char* model;
  std::vector<Linear> linears;
};

// One linear's times (ms), forward + backward.
struct Times {
  double bf16 = 0, fp8 = 0, fp8_gemms = 0;
};

Times time_linear(CudaOps& g, CudaDevice& dev, Fp8Recipe& r, int64_t M, int64_t K, int64_t N) {
  Buf x(M * K * 2), w(N * K * 2), y(M * N * 2), dy(M * N * 2), dx(M * K * 2), dw(N * K * 4), qa(M * K), qb(N * K);
  Buf sc(64);
  Times t;
  t.bf16 = time_ms(g, 10, [&] {
    g.matmul_forward(y.as<bf16>(), x.as<bf16>(), w.as<bf16>(), nullptr, M, K, N);
    g.matmul_backward(dx.as<bf16>(), dw.as<float>(), nullptr, dy.as<bf16>(), x.as<bf16>(), w.as<bf16>(), M, K, N, false);
  });
  t.fp8 = time_ms(g, 10, [&] {
    dev.fp8_matmul_forward(r, y.as<bf16>(), x.as<bf16>(), w.as<bf16>(), nullptr, M, K, N);
    dev.fp8_matmul_backward(r, dx.as<bf16>(), dw.as<float>(), nullptr, dy.as<bf16>(), x.as<bf16>(), w.as<bf16>(), M, K,
                            N);
  });
  // The three FP8 GEMMs alone, on codes cast once (their values do not matter to the time).
  float* s = sc.as<float>();
  g.fp8_quantize(qa.as<uint8_t>(), s, s + 4, x.as<bf16>(), M * K, Fp8Format::e4m3);
  g.fp8_quantize(qb.as<uint8_t>(), s + 1, s + 5, w.as<bf16>(), N * K, Fp8Format::e4m3);
  auto gemm = [&](int64_t m, int64_t k, int64_t n, bf16* out, float* acc) {
    Fp8Gemm f;
    f.M = m, f.K = k, f.N = n;
    f.a = qa.as<uint8_t>(), f.a_scale_inv = s, f.b = qb.as<uint8_t>(), f.b_scale_inv = s + 1;
    f.out = out, f.acc = acc;
    g.fp8_gemm(f);
  };
  t.fp8_gemms = time_ms(g, 10, [&] {
    gemm(M, K, N, y.as<bf16>(), nullptr);    // forward
    gemm(M, N, K, dx.as<bf16>(), nullptr);   // input gradient (contracts over N)
    gemm(N, M, K, nullptr, dw.as<float>());  // weight gradient (contracts over the rows)
  });
  return t;
}

}  // namespace

void fp8_section(Report& rep) {
  constexpr int64_t M = 8192;  // tokens of a micro-batch (8 x 1024, 4 x 2048)
  const std::vector<Shape> shapes = {
      {"gpt2-124m (C 768, F 3072)", {{"qkv", 768, 2304}, {"attn out", 768, 768}, {"fc", 768, 3072}, {"fc proj", 3072, 768}}},
      {"llama-1b-like (C 2048, H 32 / KV 8 x 64, F 8192)",
       {{"qkv", 2048, 3072}, {"attn out", 2048, 2048}, {"gate|up", 2048, 16384}, {"down", 8192, 2048}}},
      {"llama-3b-like (C 3072, H 24 / KV 8 x 128, F 8192)",
       {{"qkv", 3072, 5120}, {"attn out", 3072, 3072}, {"gate|up", 3072, 16384}, {"down", 8192, 3072}}},
  };
  rep.line("### FP8 linears against bf16 (train.precision = \"fp8\"), {} rows, forward + backward\n", M);
  rep.line("FP8 = CudaDevice::fp8_matmul_forward + _backward: 5 amaxes and casts (input, weight; the gradient with its "
           "transposed copy, the weight's and the input's transposed copies) and 3 cuBLASLt FP8 GEMMs; the GEMMs alone "
           "on codes cast once. Timings only.\n");
  rep.line("| model | linear | K -> N | bf16 ms | FP8 ms | FP8 GEMMs ms | casts ms | FP8 / bf16 speed-up | bf16 TFLOP/s | "
           "FP8 GEMM TFLOP/s |\n|---|---|---|---|---|---|---|---|---|---|");
  try {
    auto g = make_cuda_ops();
    CudaDevice dev{*g};
    Fp8Recipe recipe(nullptr, nullptr);
    recipe.set_counting(false);
    int64_t kmax = 0, nmax = 0, wmax = 0;
    for (const Shape& s : shapes)
      for (const Linear& l : s.linears) kmax = std::max(kmax, l.K), nmax = std::max(nmax, l.N), wmax = std::max(wmax, l.K * l.N);
    Buf act(M * kmax), wt(wmax), grad(M * nmax), grad_t(M * nmax), scalars(64);
    dev.fp8 = {act.as<uint8_t>(), wt.as<uint8_t>(), grad.as<uint8_t>(), grad_t.as<uint8_t>(), scalars.as<float>(), nullptr};
    for (const Shape& s : shapes) {
      Times all;
      for (const Linear& l : s.linears) {
        const Times t = time_linear(*g, dev, recipe, M, l.K, l.N);
        const double flops = 6.0 * M * l.K * l.N;
        rep.line("| {} | {} | {} -> {} | {:.3f} | {:.3f} | {:.3f} | {:.3f} | {:.2f}x | {:.0f} | {:.0f} |", s.model, l.name,
                 l.K, l.N, t.bf16, t.fp8, t.fp8_gemms, t.fp8 - t.fp8_gemms, t.bf16 / t.fp8, flops / t.bf16 / 1e9,
                 flops / t.fp8_gemms / 1e9);
        all.bf16 += t.bf16, all.fp8 += t.fp8, all.fp8_gemms += t.fp8_gemms;
      }
      rep.line("| {} | **the four** | | {:.3f} | {:.3f} | {:.3f} | {:.3f} | **{:.2f}x** | | |", s.model, all.bf16, all.fp8,
               all.fp8_gemms, all.fp8 - all.fp8_gemms, all.bf16 / all.fp8);
    }
  } catch (const std::exception& e) {
    ++rep.failures;
    rep.line("\n**ERROR** in the FP8 timings: {}\n", e.what());
    cudaGetLastError();
  }
  rep.line("");
}

}  // namespace mpitron::gpu_check
