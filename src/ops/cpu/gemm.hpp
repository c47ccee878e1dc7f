// Row-major fp32 GEMM through oneDNN, two back ends picked per transpose case by measurement
// (bench/model, PERF-NOTES.md): `dnnl_sgemm` (allocates per call, no per-shape setup) and
// matmul primitives created once per shape and cached (first call per shape JITs, ~10 ms).
// bf16 mode (set_bf16, train.precision): A and B are rounded to bf16 (round to nearest even)
// into scratch and multiplied by a bf16 matmul primitive with fp32 accumulation and an fp32
// result, bias and accumulate as in fp32 mode: the GPU backend's rounding points for the
// GEMM inputs. Rounding per call costs (M + N) K conversions against the GEMM's 2 M N K FLOPs.
//
// Weights are rounded once per change, not per call: a model registers its flat parameter buffer
// (register_weights) and says when it changed (weights_changed: after the optimizer step, a load,
// any write through param_data()). In bf16 mode the range gets a bf16 mirror (Mem::params, 2
// bytes per float: the memory ledger counts it), and a B operand inside it is rounded into the
// mirror on its first use after a change, then read from there (the head's weight, used by every
// logits chunk forward and backward, was rounded 8 times per micro-batch at gpt2-124m). The
// activations are still rounded per call into scratch (Mem::workspace).
#pragma once
#include <cstdint>
#include <memory>

namespace mpitron::cpu {

enum class GemmImpl : uint8_t { sgemm, primitive };

class Gemm {
 public:
  Gemm();
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // C[M,N] = op(A)[M,K] * op(B)[K,N] (+= when accumulate) (+ bias[N] when bias != nullptr).
  // ta: A is stored [K, M] (lda is its row stride); tb: B is stored [N, K].
  void run(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
           int64_t ldb, float* C, int64_t ldc, bool accumulate, const float* bias = nullptr);

  // Back end per case: index 0 = NN (dX = dY*W), 1 = NT (Y = X*W^T), 2 = TN (dW = dY^T*X).
  void set_impl(int which, GemmImpl impl) { impl_[which] = impl; }
  void set_bf16(bool on);  // allocates (on) or frees (off) the registered ranges' mirrors
  // Whether oneDNN has a bf16 matmul on this CPU (it needs AVX-512 at least; an AVX2-only CPU
  // has none): checked once, by creating one.
  static bool bf16_available();
  bool bf16() const { return bf16_; }
  GemmImpl impl(int which) const { return impl_[which]; }
  size_t cached_primitives() const;

  // [base, base + n) holds weights that change only when weights_changed(base) says so.
  void register_weights(const float* base, size_t n);
  void unregister_weights(const float* base);
  void weights_changed(const float* base);

 private:
  struct Cache;
  void run_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                int64_t ldb, float* C, int64_t ldc, bool accumulate, const float* bias);
  void run_primitive(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void* A, int64_t lda, const void* B,
                     int64_t ldb, float* C, int64_t ldc, bool accumulate, const float* bias, bool bf16);
  const uint16_t* mirrored(const float* p, int64_t n);  // nullptr: not in a registered range
  std::unique_ptr<Cache> cache_;
  GemmImpl impl_[3];
  bool bf16_ = false;
};

}  // namespace mpitron::cpu
