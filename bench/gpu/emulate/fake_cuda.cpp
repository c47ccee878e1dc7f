// A CPU emulation of CudaOps and of the CUDA runtime calls TransformerModelCuda makes, for checking
// TransformerModelCuda's wiring (offsets, shapes, accumulate vs overwrite, chunking, loss scaling,
// AdamW segments) against the CPU TransformerModel on a machine without a GPU (run.sh). Each
// CudaOps call converts its bf16 inputs to fp32, runs the CPU op and rounds its bf16 outputs
// (mpitron::to_bf16), keeping the interface's precision plan (fp32 gradients +=, bf16 dinp +=, fp32
// master weights); attention recomputes its probabilities in the backward and checks that the
// caller handed back this forward's output and logsumexp stats. "Device" memory is host memory: the
// runtime functions below replace libcudart's for this executable (the linker prefers the
// executable's own definitions). Timings mean nothing here; the real kernels are checked by
// gpu_check.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "mpitron/core/error.hpp"
#include "mpitron/ops/cuda/cuda_ops.hpp"
#include "mpitron/ops/fp8_scaling.hpp"
#include "mpitron/ops/ops.hpp"

using namespace mpitron;

extern "C" {
cudaError_t cudaMalloc(void** p, size_t n) {
  *p = std::aligned_alloc(256, (n + 255) / 256 * 256);
  std::memset(*p, 0xff, (n + 255) / 256 * 256);  // garbage (NaN) until written
  return cudaSuccess;
}
cudaError_t cudaFree(void* p) { std::free(p); return cudaSuccess; }
cudaError_t cudaMallocAsync(void** p, size_t n, cudaStream_t) { return cudaMalloc(p, n); }
cudaError_t cudaFreeAsync(void* p, cudaStream_t) { return cudaFree(p); }
cudaError_t cudaMallocHost(void** p, size_t n) { return cudaMalloc(p, n); }
cudaError_t cudaFreeHost(void* p) { return cudaFree(p); }
cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t) { std::memset(p, v, n); return cudaSuccess; }
cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind, cudaStream_t) { std::memcpy(d, s, n); return cudaSuccess; }
cudaError_t cudaMemcpy2DAsync(void* d, size_t dpitch, const void* s, size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind, cudaStream_t) {
  for (size_t r = 0; r < height; ++r)
    std::memcpy(static_cast<char*>(d) + r * dpitch, static_cast<const char*>(s) + r * spitch, width);
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) { *e = reinterpret_cast<cudaEvent_t>(new int(0)); return cudaSuccess; }
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) { *reinterpret_cast<int*>(e) = 1; return cudaSuccess; }
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventDestroy(cudaEvent_t e) { delete reinterpret_cast<int*>(e); return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
cudaError_t cudaMemset(void* p, int v, size_t n) { std::memset(p, v, n); return cudaSuccess; }
cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind) { std::memcpy(d, s, n); return cudaSuccess; }
cudaError_t cudaGetLastError() { return cudaSuccess; }
// One emulated device (init_launch binds it; the GPU trainer names it in its start-up line).
cudaError_t cudaGetDeviceCount(int* n) { *n = 1; return cudaSuccess; }
cudaError_t cudaSetDevice(int) { return cudaSuccess; }
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int) {
  *p = cudaDeviceProp{};
  std::snprintf(p->name, sizeof p->name, "emulated GPU (CPU)");
  p->major = 9, p->minor = 0;  // a Hopper's: FP8 tensor cores (train.precision = "fp8")
  return cudaSuccess;
}
}

namespace {
using Vec = std::vector<float>;
Vec up(const bf16* p, size_t n) { Vec v(n); for (size_t i = 0; i < n; ++i) v[i] = to_f32(p[i]); return v; }
void down(bf16* p, const float* x, size_t n) { for (size_t i = 0; i < n; ++i) p[i] = to_bf16(x[i]); }

class FakeCudaOps final : public CudaOps {
 public:
  explicit FakeCudaOps(std::string att) : att_(std::move(att)), cpu_(make_cpu_ops()) {}
  const char* name() const override { return "fake-cuda"; }
  cudaStream_t stream() const override { return nullptr; }
  const std::string& attention_kind() const override { return att_; }
  void synchronize() override {}
  void matmul_forward(bf16* out, const bf16* inp, const bf16* w, const bf16* bias, int64_t M, int64_t K, int64_t N,
                      bf16* gelu_pre) override {
    Vec x = up(inp, M * K), W = up(w, N * K), b = bias ? up(bias, N) : Vec(), y(M * N);
    cpu_->matmul_forward(y.data(), x.data(), W.data(), bias ? b.data() : nullptr, M, K, N);
    if (gelu_pre) {
      down(gelu_pre, y.data(), y.size());
      Vec g(y.size());
      cpu_->gelu_forward(g.data(), y.data(), y.size());
      down(out, g.data(), g.size());
    } else {
      down(out, y.data(), y.size());
    }
  }
  void matmul_backward(bf16* dinp, float* dw, float* db, const bf16* dout, const bf16* inp, const bf16* w, int64_t M,
                       int64_t K, int64_t N, bool acc, const bf16* gelu_pre) override {
    check(!(acc && gelu_pre), "fake: acc and gelu_pre");
    Vec d = up(dout, M * N), x = up(inp, M * K), W = up(w, N * K);
    if (dinp) {
      Vec t = acc ? up(dinp, M * K) : Vec(M * K);
      cpu_->matmul_backward(t.data(), nullptr, nullptr, d.data(), x.data(), W.data(), M, K, N, acc);
      if (gelu_pre) {
        Vec pre = up(gelu_pre, M * K);
        cpu_->gelu_backward(t.data(), pre.data(), t.data(), t.size());
      }
      down(dinp, t.data(), t.size());
    }
    if (dw || db) cpu_->matmul_backward(nullptr, dw, db, d.data(), x.data(), W.data(), M, K, N, false);
  }
  void layernorm_forward(bf16* out, float* mean, float* rstd, const bf16* inp, const bf16* w, const bf16* b,
                         int64_t rows, int64_t C) override {
    Vec x = up(inp, rows * C), W = up(w, C), B = up(b, C), y(rows * C);
    cpu_->layernorm_forward(y.data(), mean, rstd, x.data(), W.data(), B.data(), rows, C);
    down(out, y.data(), y.size());
  }
  void residual_layernorm_forward(bf16* residual, bf16* out, float* mean, float* rstd, const bf16* a, const bf16* b,
                                  const bf16* w, const bf16* bias, int64_t rows, int64_t C) override {
    residual_forward(residual, a, b, rows * C);
    layernorm_forward(out, mean, rstd, residual, w, bias, rows, C);
  }
  void layernorm_backward(bf16* dinp, float* dw, float* db, const bf16* dout, const bf16* inp, const bf16* w,
                          const float* mean, const float* rstd, int64_t rows, int64_t C) override {
    Vec t = up(dinp, rows * C), d = up(dout, rows * C), x = up(inp, rows * C), W = up(w, C);
    cpu_->layernorm_backward(t.data(), dw, db, d.data(), x.data(), W.data(), mean, rstd, rows, C);
    down(dinp, t.data(), t.size());
  }
  void gelu_forward(bf16* out, const bf16* inp, size_t n) override {
    Vec x = up(inp, n), y(n);
    cpu_->gelu_forward(y.data(), x.data(), n);
    down(out, y.data(), n);
  }
  void gelu_backward(bf16* dinp, const bf16* inp, const bf16* dout, size_t n) override {
    Vec x = up(inp, n), d = up(dout, n);
    cpu_->gelu_backward(d.data(), x.data(), d.data(), n);
    down(dinp, d.data(), n);
  }
  // qkv rows [q H hd | k KV hd | v KV hd] (KV = kv heads, 0: H), Ops' grouped-query layout.
  static int kv_of(int H, int kv) { return kv == 0 ? H : kv; }
  static int64_t row_width(int H, int hd, int kv) { return int64_t{H + 2 * kv_of(H, kv)} * hd; }
  void attention_forward(bf16* out, float* stats, const bf16* qkv, int B, int T, int H, int hd, int kv,
                         const int32_t* doc_start) override {
    const int64_t C = int64_t{H} * hd, BT = int64_t{B} * T;
    Vec q = up(qkv, BT * row_width(H, hd, kv)), o(BT * C), att(int64_t{B} * H * T * T);
    cpu_->attention_forward(o.data(), att.data(), q.data(), B, T, H, hd, kv, doc_start);
    down(out, o.data(), o.size());
    lse(q, B, T, H, hd, kv, stats, doc_start);
  }
  // logsumexp of the scaled causal scores, [B, H, T]; keys from the row's document start.
  static void lse(const Vec& q, int B, int T, int H, int hd, int kv, float* st, const int32_t* doc_start) {
    const int64_t C = int64_t{H} * hd, W = row_width(H, hd, kv);
    const int group = H / kv_of(H, kv);
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < H; ++h)
        for (int t = 0; t < T; ++t) {
          const float* qt = &q[(int64_t{b} * T + t) * W + h * hd];
          double m = -1e300, s = 0;
          std::vector<double> sc(t + 1);
          const int u0 = doc_start ? doc_start[int64_t{b} * T + t] : 0;
          for (int u = u0; u <= t; ++u) {
            const float* ku = &q[(int64_t{b} * T + u) * W + C + (h / group) * hd];
            double d = 0;
            for (int i = 0; i < hd; ++i) d += double(qt[i]) * ku[i];
            sc[u] = d / std::sqrt(double(hd));
            m = std::max(m, sc[u]);
          }
          for (int u = u0; u <= t; ++u) s += std::exp(sc[u] - m);
          st[(int64_t{b} * H + h) * T + t] = float(m + std::log(s));
        }
  }
  void attention_backward(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out, const float* stats, int B,
                          int T, int H, int hd, int kv, const int32_t* doc_start) override {
    const int64_t C = int64_t{H} * hd, BT = int64_t{B} * T, W = row_width(H, hd, kv);
    Vec q = up(qkv, BT * W), o(BT * C), att(int64_t{B} * H * T * T), d = up(dout, BT * C), dq(BT * W);
    cpu_->attention_forward(o.data(), att.data(), q.data(), B, T, H, hd, kv, doc_start);
    // the caller must hand back this forward's out and stats
    Vec st(int64_t{B} * H * T);
    lse(q, B, T, H, hd, kv, st.data(), doc_start);
    for (size_t i = 0; i < st.size(); ++i) check(std::fabs(st[i] - stats[i]) < 1e-4, "fake: stats differ at {}", i);
    for (int64_t i = 0; i < BT * C; ++i)
      check(std::fabs(mpitron::to_f32(out[i]) - o[i]) <= 1e-2 * (1 + std::fabs(o[i])), "fake: out differs at {}", i);
    cpu_->attention_backward(dq.data(), d.data(), q.data(), att.data(), B, T, H, hd, kv, doc_start);
    down(dqkv, dq.data(), dq.size());
  }
  // Attention over segments, as cuDNN's ragged graphs compute it, in fp32 from the table's own
  // rows (written here from the segments' definition, not from the CPU ops: the model's segment
  // tables are checked against the CPU model's position masks through it). Rows in no segment
  // are left as they are.
  struct Seg {
    int64_t q, nq, k, nk;
  };
  static std::vector<Seg> segments(const DeviceSegments& seg) {
    check(seg.count <= seg.shape.n && seg.table, "fake: segment table of {} for {} segments", seg.shape.n, seg.count);
    std::vector<Seg> v;
    const int n = seg.shape.n;
    for (int i = 0; i < seg.count; ++i) {
      v.push_back({seg.table[i], seg.table[n + i], seg.table[2 * n + i], seg.table[3 * n + i]});
      check(v.back().nq <= seg.shape.sq && v.back().nk <= seg.shape.skv, "fake: segment {} exceeds its buckets", i);
    }
    return v;
  }
  static float dot_bf(const bf16* a, const bf16* b, int n) {
    float d = 0;
    for (int e = 0; e < n; ++e) d += mpitron::to_f32(a[e]) * mpitron::to_f32(b[e]);
    return d;
  }
  void attention_segments_forward(bf16* out, float* lse, const bf16* q, int64_t qs, const bf16* k, const bf16* v,
                                  int64_t ks, int H, int KV, int hd, const DeviceSegments& seg) override {
    const float scale = 1.f / std::sqrt(static_cast<float>(hd));
    const int64_t C = int64_t{H} * hd;
    for (const Seg& g : segments(seg))
      for (int h = 0; h < H; ++h)
        for (int64_t i = 0; i < g.nq; ++i) {
          const int64_t row = g.q + i, nk = seg.causal ? std::min(i + 1, g.nk) : g.nk;
          const int kvh = h / (H / KV);
          std::vector<float> p(static_cast<size_t>(nk));
          float m = -INFINITY, z = 0;
          for (int64_t j = 0; j < nk; ++j)
            m = std::max(m, p[j] = scale * dot_bf(q + row * qs + h * hd, k + (g.k + j) * ks + kvh * hd, hd));
          for (int64_t j = 0; j < nk; ++j) z += p[j] = std::exp(p[j] - m);
          for (int e = 0; e < hd; ++e) {
            float o = 0;
            for (int64_t j = 0; j < nk; ++j) o += p[j] * mpitron::to_f32(v[(g.k + j) * ks + kvh * hd + e]);
            out[row * C + h * hd + e] = mpitron::to_bf16(o / z);
          }
          lse[(row / seg.Tq * H + h) * seg.Tq + row % seg.Tq] = m + std::log(z);
        }
  }
  void attention_segments_backward(bf16* dq, bf16* dk, bf16* dv, const bf16* dout, const bf16* q, int64_t qs,
                                   const bf16* k, const bf16* v, int64_t ks, const bf16* out, const float* lse, int H,
                                   int KV, int hd, const DeviceSegments& seg) override {
    const float scale = 1.f / std::sqrt(static_cast<float>(hd));
    const int64_t C = int64_t{H} * hd, Ckv = int64_t{KV} * hd;
    for (const Seg& g : segments(seg)) {
      Vec gq(g.nq * C, 0.f), gk(g.nk * Ckv, 0.f), gv(g.nk * Ckv, 0.f);
      for (int h = 0; h < H; ++h)
        for (int64_t i = 0; i < g.nq; ++i) {
          const int64_t row = g.q + i, nk = seg.causal ? std::min(i + 1, g.nk) : g.nk;
          const int kvh = h / (H / KV);
          const bf16 *qi = q + row * qs + h * hd, *doi = dout + row * C + h * hd;
          const float L = lse[(row / seg.Tq * H + h) * seg.Tq + row % seg.Tq], D = dot_bf(doi, out + row * C + h * hd, hd);
          for (int64_t j = 0; j < nk; ++j) {
            const bf16 *kj = k + (g.k + j) * ks + kvh * hd, *vj = v + (g.k + j) * ks + kvh * hd;
            const float p = std::exp(scale * dot_bf(qi, kj, hd) - L), ds = p * (dot_bf(doi, vj, hd) - D) * scale;
            for (int e = 0; e < hd; ++e) {
              gq[i * C + h * hd + e] += ds * mpitron::to_f32(kj[e]);
              gk[j * Ckv + kvh * hd + e] += ds * mpitron::to_f32(qi[e]);
              gv[j * Ckv + kvh * hd + e] += p * mpitron::to_f32(doi[e]);
            }
          }
        }
      for (int64_t i = 0; i < g.nq; ++i) down(dq + (g.q + i) * qs, &gq[i * C], C);
      for (int64_t j = 0; j < g.nk; ++j) {
        down(dk + (g.k + j) * ks, &gk[j * Ckv], Ckv);
        down(dv + (g.k + j) * ks, &gv[j * Ckv], Ckv);
      }
    }
  }
  int attention_graphs() const override { return 0; }
  void attention_segments_merge(float* acc, float* lse_acc, const bf16* o_step, const float* lse_step, int H, int hd,
                                const DeviceSegments& seg, bool first) override {
    const int64_t rows = int64_t{seg.B} * seg.Tq, C = int64_t{H} * hd;
    std::vector<char> covered(static_cast<size_t>(rows), 0);
    for (const Seg& g : segments(seg))
      for (int64_t i = 0; i < g.nq; ++i) covered[g.q + i] = 1;
    for (int64_t row = 0; row < rows; ++row)
      for (int h = 0; h < H; ++h) {
        const int64_t st = (row / seg.Tq * H + h) * seg.Tq + row % seg.Tq;
        float* a = acc + row * C + h * hd;
        const bf16* o = o_step + row * C + h * hd;
        if (first) {
          lse_acc[st] = covered[row] ? lse_step[st] : -INFINITY;
          for (int e = 0; e < hd; ++e) a[e] = covered[row] ? mpitron::to_f32(o[e]) : 0.f;
        } else if (covered[row]) {
          const double l0 = lse_acc[st], l1 = lse_step[st], l = std::max(l0, l1) + std::log1p(std::exp(-std::fabs(l0 - l1)));
          const double w0 = std::exp(l0 - l), w1 = std::exp(l1 - l);
          for (int e = 0; e < hd; ++e) a[e] = static_cast<float>(a[e] * w0 + mpitron::to_f32(o[e]) * w1);
          lse_acc[st] = static_cast<float>(l);
        }
      }
  }
  void add_bf16_rows(float* dst, int64_t dst_stride, const bf16* src, int64_t src_stride, int64_t rows,
                     int64_t cols) override {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) dst[r * dst_stride + c] += mpitron::to_f32(src[r * src_stride + c]);
  }

  void rmsnorm_forward(bf16* out, float* rstd, const bf16* inp, const bf16* w, int64_t rows, int64_t C,
                       float eps) override {
    Vec x = up(inp, rows * C), W = up(w, C), y(rows * C);
    cpu_->rmsnorm_forward(y.data(), rstd, x.data(), W.data(), rows, C, eps);
    down(out, y.data(), y.size());
  }
  void rmsnorm_backward(bf16* dinp, float* dw, const bf16* dout, const bf16* inp, const bf16* w, const float* rstd,
                        int64_t rows, int64_t C) override {
    Vec t = up(dinp, rows * C), d = up(dout, rows * C), x = up(inp, rows * C), W = up(w, C);
    cpu_->rmsnorm_backward(t.data(), dw, d.data(), x.data(), W.data(), rstd, rows, C);
    down(dinp, t.data(), t.size());
  }
  // x spans B*T rows of row_stride, the last one only up to its heads (x may be a slice of qkv);
  // bf16 -> fp32 -> bf16 is exact for the elements rope leaves alone.
  void rope(bf16* x, int B, int T, int n_heads, int hd, int64_t row_stride, const RopeFreqs& freqs, int pos0,
            bool inverse) override {
    const int64_t rows = int64_t{B} * T;
    if (rows == 0) return;
    const int64_t n = (rows - 1) * row_stride + int64_t{n_heads} * hd;
    Vec v = up(x, n);
    cpu_->rope(v.data(), B, T, n_heads, hd, row_stride, freqs, pos0, inverse);
    down(x, v.data(), n);
  }
  void swiglu_forward(bf16* out, const bf16* gate_up, int64_t rows, int64_t F) override {
    Vec g = up(gate_up, rows * 2 * F), y(rows * F);
    cpu_->swiglu_forward(y.data(), g.data(), rows, F);
    down(out, y.data(), y.size());
  }
  void swiglu_backward(bf16* dgate_up, const bf16* gate_up, const bf16* dout, int64_t rows, int64_t F) override {
    Vec g = up(gate_up, rows * 2 * F), d = up(dout, rows * F), dg(rows * 2 * F);
    cpu_->swiglu_backward(dg.data(), g.data(), d.data(), rows, F);
    down(dgate_up, dg.data(), dg.size());
  }
  // MoE rows: the permutations copy bf16 bits; the rest runs the CPU op on the rows the copies
  // name (pos: a permutation of the kept rows 0 .. max).
  void moe_gather_rows(bf16* dst, const bf16* src, const int64_t* idx, int64_t n, int64_t C) override {
    for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * C, src + idx[i] * C, sizeof(bf16) * C);
  }
  void moe_scatter_rows(bf16* dst, const bf16* src, const int64_t* idx, int64_t n, int64_t C) override {
    for (int64_t i = 0; i < n; ++i) std::memcpy(dst + idx[i] * C, src + i * C, sizeof(bf16) * C);
  }
  static int64_t kept_rows(const int64_t* pos, int64_t n) {
    int64_t m = 0;
    for (int64_t i = 0; i < n; ++i) m = std::max(m, pos[i] + 1);
    return m;
  }
  void moe_combine(bf16* out, const bf16* ys, const int64_t* pos, const float* weight, int64_t R, int k,
                   int64_t C) override {
    Vec y = up(ys, kept_rows(pos, R * k) * C), o(R * C);
    cpu_->moe_combine(o.data(), y.data(), pos, weight, R, k, C);
    down(out, o.data(), o.size());
  }
  void moe_combine_backward(bf16* dys, float* dweight, const bf16* dout, const bf16* ys, const int64_t* pos,
                            const float* weight, int64_t R, int k, int64_t C) override {
    const int64_t n = kept_rows(pos, R * k) * C;
    Vec y = up(ys, n), d = up(dout, R * C), dy(n);
    cpu_->moe_combine_backward(dy.data(), dweight, d.data(), y.data(), pos, weight, R, k, C);
    down(dys, dy.data(), n);
  }
  void moe_uncombine_add(bf16* dx, const bf16* dxs, const int64_t* pos, int64_t R, int k, int64_t C) override {
    Vec x = up(dx, R * C), s = up(dxs, kept_rows(pos, R * k) * C);
    cpu_->moe_uncombine_add(x.data(), s.data(), pos, R, k, C);
    down(dx, x.data(), x.size());
  }
  // FP8: the CPU's cast of the same values (fp8_decode_quantized: the codes' values, re-encoded
  // exactly), and the GEMM on the codes' values in fp32 (exact products; the sums in another
  // order than the tensor cores'), then the scales and the bias, as cuBLASLt.
  void fp8_amax(float* amax, const bf16* x, int64_t n) override {
    const Vec v = up(x, n);
    *amax = mpitron::fp8_amax(v.data(), v.size());
  }
  void fp8_cast(uint8_t* q, uint8_t* qt, float* scale_inv, const float* amax, const bf16* x, int64_t rows,
                int64_t cols, Fp8Format f, Fp8DeviceStats* stats) override {
    check(q || qt, "fp8_cast: neither a cast nor a transposed copy asked for");
    const int64_t n = rows * cols;
    Vec v = up(x, n);
    const Fp8CastStats st = fp8_decode_quantized(f, v.data(), v.data(), v.size(), *amax);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const uint8_t code = fp8_from_float(f, v[r * cols + c]);
        if (q) q[r * cols + c] = code;
        if (qt) qt[c * rows + r] = code;
      }
    *scale_inv = 1.f / st.scale;
    if (stats) {
      unsigned bits = 0;
      std::memcpy(&bits, amax, sizeof bits);
      stats->amax_bits = std::max(stats->amax_bits, bits);
      stats->saturated += static_cast<unsigned long long>(st.saturated);
      stats->underflowed += static_cast<unsigned long long>(st.underflowed);
    }
  }
  void fp8_gemm(const Fp8Gemm& g) override {
    g.check();
    auto decode = [](const uint8_t* c, Fp8Format f, int64_t n) {
      Vec v(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) v[i] = float_from_fp8(f, c[i]);
      return v;
    };
    const Vec a = decode(g.a, g.a_format, g.M * g.K), b = decode(g.b, g.b_format, g.N * g.K);
    Vec y(static_cast<size_t>(g.M * g.N));
    cpu_->matmul_forward(y.data(), a.data(), b.data(), nullptr, g.M, g.K, g.N);
    const float s = *g.a_scale_inv * *g.b_scale_inv;
    const Vec bias = g.bias ? up(g.bias, g.N) : Vec();
    for (int64_t i = 0; i < g.M; ++i)
      for (int64_t j = 0; j < g.N; ++j) {
        float& e = y[i * g.N + j];
        e = e * s + (g.bias ? bias[j] : 0.f);
        if (g.acc) g.acc[i * g.N + j] += e;
      }
    if (g.out) down(g.out, y.data(), y.size());
  }
  // The MoE router: the kernels' own per-thread steps (ops/moe_router.hpp) in one thread.
  void moe_router_select(const bf16* logits, const MoeRouterShape& s, const MoeRouterArrays& a) override {
    moe_router::select_serial(s, [logits](int64_t i) { return mpitron::to_f32(logits[i]); }, a);
  }
  void moe_router_place(const MoeRouterShape& s, const MoeRouterArrays& a) override { moe_router::place_serial(s, a); }
  void moe_router_backward(bf16* dlogits, const float* dweight, double aux_scale, double z_scale,
                           const MoeRouterShape& s, const MoeRouterArrays& a) override {
    moe_router::backward_serial(s, dweight, aux_scale, z_scale, a,
                                [dlogits](int64_t i, float v) { dlogits[i] = mpitron::to_bf16(v); });
  }
  // positions: wpe's rows gathered into a [T, C] table for the CPU op, its gradient scattered back;
  // per_row (positions [B, T]): the CPU op sees each row as a sequence of one (B*T rows of T = 1).
  void embedding_forward(bf16* out, const int32_t* tokens, const bf16* wte, const bf16* wpe, int B, int T, int C,
                         int64_t vb, int64_t ve, const int32_t* pos, bool per_row) override {
    const int64_t BT = int64_t{B} * T;
    const int rows = per_row ? static_cast<int>(BT) : T;
    Vec e = up(wte, (ve - vb) * C), p, y(BT * C);
    for (int r = 0; wpe && r < rows; ++r) {
      Vec row = up(wpe + int64_t{pos ? pos[r] : r} * C, C);
      p.insert(p.end(), row.begin(), row.end());
    }
    if (per_row) {
      Vec one(C);
      for (int64_t r = 0; r < BT; ++r) {
        cpu_->embedding_forward(one.data(), tokens + r, e.data(), wpe ? p.data() + r * C : nullptr, 1, 1, C, vb, ve);
        std::copy(one.begin(), one.end(), y.begin() + r * C);
      }
    } else {
      cpu_->embedding_forward(y.data(), tokens, e.data(), wpe ? p.data() : nullptr, B, T, C, vb, ve);
    }
    down(out, y.data(), y.size());
  }
  void embedding_backward(float* dwte, float* dwpe, const bf16* dout, const int32_t* tokens, int B, int T, int C,
                          int64_t vb, int64_t ve, const int32_t* pos, bool per_row) override {
    const int64_t BT = int64_t{B} * T;
    Vec d = up(dout, BT * C);
    if (per_row) {  // every row in order: the GPU kernel's sorted runs add in row order too
      Vec dp(C);
      for (int64_t r = 0; r < BT; ++r) {
        std::fill(dp.begin(), dp.end(), 0.f);
        cpu_->embedding_backward(dwte, dwpe ? dp.data() : nullptr, d.data() + r * C, tokens + r, 1, 1, C, vb, ve);
        for (int c = 0; dwpe && c < C; ++c) dwpe[int64_t{pos[r]} * C + c] += dp[c];
      }
      return;
    }
    Vec dp(dwpe ? int64_t{T} * C : 0, 0.f);
    cpu_->embedding_backward(dwte, dwpe ? dp.data() : nullptr, d.data(), tokens, B, T, C, vb, ve);
    for (int t = 0; dwpe && t < T; ++t)
      for (int c = 0; c < C; ++c) dwpe[int64_t{pos ? pos[t] : t} * C + c] += dp[int64_t{t} * C + c];
  }
  // Ring attention's blocks: the CPU block ops on fp32 copies (q keeps its row stride).
  void attention_block_forward(float* o, float* m, float* l, const bf16* q, int64_t q_stride, const bf16* kv, int B,
                               int Tq, int Tk, int H, int KV, int hd, const int32_t* qpos, const int32_t* kpos,
                               const int32_t* qstart, bool first) override {
    const int64_t stats = int64_t{B} * H * Tq;
    if (first) {
      std::fill(m, m + stats, -INFINITY);
      std::fill(l, l + stats, 0.f);
      std::fill(o, o + int64_t{B} * Tq * H * hd, 0.f);
    }
    Vec qf = up(q, (int64_t{B} * Tq - 1) * q_stride + int64_t{H} * hd), k = up(kv, int64_t{B} * Tk * 2 * KV * hd);
    cpu_->attention_block_forward(o, m, l, qf.data(), q_stride, k.data(), B, Tq, Tk, H, KV, hd, qpos, kpos, qstart);
  }
  void attention_block_finish(bf16* out, float* lse, const float* o, const float* m, const float* l, int B, int T,
                              int H, int hd) override {
    for (int64_t i = 0; i < int64_t{B} * T * H * hd; ++i) {
      const int64_t bt = i / (int64_t{H} * hd), h = i / hd % H, st = (bt / T * H + h) * T + bt % T;
      out[i] = mpitron::to_bf16(o[i] / l[st]);
      if (i % hd == 0) lse[st] = m[st] + std::log(l[st]);
    }
  }
  void attention_block_dsum(float* dsum, const bf16* dout, const bf16* out, int B, int T, int H, int hd) override {
    for (int64_t st = 0; st < int64_t{B} * H * T; ++st) {
      const int64_t b = st / (int64_t{H} * T), h = st / T % H, t = st % T, at = ((b * T + t) * H + h) * hd;
      float s = 0.f;
      for (int e = 0; e < hd; ++e) s += mpitron::to_f32(dout[at + e]) * mpitron::to_f32(out[at + e]);
      dsum[st] = s;
    }
  }
  void attention_block_backward(float* dq, float* dkv, const bf16* q, int64_t q_stride, const bf16* kv,
                                const bf16* dout, const float* lse, const float* dsum, int B, int Tq, int Tk, int H,
                                int KV, int hd, const int32_t* qpos, const int32_t* kpos,
                                const int32_t* qstart) override {
    Vec qf = up(q, (int64_t{B} * Tq - 1) * q_stride + int64_t{H} * hd), k = up(kv, int64_t{B} * Tk * 2 * KV * hd),
        d = up(dout, int64_t{B} * Tq * H * hd);
    cpu_->attention_block_backward(dq, int64_t{H} * hd, dkv, qf.data(), q_stride, k.data(), d.data(), lse, dsum, B, Tq,
                                   Tk, H, KV, hd, qpos, kpos, qstart);
  }
  void attention_block_grads(bf16* dqkv, const float* dq, const float* dkv, int64_t rows, int H, int KV,
                             int hd) override {
    const int64_t qw = int64_t{H} * hd, kvw = 2 * int64_t{KV} * hd;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < qw + kvw; ++c)
        dqkv[r * (qw + kvw) + c] = mpitron::to_bf16(c < qw ? dq[r * qw + c] : dkv[r * kvw + c - qw]);
  }
  void residual_forward(bf16* out, const bf16* a, const bf16* b, size_t n) override {
    for (size_t i = 0; i < n; ++i) out[i] = mpitron::to_bf16(mpitron::to_f32(a[i]) + mpitron::to_f32(b[i]));
  }
  void add_inplace(float* a, const float* b, size_t n) override { cpu_->add_inplace(a, b, n); }
  void scale_inplace(float* a, float s, size_t n) override { cpu_->scale_inplace(a, s, n); }
  void scale_bf16_inplace(bf16* x, float s, size_t n) override {
    for (size_t i = 0; i < n; ++i) x[i] = mpitron::to_bf16(mpitron::to_f32(x[i]) * s);
  }
  void axpy(float* y, float a, const float* x, size_t n) override { cpu_->axpy(y, a, x, n); }
  void to_bf16(bf16* out, const float* in, size_t n) override { down(out, in, n); }
  void to_f32(float* out, const bf16* in, size_t n) override { for (size_t i = 0; i < n; ++i) out[i] = mpitron::to_f32(in[i]); }
  void crossentropy_forward(float* losses, float* lse, const bf16* logits, const int32_t* t, int64_t rows, int64_t Vp,
                            int64_t V) override {
    Vec l = up(logits, rows * Vp);
    cpu_->crossentropy_forward(losses, lse, l.data(), t, rows, Vp, V);
  }
  void crossentropy_backward(bf16* logits, const float* lse, const int32_t* t, int64_t rows, int64_t Vp, int64_t V,
                             float scale) override {
    Vec l = up(logits, rows * Vp);
    cpu_->crossentropy_backward(l.data(), lse, t, rows, Vp, V, scale);
    down(logits, l.data(), l.size());
  }
  // Vocab-parallel pieces, as src/ops/cuda/crossentropy.cu computes them (columns >= V never count).
  void crossentropy_backward_shard(bf16* logits, const float* lse, const int32_t* t, int64_t rows, int64_t Vp,
                                   int64_t V, float scale, int64_t vb) override {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < Vp; ++c) {
        bf16& x = logits[r * Vp + c];
        float g = 0.f;
        if (t[r] >= 0 && c < V) g = scale * (std::exp(mpitron::to_f32(x) - lse[r]) - (c == t[r] - vb ? 1.f : 0.f));
        x = mpitron::to_bf16(g);
      }
  }
  void crossentropy_fused(float* losses, float* lse, bf16* logits, const int32_t* t, int64_t rows, int64_t Vp,
                          int64_t V, float scale) override {
    Vec l = up(logits, rows * Vp);
    cpu_->crossentropy_forward(losses, lse, l.data(), t, rows, Vp, V);
    cpu_->crossentropy_backward(l.data(), lse, t, rows, Vp, V, scale);
    down(logits, l.data(), l.size());
  }
  void crossentropy_partial(float* mx, float* se, float* tl, const bf16* logits, const int32_t* t, int64_t rows,
                            int64_t Vp, int64_t V, int64_t vb) override {
    for (int64_t r = 0; r < rows; ++r) {
      const bf16* row = logits + r * Vp;
      float m = -INFINITY;
      for (int64_t c = 0; c < V; ++c) m = std::max(m, mpitron::to_f32(row[c]));
      double sum = 0;
      for (int64_t c = 0; c < V; ++c) sum += std::exp(mpitron::to_f32(row[c]) - m);
      const int64_t local = t ? int64_t{t[r]} - vb : -1;
      mx[r] = m;
      se[r] = static_cast<float>(sum);
      tl[r] = (t && t[r] >= 0 && local >= 0 && local < V) ? mpitron::to_f32(row[local]) : 0.f;
    }
  }
  void crossentropy_rescale(float* se, const float* lm, const float* gm, int64_t rows) override {
    for (int64_t r = 0; r < rows; ++r)
      if (se[r] > 0.f) se[r] *= std::exp(lm[r] - gm[r]);
  }
  void crossentropy_combine(float* losses, float* lse, const float* gm, const float* se, const float* tl,
                            const int32_t* t, int64_t rows) override {
    for (int64_t r = 0; r < rows; ++r) {
      lse[r] = gm[r] + std::log(se[r]);
      losses[r] = (t && t[r] >= 0) ? lse[r] - tl[r] : 0.f;
    }
  }
  void adamw(float* p, bf16* pb, const float* g, float gs, float* m, float* v, size_t n, float lr, float b1, float b2,
             float eps, float wd, int step) override {
    cpu_->adamw(p, nullptr, g, gs, m, v, n, lr, b1, b2, eps, wd, step);
    if (pb) down(pb, p, n);
  }
  void sum_squares(double* dst, const float* x, size_t n, bool acc) override {
    *dst = (acc ? *dst : 0.0) + cpu_->sum_squares(x, n);
  }
  double sum_squares_host(const float* x, size_t n) override { return cpu_->sum_squares(x, n); }

 private:
  std::string att_;
  std::unique_ptr<Ops> cpu_;
};
}  // namespace

namespace mpitron {
std::string cuda_unavailable_reason() { return ""; }
std::unique_ptr<CudaOps> make_cuda_ops(const CudaOpsOptions& o) { return std::make_unique<FakeCudaOps>(o.attention); }
}  // namespace mpitron
