// cuBLASLt GEMMs for the linear layers: bf16 A/B (or FP8 with their scale pointers), fp32
// compute, bf16 or fp32 D, bias / GELU / dGELU epilogues. One matmul descriptor + layouts +
// heuristic algorithm per problem shape, created on first use and cached (cuBLASLt's heuristic
// query costs ~10-100 us per call).
#pragma once
#include <cublasLt.h>

#include <cstdint>
#include <map>
#include <tuple>

namespace mpitron::cuda {

// A column-major problem D[m,n] = op(A)[m,k] op(B)[k,n] (+ beta * D): the row-major callers
// swap operands (see cuda_ops.cpp).
struct LtGemm {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  const void* A = nullptr;
  int64_t lda = 0;
  const void* B = nullptr;
  int64_t ldb = 0;
  void* D = nullptr;
  int64_t ldd = 0;
  bool d_f32 = false;  // D (and C = D) fp32 instead of bf16
  float beta = 0.f;    // 1: accumulate into D
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;  // bf16 [m] for the BIAS epilogues
  void* aux = nullptr;         // GELU pre-activation [m,n] (written by GELU_AUX, read by DGELU)
  int64_t aux_ld = 0;
  // FP8 operands (CudaOps::fp8_gemm): CUDA_R_8F_E4M3 / CUDA_R_8F_E5M2, TN only (trans_a, not
  // trans_b), each with its device fp32 scale (D = a_scale b_scale A B + ...).
  cudaDataType_t a_type = CUDA_R_16BF, b_type = CUDA_R_16BF;
  const float* a_scale = nullptr;
  const float* b_scale = nullptr;
};

class LtMatmul {
 public:
  explicit LtMatmul(size_t workspace_bytes);
  ~LtMatmul();
  LtMatmul(const LtMatmul&) = delete;
  LtMatmul& operator=(const LtMatmul&) = delete;
  void run(const LtGemm& g, cudaStream_t stream);
  size_t cached_plans() const { return plans_.size(); }

 private:
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, int, bool, int, int>;
  Plan& plan_for(const LtGemm& g);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<Key, Plan> plans_;
};

}  // namespace mpitron::cuda
