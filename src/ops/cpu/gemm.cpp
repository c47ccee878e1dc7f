#include "gemm.hpp"

#include <dnnl.h>

#include <dnnl.hpp>
#include <map>
#include <tuple>

#include "mpitron/core/error.hpp"

namespace mpitron::cpu {

using dnnl::memory;
using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, bool>;

struct Gemm::Cache {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  struct Entry {
    dnnl::matmul prim;
    memory::desc a, b, c, bias;
  };
  std::map<Key, Entry> prims;
};

// Measured on this machine (bench/results/model_cpu.md): dnnl_sgemm for dY*W (NN; the
// primitive was 2x slower on some shapes) and dY^T*X (TN); the cached primitive for X*W^T (NT:
// on par or slightly ahead, PERF-NOTES agrees, and it fuses the bias).
Gemm::Gemm() : cache_(std::make_unique<Cache>()), impl_{GemmImpl::sgemm, GemmImpl::primitive, GemmImpl::sgemm} {}
Gemm::~Gemm() = default;

size_t Gemm::cached_primitives() const { return cache_->prims.size(); }

void Gemm::run(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
               int64_t ldb, float* C, int64_t ldc, bool accumulate, const float* bias) {
  if (M == 0 || N == 0) return;
  int which = (!ta && !tb) ? 0 : (!ta && tb) ? 1 : 2;
  if (ta && tb) which = 2;
  if (impl_[which] == GemmImpl::sgemm || K == 0) {
    float beta = accumulate ? 1.f : 0.f;
    if (bias) {
      for (int64_t i = 0; i < M; ++i) {
        float* c = C + i * ldc;
        if (accumulate)
          for (int64_t j = 0; j < N; ++j) c[j] += bias[j];
        else
          for (int64_t j = 0; j < N; ++j) c[j] = bias[j];
      }
      beta = 1.f;
    }
    if (K == 0) return;
    auto st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, 1.f, A, lda, B, ldb, beta, C, ldc);
    check(st == dnnl_success, "dnnl_sgemm failed (status {}) for M={} N={} K={}", static_cast<int>(st), M, N, K);
    return;
  }
  Key key{ta, tb, M, N, K, lda, ldb, ldc, accumulate, bias != nullptr};
  auto it = cache_->prims.find(key);
  if (it == cache_->prims.end()) {
    using dt = memory::data_type;
    memory::desc a({M, K}, dt::f32, ta ? memory::dims{1, lda} : memory::dims{lda, 1});
    memory::desc b({K, N}, dt::f32, tb ? memory::dims{1, ldb} : memory::dims{ldb, 1});
    memory::desc c({M, N}, dt::f32, memory::dims{ldc, 1});
    memory::desc bmd({1, N}, dt::f32, memory::dims{N, 1});
    dnnl::primitive_attr attr;
    if (accumulate) {
      dnnl::post_ops po;
      po.append_sum(1.f);
      attr.set_post_ops(po);
    }
    auto d = bias ? dnnl::matmul::desc(a, b, bmd, c) : dnnl::matmul::desc(a, b, c);
    dnnl::matmul::primitive_desc pd(d, attr, cache_->eng);
    it = cache_->prims.emplace(key, Cache::Entry{dnnl::matmul(pd), a, b, c, bmd}).first;
  }
  auto& e = it->second;
  auto& eng = cache_->eng;
  memory am(e.a, eng, const_cast<float*>(A)), bm(e.b, eng, const_cast<float*>(B)), cm(e.c, eng, C);
  if (bias) {
    memory biasm(e.bias, eng, const_cast<float*>(bias));
    e.prim.execute(cache_->strm, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_BIAS, biasm}, {DNNL_ARG_DST, cm}});
  } else {
    e.prim.execute(cache_->strm, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
  }
  cache_->strm.wait();
}

}  // namespace mpitron::cpu
