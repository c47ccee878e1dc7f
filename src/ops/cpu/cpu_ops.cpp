// CpuOps: the Ops interface on the CPU, fp32. GEMMs through oneDNN (gemm.cpp), the rest
// OpenMP + AVX-512 kernels (one file per family, declared in kernels.hpp).
#include <malloc.h>
#include <omp.h>

#include <mutex>

#include "gemm.hpp"
#include "kernels.hpp"
#include "mpitron/core/error.hpp"
#include "mpitron/core/memory.hpp"
#include "mpitron/ops/ops.hpp"

namespace mpitron {
namespace {

// dnnl_sgemm allocates per call; large blocks from mmap cost up to 1.7x (PERF-NOTES.md).
void tune_malloc_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
  });
}

// kv_heads 0 means H (multi-head); otherwise it must divide H.
int kv_heads_of(int H, int kv_heads) {
  const int kv = kv_heads == 0 ? H : kv_heads;
  check(kv > 0 && H % kv == 0, "attention: {} kv heads do not divide {} query heads", kv, H);
  return kv;
}

class CpuOps final : public Ops {
 public:
  CpuOps() { tune_malloc_once(); }
  const char* name() const override { return "cpu"; }
  bool set_gemm_bf16(bool on) override {
    if (on && !cpu::Gemm::bf16_available()) return false;
    gemm_.set_bf16(on);
    return true;
  }
  bool gemm_bf16() const override { return gemm_.bf16(); }
  void register_weights(const float* base, size_t n) override { gemm_.register_weights(base, n); }
  void unregister_weights(const float* base) override { gemm_.unregister_weights(base); }
  void weights_changed(const float* base) override { gemm_.weights_changed(base); }

  void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t M, int64_t K,
                      int64_t N) override {
    gemm_.run(false, true, M, N, K, inp, K, weight, K, out, N, false, bias);
  }
  void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                       const float* weight, int64_t M, int64_t K, int64_t N, bool accumulate_dinp) override {
    if (dinp) gemm_.run(false, false, M, K, N, dout, N, weight, K, dinp, K, accumulate_dinp);
    if (dweight) gemm_.run(true, false, N, K, M, dout, N, inp, K, dweight, K, true);
    if (dbias) cpu::column_sums(dbias, dout, M, N);
  }
  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                         const float* bias, int64_t rows, int64_t C) override {
    cpu::layernorm_forward(out, mean, rstd, inp, weight, bias, rows, C);
  }
  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                          const float* weight, const float* mean, const float* rstd, int64_t rows,
                          int64_t C) override {
    cpu::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, rows, C);
  }
  void gelu_forward(float* out, const float* inp, size_t n) override { cpu::gelu_forward(out, inp, n); }
  void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) override {
    cpu::gelu_backward(dinp, inp, dout, n);
  }
  void attention_forward(float* out, float* att, const float* qkv, int B, int T, int H, int hd, int kv_heads,
                         const int32_t* doc_start) override {
    cpu::attention_forward(out, att, qkv, B, T, H, hd, scratch(cpu::attention_scratch_floats(T, hd, false)),
                           kv_heads_of(H, kv_heads), doc_start);
  }
  void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, int B, int T, int H,
                          int hd, int kv_heads, const int32_t* doc_start) override {
    cpu::attention_backward(dqkv, dout, qkv, att, B, T, H, hd, scratch(cpu::attention_scratch_floats(T, hd, true)),
                            kv_heads_of(H, kv_heads), doc_start);
  }
  void attention_block_forward(float* o, float* m, float* l, const float* q, int64_t q_stride, const float* kv, int B,
                               int Tq, int Tk, int H, int KV, int hd, const int* qpos, const int* kpos,
                               const int32_t* qstart) override {
    cpu::attention_block_forward(o, m, l, q, q_stride, kv, B, Tq, Tk, H, KV, hd, qpos, kpos, qstart,
                                 scratch(cpu::attention_block_scratch_floats(Tk, hd)));
  }
  void attention_block_backward(float* dq, int64_t dq_stride, float* dkv, const float* q, int64_t q_stride,
                                const float* kv, const float* dout, const float* lse, const float* dsum, int B, int Tq,
                                int Tk, int H, int KV, int hd, const int* qpos, const int* kpos,
                                const int32_t* qstart) override {
    cpu::attention_block_backward(dq, dq_stride, dkv, q, q_stride, kv, dout, lse, dsum, B, Tq, Tk, H, KV, hd, qpos,
                                  kpos, qstart, scratch(cpu::attention_block_scratch_floats(Tk, hd)));
  }
  void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t rows, int64_t C,
                       float eps) override {
    cpu::rmsnorm_forward(out, rstd, inp, weight, rows, C, eps);
  }
  void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                        const float* rstd, int64_t rows, int64_t C) override {
    cpu::rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, rows, C);
  }
  void rope(float* x, int B, int T, int n_heads, int hd, int64_t row_stride, const RopeFreqs& freqs, int pos0,
            bool inverse) override {
    check(hd % 2 == 0 && freqs.inv_freq.size() == static_cast<size_t>(hd / 2),
          "rope: head dim {} (even) with a table of {} frequencies (hd / 2)", hd, freqs.inv_freq.size());
    cpu::rope(x, B, T, n_heads, hd, row_stride, freqs.inv_freq.data(), freqs.scale, pos0, inverse);
  }
  void swiglu_forward(float* out, const float* gate_up, int64_t rows, int64_t F) override {
    cpu::swiglu_forward(out, gate_up, rows, F);
  }
  void swiglu_backward(float* dgate_up, const float* gate_up, const float* dout, int64_t rows, int64_t F) override {
    cpu::swiglu_backward(dgate_up, gate_up, dout, rows, F);
  }
  void moe_gather_rows(float* dst, const float* src, const int64_t* idx, int64_t n, int64_t C) override {
    cpu::moe_gather_rows(dst, src, idx, n, C);
  }
  void moe_scatter_rows(float* dst, const float* src, const int64_t* idx, int64_t n, int64_t C) override {
    cpu::moe_scatter_rows(dst, src, idx, n, C);
  }
  void moe_combine(float* out, const float* ys, const int64_t* pos, const float* weight, int64_t R, int k,
                   int64_t C) override {
    cpu::moe_combine(out, ys, pos, weight, R, k, C);
  }
  void moe_combine_backward(float* dys, float* dweight, const float* dout, const float* ys, const int64_t* pos,
                            const float* weight, int64_t R, int k, int64_t C) override {
    cpu::moe_combine_backward(dys, dweight, dout, ys, pos, weight, R, k, C);
  }
  void moe_uncombine_add(float* dx, const float* dxs, const int64_t* pos, int64_t R, int k, int64_t C) override {
    cpu::moe_uncombine_add(dx, dxs, pos, R, k, C);
  }
  void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B, int T, int C,
                         int64_t vocab_begin, int64_t vocab_end) override {
    cpu::embedding_forward(out, tokens, wte, wpe, B, T, C, vocab_begin, vocab_end);
  }
  void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B, int T, int C,
                          int64_t vocab_begin, int64_t vocab_end) override {
    cpu::embedding_backward(dwte, dwpe, dout, tokens, B, T, C, vocab_begin, vocab_end);
  }
  void residual_forward(float* out, const float* a, const float* b, size_t n) override {
    cpu::residual_forward(out, a, b, n);
  }
  void add_inplace(float* a, const float* b, size_t n) override { cpu::add_inplace(a, b, n); }
  void scale_inplace(float* a, float s, size_t n) override { cpu::scale_inplace(a, s, n); }
  void axpy(float* y, float a, const float* x, size_t n) override { cpu::axpy(y, a, x, n); }
  void crossentropy_forward(float* losses, float* lse, const float* logits, const int32_t* targets, int64_t rows,
                            int64_t Vp, int64_t V) override {
    cpu::crossentropy_forward(losses, lse, logits, targets, rows, Vp, V);
  }
  void crossentropy_backward(float* dlogits, const float* lse, const int32_t* targets, int64_t rows, int64_t Vp,
                             int64_t V, float scale) override {
    cpu::crossentropy_backward(dlogits, lse, targets, rows, Vp, V, scale);
  }
  void adamw(float* p, bf16* p_bf16, const float* g, float grad_scale, float* m, float* v, size_t n, float lr,
             float beta1, float beta2, float eps, float weight_decay, int step) override {
    check(p_bf16 == nullptr, "Ops::adamw: the CPU model keeps no bf16 copy of its weights (p_bf16 must be null)");
    cpu::adamw(p, g, grad_scale, m, v, n, lr, beta1, beta2, eps, weight_decay, step);
  }
  double sum_squares(const float* x, size_t n) override { return cpu::sum_squares(x, n); }

 private:
  // Per-thread attention scratch, grown on demand and kept (tracked as workspace).
  float* scratch(size_t per_thread) {
    size_t need = per_thread * static_cast<size_t>(omp_get_max_threads());
    if (scratch_.size() < need) scratch_ = Buffer<float>(Mem::workspace, need);
    return scratch_.data();
  }
  cpu::Gemm gemm_;
  Buffer<float> scratch_;
};

}  // namespace

std::unique_ptr<Ops> make_cpu_ops() { return std::make_unique<CpuOps>(); }

}  // namespace mpitron
