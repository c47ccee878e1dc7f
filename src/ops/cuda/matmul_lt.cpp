#include "matmul_lt.hpp"

#include "mpitron/ops/cuda/check.hpp"
#include "mpitron/core/error.hpp"

namespace mpitron::cuda {
namespace {

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

template <class T>
void set_desc(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const T& v, const char* name) {
  cublas_check(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof(v)), name);
}

}  // namespace

LtMatmul::LtMatmul(size_t workspace_bytes) : workspace_bytes_(workspace_bytes) {
  cublas_check(cublasLtCreate(&handle_), "cublasLtCreate");
  cuda_check(cudaMalloc(&workspace_, workspace_bytes_), "cudaMalloc(cuBLASLt workspace)");
}

LtMatmul::~LtMatmul() {
  for (auto& [key, p] : plans_) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.d);
    cublasLtMatmulDescDestroy(p.desc);
  }
  if (workspace_) cudaFree(workspace_);
  if (handle_) cublasLtDestroy(handle_);
}

LtMatmul::Plan& LtMatmul::plan_for(const LtGemm& g) {
  Key key{g.trans_a, g.trans_b, g.m, g.n, g.k, g.lda, g.ldb, g.ldd, g.d_f32, static_cast<int>(g.epilogue),
          g.bias != nullptr, static_cast<int>(g.a_type), static_cast<int>(g.b_type)};
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;

  Plan p;
  cublas_check(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
  cublasOperation_t ta = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_desc(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, ta, "cublasLtMatmulDescSetAttribute(TRANSA)");
  set_desc(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, tb, "cublasLtMatmulDescSetAttribute(TRANSB)");
  set_desc(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, g.epilogue, "cublasLtMatmulDescSetAttribute(EPILOGUE)");
  const bool fp8 = g.a_type != CUDA_R_16BF || g.b_type != CUDA_R_16BF;
  if (fp8 && g.bias) {
    const cudaDataType_t bias_type = CUDA_R_16BF;
    set_desc(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, bias_type, "cublasLtMatmulDescSetAttribute(BIAS_DATA_TYPE)");
  }
  if (g.aux) {
    set_desc(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, g.aux_ld, "cublasLtMatmulDescSetAttribute(EPILOGUE_AUX_LD)");
  }
  // Stored layouts (column-major): A is m x k when not transposed, k x m when transposed.
  cublas_check(cublasLtMatrixLayoutCreate(&p.a, g.a_type, g.trans_a ? g.k : g.m, g.trans_a ? g.m : g.k, g.lda),
               "cublasLtMatrixLayoutCreate(A)");
  cublas_check(cublasLtMatrixLayoutCreate(&p.b, g.b_type, g.trans_b ? g.n : g.k, g.trans_b ? g.k : g.n, g.ldb),
               "cublasLtMatrixLayoutCreate(B)");
  cublas_check(cublasLtMatrixLayoutCreate(&p.d, g.d_f32 ? CUDA_R_32F : CUDA_R_16BF, g.m, g.n, g.ldd),
               "cublasLtMatrixLayoutCreate(D)");

  cublasLtMatmulPreference_t pref = nullptr;
  cublas_check(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
  uint64_t ws = workspace_bytes_;
  uint32_t align = 16;  // every pointer passed in is checked to be 16-byte aligned
  cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof align);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulAlgoGetHeuristic(handle_, p.desc, p.a, p.b, p.d, p.d, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  cublas_check(st, "cublasLtMatmulAlgoGetHeuristic");
  if (found == 0)
    fail("cuBLASLt has no algorithm for m={} n={} k={} (trans {}{}, lda {} ldb {} ldd {}, A/B types {}/{}, D {}, "
         "epilogue {})",
         g.m, g.n, g.k, g.trans_a ? 'T' : 'N', g.trans_b ? 'T' : 'N', g.lda, g.ldb, g.ldd, static_cast<int>(g.a_type),
         static_cast<int>(g.b_type), g.d_f32 ? "f32" : "bf16", static_cast<int>(g.epilogue));
  p.algo = result.algo;
  return plans_.emplace(key, p).first->second;
}

void LtMatmul::run(const LtGemm& g, cudaStream_t stream) {
  if (g.m <= 0 || g.n <= 0 || g.k <= 0) return;
  check((g.a_type == CUDA_R_16BF && g.b_type == CUDA_R_16BF) || (g.trans_a && !g.trans_b),
        "cuBLASLt FP8 matmul m={} n={} k={}: FP8 operands need the TN layout", g.m, g.n, g.k);
  for (const void* ptr : {g.A, g.B, static_cast<const void*>(g.D), g.bias, static_cast<const void*>(g.aux)})
    check(!ptr || aligned16(ptr), "cuBLASLt matmul m={} n={} k={}: operands must be 16-byte aligned", g.m, g.n, g.k);
  Plan& p = plan_for(g);
  // Per-call pointers live in the cached descriptor: set them every time.
  if (g.bias) set_desc(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias, "cublasLtMatmulDescSetAttribute(BIAS_POINTER)");
  if (g.aux)
    set_desc(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, g.aux,
             "cublasLtMatmulDescSetAttribute(EPILOGUE_AUX_POINTER)");
  if (g.a_scale)
    set_desc(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, g.a_scale, "cublasLtMatmulDescSetAttribute(A_SCALE_POINTER)");
  if (g.b_scale)
    set_desc(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, g.b_scale, "cublasLtMatmulDescSetAttribute(B_SCALE_POINTER)");
  const float alpha = 1.f, beta = g.beta;
  cublas_check(cublasLtMatmul(handle_, p.desc, &alpha, g.A, p.a, g.B, p.b, &beta, g.D, p.d, g.D, p.d, &p.algo,
                              workspace_, workspace_bytes_, stream),
               "cublasLtMatmul");
}

}  // namespace mpitron::cuda
