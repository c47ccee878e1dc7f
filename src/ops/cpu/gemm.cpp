#include "gemm.hpp"

#include <dnnl.h>

#include <dnnl.hpp>
#include <cstring>
#include <algorithm>
#include <map>
#include <vector>
#include <tuple>

#include "mpitron/core/error.hpp"
#include "mpitron/core/memory.hpp"

namespace mpitron::cpu {

using dnnl::memory;
using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, bool, bool>;

struct Gemm::Cache {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  struct Entry {
    dnnl::matmul prim;
    memory::desc a, b, c, bias;
  };
  std::map<Key, Entry> prims;
  Buffer<uint16_t> a16, b16;  // bf16 mode: the rounded inputs (b16: weights outside a mirror)
  // A registered weight range: its bf16 copy (bf16 mode only) and, per weight (by offset), the
  // extent rounded and the generation it was rounded at; weights_changed bumps the generation.
  struct Mirror {
    const float* base = nullptr;
    size_t n = 0;
    Buffer<uint16_t> bf16;
    uint64_t gen = 1;
    std::map<size_t, std::pair<size_t, uint64_t>> fresh;
  };
  std::vector<Mirror> mirrors;
};

namespace {

// fp32 -> bf16, round to nearest even (NaN kept quiet), over n floats; OpenMP-parallel.
void to_bf16(uint16_t* out, const float* in, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, in + i, 4);
    const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
    out[i] = nan ? static_cast<uint16_t>((u >> 16) | 0x40u) : static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
}

}  // namespace

// Measured on this machine (bench/results/model_cpu.md): dnnl_sgemm for dY*W (NN; the
// primitive was 2x slower on some shapes) and dY^T*X (TN); the cached primitive for X*W^T (NT:
// on par or slightly ahead, PERF-NOTES agrees, and it fuses the bias).
Gemm::Gemm() : cache_(std::make_unique<Cache>()), impl_{GemmImpl::sgemm, GemmImpl::primitive, GemmImpl::sgemm} {}
Gemm::~Gemm() = default;

size_t Gemm::cached_primitives() const { return cache_->prims.size(); }

bool Gemm::bf16_available() {
  static const bool ok = [] {
    try {
      using dt = memory::data_type;
      dnnl::engine eng{dnnl::engine::kind::cpu, 0};
      memory::desc a({16, 16}, dt::bf16, memory::dims{16, 1}), b({16, 16}, dt::bf16, memory::dims{16, 1}),
          c({16, 16}, dt::f32, memory::dims{16, 1});
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), eng);
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return ok;
}

void Gemm::set_bf16(bool on) {
  bf16_ = on;
  for (auto& m : cache_->mirrors) {
    m.bf16 = on ? Buffer<uint16_t>(Mem::params, m.n) : Buffer<uint16_t>();
    m.fresh.clear();
  }
  if (!on) cache_->a16.reset(), cache_->b16.reset();
}

void Gemm::register_weights(const float* base, size_t n) {
  unregister_weights(base);
  Cache::Mirror m;
  m.base = base, m.n = n;
  if (bf16_) m.bf16 = Buffer<uint16_t>(Mem::params, n);
  cache_->mirrors.push_back(std::move(m));
}

void Gemm::unregister_weights(const float* base) {
  auto& v = cache_->mirrors;
  v.erase(std::remove_if(v.begin(), v.end(), [&](const Cache::Mirror& m) { return m.base == base; }), v.end());
}

void Gemm::weights_changed(const float* base) {
  for (auto& m : cache_->mirrors)
    if (m.base == base) ++m.gen;
}

const uint16_t* Gemm::mirrored(const float* p, int64_t n) {
  for (auto& m : cache_->mirrors) {
    if (!m.bf16.data() || p < m.base || p + n > m.base + m.n) continue;
    const size_t off = static_cast<size_t>(p - m.base);
    auto& f = m.fresh[off];
    if (f.second != m.gen || f.first < static_cast<size_t>(n)) {
      to_bf16(m.bf16.data() + off, p, n);
      f = {static_cast<size_t>(n), m.gen};
    }
    return m.bf16.data() + off;
  }
  return nullptr;
}

void Gemm::run(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
               int64_t ldb, float* C, int64_t ldc, bool accumulate, const float* bias) {
  if (M == 0 || N == 0) return;
  if (bf16_ && K > 0) return run_bf16(ta, tb, M, N, K, A, lda, B, ldb, C, ldc, accumulate, bias);
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
  run_primitive(ta, tb, M, N, K, A, lda, B, ldb, C, ldc, accumulate, bias, false);
}

void Gemm::run_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                    int64_t ldb, float* C, int64_t ldc, bool accumulate, const float* bias) {
  // The inputs as stored (rows x row stride), rounded to bf16 with the same strides.
  const int64_t a_n = (ta ? K : M) * lda, b_n = (tb ? N : K) * ldb;
  auto& c = *cache_;
  auto scratch = [](Buffer<uint16_t>& b, int64_t n) {
    if (static_cast<int64_t>(b.size()) < n) b = Buffer<uint16_t>(Mem::workspace, static_cast<size_t>(n));
    return b.data();
  };
  uint16_t* a16 = scratch(c.a16, a_n);
  to_bf16(a16, A, a_n);
  const uint16_t* b16 = mirrored(B, b_n);  // a weight: rounded once per change
  if (!b16) {
    uint16_t* s = scratch(c.b16, b_n);
    to_bf16(s, B, b_n);
    b16 = s;
  }
  run_primitive(ta, tb, M, N, K, a16, lda, b16, ldb, C, ldc, accumulate, bias, true);
}

// The cached matmul primitive of this shape (fp32 or bf16 inputs; fp32 result and bias), run.
void Gemm::run_primitive(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void* A, int64_t lda, const void* B,
                         int64_t ldb, float* C, int64_t ldc, bool accumulate, const float* bias, bool bf16) {
  auto& c = *cache_;
  Key key{ta, tb, M, N, K, lda, ldb, ldc, accumulate, bias != nullptr, bf16};
  auto it = c.prims.find(key);
  if (it == c.prims.end()) {
    using dt = memory::data_type;
    const dt in = bf16 ? dt::bf16 : dt::f32;
    memory::desc a({M, K}, in, ta ? memory::dims{1, lda} : memory::dims{lda, 1});
    memory::desc b({K, N}, in, tb ? memory::dims{1, ldb} : memory::dims{ldb, 1});
    memory::desc cd({M, N}, dt::f32, memory::dims{ldc, 1});
    memory::desc bmd({1, N}, dt::f32, memory::dims{N, 1});
    dnnl::primitive_attr attr;
    if (accumulate) {
      dnnl::post_ops po;
      po.append_sum(1.f);
      attr.set_post_ops(po);
    }
    auto d = bias ? dnnl::matmul::desc(a, b, bmd, cd) : dnnl::matmul::desc(a, b, cd);
    dnnl::matmul::primitive_desc pd(d, attr, c.eng);
    it = c.prims.emplace(key, Cache::Entry{dnnl::matmul(pd), a, b, cd, bmd}).first;
  }
  auto& e = it->second;
  memory am(e.a, c.eng, const_cast<void*>(A)), bm(e.b, c.eng, const_cast<void*>(B)), cm(e.c, c.eng, C);
  if (bias) {
    memory biasm(e.bias, c.eng, const_cast<float*>(bias));
    e.prim.execute(c.strm, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_BIAS, biasm}, {DNNL_ARG_DST, cm}});
  } else {
    e.prim.execute(c.strm, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
  }
  c.strm.wait();
}

}  // namespace mpitron::cpu
