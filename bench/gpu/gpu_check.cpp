// gpu_check: the device check of the CUDA backend (run by bench/gpu_check.sh).
//   1. every CudaOps kernel against the CPU backend on random inputs (self_check.hpp: relative
//      error and a bound per op), with both attention paths, at a small and a GPT-2-like shape;
//   2. cuDNN attention against the naive path at the gpt2-124m / gpt2-350m attention shapes;
//   3. kernel timings at gpt2-124m shapes (B 8, T 1024) and the cuBLASLt bf16 GEMM rate
//      (8192^3) against the H200's 989 TFLOP/s dense bf16 datasheet peak;
//   4. training: the tiny model 20 AdamW steps on GptCuda (both attention paths) against the CPU
//      GPT from the same initial parameters (losses, first-step gradients, final parameters), and
//      one training step of gpt2-124m / gpt2-350m timed (ms, tokens/s, MFU).
// Usage: gpu_check RESULTS.md   (exit 0: every check passed; 1: a check failed; 2: no GPU)
#if !MPITRON_CUDA
#error "gpu_check needs a CUDA build: make CUDA=1"
#endif
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <nccl.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "../../src/ops/cuda/attention.hpp"
#include "mpitron/core/error.hpp"
#include "mpitron/model/config.hpp"
#include "mpitron/model/cuda/gpt_cuda.hpp"
#include "mpitron/model/gpt.hpp"
#include "mpitron/ops/cuda/cuda_ops.hpp"
#include "mpitron/ops/cuda/self_check.hpp"
#include "mpitron/ops/ops.hpp"
#include "mpitron/train/adamw.hpp"

using namespace mpitron;

namespace {

constexpr double kPeakTflops = 989.0;  // H200 SXM dense bf16, datasheet

void cuda_ok(cudaError_t e, const char* call) {
  if (e != cudaSuccess) fail("{} failed: CUDA error {} ({})", call, static_cast<int>(e), cudaGetErrorString(e));
}

// Every line goes to stdout and, flushed at once, to the results file: a run cut short by the
// time limit still leaves what it measured.
struct Report {
  explicit Report(const char* path) : file(path) {}
  std::ofstream file;
  int failures = 0;
  template <class... A>
  void line(fmt::format_string<A...> f, A&&... a) {
    std::string s = fmt::format(f, std::forward<A>(a)...);
    file << s << "\n" << std::flush;
    std::printf("%s\n", s.c_str());
    std::fflush(stdout);
  }
};

// A device buffer filled with the byte 0x3c: bf16 0x3c3c and fp32 0x3c3c3c3c are both ~0.0115,
// finite and non-zero (timing needs no particular values).
struct Buf {
  explicit Buf(size_t bytes) {
    cuda_ok(cudaMalloc(&p, bytes ? bytes : 16), "cudaMalloc(bench buffer)");
    cuda_ok(cudaMemset(p, 0x3c, bytes), "cudaMemset");
  }
  ~Buf() { cudaFree(p); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  template <class T>
  T* as() const {
    return static_cast<T*>(p);
  }
  void* p = nullptr;
};

// Median milliseconds of `reps` runs of f on ops' stream (after 2 warm-up runs).
double time_ms(CudaOps& ops, int reps, const std::function<void()>& f) {
  f();
  f();
  std::vector<cudaEvent_t> ev(2 * reps);
  for (auto& e : ev) cuda_ok(cudaEventCreate(&e), "cudaEventCreate");
  for (int r = 0; r < reps; ++r) {
    cuda_ok(cudaEventRecord(ev[2 * r], ops.stream()), "cudaEventRecord");
    f();
    cuda_ok(cudaEventRecord(ev[2 * r + 1], ops.stream()), "cudaEventRecord");
  }
  ops.synchronize();
  std::vector<double> ms(reps);
  for (int r = 0; r < reps; ++r) {
    float t = 0;
    cuda_ok(cudaEventElapsedTime(&t, ev[2 * r], ev[2 * r + 1]), "cudaEventElapsedTime");
    ms[r] = t;
  }
  for (auto& e : ev) cudaEventDestroy(e);
  std::sort(ms.begin(), ms.end());
  return ms[reps / 2];
}

void device_section(Report& rep) {
  int dev = 0;
  cuda_ok(cudaGetDevice(&dev), "cudaGetDevice");
  cudaDeviceProp p{};
  cuda_ok(cudaGetDeviceProperties(&p, dev), "cudaGetDeviceProperties");
  int rt = 0, drv = 0, nccl = 0;
  cudaRuntimeGetVersion(&rt);
  cudaDriverGetVersion(&drv);
  ncclGetVersion(&nccl);
  rep.line("## Device\n");
  rep.line("- {} (sm_{}{}, {} SMs, {:.1f} GiB)", p.name, p.major, p.minor, p.multiProcessorCount,
           static_cast<double>(p.totalGlobalMem) / (1ull << 30));
  rep.line("- CUDA runtime {}, driver {}, cuBLASLt {}, cuDNN {}, NCCL {}", rt, drv, cublasLtGetVersion(),
           cudnnGetVersion(), nccl);
  rep.line("");
}

void correctness_section(Report& rep, Ops& cpu) {
  rep.line("## Kernels against the CPU backend\n");
  rep.line("rel err = max|gpu - cpu| / max|cpu| per output tensor; inputs rounded to bf16 first, so the CPU sees");
  rep.line("the GPU's inputs. Bounds: bf16 outputs 1e-2, fp32 outputs 1e-3, elementwise fp32 / fp64 sums 1e-6.\n");
  struct Case {
    const char* name;
    SelfCheckShape shape;
    const char* attention;
  };
  SelfCheckShape small;  // B2 T64 C128 H4 V1000
  SelfCheckShape gpt;
  gpt.B = 4, gpt.T = 256, gpt.C = 768, gpt.H = 12, gpt.V = 50257, gpt.Vp = 50304;
  for (const Case& c : {Case{"small", small, "naive"}, Case{"small", small, "cudnn"}, Case{"gpt2", gpt, "naive"},
                        Case{"gpt2", gpt, "cudnn"}}) {
    rep.line("### shape {} (B {} T {} C {} H {} V {} Vp {}), attention {}\n", c.name, c.shape.B, c.shape.T, c.shape.C,
             c.shape.H, c.shape.V, c.shape.Vp, c.attention);
    try {
      CudaOpsOptions o;
      o.attention = c.attention;
      auto gpu = make_cuda_ops(o);
      auto t0 = std::chrono::steady_clock::now();
      auto checks = check_cuda_ops_against_cpu(*gpu, cpu, c.shape);
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      rep.line("| op | rel err | bound | |\n|---|---|---|---|");
      for (const OpCheck& k : checks) {
        if (!k.error.empty())
          rep.line("| {} | | | **ERROR** {} |", k.op, k.error);
        else
          rep.line("| {} | {:.2e} | {:.0e} | {} |", k.op, k.rel_err, k.bound, k.pass() ? "ok" : "**FAIL**");
        if (!k.pass()) ++rep.failures;
      }
      rep.line("\n({:.1f} s)\n", s);
    } catch (const std::exception& e) {
      ++rep.failures;
      rep.line("**ERROR**: {}\n", e.what());
    }
  }
}

void attention_paths_section(Report& rep) {
  rep.line("## cuDNN attention graphs (built once per shape)\n");
  cudnnHandle_t h = nullptr;
  cudnnStatus_t st = cudnnCreate(&h);
  if (st != CUDNN_STATUS_SUCCESS) {
    ++rep.failures;
    rep.line("- cudnnCreate failed: {}", cudnnGetErrorString(st));
  } else {
    for (auto [B, T, H, hd] : {std::array{8, 1024, 12, 64}, std::array{8, 1024, 16, 64}, std::array{2, 64, 4, 32}}) {
      try {
        rep.line("- B{} T{} H{} hd{}: {}", B, T, H, hd, cuda::cudnn_attention_dry_build(h, B, T, H, hd));
      } catch (const std::exception& e) {
        ++rep.failures;
        rep.line("- B{} T{} H{} hd{}: **ERROR** {}", B, T, H, hd, e.what());
      }
    }
    cudnnDestroy(h);
  }
  rep.line("");
  rep.line("## cuDNN attention against the naive path (GPU vs GPU)\n");
  for (auto [name, B, T, H, hd] : {std::tuple{"gpt2-124m", 8, 1024, 12, 64}, std::tuple{"gpt2-350m", 8, 1024, 16, 64}}) {
    try {
      CudaOpsOptions n;
      n.attention = "naive";
      auto a = make_cuda_ops(), b = make_cuda_ops(n);
      for (const OpCheck& k : check_attention_paths(*a, *b, B, T, H, hd, 7)) {
        rep.line("- {} B{} T{} H{} hd{}: {} rel err {:.2e} (bound {:.0e}) {}", name, B, T, H, hd, k.op, k.rel_err,
                 k.bound, k.pass() ? "ok" : "**FAIL**");
        if (!k.pass()) ++rep.failures;
      }
    } catch (const std::exception& e) {
      ++rep.failures;
      rep.line("- {}: **ERROR**: {}", name, e.what());
    }
  }
  rep.line("");
}

// Returns the measured cuBLASLt GEMM rate in TFLOP/s (0 when the timings failed).
double timing_section(Report& rep) {
  double gemm_tflops = 0;
  rep.line("## Kernel timings, gpt2-124m shapes (B 8, T 1024, C 768, H 12, Vp 50304), median of 20\n");
  const int B = 8, T = 1024, C = 768, H = 12, hd = 64, Vp = 50304, V = 50257;
  const int64_t M = static_cast<int64_t>(B) * T;
  // A failing kernel reports its error (the message names the call) and the table goes on.
  auto timed = [&](CudaOps& o, int reps, const std::function<void()>& f) -> double {
    try {
      return time_ms(o, reps, f);
    } catch (const std::exception& e) {
      ++rep.failures;
      rep.line("| **ERROR** | {} | |", e.what());
      cudaGetLastError();
      return -1.0;
    }
  };
  auto row = [&](const std::string& what, double ms, double flops, double bytes) {
    if (ms < 0) return;  // the timing failed and was reported
    std::string rate;
    if (flops > 0) rate = fmt::format("{:.0f} TFLOP/s ({:.0f}% of {:.0f})", flops / ms / 1e9, 100 * flops / ms / 1e9 / kPeakTflops, kPeakTflops);
    if (bytes > 0) rate = fmt::format("{:.0f} GB/s", bytes / ms / 1e6);
    rep.line("| {} | {:.3f} | {} |", what, ms, rate);
  };
  try {
    CudaOpsOptions naive_opt;
    naive_opt.attention = "naive";
    auto ops = make_cuda_ops();
    auto naive = make_cuda_ops(naive_opt);
    CudaOps& g = *ops;
    rep.line("| kernel | ms | rate |\n|---|---|---|");
    // GEMMs of one block (+ the LM head): forward and backward (dinp + dweight).
    Buf x(M * 4 * C * 2), w(static_cast<size_t>(Vp) * C * 2), bias(4 * C * 2), y(M * static_cast<int64_t>(Vp) * 2),
        pre(M * 4 * C * 2), dw(static_cast<size_t>(Vp) * C * 4), db(4 * C * 4);
    struct G {
      const char* name;
      int64_t K, N;
      bool gelu, has_bias;
    };
    for (const G& m : {G{"qkv", C, 3 * C, false, true}, G{"attn proj", C, C, false, true}, G{"fc (+gelu)", C, 4 * C, true, true},
                       G{"fc proj", 4 * C, C, false, true}, G{"lm head", C, Vp, false, false}}) {
      double f = 2.0 * M * m.K * m.N;
      row(fmt::format("matmul fwd {} [{}x{}x{}]", m.name, M, m.K, m.N),
          timed(g, 20, [&] {
            g.matmul_forward(y.as<bf16>(), x.as<bf16>(), w.as<bf16>(), m.has_bias ? bias.as<bf16>() : nullptr, M, m.K,
                             m.N, m.gelu ? pre.as<bf16>() : nullptr);
          }),
          f, 0);
      row(fmt::format("matmul bwd {} (dinp + dW{})", m.name, m.has_bias ? " + db" : ""),
          timed(g, 20, [&] {
            g.matmul_backward(x.as<bf16>(), dw.as<float>(), m.has_bias ? db.as<float>() : nullptr, y.as<bf16>(),
                              x.as<bf16>(), w.as<bf16>(), M, m.K, m.N);
          }),
          2 * f, 0);
    }
    Buf a(M * C * 2), b(M * C * 2), o(M * C * 2), r(M * C * 2), mean(M * 4), rstd(M * 4), lw(C * 2), lb(C * 2),
        gw(C * 4), gb(C * 4);
    double act = static_cast<double>(M) * C * 2;
    row("layernorm fwd", timed(g, 20, [&] {
          g.layernorm_forward(o.as<bf16>(), mean.as<float>(), rstd.as<float>(), a.as<bf16>(), lw.as<bf16>(),
                              lb.as<bf16>(), M, C);
        }),
        0, 2 * act);
    row("residual + layernorm fwd", timed(g, 20, [&] {
          g.residual_layernorm_forward(r.as<bf16>(), o.as<bf16>(), mean.as<float>(), rstd.as<float>(), a.as<bf16>(),
                                       b.as<bf16>(), lw.as<bf16>(), lb.as<bf16>(), M, C);
        }),
        0, 4 * act);
    row("layernorm bwd", timed(g, 20, [&] {
          g.layernorm_backward(r.as<bf16>(), gw.as<float>(), gb.as<float>(), o.as<bf16>(), a.as<bf16>(), lw.as<bf16>(),
                               mean.as<float>(), rstd.as<float>(), M, C);
        }),
        0, 4 * act);
    row("gelu fwd (4C)", timed(g, 20, [&] { g.gelu_forward(pre.as<bf16>(), x.as<bf16>(), M * 4 * C); }), 0, 8 * act);
    row("gelu bwd (4C)",
        timed(g, 20, [&] { g.gelu_backward(pre.as<bf16>(), x.as<bf16>(), pre.as<bf16>(), M * 4 * C); }), 0,
        12 * act);
    // Attention: causal FLOPs = 2 matmuls * 2 * B H T^2 hd / 2 forward, 2.5x that backward.
    Buf qkv(M * 3 * C * 2), dqkv(M * 3 * C * 2), st(static_cast<size_t>(B) * H * T * 4);
    double af = 2.0 * 2.0 * B * H * static_cast<double>(T) * T * hd / 2;
    for (CudaOps* k : {&g, naive.get()}) {
      try {
        row(fmt::format("attention fwd [{}]", k->attention_kind()), timed(*k, 20, [&] {
              k->attention_forward(o.as<bf16>(), st.as<float>(), qkv.as<bf16>(), B, T, H, hd);
            }),
            af, 0);
        row(fmt::format("attention bwd [{}]", k->attention_kind()), timed(*k, 20, [&] {
              k->attention_backward(dqkv.as<bf16>(), o.as<bf16>(), qkv.as<bf16>(), o.as<bf16>(), st.as<float>(), B, T,
                                    H, hd);
            }),
            2.5 * af, 0);
      } catch (const std::exception& e) {
        ++rep.failures;
        rep.line("| attention [{}] | **ERROR** {} | |", k->attention_kind(), e.what());
      }
    }
    std::vector<int32_t> tok(M);
    std::mt19937 rng(1);
    for (auto& t : tok) t = static_cast<int32_t>(rng() % V);
    int32_t* dtok = nullptr;
    cuda_ok(cudaMalloc(&dtok, M * sizeof(int32_t)), "cudaMalloc(tokens)");
    cuda_ok(cudaMemcpy(dtok, tok.data(), M * sizeof(int32_t), cudaMemcpyHostToDevice), "cudaMemcpy(tokens)");
    Buf loss(M * 4), lse(M * 4), wpe(static_cast<size_t>(T) * C * 2), dwpe(static_cast<size_t>(T) * C * 4);
    row("crossentropy fused (fwd + dlogits)", timed(g, 20, [&] {
          g.crossentropy_fused(loss.as<float>(), lse.as<float>(), y.as<bf16>(), dtok, M, Vp, V, 1.f / M);
        }),
        0, 2.0 * M * Vp * 2);
    row("embedding fwd", timed(g, 20, [&] {
          g.embedding_forward(o.as<bf16>(), dtok, w.as<bf16>(), wpe.as<bf16>(), B, T, C, 0, Vp);
        }),
        0, 3 * act);
    row("embedding bwd (sorted, deterministic)", timed(g, 20, [&] {
          g.embedding_backward(dw.as<float>(), dwpe.as<float>(), o.as<bf16>(), dtok, B, T, C, 0, Vp);
        }),
        0, 3 * act);
    const size_t P = 124'000'000;
    Buf p(P * 4), pg(P * 4), pm(P * 4), pv(P * 4), pb(P * 2), norm(8);
    cuda_ok(cudaMemset(pv.p, 0, P * 4), "cudaMemset");
    row("adamw 124M params (fp32 master + bf16 copy)", timed(g, 10, [&] {
          g.adamw(p.as<float>(), pb.as<bf16>(), pg.as<float>(), pm.as<float>(), pv.as<float>(), P, 1e-4f, 0.9f, 0.95f,
                  1e-8f, 0.1f, 1);
        }),
        0, P * 18.0);
    row("sum_squares 124M", timed(g, 10, [&] { g.sum_squares(norm.as<double>(), pg.as<float>(), P, false); }), 0,
        P * 4.0);
    cudaFree(dtok);
    rep.line("");
    // The cuBLASLt GEMM rate: the measured ceiling MFU figures can also be quoted against.
    const int64_t S = 8192;
    Buf ga(S * S * 2), gb2(S * S * 2), gc(S * S * 2);
    double ms = time_ms(g, 20, [&] { g.matmul_forward(gc.as<bf16>(), ga.as<bf16>(), gb2.as<bf16>(), nullptr, S, S, S); });
    double tf = 2.0 * S * S * S / ms / 1e9;
    gemm_tflops = tf;
    rep.line("cuBLASLt bf16 GEMM 8192^3 (fp32 accumulate, through CudaOps::matmul_forward): **{:.0f} TFLOP/s** = {:.0f}% "
             "of the {:.0f} TFLOP/s datasheet peak\n",
             tf, 100 * tf / kPeakTflops, kPeakTflops);
  } catch (const std::exception& e) {
    ++rep.failures;
    rep.line("\n**ERROR** in the timings: {}\n", e.what());
  }
  return gemm_tflops;
}


// ---- training: GptCuda against the CPU GPT, and the training step timed ----

constexpr uint64_t kInitSeed = 1234, kDataSeed = 42;

struct MicroBatch {
  int B = 0;
  std::vector<int32_t> inputs, targets;
  int64_t count() const { return std::count_if(targets.begin(), targets.end(), [](int32_t t) { return t >= 0; }); }
};

// `steps` steps of two micro-batches, B 4 and 3 (the second below the model's maximum, so a
// smaller shape runs too), of a random bigram chain from a fixed seed: the next token is
// perm[token] with probability 3/4, else uniform. The model can learn it (the chain's entropy,
// the lowest reachable loss, is 1.94 nats against ln 256 = 5.55 at the start; the CPU run falls
// to ~4.2 in the 20 steps), so the two runs are compared along a moving trajectory.
// The first targets of the second micro-batch are -1 (ignored): the count, not B*T, normalises.
std::vector<std::array<MicroBatch, 2>> tiny_batches(const ModelConfig& cfg, int steps) {
  std::mt19937_64 rng(kDataSeed);
  const int V = cfg.vocab_size, T = cfg.seq_len;
  std::vector<int32_t> perm(V);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<std::array<MicroBatch, 2>> out(steps);
  for (auto& step : out)
    for (int k = 0; k < 2; ++k) {
      MicroBatch& mb = step[k];
      mb.B = k == 0 ? 4 : 3;
      mb.inputs.resize(static_cast<size_t>(mb.B) * T);
      mb.targets.resize(mb.inputs.size());
      for (int b = 0; b < mb.B; ++b) {
        int32_t x = static_cast<int32_t>(rng() % V);
        for (int t = 0; t < T; ++t) {
          mb.inputs[b * T + t] = x;
          x = rng() % 4 != 0 ? perm[x] : static_cast<int32_t>(rng() % V);
          mb.targets[b * T + t] = x;
        }
      }
      if (k == 1) std::fill(mb.targets.begin(), mb.targets.begin() + 5, -1);
    }
  return out;
}

// Per parameter kind ("wte.weight", "h.*.attn.c_attn.weight", ...): max |a - ref| / max |ref|
// over every layer's tensor of that kind.
std::vector<std::pair<std::string, double>> rel_err_by_kind(const std::vector<ParamInfo>& params, const float* a,
                                                            const float* ref) {
  std::map<std::string, std::pair<double, double>> acc;  // kind -> (max diff, max |ref|)
  std::vector<std::string> order;
  for (const ParamInfo& p : params) {
    std::string kind = p.name;
    if (kind.starts_with("h.")) kind = "h.*" + kind.substr(kind.find('.', 2));
    if (!acc.count(kind)) order.push_back(kind);
    auto& [diff, mag] = acc[kind];
    for (size_t i = p.offset; i < p.offset + p.numel; ++i) {
      diff = std::max(diff, static_cast<double>(std::fabs(a[i] - ref[i])));
      mag = std::max(mag, static_cast<double>(std::fabs(ref[i])));
    }
  }
  std::vector<std::pair<std::string, double>> out;
  for (const auto& k : order) {
    auto [diff, mag] = acc[k];
    out.push_back({k, mag > 0 ? diff / mag : diff});
  }
  return out;
}

double max_rel_err(const float* a, const float* ref, size_t n) {
  double diff = 0, mag = 0;
  for (size_t i = 0; i < n; ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(a[i] - ref[i])));
    mag = std::max(mag, static_cast<double>(std::fabs(ref[i])));
  }
  return mag > 0 ? diff / mag : diff;
}

struct Curve {
  std::vector<double> loss, grad_norm;
  std::vector<float> step1_grads, final_params;
};

constexpr int kTinySteps = 20;
constexpr double kTinyLr = 3e-3, kClip = 1.0;

// The CPU reference: the CPU GPT and the trainer's AdamW, global grad-norm clipping at 1.0.
Curve tiny_cpu_run(Ops& cpu, const ModelConfig& cfg, const std::vector<std::array<MicroBatch, 2>>& data) {
  GPT model(cfg, ModelShard{}, cpu, 4);
  model.init_weights(kInitSeed);
  AdamWOptions ao;
  AdamW opt(ao, cpu, model.params(), 0, model.num_params());
  const size_t n = model.num_params();
  Curve c;
  for (size_t s = 0; s < data.size(); ++s) {
    const double count = static_cast<double>(data[s][0].count() + data[s][1].count());
    model.zero_grad();
    double sum = 0;
    for (const MicroBatch& mb : data[s]) {
      sum += model.forward(mb.inputs.data(), mb.targets.data(), mb.B, nullptr);
      model.backward(static_cast<float>(1.0 / count));
    }
    if (s == 0) c.step1_grads.assign(model.grad_data(), model.grad_data() + n);
    double norm = std::sqrt(cpu.sum_squares(model.grad_data(), n));
    if (norm > kClip) cpu.scale_inplace(model.grad_data(), static_cast<float>(kClip / norm), n);
    opt.step(model.param_data(), model.grad_data(), kTinyLr);
    c.loss.push_back(sum / count);
    c.grad_norm.push_back(norm);
  }
  c.final_params.assign(model.param_data(), model.param_data() + n);
  return c;
}

// The same run on GptCuda, from the CPU GPT's initial parameters (init_weights(kInitSeed)). The
// LM head runs in chunks of 96 rows (256 rows = 96 + 96 + 64), so the chunk offsets are exercised.
Curve tiny_gpu_run(Ops& cpu, const ModelConfig& cfg, const std::vector<std::array<MicroBatch, 2>>& data,
                   const std::string& attention, std::string* memory) {
  std::vector<float> init;
  {
    GPT ref(cfg, ModelShard{}, cpu, 1);
    ref.init_weights(kInitSeed);
    init.assign(ref.param_data(), ref.param_data() + ref.num_params());
  }
  CudaOpsOptions oo;
  oo.attention = attention;
  auto ops = make_cuda_ops(oo);
  GptCudaOptions go;
  go.logits_chunk_rows = 96;
  GptCuda model(cfg, *ops, 4, ModelShard{}, go);
  check(model.num_params() == init.size(), "GptCuda has {} flat floats, the CPU GPT {}", model.num_params(),
        init.size());
  model.load_params(init.data(), init.size());
  *memory = model.memory_summary();
  const CudaAdamWOptions ao;  // the same defaults as AdamWOptions
  const size_t n = model.num_params();
  Curve c;
  for (size_t s = 0; s < data.size(); ++s) {
    const double count = static_cast<double>(data[s][0].count() + data[s][1].count());
    model.zero_grad();
    double sum = 0;
    for (const MicroBatch& mb : data[s]) {
      sum += model.forward(mb.inputs.data(), mb.targets.data(), mb.B, nullptr);
      model.backward(static_cast<float>(1.0 / count));
    }
    if (s == 0) {
      c.step1_grads.resize(n);
      model.copy_grads_to_host(c.step1_grads.data(), n);
    }
    double norm = std::sqrt(model.grad_sum_squares());
    if (norm > kClip) model.scale_grads(static_cast<float>(kClip / norm));
    model.adamw_step(static_cast<float>(kTinyLr), ao, static_cast<int>(s) + 1);
    c.loss.push_back(sum / count);
    c.grad_norm.push_back(norm);
  }
  c.final_params.resize(n);
  model.copy_params_to_host(c.final_params.data(), n);
  return c;
}

// Bounds of the tiny comparison. The GPU rounds every activation, the weights it reads and the
// residual-stream gradient to bf16 (8 significant bits: a rounding is up to 2^-9 ~ 2e-3
// relative); the CPU rounds nothing. At equal weights that moves a per-token loss by O(1e-3)
// relative, and the mean over ~440 tokens by less. Over 20 Adam steps the two trajectories
// separate: Adam's step is ~lr * sign(g) where |g| is small, so rounding noise in tiny gradient
// components turns into lr-sized parameter differences, which the loss feels only weakly (lr 3e-3,
// weights ~0.02-1). GptCuda on a CPU emulation of CudaOps (each kernel = the CPU op with its bf16
// tensors rounded) stayed within 5e-4 of the CPU losses over these 20 steps, its first-step
// gradients within 1e-2; the real kernels add their own accumulation orders and cuDNN's bf16
// probabilities. 2e-2 (~0.1 nats at loss 5.5) leaves a wide margin for that, while wiring errors
// do not fit: an unscaled head gradient gave 9e-2 in that emulation, a misplaced wpe gradient
// 4e-2 (and O(1) first-step gradient errors, which the second bound catches even where the loss
// alone would not, e.g. an unzeroed head wte gradient: loss 1.4e-2, gradient 0.7).
constexpr double kLossBound = 2e-2;
// First-step gradients per parameter kind, max |gpu - cpu| / max |cpu|: bf16 errors compound
// through the two blocks to a few 1e-3 .. 1e-2 (3e-3 .. 8e-3 in the emulation); a wiring error
// gives O(1).
constexpr double kGradBound = 1e-1;

// One comparison: `cfg` on the CPU and on GptCuda with each attention path; a table of both
// curves, then the checks.
void tiny_training(Report& rep, Ops& cpu, const ModelConfig& cfg, const std::string& title,
                   const std::vector<std::string>& attentions) {
  rep.line("#### {} (L{} H{} d{} V{} padded to {}, T{})\n", title, cfg.n_layer, cfg.n_head, cfg.d_model,
           cfg.vocab_size, cfg.padded_vocab(), cfg.seq_len);
  const auto data = tiny_batches(cfg, kTinySteps);
  auto t0 = std::chrono::steady_clock::now();
  const Curve ref = tiny_cpu_run(cpu, cfg, data);
  rep.line("CPU run: {:.2f} s\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  struct Run {
    std::string attention;
    Curve c;
    std::string error, memory;
  };
  std::vector<Run> runs;
  for (const std::string& att : attentions) {
    Run r{att, {}, {}, {}};
    try {
      r.c = tiny_gpu_run(cpu, cfg, data, att, &r.memory);
    } catch (const std::exception& e) {
      r.error = e.what();
      cudaGetLastError();
    }
    runs.push_back(std::move(r));
  }
  std::string head = "| step | CPU loss |", sep = "|---|---|";
  for (const Run& r : runs) {
    head += fmt::format(" GPU loss [{}] | rel diff |", r.attention);
    sep += "---|---|";
  }
  head += " CPU grad norm |";
  sep += "---|";
  for (const Run& r : runs) {
    head += fmt::format(" GPU grad norm [{}] |", r.attention);
    sep += "---|";
  }
  rep.line("{}\n{}", head, sep);
  for (int s = 0; s < kTinySteps; ++s) {
    std::string row = fmt::format("| {} | {:.5f} |", s + 1, ref.loss[s]);
    for (const Run& r : runs) {
      if (r.error.empty())
        row += fmt::format(" {:.5f} | {:.1e} |", r.c.loss[s], std::fabs(r.c.loss[s] - ref.loss[s]) / ref.loss[s]);
      else
        row += " | |";
    }
    row += fmt::format(" {:.4f} |", ref.grad_norm[s]);
    for (const Run& r : runs) row += r.error.empty() ? fmt::format(" {:.4f} |", r.c.grad_norm[s]) : " |";
    rep.line("{}", row);
  }
  rep.line("");
  for (const Run& r : runs) {
    if (!r.error.empty()) {
      ++rep.failures;
      rep.line("- attention {}: **ERROR** {}", r.attention, r.error);
      continue;
    }
    double worst = 0;
    bool finite = true;
    for (int s = 0; s < kTinySteps; ++s) {
      finite = finite && std::isfinite(r.c.loss[s]);
      worst = std::max(worst, std::fabs(r.c.loss[s] - ref.loss[s]) / ref.loss[s]);
    }
    const bool loss_ok = finite && worst <= kLossBound;
    const bool learns = r.c.loss.back() < r.c.loss.front();
    if (!loss_ok) ++rep.failures;
    if (!learns) ++rep.failures;
    rep.line("- attention {}: max relative loss difference {:.2e} (bound {:.0e}) {}; GPU loss {:.4f} -> {:.4f} {}",
             r.attention, worst, kLossBound, loss_ok ? "ok" : "**FAIL**", r.c.loss.front(), r.c.loss.back(),
             learns ? "(falls, ok)" : "**does not fall: FAIL**");
    rep.line("  device memory: {}", r.memory);
    std::string grads;
    int grad_fail = 0;
    for (auto& [kind, e] : rel_err_by_kind(gpt_param_table(cfg, ModelShard{}), r.c.step1_grads.data(),
                                           ref.step1_grads.data())) {
      grads += fmt::format("{} {:.1e}{}, ", kind, e, e <= kGradBound ? "" : " **FAIL**");
      grad_fail += !(e <= kGradBound);
    }
    rep.failures += grad_fail;
    rep.line("  first-step gradients (rel err per kind, bound {:.0e}): {}{}", kGradBound, grads,
             grad_fail ? "**FAIL**" : "ok");
    rep.line("  parameters after {} steps: max |gpu - cpu| / max |cpu| = {:.2e} (not bounded: Adam's lr-sized steps "
             "on near-zero gradients differ)",
             kTinySteps, max_rel_err(r.c.final_params.data(), ref.final_params.data(), ref.final_params.size()));
  }
  rep.line("");
}

// One training step (zero_grad, forward + backward of one micro-batch, grad norm + clip, AdamW)
// of a GPT-2 preset at T 1024 on random tokens: median wall time of 5 after 2 warm-up steps.
// FLOPs per step = B*T * gpt_flops_per_token (6 N_nonembedding + 6 V d + 12 L T d: attention
// counted without the causal half, as PaLM's MFU does).
constexpr double kInitLossBound = 1e-2;

void time_training_step(Report& rep, Ops& cpu, const std::string& preset, int B, double gemm_tflops) {
  const ModelConfig cfg = model_preset(preset);
  const int T = cfg.seq_len;
  const int64_t BT = int64_t{B} * T;
  auto ops = make_cuda_ops();
  GptCuda model(cfg, *ops, B);
  std::mt19937 rng(kDataSeed);
  std::vector<int32_t> inputs(BT), targets(BT);
  for (int64_t i = 0; i < BT; ++i) {
    inputs[i] = static_cast<int32_t>(rng() % cfg.vocab_size);
    targets[i] = static_cast<int32_t>(rng() % cfg.vocab_size);
  }
  // GPT-2 initialisation on the CPU (recompute: only the block outputs are allocated), and the
  // full-size check: the loss of the first sequence at the initial weights, CPU (fp32) against
  // GptCuda (bf16, forward only: one chunk of 50304-column logits, padded vocabulary).
  double init_diff = 0;
  std::string init_losses;
  {
    GPT ref(cfg, ModelShard{}, cpu, 1, ActivationOptions{1, true});
    ref.init_weights(kInitSeed);
    model.load_params(ref.param_data(), ref.num_params());
    ref.set_grad_enabled(false);
    model.set_grad_enabled(false);
    int64_t n_cpu = 0, n_gpu = 0;
    const double l_cpu = ref.forward(inputs.data(), targets.data(), 1, &n_cpu) / static_cast<double>(n_cpu);
    const double l_gpu = model.forward(inputs.data(), targets.data(), 1, &n_gpu) / static_cast<double>(n_gpu);
    model.set_grad_enabled(true);
    init_diff = std::fabs(l_gpu - l_cpu) / l_cpu;
    init_losses = fmt::format("{:.4f} / {:.4f} ({:.1e}{})", l_cpu, l_gpu, init_diff,
                              init_diff <= kInitLossBound ? "" : " **FAIL**");
    if (!(init_diff <= kInitLossBound)) ++rep.failures;
  }
  const CudaAdamWOptions ao;
  int step = 0;
  std::vector<double> losses, norms;
  auto train_step = [&] {
    model.zero_grad();
    int64_t count = 0;
    double sum = model.forward(inputs.data(), targets.data(), B, &count);
    model.backward(static_cast<float>(1.0 / count));
    double norm = std::sqrt(model.grad_sum_squares());
    if (norm > kClip) model.scale_grads(static_cast<float>(kClip / norm));
    model.adamw_step(6e-4f, ao, ++step);
    ops->synchronize();
    losses.push_back(sum / count);
    norms.push_back(norm);
  };
  train_step();
  train_step();
  std::vector<double> ms;
  for (int r = 0; r < 5; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    train_step();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  const double med = ms[ms.size() / 2];
  const double tflops = gpt_flops_per_token(cfg) * static_cast<double>(BT) / med / 1e9;
  bool finite = true;
  for (double l : losses) finite = finite && std::isfinite(l);
  for (double g : norms) finite = finite && std::isfinite(g);
  if (!finite) ++rep.failures;
  size_t free_b = 0, total_b = 0;
  cudaMemGetInfo(&free_b, &total_b);
  rep.line("| {} | {} x {} | {} | {:.1f} | {:.0f} | {:.0f} | {:.1f}% | {} | {:.3f} -> {:.3f}{} | {} |", preset, B, T,
           init_losses, med,
           static_cast<double>(BT) / med * 1e3, tflops, 100 * tflops / kPeakTflops,
           gemm_tflops > 0 ? fmt::format("{:.1f}%", 100 * tflops / gemm_tflops) : std::string("n/a"),
           losses.front(), losses.back(), finite ? "" : " **NOT FINITE: FAIL**",
           fmt::format("{} (device in use {:.1f} GiB)", format_bytes(model.device_bytes()),
                       static_cast<double>(total_b - free_b) / (1ull << 30)));
}

void tiny_section(Report& rep, Ops& cpu) {
  try {
    rep.line("### {} steps on GptCuda against the CPU GPT\n", kTinySteps);
    rep.line("Same initial parameters (CPU GPT init_weights({}) loaded into GptCuda); per step 2 micro-batches", kInitSeed);
    rep.line("(B 4 + B 3, 5 targets ignored) of a random bigram chain (seed {}); loss scale 1/targets; grad-norm", kDataSeed);
    rep.line("clip {}; AdamW lr {} betas (0.9, 0.95) eps 1e-8 wd 0.1 on 2-D weights (the trainer's AdamW on the", kClip,
             kTinyLr);
    rep.line("CPU); GptCuda's LM head in chunks of 96 rows. Bounds: max over the steps of |gpu - cpu| / cpu loss");
    rep.line("<= {:.0e}; first-step gradients, max |gpu - cpu| / max |cpu| per tensor kind, <= {:.0e}.\n", kLossBound,
             kGradBound);
    const ModelConfig tiny = model_preset("tiny");
    tiny_training(rep, cpu, tiny, "preset tiny", {"cudnn", "naive"});
    ModelConfig padded = tiny;  // the padded-vocabulary path: 6 padding rows of wte, never counted
    padded.vocab_size = 250;
    padded.name = "tiny+v250";
    tiny_training(rep, cpu, padded, "preset tiny with vocab_size 250", {"cudnn"});
  } catch (const std::exception& e) {
    ++rep.failures;
    rep.line("\n**ERROR** in the tiny training comparison: {}\n", e.what());
  }
}

void training_section(Report& rep, Ops& cpu, double gemm_tflops) {
  rep.line("## Training on GptCuda (src/model/cuda/gpt_cuda.cpp)\n");
  tiny_section(rep, cpu);
  rep.line("### Training step timings (T 1024, random tokens, attention cudnn)\n");
  rep.line("One step = zero_grad + forward + backward (one micro-batch) + grad norm and clip + AdamW (fp32 master ->");
  rep.line("bf16 copy), wall time, median of 5 after 2 warm-up steps. FLOPs/step = B*T * gpt_flops_per_token");
  rep.line("(6 N_nonembedding + 6 V d + 12 L T d). MFU against the {:.0f} TFLOP/s dense bf16 datasheet peak and", kPeakTflops);
  rep.line("against the cuBLASLt 8192^3 GEMM rate measured above ({}).\n",
           gemm_tflops > 0 ? fmt::format("{:.0f} TFLOP/s", gemm_tflops) : std::string("not measured"));
  rep.line("Before timing, the loss of the first sequence at the initial weights: CPU GPT (fp32) / GptCuda, relative");
  rep.line("difference bounded by {:.0e} (bf16 forward only, no training drift: O(1e-3) expected).\n", kInitLossBound);
  rep.line("| model | micro-batch | initial loss CPU / GPU (rel diff) | ms/step | tokens/s | TFLOP/s | MFU (peak) | MFU (GEMM rate) | loss (first -> last of 7 steps) | model device memory |");
  rep.line("|---|---|---|---|---|---|---|---|---|---|");
  for (auto [preset, B] : {std::pair<const char*, int>{"gpt2-124m", 8}, std::pair<const char*, int>{"gpt2-350m", 8}}) {
    try {
      time_training_step(rep, cpu, preset, B, gemm_tflops);
    } catch (const std::exception& e) {
      ++rep.failures;
      rep.line("| {} | {} | **ERROR** {} | | | | | | | |", preset, B, e.what());
      cudaGetLastError();
    }
  }
  rep.line("");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: gpu_check RESULTS.md\n");
    return 2;
  }
  Report rep(argv[1]);
  if (!rep.file) {
    std::fprintf(stderr, "gpu_check: cannot write %s\n", argv[1]);
    return 2;
  }
  rep.line("# gpu_check: mpitron CUDA backend\n");
  std::string why = cuda_unavailable_reason();
  int rc = 0;
  if (!why.empty()) {
    rep.line("No usable GPU: {}. Nothing was checked.", why);
    rc = 2;
  } else {
    try {
      device_section(rep);
      auto cpu = make_cpu_ops();
      correctness_section(rep, *cpu);
      attention_paths_section(rep);
      double gemm_tflops = timing_section(rep);
      training_section(rep, *cpu, gemm_tflops);
    } catch (const std::exception& e) {
      ++rep.failures;
      rep.line("\n**ERROR**: {}", e.what());
    }
    rep.line("Result: {}", rep.failures == 0 ? "every check passed" : fmt::format("{} check(s) failed", rep.failures));
    rc = rep.failures == 0 ? 0 : 1;
  }
  return rc;
}
