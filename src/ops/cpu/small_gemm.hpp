// Register-blocked AVX-512 GEMM for the small per-(batch, head) products of attention, called
// from inside an OpenMP loop (oneDNN is not, to keep its thread pool out of nested regions).
// C[M,N] (+)= alpha * op(A)[M,K] * B[K,N], all row-major with leading dimensions; TransA: A is
// stored [K, M]. 6x32 micro-tile: 12 zmm accumulators, 2 loads + 6 broadcasts per 12 FMAs.
// Without AVX-512 (isa.hpp): a row at a time, 32 columns of accumulators the compiler vectorises;
// each output is the same fused sum over k in the same order, times alpha, plus C.
#pragma once
#include "isa.hpp"

namespace mpitron::cpu::MPITRON_CPU_ISA {

#if MPITRON_CPU_AVX512

template <int MR, bool TransA>
inline void small_gemm_tile(int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
                            int64_t ldc, float alpha, bool accumulate, __mmask16 m0, __mmask16 m1) {
  __m512 c0[MR], c1[MR];
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r) c0[r] = c1[r] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    const float* b = B + k * ldb;
    __m512 b0 = _mm512_maskz_loadu_ps(m0, b);
    __m512 b1 = _mm512_maskz_loadu_ps(m1, b + 16);
#pragma GCC unroll 6
    for (int r = 0; r < MR; ++r) {
      __m512 a = _mm512_set1_ps(TransA ? A[k * lda + r] : A[r * lda + k]);
      c0[r] = _mm512_fmadd_ps(a, b0, c0[r]);
      c1[r] = _mm512_fmadd_ps(a, b1, c1[r]);
    }
  }
  __m512 al = _mm512_set1_ps(alpha);
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r) {
    float* c = C + r * ldc;
    __m512 v0 = _mm512_mul_ps(c0[r], al), v1 = _mm512_mul_ps(c1[r], al);
    if (accumulate) {
      v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, c));
      v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, c + 16));
    }
    _mm512_mask_storeu_ps(c, m0, v0);
    _mm512_mask_storeu_ps(c + 16, m1, v1);
  }
}

template <bool TransA = false>
inline void small_gemm(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb,
                       float* C, int64_t ldc, float alpha, bool accumulate) {
  auto a_rows = [&](int64_t i) { return TransA ? A + i : A + i * lda; };
  for (int64_t j = 0; j < N; j += 32) {
    int64_t nj = N - j < 32 ? N - j : 32;
    __mmask16 m0 = nj >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << nj) - 1);
    __mmask16 m1 = nj >= 32 ? 0xFFFF : nj <= 16 ? 0 : static_cast<__mmask16>((1u << (nj - 16)) - 1);
    int64_t i = 0;
    for (; i + 6 <= M; i += 6)
      small_gemm_tile<6, TransA>(K, a_rows(i), lda, B + j, ldb, C + i * ldc + j, ldc, alpha, accumulate, m0, m1);
    const float* a = a_rows(i);
    float* c = C + i * ldc + j;
    switch (M - i) {
      case 5: small_gemm_tile<5, TransA>(K, a, lda, B + j, ldb, c, ldc, alpha, accumulate, m0, m1); break;
      case 4: small_gemm_tile<4, TransA>(K, a, lda, B + j, ldb, c, ldc, alpha, accumulate, m0, m1); break;
      case 3: small_gemm_tile<3, TransA>(K, a, lda, B + j, ldb, c, ldc, alpha, accumulate, m0, m1); break;
      case 2: small_gemm_tile<2, TransA>(K, a, lda, B + j, ldb, c, ldc, alpha, accumulate, m0, m1); break;
      case 1: small_gemm_tile<1, TransA>(K, a, lda, B + j, ldb, c, ldc, alpha, accumulate, m0, m1); break;
      default: break;
    }
  }
}

#else

template <bool TransA = false>
inline void small_gemm(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb,
                       float* C, int64_t ldc, float alpha, bool accumulate) {
  for (int64_t j = 0; j < N; j += 32) {
    const int64_t nj = N - j < 32 ? N - j : 32;
    for (int64_t i = 0; i < M; ++i) {
      float acc[32] = {};
      for (int64_t k = 0; k < K; ++k) {
        const float a = TransA ? A[k * lda + i] : A[i * lda + k];
        const float* b = B + k * ldb + j;
#pragma omp simd
        for (int64_t c = 0; c < nj; ++c) acc[c] = std::fma(a, b[c], acc[c]);
      }
      float* c = C + i * ldc + j;
      for (int64_t l = 0; l < nj; ++l) c[l] = accumulate ? acc[l] * alpha + c[l] : acc[l] * alpha;
    }
  }
}

#endif

// dst[cols, rows] = src[rows, cols]^T (src row stride lds, dst row stride ldd).
inline void transpose(const float* src, int64_t rows, int64_t cols, int64_t lds, float* dst, int64_t ldd) {
  constexpr int64_t b = 16;
  for (int64_t i0 = 0; i0 < rows; i0 += b)
    for (int64_t j0 = 0; j0 < cols; j0 += b)
      for (int64_t i = i0; i < i0 + b && i < rows; ++i)
        for (int64_t j = j0; j < j0 + b && j < cols; ++j) dst[j * ldd + i] = src[i * lds + j];
}

}  // namespace mpitron::cpu::MPITRON_CPU_ISA
