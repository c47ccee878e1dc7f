// Model benchmark (not a test): raw oneDNN GEMM rates at GPT-2 d 768 shapes (both back ends,
// every transpose case), then forward + backward + AdamW steps of tiny, small and gpt2-124m with
// ms/step, tokens/s, GFLOP/s (PERF-NOTES formula) and a per-op time breakdown.
// Build + run: bench/model/run.sh   (OMP_NUM_THREADS=2 unless set)
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "../../src/ops/cpu/gemm.hpp"
#include "mpitron/core/rng.hpp"
#include "mpitron/model/transformer_model.hpp"

using namespace mpitron;
using Clock = std::chrono::steady_clock;

namespace {

double secs(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Ops decorator that accumulates wall time per kernel family.
class TimedOps final : public Ops {
 public:
  explicit TimedOps(Ops& in) : in_(in) {}
  std::map<std::string, double> t;
  const char* name() const override { return "timed"; }
  template <class F>
  void time(const char* k, F&& f) {
    auto a = Clock::now();
    f();
    t[k] += secs(a, Clock::now());
  }
  void matmul_forward(float* o, const float* i, const float* w, const float* b, int64_t M, int64_t K,
                      int64_t N) override {
    time(N > 8 * K ? "lm_head_gemm" : "matmul_fwd", [&] { in_.matmul_forward(o, i, w, b, M, K, N); });
  }
  void matmul_backward(float* di, float* dw, float* db, const float* d, const float* i, const float* w, int64_t M,
                       int64_t K, int64_t N, bool acc) override {
    time(N > 8 * K ? "lm_head_gemm" : "matmul_bwd", [&] { in_.matmul_backward(di, dw, db, d, i, w, M, K, N, acc); });
  }
  void layernorm_forward(float* o, float* m, float* r, const float* i, const float* w, const float* b, int64_t R,
                         int64_t C) override {
    time("layernorm", [&] { in_.layernorm_forward(o, m, r, i, w, b, R, C); });
  }
  void layernorm_backward(float* di, float* dw, float* db, const float* d, const float* i, const float* w,
                          const float* m, const float* r, int64_t R, int64_t C) override {
    time("layernorm", [&] { in_.layernorm_backward(di, dw, db, d, i, w, m, r, R, C); });
  }
  void gelu_forward(float* o, const float* i, size_t n) override { time("gelu", [&] { in_.gelu_forward(o, i, n); }); }
  void gelu_backward(float* di, const float* i, const float* d, size_t n) override {
    time("gelu", [&] { in_.gelu_backward(di, i, d, n); });
  }
  void attention_forward(float* o, float* a, const float* q, int B, int T, int H, int hd, int kv,
                         const int32_t* ds) override {
    time("attention_fwd", [&] { in_.attention_forward(o, a, q, B, T, H, hd, kv, ds); });
  }
  void attention_backward(float* dq, const float* d, const float* q, const float* a, int B, int T, int H, int hd,
                          int kv, const int32_t* ds) override {
    time("attention_bwd", [&] { in_.attention_backward(dq, d, q, a, B, T, H, hd, kv, ds); });
  }
  void attention_block_forward(float* o, float* m, float* l, const float* q, int64_t qs, const float* kv, int B, int Tq,
                               int Tk, int H, int KV, int hd, const int* qp, const int* kp, const int32_t* qst) override {
    time("attention_block_fwd",
         [&] { in_.attention_block_forward(o, m, l, q, qs, kv, B, Tq, Tk, H, KV, hd, qp, kp, qst); });
  }
  void attention_block_backward(float* dq, int64_t dqs, float* dkv, const float* q, int64_t qs, const float* kv,
                                const float* d, const float* lse, const float* ds, int B, int Tq, int Tk, int H, int KV,
                                int hd, const int* qp, const int* kp, const int32_t* qst) override {
    time("attention_block_bwd",
         [&] { in_.attention_block_backward(dq, dqs, dkv, q, qs, kv, d, lse, ds, B, Tq, Tk, H, KV, hd, qp, kp, qst); });
  }
  void rmsnorm_forward(float* o, float* r, const float* i, const float* w, int64_t R, int64_t C, float eps) override {
    time("rmsnorm", [&] { in_.rmsnorm_forward(o, r, i, w, R, C, eps); });
  }
  void rmsnorm_backward(float* di, float* dw, const float* d, const float* i, const float* w, const float* r,
                        int64_t R, int64_t C) override {
    time("rmsnorm", [&] { in_.rmsnorm_backward(di, dw, d, i, w, r, R, C); });
  }
  void rope(float* x, int B, int T, int nh, int hd, int64_t stride, const RopeFreqs& f, int pos0, bool inv) override {
    time("rope", [&] { in_.rope(x, B, T, nh, hd, stride, f, pos0, inv); });
  }
  void swiglu_forward(float* o, const float* gu, int64_t R, int64_t F) override {
    time("swiglu", [&] { in_.swiglu_forward(o, gu, R, F); });
  }
  void swiglu_backward(float* dgu, const float* gu, const float* d, int64_t R, int64_t F) override {
    time("swiglu", [&] { in_.swiglu_backward(dgu, gu, d, R, F); });
  }
  void embedding_forward(float* o, const int32_t* tk, const float* wte, const float* wpe, int B, int T, int C,
                         int64_t vb, int64_t ve) override {
    time("embedding", [&] { in_.embedding_forward(o, tk, wte, wpe, B, T, C, vb, ve); });
  }
  void embedding_backward(float* dwte, float* dwpe, const float* d, const int32_t* tk, int B, int T, int C, int64_t vb,
                          int64_t ve) override {
    time("embedding", [&] { in_.embedding_backward(dwte, dwpe, d, tk, B, T, C, vb, ve); });
  }
  void residual_forward(float* o, const float* a, const float* b, size_t n) override {
    time("residual", [&] { in_.residual_forward(o, a, b, n); });
  }
  void add_inplace(float* a, const float* b, size_t n) override { time("residual", [&] { in_.add_inplace(a, b, n); }); }
  void moe_gather_rows(float* d, const float* s, const int64_t* i, int64_t n, int64_t C) override {
    time("moe_rows", [&] { in_.moe_gather_rows(d, s, i, n, C); });
  }
  void moe_scatter_rows(float* d, const float* s, const int64_t* i, int64_t n, int64_t C) override {
    time("moe_rows", [&] { in_.moe_scatter_rows(d, s, i, n, C); });
  }
  void moe_combine(float* o, const float* y, const int64_t* p, const float* w, int64_t R, int k, int64_t C) override {
    time("moe_rows", [&] { in_.moe_combine(o, y, p, w, R, k, C); });
  }
  void moe_combine_backward(float* dy, float* dw, const float* d, const float* y, const int64_t* p, const float* w,
                            int64_t R, int k, int64_t C) override {
    time("moe_rows", [&] { in_.moe_combine_backward(dy, dw, d, y, p, w, R, k, C); });
  }
  void moe_uncombine_add(float* dx, const float* s, const int64_t* p, int64_t R, int k, int64_t C) override {
    time("moe_rows", [&] { in_.moe_uncombine_add(dx, s, p, R, k, C); });
  }
  void scale_inplace(float* a, float s, size_t n) override { time("residual", [&] { in_.scale_inplace(a, s, n); }); }
  void axpy(float* y, float a, const float* x, size_t n) override { time("residual", [&] { in_.axpy(y, a, x, n); }); }
  void crossentropy_forward(float* l, float* lse, const float* x, const int32_t* tg, int64_t R, int64_t Vp,
                            int64_t V) override {
    time("crossentropy", [&] { in_.crossentropy_forward(l, lse, x, tg, R, Vp, V); });
  }
  void crossentropy_backward(float* d, const float* lse, const int32_t* tg, int64_t R, int64_t Vp, int64_t V,
                             float s) override {
    time("crossentropy", [&] { in_.crossentropy_backward(d, lse, tg, R, Vp, V, s); });
  }
  void adamw(float* p, bf16* pb, const float* g, float gs, float* m, float* v, size_t n, float lr, float b1, float b2,
             float eps, float wd, int step) override {
    time("adamw", [&] { in_.adamw(p, pb, g, gs, m, v, n, lr, b1, b2, eps, wd, step); });
  }
  double sum_squares(const float* x, size_t n) override {
    double r = 0;
    time("adamw", [&] { r = in_.sum_squares(x, n); });
    return r;
  }

 private:
  Ops& in_;
};

void bench_gemm() {
  // The two back ends alternate rep by rep (the machine is shared and noisy); quoted: the median
  // and, in brackets, the best of 15.
  std::printf("## Raw fp32 GEMM rates (GFLOP/s: median [best] of 15, alternating back ends)\n\n");
  std::printf("| shape | case | dnnl_sgemm | cached primitive |\n|---|---|---|---|\n");
  struct S {
    const char* what;
    int64_t M, K, N;
  } shapes[] = {{"124m qkv 768->2304", 1024, 768, 2304},   {"124m fc 768->3072", 1024, 768, 3072},
                {"124m proj 3072->768", 1024, 3072, 768},  {"124m attn-proj 768->768", 1024, 768, 768},
                {"124m lm head 768->50304", 160, 768, 50304}, {"small fc 384->1536", 2048, 384, 1536},
                {"small proj 1536->384", 2048, 1536, 384},  {"tiny qkv 256->768", 2048, 256, 768}};
  const char* cases[3] = {"dX = dY*W (NN)", "Y = X*W^T (NT)", "dW += dY^T*X (TN)"};
  for (auto s : shapes) {
    std::vector<float> X(s.M * s.K, 0.01f), W(s.N * s.K, 0.01f), Y(s.M * s.N, 0.f), dX(s.M * s.K), dW(s.N * s.K);
    for (int c : {1, 0, 2}) {
      cpu::Gemm g[2];
      g[0].set_impl(c, cpu::GemmImpl::sgemm);
      g[1].set_impl(c, cpu::GemmImpl::primitive);
      std::vector<double> ts[2];
      for (int rep = 0; rep < 16; ++rep)
        for (int impl = 0; impl < 2; ++impl) {
          auto a = Clock::now();
          if (c == 1) g[impl].run(false, true, s.M, s.N, s.K, X.data(), s.K, W.data(), s.K, Y.data(), s.N, false);
          if (c == 0) g[impl].run(false, false, s.M, s.K, s.N, Y.data(), s.N, W.data(), s.K, dX.data(), s.K, false);
          if (c == 2) g[impl].run(true, false, s.N, s.K, s.M, Y.data(), s.N, X.data(), s.K, dW.data(), s.K, true);
          if (rep > 0) ts[impl].push_back(secs(a, Clock::now()));
        }
      double f = 2.0 * s.M * s.N * s.K / 1e9;
      std::printf("| %s (M=%ld) | %s | %.0f [%.0f] | %.0f [%.0f] |\n", s.what, static_cast<long>(s.M), cases[c],
                  f / median(ts[0]), f / *std::min_element(ts[0].begin(), ts[0].end()), f / median(ts[1]),
                  f / *std::min_element(ts[1].begin(), ts[1].end()));
      std::fflush(stdout);
    }
  }
  std::printf("\n");
}

void bench_model(ModelConfig cfg, int B, int steps, bool breakdown) {
  auto base = make_cpu_ops();
  TimedOps timed(*base);
  Ops& ops = breakdown ? static_cast<Ops&>(timed) : *base;
  TransformerModel m(cfg, ModelShard{}, ops, B);
  m.init_weights(42);
  const int T = cfg.seq_len;
  std::vector<int32_t> in(B * T), tg(B * T);
  for (int i = 0; i < B * T; ++i) {
    in[i] = static_cast<int32_t>(counter_bits(1, 1, i) % cfg.vocab_size);
    tg[i] = static_cast<int32_t>(counter_bits(1, 2, i) % cfg.vocab_size);
  }
  Buffer<float> mo(Mem::optim, m.num_params()), vo(Mem::optim, m.num_params());
  std::vector<double> ts;
  double loss = 0;
  for (int s = 1; s <= steps + 2; ++s) {
    if (s == 3) timed.t.clear();
    auto a = Clock::now();
    m.zero_grad();
    int64_t n;
    loss = m.forward(in.data(), tg.data(), B, &n) / n;
    m.backward(1.f / n);
    double gn = ops.sum_squares(m.grad_data(), m.num_params());
    (void)gn;
    for (const auto& p : m.params())
      ops.adamw(m.param_data() + p.offset, nullptr, m.grad_data() + p.offset, 1.f, mo.data() + p.offset,
                vo.data() + p.offset, p.numel, 1e-4f, 0.9f, 0.95f, 1e-8f, p.decay ? 0.1f : 0.f, s);
    if (s > 2) ts.push_back(secs(a, Clock::now()));
  }
  double t = median(ts), tok = double(B) * T;
  double gf = gpt_flops_per_token(cfg) * tok / t / 1e9;
  std::printf("| %s | V%d L%d H%d d%d T%d B%d | %.1f | %.0f | %.1f | %.3f |\n", cfg.name.c_str(), cfg.vocab_size,
              cfg.n_layer, cfg.n_head, cfg.d_model, T, B, t * 1e3, tok / t, gf, loss);
  if (breakdown) {
    double total = 0;
    for (auto& [k, v] : timed.t) total += v;
    std::printf("|  breakdown (ms/step) |");
    for (auto& [k, v] : timed.t) std::printf(" %s %.1f;", k.c_str(), v * 1e3 / steps);
    std::printf(" other %.1f |||||\n", (t * steps - total) * 1e3 / steps);
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  bool gemm = true, breakdown = true;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--no-gemm")) gemm = false;
    if (!std::strcmp(argv[i], "--no-breakdown")) breakdown = false;
    if (!std::strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
  }
  std::printf("threads: %d\n\n", omp_get_max_threads());
  if (gemm) bench_gemm();
  std::printf("## Training step (fwd + bwd + AdamW), fp32, median\n\n");
  std::printf("| model | shape | ms/step | tokens/s | GFLOP/s | loss |\n|---|---|---|---|---|---|\n");
  ModelConfig tiny = model_preset("tiny");
  tiny.n_layer = 4, tiny.d_model = 256, tiny.d_ff = 1024, tiny.seq_len = 256, tiny.name = "tiny(bench)";
  ModelConfig small = model_preset("gpt2-124m");
  small.name = "small", small.vocab_size = 8192, small.n_layer = 6, small.n_head = small.n_kv_head = 6;
  small.d_model = 384, small.d_ff = 1536, small.seq_len = 256;
  ModelConfig g124 = model_preset("gpt2-124m");
  g124.seq_len = 256;
  // bench/plan/heldout.sh's GPT and LLaMA (byte vocabulary, 4 layers, d 256, T 128) at micro-batch 4.
  ModelConfig hgpt = tiny;
  hgpt.seq_len = 128, hgpt.name = "heldout-gpt";
  ModelConfig hllama = model_preset("llama-tiny");
  hllama.n_layer = 4, hllama.d_model = 256, hllama.n_head = 4, hllama.n_kv_head = 2, hllama.d_ff = 688;
  hllama.seq_len = 128, hllama.name = "heldout-llama";
  if (only.empty() || only == "tiny") bench_model(tiny, 8, 10, breakdown);
  if (only.empty() || only == "heldout") {
    bench_model(hgpt, 4, 10, breakdown);
    bench_model(hllama, 4, 10, breakdown);
  }
  if (only.empty() || only == "small") bench_model(small, 8, 5, breakdown);
  if (only.empty() || only == "124m") bench_model(g124, 4, 3, breakdown);
  return 0;
}
