// gpu_check: the device check of the CUDA backend (run by bench/gpu_check.sh).
//   1. every CudaOps kernel against the CPU backend on random inputs (tests/cuda/self_check.hpp:
//      relative error and a bound per op), with both attention paths, at a small and a GPT-2-like
//      shape; the LLaMA kernels (RMSNorm, RoPE, SwiGLU), grouped-query attention (GPT-2-like:
//      H 12, KV 4, hd 64) and context parallel's ring-attention block kernels included;
//   2. cuDNN attention against the naive path at the gpt2-124m / gpt2-350m attention shapes and
//      grouped-query H 12 / KV 4 (the cuDNN graphs also for LLaMA-3 8B's H 32 / KV 8 / hd 128);
//   3. kernel timings at gpt2-124m shapes (B 8, T 1024; the LLaMA kernels at the same C 768,
//      F 2048, KV 4; the ring's block kernels on the same causal work) and the cuBLASLt bf16 GEMM rate
//      (8192^3) against the H200's 989 TFLOP/s dense bf16 datasheet peak; the device MoE router
//      against the expert GEMMs at OLMoE shapes;
//   4. fp8 (fp8_timings.cpp): the FP8 linears against bf16 at gpt2-124m, llama-1b and llama-3b-like
//      shapes, the casts and the FP8 GEMMs apart;
//   5. training (training_check.cpp): the tiny model 20 AdamW steps on TransformerModelCuda (both
//      attention paths, and a padded vocabulary) against the CPU TransformerModel from the same
//      initial parameters (losses, first-step gradients, final parameters), and one training step
//      of gpt2-124m / gpt2-350m timed (ms, tokens/s, MFU), after an initial-loss check against the
//      CPU TransformerModel.
// Usage: gpu_check RESULTS.md [--append] [SECTION...]   (exit 0: every check passed; 1: a check
// failed; 2: no GPU; 3: bad arguments). SECTIONs: device kernels attention timings fp8 tiny steps
// (training = tiny + steps; default: all, in one process). bench/gpu_check.sh runs each section in
// its own process, appending to one file: a kernel fault (illegal address, ...) is sticky for the
// whole CUDA context, so in one process it would fail every section after it.
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
#include <cstdio>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "../../src/ops/cuda/attention.hpp"
#include "mpitron/core/error.hpp"
#include "mpitron/model/moe/moe_routing.hpp"
#include "mpitron/ops/cuda/cuda_ops.hpp"
#include "../../tests/cuda/self_check.hpp"
#include "mpitron/ops/ops.hpp"
#include "device_timing.hpp"
#include "fp8_timings.hpp"
#include "report.hpp"
#include "training_check.hpp"

using namespace mpitron;
using namespace mpitron::gpu_check;

namespace {

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
  SelfCheckShape small;  // B2 T64 C128 H4 (KV 2) V1000
  SelfCheckShape gpt;
  gpt.B = 4, gpt.T = 256, gpt.C = 768, gpt.H = 12, gpt.KV = 4, gpt.V = 50257, gpt.Vp = 50304;
  // The naive cases first: a fault in a cuDNN kernel would be sticky for the rest of the process.
  for (const Case& c : {Case{"small", small, "naive"}, Case{"gpt2", gpt, "naive"}, Case{"small", small, "cudnn"},
                        Case{"gpt2", gpt, "cudnn"}}) {
    rep.line("### shape {} (B {} T {} C {} H {} KV {} V {} Vp {}), attention {}\n", c.name, c.shape.B, c.shape.T,
             c.shape.C, c.shape.H, c.shape.KV, c.shape.V, c.shape.Vp, c.attention);
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
    // B, T, H, hd, KV: gpt2-124m, gpt2-350m, a small one; grouped-query H12/KV4, LLaMA-3 8B's
    // H32/KV8/hd128 and a small multi-query one.
    for (auto [B, T, H, hd, KV] : {std::array{8, 1024, 12, 64, 12}, std::array{8, 1024, 16, 64, 16},
                                   std::array{2, 64, 4, 32, 4}, std::array{8, 1024, 12, 64, 4},
                                   std::array{2, 1024, 32, 128, 8}, std::array{2, 64, 4, 32, 1}}) {
      try {
        rep.line("- B{} T{} H{} KV{} hd{}: {}", B, T, H, KV, hd, cuda::cudnn_attention_dry_build(h, B, T, H, hd, KV));
      } catch (const std::exception& e) {
        ++rep.failures;
        rep.line("- B{} T{} H{} KV{} hd{}: **ERROR** {}", B, T, H, KV, hd, e.what());
      }
    }
    cudnnDestroy(h);
  }
  rep.line("");
  rep.line("## cuDNN attention against the naive path (GPU vs GPU)\n");
  for (auto [name, B, T, H, hd, KV] : {std::tuple{"gpt2-124m", 8, 1024, 12, 64, 0},
                                       std::tuple{"gpt2-350m", 8, 1024, 16, 64, 0},
                                       std::tuple{"gqa H12 KV4", 8, 1024, 12, 64, 4}}) {
    try {
      CudaOpsOptions n;
      n.attention = "naive";
      auto a = make_cuda_ops(), b = make_cuda_ops(n);
      for (const OpCheck& k : check_attention_paths(*a, *b, B, T, H, hd, 7, KV)) {
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

// The cuBLASLt bf16 GEMM rate (8192^3 through CudaOps::matmul_forward), TFLOP/s.
double gemm_rate_tflops(CudaOps& g) {
  const int64_t S = 8192;
  Buf ga(S * S * 2), gb2(S * S * 2), gc(S * S * 2);
  double ms = time_ms(g, 20, [&] { g.matmul_forward(gc.as<bf16>(), ga.as<bf16>(), gb2.as<bf16>(), nullptr, S, S, S); });
  return 2.0 * S * S * S / ms / 1e9;
}

// cuDNN's segment graphs (ops/attention_segments.hpp) against the dense causal call of the same
// shape: the ring's diagonal block (B causal segments of T: the bound is 1.3x the dense
// call), an off-diagonal block (queries all after the keys: full T x T segments, twice the causal
// FLOPs), and packed documents of mean length ~300 (exponential lengths, seed 1), whose FLOPs are
// what the segments compute (sum of each document's causal triangle). Also the number of graphs
// built. `timed` and `row` are timing_section's.
template <class Timed, class Row>
void segment_timings(CudaOps& g, Report& rep, Timed& timed, Row& row, const Buf& qkv, const Buf& dqkv, const Buf& o,
                     const Buf& st, int B, int T, int H, int hd, double causal_flops) {
  const int64_t W = 3 * static_cast<int64_t>(H) * hd;
  std::vector<int32_t> pos(static_cast<size_t>(T)), later(static_cast<size_t>(T));
  for (int t = 0; t < T; ++t) pos[static_cast<size_t>(t)] = t, later[static_cast<size_t>(t)] = T + t;
  std::mt19937 rng(1);
  std::exponential_distribution<double> len(1.0 / 300);
  std::vector<int32_t> starts(static_cast<size_t>(B) * T);
  double doc_pairs = 0;  // query-key pairs the documents' causal masks keep
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T;) {
      const int n = std::min(T - t, 1 + static_cast<int>(len(rng)));
      for (int i = 0; i < n; ++i) starts[static_cast<size_t>(b) * T + t + i] = t;
      doc_pairs += 0.5 * n * (n + 1.0);
      t += n;
    }
  struct Case {
    const char* name;
    AttentionSegments seg;
    double flops;
  };
  const double per_pair = 2.0 * 2.0 * H * hd;  // two matmuls, per (query, key) pair and head
  std::vector<Case> cases;
  cases.push_back({"ring diagonal block (causal)", attention_segments(pos.data(), T, pos.data(), T, B, nullptr),
                   causal_flops});
  cases.push_back({"ring earlier block (full)", attention_segments(later.data(), T, pos.data(), T, B, nullptr),
                   2 * causal_flops});
  cases.push_back({"packed documents (mean ~300)", attention_segments(pos.data(), T, pos.data(), T, B, starts.data()),
                   per_pair * doc_pairs});
  for (const Case& c : cases) {
    try {
      DeviceSegments d;
      d.shape = segment_buckets(c.seg);
      d.count = c.seg.count(), d.causal = c.seg.causal, d.B = B, d.Tq = T, d.Tk = T;
      std::vector<int32_t> table(static_cast<size_t>(kSegmentTableRows) * d.shape.n);
      segment_table(c.seg, d.shape.n, table.data());
      Buf dt(table.size() * 4);
      cuda_ok(cudaMemcpy(dt.p, table.data(), table.size() * 4, cudaMemcpyHostToDevice), "cudaMemcpy(segments)");
      d.table = dt.as<int32_t>();
      const bf16* q = qkv.as<bf16>();
      const std::string what = fmt::format("[cudnn segments] {} ({} segments, buckets {} x {} x {})", c.name, d.count,
                                           d.shape.n, d.shape.sq, d.shape.skv);
      row("attention fwd " + what, timed(g, 20, [&] {
            g.attention_segments_forward(o.as<bf16>(), st.as<float>(), q, W, q + H * hd, q + 2 * H * hd, W, H, H, hd, d);
          }),
          c.flops, 0);
      bf16* dq = dqkv.as<bf16>();
      row("attention bwd " + what, timed(g, 20, [&] {
            g.attention_segments_backward(dq, dq + H * hd, dq + 2 * H * hd, o.as<bf16>(), q, W, q + H * hd,
                                          q + 2 * H * hd, W, o.as<bf16>(), st.as<float>(), H, H, hd, d);
          }),
          2.5 * c.flops, 0);
    } catch (const std::exception& e) {
      ++rep.failures;
      rep.line("| attention segments {} | **ERROR** {} | |", c.name, e.what());
    }
  }
  rep.line("\ncuDNN attention graphs built by this process's CudaOps: {}", g.attention_graphs());
}

// The device MoE router at OLMoE-1B-7B's shapes (C 2048, 64 experts, top 8, expert width 1024;
// 8192 rows: 4 sequences of 2048) against the expert GEMMs it feeds (one GEMM per expert over its
// rows at balanced routing, forward and backward): the bound is 0.1x. Random logits (seed 2).
template <class Timed, class Row>
void router_timings(CudaOps& g, Report& rep, Timed& timed, Row& row) {
  const int64_t R = 8192, T = 2048, C = 2048, E = 64, k = 8, Fe = 1024, n = R * k / E;
  rep.line("\n| MoE router and expert GEMMs | ms | rate |\n|---|---|---|");
  try {
    MoeConfig olmoe;
    olmoe.n_experts = static_cast<int>(E), olmoe.top_k = static_cast<int>(k), olmoe.router = MoeRouter::topk_softmax;
    const MoeRouterShape sh = moe_router_shape(olmoe, R, T, T, R);
    std::mt19937 rng(2);
    std::normal_distribution<float> nd(0.f, 1.f);
    std::vector<bf16> lg(static_cast<size_t>(R * E));
    for (bf16& v : lg) v = to_bf16(nd(rng));
    Buf logits(R * E * 2), probs(R * E * 4), lse(R * 4), expert(R * k * 4), weight(R * k * 4), pos(R * k * 8),
        seq_routed(R / T * E * 8), seq_psum(R / T * E * 8), srow(R * k * 8), summary((E + 3) * 8),
        scratch(sh.scratch_elems() * 8), dscratch(sh.dscratch_elems() * 8), dw(R * k * 4), dl(R * E * 2);
    cuda_ok(cudaMemcpy(logits.p, lg.data(), lg.size() * 2, cudaMemcpyHostToDevice), "cudaMemcpy(router logits)");
    MoeRouterArrays a;
    a.probs = probs.as<float>(), a.lse = lse.as<float>(), a.expert = expert.as<int32_t>(), a.weight = weight.as<float>();
    a.pos = pos.as<int64_t>(), a.seq_routed = seq_routed.as<int64_t>(), a.seq_psum = seq_psum.as<double>();
    a.srow = srow.as<int64_t>(), a.summary = summary.as<double>(), a.scratch = scratch.as<int64_t>();
    a.dscratch = dscratch.as<double>();
    const double fwd = timed(g, 20, [&] {
      g.moe_router_select(logits.as<bf16>(), sh, a);
      g.moe_router_place(sh, a);
    });
    row("moe router fwd (select + place) [OLMoE: 8192 rows, 64 experts, top 8]", fwd, 0, 0);
    const double bwd = timed(g, 20, [&] { g.moe_router_backward(dl.as<bf16>(), dw.as<float>(), 1e-6, 1e-7, sh, a); });
    row("moe router bwd", bwd, 0, 0);
    Buf x(n * C * 2), w13(2 * Fe * C * 2), h(n * 2 * Fe * 2), w2(C * Fe * 2), y(n * C * 2), g13(2 * Fe * C * 4),
        g2(C * Fe * 4);
    const double gf = timed(g, 5, [&] {
      for (int64_t e = 0; e < E; ++e) {
        g.matmul_forward(h.as<bf16>(), x.as<bf16>(), w13.as<bf16>(), nullptr, n, C, 2 * Fe);
        g.matmul_forward(y.as<bf16>(), h.as<bf16>(), w2.as<bf16>(), nullptr, n, Fe, C);
      }
    });
    const double flops = 2.0 * double(R * k) * C * 3 * Fe;
    row("moe expert GEMMs fwd (64 x [1024 rows: C 2048 -> 2 x 1024 -> 2048])", gf, flops, 0);
    const double gb = timed(g, 5, [&] {
      for (int64_t e = 0; e < E; ++e) {
        g.matmul_backward(h.as<bf16>(), g2.as<float>(), nullptr, y.as<bf16>(), h.as<bf16>(), w2.as<bf16>(), n, Fe, C);
        g.matmul_backward(x.as<bf16>(), g13.as<float>(), nullptr, h.as<bf16>(), x.as<bf16>(), w13.as<bf16>(), n, C,
                          2 * Fe);
      }
    });
    row("moe expert GEMMs bwd", gb, 2 * flops, 0);
    if (fwd > 0 && bwd > 0 && gf > 0 && gb > 0)
      rep.line("\nMoE router (device) / expert GEMMs at OLMoE shapes: {:.3f}x (bound 0.1x; the host router: "
               "bench/results/moe_route_host.md)",
               (fwd + bwd) / (gf + gb));
  } catch (const std::exception& e) {
    ++rep.failures;
    rep.line("| moe router | **ERROR** {} | |", e.what());
  }
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
    // The LLaMA block's kernels at the same C: RMSNorm, RoPE on a grouped-query qkv (H 12, KV 4),
    // SwiGLU at Meta's hidden size for C 768 (F 2048).
    const int KVg = 4, F = 2048;
    const int64_t Wg = static_cast<int64_t>(H + 2 * KVg) * hd;
    row("rmsnorm fwd", timed(g, 20, [&] {
          g.rmsnorm_forward(o.as<bf16>(), rstd.as<float>(), a.as<bf16>(), lw.as<bf16>(), M, C, 1e-5f);
        }),
        0, 2 * act);
    row("rmsnorm bwd", timed(g, 20, [&] {
          g.rmsnorm_backward(r.as<bf16>(), gw.as<float>(), o.as<bf16>(), a.as<bf16>(), lw.as<bf16>(), rstd.as<float>(),
                             M, C);
        }),
        0, 4 * act);
    Buf qkv_g(M * Wg * 2), dqkv_g(M * Wg * 2), gu(M * 2 * F * 2), dgu(M * 2 * F * 2), sw(M * F * 2);
    const RopeFreqs freqs = rope_freqs_plain(5e5, hd);
    row("rope q + k (H 12, KV 4)", timed(g, 20, [&] {
          g.rope(qkv_g.as<bf16>(), B, T, H, hd, Wg, freqs, 0, false);
          g.rope(qkv_g.as<bf16>() + static_cast<int64_t>(H) * hd, B, T, KVg, hd, Wg, freqs, 0, false);
        }),
        0, 2.0 * M * (H + KVg) * hd * 2);
    row("swiglu fwd (F 2048)", timed(g, 20, [&] { g.swiglu_forward(sw.as<bf16>(), gu.as<bf16>(), M, F); }), 0,
        3.0 * M * F * 2);
    row("swiglu bwd (F 2048)",
        timed(g, 20, [&] { g.swiglu_backward(dgu.as<bf16>(), gu.as<bf16>(), sw.as<bf16>(), M, F); }), 0,
        5.0 * M * F * 2);
    std::vector<int32_t> tok(M);
    std::mt19937 rng(1);
    for (auto& t : tok) t = static_cast<int32_t>(rng() % V);
    int32_t* dtok = nullptr;
    cuda_ok(cudaMalloc(&dtok, M * sizeof(int32_t)), "cudaMalloc(tokens)");
    cuda_ok(cudaMemcpy(dtok, tok.data(), M * sizeof(int32_t), cudaMemcpyHostToDevice), "cudaMemcpy(tokens)");
    cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");  // a pageable upload may still be in flight
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
    cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    row("adamw 124M params (fp32 master + bf16 copy)", timed(g, 10, [&] {
          g.adamw(p.as<float>(), pb.as<bf16>(), pg.as<float>(), 1.f, pm.as<float>(), pv.as<float>(), P, 1e-4f, 0.9f,
                  0.95f, 1e-8f, 0.1f, 1);
        }),
        0, P * 18.0);
    row("sum_squares 124M", timed(g, 10, [&] { g.sum_squares(norm.as<double>(), pg.as<float>(), P, false); }), 0,
        P * 4.0);
    cudaFree(dtok);
    rep.line("");
    // The cuBLASLt GEMM rate: the measured ceiling MFU figures can also be quoted against.
    double tf = gemm_rate_tflops(g);
    gemm_tflops = tf;
    rep.line("cuBLASLt bf16 GEMM 8192^3 (fp32 accumulate, through CudaOps::matmul_forward): **{:.0f} TFLOP/s** = {:.0f}% "
             "of the {:.0f} TFLOP/s datasheet peak\n",
             tf, 100 * tf / kPeakTflops, kPeakTflops);
    // Attention last, naive before cudnn: a fault in a cuDNN kernel would be sticky for the rest
    // of the process.
    rep.line("| kernel | ms | rate |\n|---|---|---|");
    // Attention: causal FLOPs = 2 matmuls * 2 * B H T^2 hd / 2 forward, 2.5x that backward.
    Buf qkv(M * 3 * C * 2), dqkv(M * 3 * C * 2), st(static_cast<size_t>(B) * H * T * 4);
    double af = 2.0 * 2.0 * B * H * static_cast<double>(T) * T * hd / 2;
    // Plain (KV 0 = H) and grouped-query (KV 4, on the GQA qkv above): the same FLOPs.
    for (CudaOps* k : {naive.get(), &g}) {
      for (int kv : {0, KVg}) {
        const std::string what = fmt::format("[{}]{}", k->attention_kind(), kv ? fmt::format(" gqa KV{}", kv) : "");
        const Buf& in = kv ? qkv_g : qkv;
        const Buf& din = kv ? dqkv_g : dqkv;
        try {
          row("attention fwd " + what, timed(*k, 20, [&] {
                k->attention_forward(o.as<bf16>(), st.as<float>(), in.as<bf16>(), B, T, H, hd, kv);
              }),
              af, 0);
          row("attention bwd " + what, timed(*k, 20, [&] {
                k->attention_backward(din.as<bf16>(), o.as<bf16>(), in.as<bf16>(), o.as<bf16>(), st.as<float>(), B, T,
                                      H, hd, kv);
              }),
              2.5 * af, 0);
        } catch (const std::exception& e) {
          ++rep.failures;
          rep.line("| attention {} | **ERROR** {} | |", what, e.what());
        }
      }
    }
    // Context parallel's block kernels (ring attention, CUDA cores) on the same causal work: one
    // block holding the whole sequence (positions 0..T-1), to set them against the fused kernels.
    try {
      std::vector<int32_t> pos(T);
      for (int t = 0; t < T; ++t) pos[t] = t;
      Buf dpos(static_cast<size_t>(T) * 4), kvb(M * 2 * C * 2), acc(M * C * 4), mm(static_cast<size_t>(B) * H * T * 4),
          ll(static_cast<size_t>(B) * H * T * 4), dkv(M * 2 * C * 4), ds(static_cast<size_t>(B) * H * T * 4);
      cuda_ok(cudaMemcpy(dpos.p, pos.data(), pos.size() * 4, cudaMemcpyHostToDevice), "cudaMemcpy(positions)");
      cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      row("attention block fwd (ring, cp)", timed(g, 5, [&] {
            g.attention_block_forward(acc.as<float>(), mm.as<float>(), ll.as<float>(), qkv.as<bf16>(), 3 * C,
                                      kvb.as<bf16>(), B, T, T, H, H, hd, dpos.as<int32_t>(), dpos.as<int32_t>(), nullptr,
                                      true);
          }),
          af, 0);
      row("attention block bwd (ring, cp)", timed(g, 5, [&] {
            g.attention_block_backward(acc.as<float>(), dkv.as<float>(), qkv.as<bf16>(), 3 * C, kvb.as<bf16>(),
                                       o.as<bf16>(), st.as<float>(), ds.as<float>(), B, T, T, H, H, hd,
                                       dpos.as<int32_t>(), dpos.as<int32_t>(), nullptr);
          }),
          2.5 * af, 0);
    } catch (const std::exception& e) {
      ++rep.failures;
      rep.line("| attention block (ring) | **ERROR** {} | |", e.what());
    }
    segment_timings(g, rep, timed, row, qkv, dqkv, o, st, B, T, H, hd, af);
    router_timings(g, rep, timed, row);
    rep.line("");
  } catch (const std::exception& e) {
    ++rep.failures;
    rep.line("\n**ERROR** in the timings: {}\n", e.what());
  }
  return gemm_tflops;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: gpu_check RESULTS.md [--append] [device|kernels|attention|timings|fp8|tiny|steps|training ...]\n");
    return 2;
  }
  bool append = false;
  std::vector<std::string> sections;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--append") {
      append = true;
    } else if (a == "device" || a == "kernels" || a == "attention" || a == "timings" || a == "fp8" || a == "tiny" ||
               a == "steps") {
      sections.push_back(a);
    } else if (a == "training") {
      sections.push_back("tiny");
      sections.push_back("steps");
    } else {
      std::fprintf(stderr, "gpu_check: unknown argument '%s'\n", argv[i]);
      return 3;  // not 2: gpu_check.sh reads 2 as "no usable GPU"
    }
  }
  const bool all = sections.empty();
  auto want = [&](const char* s) { return all || std::find(sections.begin(), sections.end(), s) != sections.end(); };
  Report rep(argv[1], append);
  if (!rep.file) {
    std::fprintf(stderr, "gpu_check: cannot write %s\n", argv[1]);
    return 2;
  }
  if (!append) rep.line("# gpu_check: mpitron CUDA backend\n");
  std::string why = cuda_unavailable_reason();
  int rc = 0;
  if (!why.empty()) {
    rep.line("No usable GPU: {}. Nothing was checked.", why);
    rc = 2;
  } else {
    try {
      if (want("device")) device_section(rep);
      auto cpu = make_cpu_ops();
      if (want("kernels")) correctness_section(rep, *cpu);
      if (want("attention")) attention_paths_section(rep);
      double gemm_tflops = 0;
      if (want("timings")) gemm_tflops = timing_section(rep);
      if (want("fp8")) fp8_section(rep);
      if (want("tiny") || want("steps")) {
        // A process of its own: measure the GEMM rate the step MFU is also quoted against.
        if (want("steps") && !want("timings")) {
          try {
            auto g = make_cuda_ops();
            gemm_tflops = gemm_rate_tflops(*g);
          } catch (const std::exception& e) {
            rep.line("(cuBLASLt GEMM rate not measured: {})\n", e.what());
            cudaGetLastError();
          }
        }
        training_section(rep, *cpu, gemm_tflops, want("tiny"), want("steps"));
      }
    } catch (const std::exception& e) {
      ++rep.failures;
      rep.line("\n**ERROR**: {}", e.what());
    }
    if (all)
      rep.line("Result: {}", rep.failures == 0 ? "every check passed" : fmt::format("{} check(s) failed", rep.failures));
    else if (rep.failures > 0)
      rep.line("({} check(s) failed in this section)\n", rep.failures);
    rc = rep.failures == 0 ? 0 : 1;
  }
  return rc;
}
