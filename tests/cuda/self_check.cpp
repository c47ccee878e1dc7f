// CudaOps against the CPU Ops (see self_check.hpp for the error measure and the bounds).
#include "self_check.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

#include "mpitron/ops/cuda/check.hpp"
#include "mpitron/core/dtype.hpp"
#include "mpitron/core/error.hpp"
#include "mpitron/core/rng.hpp"
#include "mpitron/model/model_chunk.hpp"
#include "mpitron/model/moe/moe_routing.hpp"
#include "mpitron/ops/fp8_scaling.hpp"
#include "mpitron/ops/moe_router.hpp"

namespace mpitron {
namespace {

using cuda::cuda_check;
using Vec = std::vector<float>;

constexpr double kBf16Out = 1e-2;  // outputs stored in bf16 (or computed through bf16 intermediates)
constexpr double kF32Out = 1e-3;   // fp32 outputs from the same bf16 inputs (accumulation order only)
constexpr double kExact = 1e-6;    // fp32 elementwise / fp64 reductions

// One device allocation, freed on scope exit.
class Dev {
 public:
  explicit Dev(size_t bytes) { cuda_check(cudaMalloc(&p_, bytes ? bytes : 16), "cudaMalloc(self-check buffer)"); }
  ~Dev() { cudaFree(p_); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  void* ptr() const { return p_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(p_);
  }

 private:
  void* p_ = nullptr;
};

Vec rnd(size_t n, uint64_t seed, uint64_t stream, float sd = 1.f, float mean = 0.f) {
  Vec v(n);
  for (size_t i = 0; i < n; ++i) v[i] = mean + sd * static_cast<float>(normal_at(seed, stream, i));
  return v;
}

// Rounds v to bf16 values in place (the CPU then sees exactly what the GPU sees).
Vec& round_bf16(Vec& v) {
  for (float& x : v) x = to_f32(to_bf16(x));
  return v;
}

std::unique_ptr<Dev> up_bf16(const Vec& v) {
  std::vector<bf16> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = to_bf16(v[i]);
  auto d = std::make_unique<Dev>(h.size() * sizeof(bf16));
  cuda_check(cudaMemcpy(d->ptr(), h.data(), h.size() * sizeof(bf16), cudaMemcpyHostToDevice), "cudaMemcpy(H2D)");
  cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  return d;
}
template <class T>
std::unique_ptr<Dev> up(const std::vector<T>& v) {
  auto d = std::make_unique<Dev>(v.size() * sizeof(T));
  cuda_check(cudaMemcpy(d->ptr(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy(H2D)");
  cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  return d;
}
Vec down_bf16(const Dev& d, size_t n) {
  std::vector<bf16> h(n);
  cuda_check(cudaMemcpy(h.data(), d.ptr(), n * sizeof(bf16), cudaMemcpyDeviceToHost), "cudaMemcpy(D2H)");
  Vec v(n);
  for (size_t i = 0; i < n; ++i) v[i] = to_f32(h[i]);
  return v;
}
Vec down(const Dev& d, size_t n) {
  Vec v(n);
  cuda_check(cudaMemcpy(v.data(), d.ptr(), n * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy(D2H)");
  return v;
}

double rel_err(const Vec& got, const Vec& ref) {
  check(got.size() == ref.size(), "self-check: size mismatch {} vs {}", got.size(), ref.size());
  double err = 0, mag = 1e-30;
  for (size_t i = 0; i < ref.size(); ++i) {
    double g = got[i], r = ref[i];
    if (!std::isfinite(g)) return INFINITY;
    err = std::max(err, std::fabs(g - r));
    mag = std::max(mag, std::fabs(r));
  }
  return err / mag;
}

class Checker {
 public:
  Checker(CudaOps& gpu, std::vector<OpCheck>& out) : gpu_(gpu), out_(out) {}
  void add(const std::string& op, const Vec& got, const Vec& ref, double bound) {
    out_.push_back({op, rel_err(got, ref), bound, ""});
  }
  void sync() { gpu_.synchronize(); }

 private:
  CudaOps& gpu_;
  std::vector<OpCheck>& out_;
};

Vec cpu_gelu(Ops& cpu, const Vec& x) {
  Vec y(x.size());
  cpu.gelu_forward(y.data(), x.data(), x.size());
  return y;
}

void check_matmul(CudaOps& gpu, Ops& cpu, const SelfCheckShape& s, Checker& c) {
  const int64_t M = static_cast<int64_t>(s.B) * s.T, K = s.C, N = 3 * s.C;
  Vec x = rnd(M * K, s.seed, 1), w = rnd(N * K, s.seed, 2, 1.f / std::sqrt(static_cast<float>(K))),
      b = rnd(N, s.seed, 3, 0.1f);
  round_bf16(x), round_bf16(w), round_bf16(b);
  auto dx = up_bf16(x), dw = up_bf16(w), db = up_bf16(b);
  {  // forward with bias
    Dev out(M * N * 2);
    gpu.matmul_forward(out.as<bf16>(), dx->as<bf16>(), dw->as<bf16>(), db->as<bf16>(), M, K, N);
    c.sync();
    Vec ref(M * N);
    cpu.matmul_forward(ref.data(), x.data(), w.data(), b.data(), M, K, N);
    c.add("matmul_forward.out", down_bf16(out, M * N), ref, kBf16Out);
    // forward with the GELU epilogue
    Dev pre(M * N * 2);
    gpu.matmul_forward(out.as<bf16>(), dx->as<bf16>(), dw->as<bf16>(), db->as<bf16>(), M, K, N, pre.as<bf16>());
    c.sync();
    c.add("matmul_forward+gelu.pre", down_bf16(pre, M * N), ref, kBf16Out);
    c.add("matmul_forward+gelu.out", down_bf16(out, M * N), cpu_gelu(cpu, ref), kBf16Out);
  }
  {  // backward: dinp accumulated onto a random start, dweight / dbias accumulated in fp32
    Vec dout = rnd(M * N, s.seed, 4), dinp0 = rnd(M * K, s.seed, 5), dw0 = rnd(N * K, s.seed, 6),
        db0 = rnd(N, s.seed, 7);
    round_bf16(dout), round_bf16(dinp0);
    auto ddout = up_bf16(dout), ddinp = up_bf16(dinp0), ddw = up(dw0), ddb = up(db0);
    gpu.matmul_backward(ddinp->as<bf16>(), ddw->as<float>(), ddb->as<float>(), ddout->as<bf16>(), dx->as<bf16>(),
                        dw->as<bf16>(), M, K, N, true);
    c.sync();
    Vec rdinp = dinp0, rdw = dw0, rdb = db0;
    cpu.matmul_backward(rdinp.data(), rdw.data(), rdb.data(), dout.data(), x.data(), w.data(), M, K, N, true);
    c.add("matmul_backward.dinp(+=)", down_bf16(*ddinp, M * K), rdinp, kBf16Out);
    c.add("matmul_backward.dweight", down(*ddw, N * K), rdw, kF32Out);
    c.add("matmul_backward.dbias", down(*ddb, N), rdb, kF32Out);
    // dGELU epilogue: dinp = (dout W) * gelu'(pre)
    Vec pre = rnd(M * K, s.seed, 8);
    round_bf16(pre);
    auto dpre = up_bf16(pre);
    gpu.matmul_backward(ddinp->as<bf16>(), nullptr, nullptr, ddout->as<bf16>(), dx->as<bf16>(), dw->as<bf16>(), M, K, N,
                        false, dpre->as<bf16>());
    c.sync();
    Vec t(M * K), r(M * K);
    cpu.matmul_backward(t.data(), nullptr, nullptr, dout.data(), x.data(), w.data(), M, K, N, false);
    cpu.gelu_backward(r.data(), pre.data(), t.data(), r.size());
    c.add("matmul_backward+dgelu.dinp", down_bf16(*ddinp, M * K), r, kBf16Out);
  }
}

void check_layernorm(CudaOps& gpu, Ops& cpu, const SelfCheckShape& s, Checker& c) {
  const int64_t R = static_cast<int64_t>(s.B) * s.T, C = s.C, n = R * C;
  Vec a = rnd(n, s.seed, 11, 1.f, 0.5f), b = rnd(n, s.seed, 12), w = rnd(C, s.seed, 13, 0.1f, 1.f),
      bias = rnd(C, s.seed, 14, 0.1f);
  round_bf16(a), round_bf16(b), round_bf16(w), round_bf16(bias);
  auto da = up_bf16(a), db = up_bf16(b), dw = up_bf16(w), dbias = up_bf16(bias);
  Dev out(n * 2), res(n * 2), mean(R * 4), rstd(R * 4);
  Vec rout(n), rmean(R), rrstd(R);
  gpu.layernorm_forward(out.as<bf16>(), mean.as<float>(), rstd.as<float>(), da->as<bf16>(), dw->as<bf16>(),
                        dbias->as<bf16>(), R, C);
  c.sync();
  cpu.layernorm_forward(rout.data(), rmean.data(), rrstd.data(), a.data(), w.data(), bias.data(), R, C);
  c.add("layernorm_forward.out", down_bf16(out, n), rout, kBf16Out);
  c.add("layernorm_forward.mean", down(mean, R), rmean, kF32Out);
  c.add("layernorm_forward.rstd", down(rstd, R), rrstd, kF32Out);

  gpu.residual_layernorm_forward(res.as<bf16>(), out.as<bf16>(), mean.as<float>(), rstd.as<float>(), da->as<bf16>(),
                                 db->as<bf16>(), dw->as<bf16>(), dbias->as<bf16>(), R, C);
  c.sync();
  Vec r(n);
  for (int64_t i = 0; i < n; ++i) r[i] = a[i] + b[i];
  round_bf16(r);
  cpu.layernorm_forward(rout.data(), rmean.data(), rrstd.data(), r.data(), w.data(), bias.data(), R, C);
  c.add("residual_layernorm_forward.residual", down_bf16(res, n), r, kBf16Out);
  c.add("residual_layernorm_forward.out", down_bf16(out, n), rout, kBf16Out);

  // Backward from the CPU statistics (so only the backward kernel is measured).
  Vec dout = rnd(n, s.seed, 15), dinp0 = rnd(n, s.seed, 16), dw0 = rnd(C, s.seed, 17), db0 = rnd(C, s.seed, 18);
  round_bf16(dout), round_bf16(dinp0);
  auto ddout = up_bf16(dout), ddinp = up_bf16(dinp0), ddw = up(dw0), ddb = up(db0), dmean = up(rmean),
       drstd = up(rrstd), dr = up_bf16(r);
  gpu.layernorm_backward(ddinp->as<bf16>(), ddw->as<float>(), ddb->as<float>(), ddout->as<bf16>(), dr->as<bf16>(),
                         dw->as<bf16>(), dmean->as<float>(), drstd->as<float>(), R, C);
  c.sync();
  Vec rdinp = dinp0, rdw = dw0, rdb = db0;
  cpu.layernorm_backward(rdinp.data(), rdw.data(), rdb.data(), dout.data(), r.data(), w.data(), rmean.data(),
                         rrstd.data(), R, C);
  c.add("layernorm_backward.dinp(+=)", down_bf16(*ddinp, n), rdinp, kBf16Out);
  c.add("layernorm_backward.dweight", down(*ddw, C), rdw, kF32Out);
  c.add("layernorm_backward.dbias", down(*ddb, C), rdb, kF32Out);
}

void check_gelu_elementwise(CudaOps& gpu, Ops& cpu, const SelfCheckShape& s, Checker& c) {
  const size_t n = static_cast<size_t>(s.B) * s.T * 4 * s.C + 5;  // odd tail: the scalar path too
  Vec x = rnd(n, s.seed, 21, 2.f), d = rnd(n, s.seed, 22);
  round_bf16(x), round_bf16(d);
  auto dx = up_bf16(x), dd = up_bf16(d);
  Dev out(n * 2);
  gpu.gelu_forward(out.as<bf16>(), dx->as<bf16>(), n);
  c.sync();
  c.add("gelu_forward", down_bf16(out, n), cpu_gelu(cpu, x), kBf16Out);
  gpu.gelu_backward(out.as<bf16>(), dx->as<bf16>(), dd->as<bf16>(), n);
  c.sync();
  Vec r(n);
  cpu.gelu_backward(r.data(), x.data(), d.data(), n);
  c.add("gelu_backward", down_bf16(out, n), r, kBf16Out);

  gpu.residual_forward(out.as<bf16>(), dx->as<bf16>(), dd->as<bf16>(), n);
  c.sync();
  cpu.residual_forward(r.data(), x.data(), d.data(), n);
  c.add("residual_forward", down_bf16(out, n), r, kBf16Out);

  Vec y = rnd(n, s.seed, 23), z = rnd(n, s.seed, 24);
  auto dy = up(y), dz = up(z);
  gpu.add_inplace(dy->as<float>(), dz->as<float>(), n);
  gpu.scale_inplace(dy->as<float>(), 0.75f, n);
  gpu.axpy(dy->as<float>(), -0.5f, dz->as<float>(), n);
  c.sync();
  cpu.add_inplace(y.data(), z.data(), n);
  cpu.scale_inplace(y.data(), 0.75f, n);
  cpu.axpy(y.data(), -0.5f, z.data(), n);
  c.add("add_inplace+scale_inplace+axpy", down(*dy, n), y, kExact);

  Dev h(n * 2);
  gpu.to_bf16(h.as<bf16>(), dz->as<float>(), n);
  c.sync();
  Vec zr = z;
  round_bf16(zr);
  c.add("to_bf16", down_bf16(h, n), zr, 0.0);
  gpu.to_f32(dz->as<float>(), h.as<bf16>(), n);
  c.sync();
  c.add("to_f32", down(*dz, n), zr, 0.0);
  gpu.scale_bf16_inplace(h.as<bf16>(), -1.5f, n);  // the LM head's dlnf times the loss scale
  c.sync();
  for (float& v : zr) v = to_f32(to_bf16(v * -1.5f));
  c.add("scale_bf16_inplace", down_bf16(h, n), zr, 0.0);
}

// fp64 logsumexp of the scaled causal scores: the reference for the saved statistics. qkv rows
// [q H hd | k KV hd | v KV hd].
Vec attention_stats_ref(const Vec& qkv, int B, int T, int H, int hd, int KV, const int32_t* start = nullptr) {
  const int64_t C = static_cast<int64_t>(H) * hd, W = C + 2 * static_cast<int64_t>(KV) * hd;
  const int group = H / KV;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  Vec st(static_cast<size_t>(B) * H * T);
  std::vector<double> row(T);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < T; ++i) {
        const float* q = &qkv[(static_cast<int64_t>(b) * T + i) * W + h * hd];
        double mx = -INFINITY;
        const int j0 = start ? start[static_cast<int64_t>(b) * T + i] : 0;  // document masking
        for (int j = j0; j <= i; ++j) {
          const float* k = &qkv[(static_cast<int64_t>(b) * T + j) * W + C + (h / group) * hd];
          double d = 0;
          for (int e = 0; e < hd; ++e) d += static_cast<double>(q[e]) * k[e];
          row[j] = d * scale;
          mx = std::max(mx, row[j]);
        }
        double sum = 0;
        for (int j = j0; j <= i; ++j) sum += std::exp(row[j] - mx);
        st[(static_cast<size_t>(b) * H + h) * T + i] = static_cast<float>(mx + std::log(sum));
      }
  return st;
}

// Each position's document start [B, T] for documents of T/3, T/4 and the rest in every sequence,
// shifted by the sequence index.
std::vector<int32_t> document_starts(int B, int T) {
  std::vector<int32_t> start(static_cast<size_t>(B) * T);
  for (int b = 0; b < B; ++b)
    for (int t = 0, st = 0; t < T; ++t) {
      if (t == T / 3 + b || t == T / 3 + T / 4 + b) st = t;
      start[static_cast<size_t>(b) * T + t] = st;
    }
  return start;
}

// Attention segments (ops/attention_segments.hpp) of queries at qpos and keys at kpos, their table
// on the device (kept alive by `table`), as the GPU model stages them.
DeviceSegments device_segments(const std::vector<int32_t>& qpos, const std::vector<int32_t>& kpos, int B,
                               const int32_t* start, std::unique_ptr<Dev>& table) {
  const int Tq = static_cast<int>(qpos.size()), Tk = static_cast<int>(kpos.size());
  const AttentionSegments as = attention_segments(qpos.data(), Tq, kpos.data(), Tk, B, start);
  DeviceSegments seg;
  seg.shape = segment_buckets(as);
  seg.count = as.count(), seg.causal = as.causal, seg.B = B, seg.Tq = Tq, seg.Tk = Tk;
  std::vector<int32_t> host(static_cast<size_t>(kSegmentTableRows) * seg.shape.n);
  segment_table(as, seg.shape.n, host.data());
  table = up(host);
  seg.table = table->as<int32_t>();
  return seg;
}

// KV = H: plain multi-head attention (through the default kv_heads, as GPT-2 calls it); KV < H:
// grouped-query attention (dk, dv summed over each group). docs: document masking
// (document_starts): with cuDNN, as attention segments (CudaOps::attention_segments_*).
void check_attention_kv(CudaOps& gpu, Ops& cpu, const SelfCheckShape& s, Checker& c, int KV, bool docs = false) {
  check(KV > 0 && s.H % KV == 0, "self-check shape: KV = {} must divide H = {}", KV, s.H);
  const int B = s.B, T = s.T, H = s.H, hd = s.C / s.H;
  const int kv_arg = KV == H ? 0 : KV;
  const int64_t C = s.C, W = C + 2 * static_cast<int64_t>(KV) * hd;
  const int64_t n3 = static_cast<int64_t>(B) * T * W, n = static_cast<int64_t>(B) * T * C;
  const std::vector<int32_t> start = docs ? document_starts(B, T) : std::vector<int32_t>{};
  Vec qkv = rnd(n3, s.seed, docs ? 33 : 31), dout = rnd(n, s.seed, docs ? 34 : 32);
  round_bf16(qkv), round_bf16(dout);
  auto dqkv_in = up_bf16(qkv), ddout = up_bf16(dout);
  std::unique_ptr<Dev> dstart = docs ? up(start) : nullptr;
  const int32_t* gstart = docs ? dstart->as<int32_t>() : nullptr;
  const int32_t* cstart = docs ? start.data() : nullptr;
  Dev out(n * 2), stats(static_cast<size_t>(B) * H * T * 4), dqkv(n3 * 2);
  const std::string tag = "attention[" + gpu.attention_kind() + "]" + (docs ? " documents" : "") +
                          (KV == H ? "" : " gqa KV" + std::to_string(KV));
  // cuDNN takes the documents as segments of the fused qkv rows (what CudaDevice does).
  std::unique_ptr<Dev> table;
  DeviceSegments seg;
  const bool segments = docs && gpu.attention_kind() == "cudnn";
  if (segments) {
    std::vector<int32_t> pos(static_cast<size_t>(T));
    for (int t = 0; t < T; ++t) pos[static_cast<size_t>(t)] = t;
    seg = device_segments(pos, pos, B, cstart, table);
  }
  const int64_t k_at = C, v_at = C + static_cast<int64_t>(KV) * hd;
  if (segments)
    gpu.attention_segments_forward(out.as<bf16>(), stats.as<float>(), dqkv_in->as<bf16>(), W,
                                   dqkv_in->as<bf16>() + k_at, dqkv_in->as<bf16>() + v_at, W, H, KV, hd, seg);
  else
    gpu.attention_forward(out.as<bf16>(), stats.as<float>(), dqkv_in->as<bf16>(), B, T, H, hd, kv_arg, gstart);
  c.sync();
  Vec rout(n), att(static_cast<size_t>(B) * H * T * T);
  cpu.attention_forward(rout.data(), att.data(), qkv.data(), B, T, H, hd, kv_arg, cstart);
  c.add(tag + "_forward.out", down_bf16(out, n), rout, kBf16Out);
  c.add(tag + "_forward.stats", down(stats, static_cast<size_t>(B) * H * T),
        attention_stats_ref(qkv, B, T, H, hd, KV, cstart), kF32Out);
  if (segments)
    gpu.attention_segments_backward(dqkv.as<bf16>(), dqkv.as<bf16>() + k_at, dqkv.as<bf16>() + v_at, ddout->as<bf16>(),
                                    dqkv_in->as<bf16>(), W, dqkv_in->as<bf16>() + k_at, dqkv_in->as<bf16>() + v_at, W,
                                    out.as<bf16>(), stats.as<float>(), H, KV, hd, seg);
  else
    gpu.attention_backward(dqkv.as<bf16>(), ddout->as<bf16>(), dqkv_in->as<bf16>(), out.as<bf16>(),
                           stats.as<float>(), B, T, H, hd, kv_arg, gstart);
  c.sync();
  Vec rd(n3);
  cpu.attention_backward(rd.data(), dout.data(), qkv.data(), att.data(), B, T, H, hd, kv_arg, cstart);
  c.add(tag + "_backward.dqkv", down_bf16(dqkv, n3), rd, kBf16Out);
}

void check_attention(CudaOps& gpu, Ops& cpu, const SelfCheckShape& s, Checker& c) {
  check_attention_kv(gpu, cpu, s, c, s.H);
}

void check_attention_gqa(CudaOps& gpu, Ops& cpu, const SelfCheckShape& s, Checker& c) {
  if (s.KV > 0) check_attention_kv(gpu, cpu, s, c, s.KV);
}
// Document masking: the naive path masks the scores, cuDNN runs the documents as segments.
void check_attention_documents(CudaOps& gpu, Ops& cpu, const SelfCheckShape& s, Checker& c) {
  check_attention_kv(gpu, cpu, s, c, s.KV > 0 ? s.KV : s.H, true);
}

// Ring attention's block kernels (context parallel) as rank 0 of a cp 2 ring runs them: its
// queries (chunks 0 and 3 of T) over its own k|v block, then rank 1's (chunks 1 and 2); forward,
// finish, D, backward of both blocks and the final dqkv, against the CPU's block kernels on the
// same bf16 inputs. Grouped-query when the shape has KV. docs: document masking, rank 0's rows'
// document starts (document_starts at their global positions): some rows see none of rank 1's keys.
void check_attention_block(CudaOps& gpu, Ops& cpu, const SelfCheckShape& s, Checker& c, bool docs) {
  const int B = s.B, T = s.T, H = s.H, hd = s.C / s.H, KV = s.KV > 0 ? s.KV : s.H, Tl = T / 2;
  check(T % 4 == 0, "self-check shape: T = {} must split into 4 chunks", T);
  const int64_t W = static_cast<int64_t>(H + 2 * KV) * hd, kvw = 2 * static_cast<int64_t>(KV) * hd;
  const int64_t rows = static_cast<int64_t>(B) * Tl, no = rows * H * hd, nkv = rows * kvw, ns = int64_t{B} * H * Tl;
  Vec qkv = rnd(rows * W, s.seed, 41), other = rnd(nkv, s.seed, 42), dout = rnd(no, s.seed, 43);
  round_bf16(qkv), round_bf16(other), round_bf16(dout);
  Vec own(nkv);  // rank 0's own k|v block, packed from its qkv rows
  for (int64_t i = 0; i < rows; ++i)
    std::copy(qkv.begin() + i * W + int64_t{H} * hd, qkv.begin() + (i + 1) * W, own.begin() + i * kvw);
  std::vector<int32_t> pos(2 * static_cast<size_t>(Tl));  // [rank 0 | rank 1]
  for (int r = 0; r < 2; ++r)
    for (int t = 0; t < Tl; ++t) pos[static_cast<size_t>(r) * Tl + t] = cp_global_position(t, r, 2, T);
  std::vector<int32_t> qstart;  // [B, Tl] at rank 0's global positions
  if (docs) {
    const std::vector<int32_t> full = document_starts(B, T);
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < Tl; ++t) qstart.push_back(full[static_cast<size_t>(b) * T + pos[static_cast<size_t>(t)]]);
  }
  auto d_qkv = up_bf16(qkv), d_own = up_bf16(own), d_other = up_bf16(other), d_dout = up_bf16(dout), d_pos = up(pos);
  std::unique_ptr<Dev> d_qstart = docs ? up(qstart) : nullptr;
  const int32_t *p0 = d_pos->as<int32_t>(), *p1 = p0 + Tl, *gs = docs ? d_qstart->as<int32_t>() : nullptr;
  const int32_t* cs = docs ? qstart.data() : nullptr;
  Dev acc(no * 4), m(ns * 4), l(ns * 4), out(no * 2), lse(ns * 4), dsum(ns * 4), dkv0(nkv * 4), dkv1(nkv * 4),
      dqkv(rows * W * 2);
  const std::string tag = "attention_block[" + gpu.attention_kind() + "]" + std::string(docs ? " documents" : "") +
                          (KV < H ? " gqa KV" + std::to_string(KV) : "");
  // cuDNN: each block one segment call (CudaRingBlocks' path), merged by log-sum-exp.
  const bool segments = gpu.attention_kind() == "cudnn";
  std::unique_ptr<Dev> table0, table1;
  DeviceSegments seg0, seg1;
  Dev step(rows * W * 2), dkv_step(nkv * 2);
  const int64_t kvh = static_cast<int64_t>(KV) * hd;
  if (segments) {
    const std::vector<int32_t> q0(pos.begin(), pos.begin() + Tl), q1(pos.begin() + Tl, pos.end());
    seg0 = device_segments(q0, q0, B, cs, table0);
    seg1 = device_segments(q0, q1, B, cs, table1);
    const bf16* blocks[2] = {d_own->as<bf16>(), d_other->as<bf16>()};
    const DeviceSegments* segs[2] = {&seg0, &seg1};
    for (int i = 0; i < 2; ++i) {
      gpu.attention_segments_forward(step.as<bf16>(), l.as<float>(), d_qkv->as<bf16>(), W, blocks[i],
                                     blocks[i] + kvh, kvw, H, KV, hd, *segs[i]);
      gpu.attention_segments_merge(acc.as<float>(), m.as<float>(), step.as<bf16>(), l.as<float>(), H, hd, *segs[i],
                                   i == 0);
    }
    gpu.to_bf16(out.as<bf16>(), acc.as<float>(), static_cast<size_t>(no));
    cuda_check(cudaMemcpy(lse.ptr(), m.ptr(), static_cast<size_t>(ns) * 4, cudaMemcpyDeviceToDevice), "cudaMemcpy");
  } else {
    gpu.attention_block_forward(acc.as<float>(), m.as<float>(), l.as<float>(), d_qkv->as<bf16>(), W,
                                d_own->as<bf16>(), B, Tl, Tl, H, KV, hd, p0, p0, gs, true);
    gpu.attention_block_forward(acc.as<float>(), m.as<float>(), l.as<float>(), d_qkv->as<bf16>(), W,
                                d_other->as<bf16>(), B, Tl, Tl, H, KV, hd, p0, p1, gs, false);
    gpu.attention_block_finish(out.as<bf16>(), lse.as<float>(), acc.as<float>(), m.as<float>(), l.as<float>(), B, Tl,
                               H, hd);
  }
  c.sync();
  Vec ro(no, 0.f), rm(ns, -INFINITY), rl(ns, 0.f), rlse(ns);
  cpu.attention_block_forward(ro.data(), rm.data(), rl.data(), qkv.data(), W, own.data(), B, Tl, Tl, H, KV, hd,
                              pos.data(), pos.data(), cs);
  cpu.attention_block_forward(ro.data(), rm.data(), rl.data(), qkv.data(), W, other.data(), B, Tl, Tl, H, KV, hd,
                              pos.data(), pos.data() + Tl, cs);
  for (int64_t st = 0; st < ns; ++st) {
    const int64_t b = st / (int64_t{H} * Tl), h = st / Tl % H, i = st % Tl;
    for (int e = 0; e < hd; ++e) ro[((b * Tl + i) * H + h) * hd + e] /= rl[st];
    rlse[st] = rm[st] + std::log(rl[st]);
  }
  c.add(tag + "_forward.out", down_bf16(out, no), ro, kBf16Out);
  c.add(tag + "_forward.lse", down(lse, ns), rlse, kF32Out);
  // The backward from the GPU's own out (bf16) and lse, as the ring does.
  Vec gout = down_bf16(out, no), glse = down(lse, ns), rdsum(ns);
  for (int64_t st = 0; st < ns; ++st) {
    const int64_t b = st / (int64_t{H} * Tl), h = st / Tl % H, i = st % Tl, at = ((b * Tl + i) * H + h) * hd;
    double d = 0;
    for (int e = 0; e < hd; ++e) d += double(dout[at + e]) * gout[at + e];
    rdsum[st] = static_cast<float>(d);
  }
  cuda_check(cudaMemset(acc.ptr(), 0, no * 4), "cudaMemset");
  cuda_check(cudaMemset(dkv0.ptr(), 0, nkv * 4), "cudaMemset");
  cuda_check(cudaMemset(dkv1.ptr(), 0, nkv * 4), "cudaMemset");
  if (segments) {  // per block: bf16 dq, dk|dv from the final out and lse, added into the fp32 sums
    const bf16* blocks[2] = {d_own->as<bf16>(), d_other->as<bf16>()};
    const DeviceSegments* segs[2] = {&seg0, &seg1};
    float* dkvs[2] = {dkv0.as<float>(), dkv1.as<float>()};
    for (int i = 0; i < 2; ++i) {
      cuda_check(cudaMemset(step.ptr(), 0, static_cast<size_t>(rows * W) * 2), "cudaMemset");
      cuda_check(cudaMemset(dkv_step.ptr(), 0, static_cast<size_t>(nkv) * 2), "cudaMemset");
      gpu.attention_segments_backward(step.as<bf16>(), dkv_step.as<bf16>(), dkv_step.as<bf16>() + kvh,
                                      d_dout->as<bf16>(), d_qkv->as<bf16>(), W, blocks[i], blocks[i] + kvh, kvw,
                                      out.as<bf16>(), lse.as<float>(), H, KV, hd, *segs[i]);
      gpu.add_bf16_rows(acc.as<float>(), int64_t{H} * hd, step.as<bf16>(), W, rows, int64_t{H} * hd);
      gpu.add_bf16_rows(dkvs[i], kvw, dkv_step.as<bf16>(), kvw, rows, kvw);
    }
  } else {
    gpu.attention_block_dsum(dsum.as<float>(), d_dout->as<bf16>(), out.as<bf16>(), B, Tl, H, hd);
    gpu.attention_block_backward(acc.as<float>(), dkv0.as<float>(), d_qkv->as<bf16>(), W, d_own->as<bf16>(),
                                 d_dout->as<bf16>(), lse.as<float>(), dsum.as<float>(), B, Tl, Tl, H, KV, hd, p0, p0,
                                 gs);
    gpu.attention_block_backward(acc.as<float>(), dkv1.as<float>(), d_qkv->as<bf16>(), W, d_other->as<bf16>(),
                                 d_dout->as<bf16>(), lse.as<float>(), dsum.as<float>(), B, Tl, Tl, H, KV, hd, p0, p1,
                                 gs);
  }
  gpu.attention_block_grads(dqkv.as<bf16>(), acc.as<float>(), dkv0.as<float>(), rows, H, KV, hd);
  c.sync();
  if (!segments) c.add(tag + "_dsum", down(dsum, ns), rdsum, kF32Out);
  // cuDNN's blocks round their dq, dk, dv to bf16 before the fp32 sums: the bf16 bound.
  const double grad_bound = segments ? kBf16Out : kF32Out;
  Vec rdq(no, 0.f), rdkv0(nkv, 0.f), rdkv1(nkv, 0.f);
  cpu.attention_block_backward(rdq.data(), int64_t{H} * hd, rdkv0.data(), qkv.data(), W, own.data(), dout.data(),
                               glse.data(), rdsum.data(), B, Tl, Tl, H, KV, hd, pos.data(), pos.data(), cs);
  cpu.attention_block_backward(rdq.data(), int64_t{H} * hd, rdkv1.data(), qkv.data(), W, other.data(), dout.data(),
                               glse.data(), rdsum.data(), B, Tl, Tl, H, KV, hd, pos.data(), pos.data() + Tl, cs);
  c.add(tag + "_backward.dq", down(acc, no), rdq, grad_bound);
  c.add(tag + "_backward.dkv(own)", down(dkv0, nkv), rdkv0, grad_bound);
  c.add(tag + "_backward.dkv(other)", down(dkv1, nkv), rdkv1, grad_bound);
  Vec rdqkv(rows * W);
  for (int64_t i = 0; i < rows; ++i) {
    std::copy(rdq.begin() + i * H * hd, rdq.begin() + (i + 1) * H * hd, rdqkv.begin() + i * W);
    std::copy(rdkv0.begin() + i * kvw, rdkv0.begin() + (i + 1) * kvw, rdqkv.begin() + i * W + int64_t{H} * hd);
  }
  c.add(tag + "_grads.dqkv", down_bf16(dqkv, rows * W), rdqkv, kBf16Out);
}

void check_attention_block_causal(CudaOps& gpu, Ops& cpu, const SelfCheckShape& s, Checker& c) {
  check_attention_block(gpu, cpu, s, c, false);
}
void check_attention_block_documents(CudaOps& gpu, Ops& cpu, const SelfCheckShape& s, Checker& c) {
  check_attention_block(gpu, cpu, s, c, true);
}

void check_rmsnorm(CudaOps& gpu, Ops& cpu, const SelfCheckShape& s, Checker& c) {
  const int64_t R = static_cast<int64_t>(s.B) * s.T, C = s.C, n = R * C;
  const float eps = 1e-5f;
  Vec x = rnd(n, s.seed, 81, 1.f, 0.3f), w = rnd(C, s.seed, 82, 0.1f, 1.f);
  round_bf16(x), round_bf16(w);
  auto dx = up_bf16(x), dw = up_bf16(w);
  Dev out(n * 2), rstd(R * 4);
  gpu.rmsnorm_forward(out.as<bf16>(), rstd.as<float>(), dx->as<bf16>(), dw->as<bf16>(), R, C, eps);
  c.sync();
  Vec rout(n), rrstd(R);
  cpu.rmsnorm_forward(rout.data(), rrstd.data(), x.data(), w.data(), R, C, eps);
  c.add("rmsnorm_forward.out", down_bf16(out, n), rout, kBf16Out);
  c.add("rmsnorm_forward.rstd", down(rstd, R), rrstd, kF32Out);

  // Backward from the CPU statistics; dinp and dweight accumulate onto random starts.
  Vec dout = rnd(n, s.seed, 83), dinp0 = rnd(n, s.seed, 84), dw0 = rnd(C, s.seed, 85);
  round_bf16(dout), round_bf16(dinp0);
  auto ddout = up_bf16(dout), ddinp = up_bf16(dinp0), ddw = up(dw0), drstd = up(rrstd);
  gpu.rmsnorm_backward(ddinp->as<bf16>(), ddw->as<float>(), ddout->as<bf16>(), dx->as<bf16>(), dw->as<bf16>(),
                       drstd->as<float>(), R, C);
  c.sync();
  Vec rdinp = dinp0, rdw = dw0;
  cpu.rmsnorm_backward(rdinp.data(), rdw.data(), dout.data(), x.data(), w.data(), rrstd.data(), R, C);
  c.add("rmsnorm_backward.dinp(+=)", down_bf16(*ddinp, n), rdinp, kBf16Out);
  c.add("rmsnorm_backward.dweight(+=)", down(*ddw, C), rdw, kF32Out);
  // Without dweight (the kernel then keeps no partial sums).
  auto ddinp2 = up_bf16(dinp0);
  gpu.rmsnorm_backward(ddinp2->as<bf16>(), nullptr, ddout->as<bf16>(), dx->as<bf16>(), dw->as<bf16>(),
                       drstd->as<float>(), R, C);
  c.sync();
  c.add("rmsnorm_backward(no dweight).dinp(+=)", down_bf16(*ddinp2, n), rdinp, kBf16Out);
}

// RoPE on a grouped-query qkv buffer: the H query heads at positions 0.., theta 1e4, and the KV key
// heads at positions 8000.. (large angles), theta 5e5 with cos and sin scaled by 1.1 (YaRN's
// attention factor); then the inverse of each from the GPU's own output. The v columns must come
// through bit for bit.
void check_rope(CudaOps& gpu, Ops& cpu, const SelfCheckShape& s, Checker& c) {
  const int B = s.B, T = s.T, H = s.H, hd = s.C / s.H, KV = s.KV > 0 ? s.KV : s.H;
  const int64_t C = s.C, W = C + 2 * static_cast<int64_t>(KV) * hd, n = static_cast<int64_t>(B) * T * W;
  struct Part {
    int64_t off;
    int heads, pos0;
    RopeFreqs freqs;
  };
  RopeFreqs scaled = rope_freqs_plain(5e5, hd);
  scaled.scale = 1.1;
  const Part parts[2] = {{0, H, 0, rope_freqs_plain(1e4, hd)}, {C, KV, 8000, scaled}};
  Vec x = rnd(n, s.seed, 91);
  round_bf16(x);
  auto dx = up_bf16(x);
  Vec ref = x;
  for (const Part& p : parts) {
    gpu.rope(dx->as<bf16>() + p.off, B, T, p.heads, hd, W, p.freqs, p.pos0, false);
    cpu.rope(ref.data() + p.off, B, T, p.heads, hd, W, p.freqs, p.pos0, false);
  }
  c.sync();
  Vec got = down_bf16(*dx, n);
  c.add("rope.qk", got, ref, kBf16Out);
  Vec got_v, x_v;
  for (int64_t r = 0; r < static_cast<int64_t>(B) * T; ++r)
    for (int64_t j = C + static_cast<int64_t>(KV) * hd; j < W; ++j) {
      got_v.push_back(got[r * W + j]);
      x_v.push_back(x[r * W + j]);
    }
  c.add("rope.v_untouched", got_v, x_v, 0.0);
  Vec back = got;  // the inverse, measured on the GPU's forward output
  for (const Part& p : parts) {
    gpu.rope(dx->as<bf16>() + p.off, B, T, p.heads, hd, W, p.freqs, p.pos0, true);
    cpu.rope(back.data() + p.off, B, T, p.heads, hd, W, p.freqs, p.pos0, true);
  }
  c.sync();
  c.add("rope(inverse).qk", down_bf16(*dx, n), back, kBf16Out);
}

// SwiGLU at F = 3C/2 (16-byte packs) and F + 3 (odd: the scalar path).
void check_swiglu(CudaOps& gpu, Ops& cpu, const SelfCheckShape& s, Checker& c) {
  const int64_t R = static_cast<int64_t>(s.B) * s.T;
  for (int64_t F : {int64_t{s.C} * 3 / 2, int64_t{s.C} * 3 / 2 + 3}) {
    const std::string tag = "swiglu(F " + std::to_string(F) + ")";
    Vec gu = rnd(R * 2 * F, s.seed, 101, 2.f), dout = rnd(R * F, s.seed, 102);
    round_bf16(gu), round_bf16(dout);
    auto dgu = up_bf16(gu), ddout = up_bf16(dout);
    Dev out(R * F * 2), dgrad(R * 2 * F * 2);
    gpu.swiglu_forward(out.as<bf16>(), dgu->as<bf16>(), R, F);
    c.sync();
    Vec rout(R * F), rgrad(R * 2 * F);
    cpu.swiglu_forward(rout.data(), gu.data(), R, F);
    c.add(tag + "_forward", down_bf16(out, R * F), rout, kBf16Out);
    gpu.swiglu_backward(dgrad.as<bf16>(), dgu->as<bf16>(), ddout->as<bf16>(), R, F);
    c.sync();
    cpu.swiglu_backward(rgrad.data(), gu.data(), dout.data(), R, F);
    c.add(tag + "_backward.dgate_up", down_bf16(dgrad, R * 2 * F), rgrad, kBf16Out);
  }
}

// The MoE rows (moe_mlp.hpp): R tokens, top 2 of 4 experts, every 7th copy dropped; the kept
// copies' rows in a shuffled order. Gather / scatter copy bf16 bits (exact); combine and its
// backward sum in fp32.
void check_moe(CudaOps& gpu, Ops& cpu, const SelfCheckShape& s, Checker& c) {
  const int64_t R = static_cast<int64_t>(s.B) * s.T, C = s.C;
  const int k = 2;
  std::vector<int64_t> pos(R * k, -1), perm;
  int64_t kept = 0;
  for (int64_t i = 0; i < R * k; ++i)
    if (i % 7 != 3) pos[i] = kept++;
  check(kept % 7919 != 0, "check_moe: {} kept rows", kept);
  for (int64_t i = 0; i < kept; ++i) perm.push_back((i * 7919) % kept);  // a permutation (7919 is prime)
  for (int64_t& p : pos)
    if (p >= 0) p = perm[p];
  std::vector<int64_t> idx(kept);
  for (int64_t i = 0; i < kept; ++i) idx[i] = (i * 31) % R;  // gather: rows may repeat
  Vec w = rnd(R * k, s.seed, 111, 0.3f, 0.5f), x = rnd(R * C, s.seed, 112), ys = rnd(kept * C, s.seed, 113),
      dout = rnd(R * C, s.seed, 114), dx0 = rnd(R * C, s.seed, 115);
  round_bf16(x), round_bf16(ys), round_bf16(dout), round_bf16(dx0);
  auto dx = up_bf16(x), dys_in = up_bf16(ys), ddout = up_bf16(dout), ddx = up_bf16(dx0);
  auto dpos = up(pos), didx = up(idx), dperm = up(perm), dw = up(w);
  {
    Dev out(kept * C * 2);
    gpu.moe_gather_rows(out.as<bf16>(), dx->as<bf16>(), didx->as<int64_t>(), kept, C);
    c.sync();
    Vec ref(kept * C);
    cpu.moe_gather_rows(ref.data(), x.data(), idx.data(), kept, C);
    c.add("moe_gather_rows", down_bf16(out, kept * C), ref, kExact);
    Dev sc(kept * C * 2);
    gpu.moe_scatter_rows(sc.as<bf16>(), dys_in->as<bf16>(), dperm->as<int64_t>(), kept, C);
    c.sync();
    Vec rsc(kept * C);
    cpu.moe_scatter_rows(rsc.data(), ys.data(), perm.data(), kept, C);
    c.add("moe_scatter_rows", down_bf16(sc, kept * C), rsc, kExact);
  }
  {
    Dev out(R * C * 2);
    gpu.moe_combine(out.as<bf16>(), dys_in->as<bf16>(), dpos->as<int64_t>(), dw->as<float>(), R, k, C);
    c.sync();
    Vec ref(R * C);
    cpu.moe_combine(ref.data(), ys.data(), pos.data(), w.data(), R, k, C);
    c.add("moe_combine", down_bf16(out, R * C), ref, kBf16Out);
  }
  {
    Dev dys(kept * C * 2), dwt(R * k * 4);
    gpu.moe_combine_backward(dys.as<bf16>(), dwt.as<float>(), ddout->as<bf16>(), dys_in->as<bf16>(),
                             dpos->as<int64_t>(), dw->as<float>(), R, k, C);
    c.sync();
    Vec rdys(kept * C), rdw(R * k);
    cpu.moe_combine_backward(rdys.data(), rdw.data(), dout.data(), ys.data(), pos.data(), w.data(), R, k, C);
    c.add("moe_combine_backward.dys", down_bf16(dys, kept * C), rdys, kBf16Out);
    c.add("moe_combine_backward.dweight", down(dwt, R * k), rdw, kF32Out);
  }
  {
    gpu.moe_uncombine_add(ddx->as<bf16>(), dys_in->as<bf16>(), dpos->as<int64_t>(), R, k, C);
    c.sync();
    Vec ref = dx0;
    cpu.moe_uncombine_add(ref.data(), ys.data(), pos.data(), R, k, C);
    c.add("moe_uncombine_add(+=)", down_bf16(*ddx, R * C), ref, kBf16Out);
  }
}

// The MoE router (ops/moe_router.hpp) against the host router (moe_routing.hpp) on the same bf16
// logits: B T rows in sequences of T, with ties planted (pairs of equal logits, a row of equal
// logits) so top-k's rule (the lower index first) decides. Cases: Mixtral's weights, dropless, 8
// experts top 2; OLMoE's (the probabilities), 64 experts top 8 (several rank chunks); Qwen's
// (renormalised) with a capacity factor and, as under context parallel, copies routed before
// each half sequence on other ranks (non-decreasing, as cp's chunks in token order give them).
// Integer outputs exact, probabilities / weights / losses to fp32 rounding, dlogits to bf16.
void check_moe_router(CudaOps& gpu, Ops&, const SelfCheckShape& s, Checker& c) {
  struct Case {
    const char* tag;
    int E, k;
    MoeRouter router;
    bool renorm;
    double capacity;
    bool prior;
  };
  const Case cases[] = {{"mixtral E8 k2", 8, 2, MoeRouter::softmax_topk, false, 0.0, false},
                        {"olmoe E64 k8", 64, 8, MoeRouter::topk_softmax, false, 0.0, false},
                        {"qwen E16 k4 capacity 0.5 + cp prior", 16, 4, MoeRouter::topk_softmax, true, 0.5, true}};
  const int64_t T = s.T, R = int64_t{s.B} * T;
  for (const Case& cs : cases) {
    const int E = cs.E, k = cs.k;
    const int64_t Rk = R * k;
    const std::string tag = std::string("moe_router[") + cs.tag + "]";
    MoeConfig cfg;
    cfg.n_experts = E, cfg.top_k = k, cfg.router = cs.router, cfg.norm_topk_prob = cs.renorm;
    cfg.capacity_factor = cs.capacity, cfg.aux_loss_coef = 0.01, cfg.z_loss_coef = 0.001;
    Vec logits = rnd(R * E, s.seed, 120 + E, 1.5f);
    for (int64_t t = 0; t < R; t += 3) logits[t * E + (t % (E - 1)) + 1] = logits[t * E + t % (E - 1)];
    for (int e = 0; e < E; ++e) logits[5 * E + e] = 0.25f;
    round_bf16(logits);
    MoeCapacityPrior prior;
    MoeCapacityHook hook;
    if (cs.prior) {
      prior.chunk_rows = T / 2, prior.total_rows = 2 * R;
      prior.before.assign(static_cast<size_t>(R / prior.chunk_rows * E), 0);
      for (int64_t ch = 1; ch < R / prior.chunk_rows; ++ch)
        for (int e = 0; e < E; ++e)
          prior.before[ch * E + e] = prior.before[(ch - 1) * E + e] + 4 * ((ch * 7 + e * 3) % 5);
      hook = [&](const MoeRouting&) { return prior; };
    }
    MoeRouting r;
    moe_route(cfg, logits.data(), R, T, r, hook);
    check(cs.capacity == 0 || r.dropped > 0, "check_moe_router: {} drops nothing", cs.tag);
    const MoeRouterShape sh =
        moe_router_shape(cfg, R, T, T, prior.total_rows ? prior.total_rows : R, prior.chunk_rows);
    auto dlog = up_bf16(logits);
    Dev probs(R * E * 4), lse(R * 4), expert(Rk * 4), weight(Rk * 4), pos(Rk * 8), seq_routed(R / T * E * 8),
        seq_psum(R / T * E * 8), srow(Rk * 8), summary((E + 3) * 8), scratch(sh.scratch_elems() * 8),
        dscratch(sh.dscratch_elems() * 8), dl(R * E * 2);
    std::unique_ptr<Dev> before = cs.prior ? up(prior.before) : nullptr;
    MoeRouterArrays a;
    a.probs = probs.as<float>(), a.lse = lse.as<float>(), a.expert = expert.as<int32_t>(), a.weight = weight.as<float>();
    a.pos = pos.as<int64_t>(), a.seq_routed = seq_routed.as<int64_t>(), a.seq_psum = seq_psum.as<double>();
    a.srow = srow.as<int64_t>(), a.before = before ? before->as<int64_t>() : nullptr;
    a.summary = summary.as<double>(), a.scratch = scratch.as<int64_t>(), a.dscratch = dscratch.as<double>();
    gpu.moe_router_select(dlog->as<bf16>(), sh, a);
    gpu.moe_router_place(sh, a);
    c.sync();
    auto get = [](const Dev& d, auto sample, size_t n) {
      std::vector<decltype(sample)> h(n);
      cuda_check(cudaMemcpy(h.data(), d.ptr(), n * sizeof(sample), cudaMemcpyDeviceToHost), "cudaMemcpy(D2H)");
      return Vec(h.begin(), h.end());
    };
    auto vf = [](const auto& v) { return Vec(v.begin(), v.end()); };
    c.add(tag + ".probs", down(probs, R * E), r.probs, kExact);
    c.add(tag + ".lse", down(lse, R), r.lse, kExact);
    c.add(tag + ".expert", get(expert, int32_t{}, Rk), vf(r.expert), 0);
    c.add(tag + ".weight", down(weight, Rk), r.weight, kExact);
    c.add(tag + ".pos", get(pos, int64_t{}, Rk), vf(r.pos), 0);
    Vec ref_srow;
    for (int64_t o : r.order) ref_srow.push_back(static_cast<float>(o / k));
    c.add(tag + ".srow", get(srow, int64_t{}, r.order.size()), ref_srow, 0);
    c.add(tag + ".seq_routed", get(seq_routed, int64_t{}, R / T * E), vf(r.seq_routed), 0);
    c.add(tag + ".seq_psum", get(seq_psum, double{}, R / T * E), vf(r.seq_psum), kExact);
    const Vec sum = get(summary, double{}, E + 3);
    Vec ref_counts = vf(r.counts);
    ref_counts.push_back(static_cast<float>(r.dropped));
    c.add(tag + ".counts+dropped", Vec(sum.begin(), sum.begin() + E + 1), ref_counts, 0);
    c.add(tag + ".aux", Vec(1, sum[E + 1]), Vec(1, static_cast<float>(r.aux)), kExact);
    c.add(tag + ".z", Vec(1, sum[E + 2]), Vec(1, static_cast<float>(r.z)), kExact);
    // The backward, dropped copies' dweight 0 (as combine_backward gives them).
    Vec dw = rnd(Rk, s.seed, 130 + E, 0.5f);
    for (int64_t i = 0; i < Rk; ++i)
      if (r.pos[i] < 0) dw[i] = 0.f;
    auto ddw = up(dw);
    const double ls = 1.0 / double(R);
    gpu.moe_router_backward(dl.as<bf16>(), ddw->as<float>(), cfg.aux_loss_coef * ls, cfg.z_loss_coef * ls, sh, a);
    c.sync();
    Vec rdl(R * E);
    moe_router_backward(cfg, r, dw.data(), ls, rdl.data());
    c.add(tag + ".dlogits", down_bf16(dl, R * E), rdl, kBf16Out);
  }
}

// FP8 casts with current scaling (ops/fp8_scaling.hpp): the GPU's bytes, amax and scale_inv equal
// the CPU's exactly, E4M3 and E5M2, on bf16 values spanning many binades (normal values times
// 2^-20 .. 2^12, some zeros, outliers), so that elements saturate nowhere, round at midpoints and
// underflow to zero.
void check_fp8_casts(CudaOps& gpu, Ops&, const SelfCheckShape& s, Checker& c) {
  const int64_t n = int64_t{s.B} * s.T * s.C + 13;  // not a multiple of any block
  Vec x = rnd(n, s.seed, 140);
  for (int64_t i = 0; i < n; ++i) x[i] = std::ldexp(x[i], static_cast<int>(i % 33) - 20) * (i % 97 == 0 ? 0.f : 1.f);
  round_bf16(x);
  auto dx = up_bf16(x);
  for (Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2}) {
    const std::string tag = f == Fp8Format::e4m3 ? "fp8_quantize e4m3" : "fp8_quantize e5m2";
    Dev q(n), si(4), am(4);
    gpu.fp8_quantize(q.as<uint8_t>(), si.as<float>(), am.as<float>(), dx->as<bf16>(), n, f);
    c.sync();
    std::vector<uint8_t> got(n), want(n);
    cuda_check(cudaMemcpy(got.data(), q.ptr(), n, cudaMemcpyDeviceToHost), "cudaMemcpy(D2H)");
    const Fp8CastStats st = fp8_quantize(f, x.data(), x.size(), want.data());
    c.add(tag + ".bytes", Vec(got.begin(), got.end()), Vec(want.begin(), want.end()), 0);
    c.add(tag + ".amax", down(am, 1), Vec(1, st.amax), 0);
    c.add(tag + ".scale_inv", down(si, 1), Vec(1, 1.f / st.scale), 0);
  }
  // The linears' form (CudaOps::fp8_cast): x as [rows, cols], neither a multiple of the 32 x 32
  // tile, with its transposed copy and the statistics, cast with an amax from elsewhere as tensor
  // parallel's group amax: twice the part's (nothing saturates) and half of it (the top half does).
  const int64_t rows = s.T + 5, cols = (n - 13) / rows, nn = rows * cols;
  const Vec xs(x.begin(), x.begin() + nn);
  for (Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2})
    for (float factor : {2.f, 0.5f}) {
      const std::string tag = fmt::format("fp8_cast {} amax x{}", f == Fp8Format::e4m3 ? "e4m3" : "e5m2", factor);
      const float amax = fp8_amax(xs.data(), xs.size()) * factor;
      Dev q(nn), qt(nn), si(4);
      auto am = up(std::vector<float>{amax});
      auto st = up(std::vector<Fp8DeviceStats>(1));
      gpu.fp8_cast(q.as<uint8_t>(), qt.as<uint8_t>(), si.as<float>(), am->as<float>(), dx->as<bf16>(), rows, cols, f,
                   st->as<Fp8DeviceStats>());
      c.sync();
      Vec vals(nn);
      const Fp8CastStats want = fp8_decode_quantized(f, xs.data(), vals.data(), xs.size(), amax);
      Vec codes(nn), codes_t(nn), got(nn), got_t(nn);
      std::vector<uint8_t> hq(nn), hqt(nn);
      cuda_check(cudaMemcpy(hq.data(), q.ptr(), nn, cudaMemcpyDeviceToHost), "cudaMemcpy(D2H)");
      cuda_check(cudaMemcpy(hqt.data(), qt.ptr(), nn, cudaMemcpyDeviceToHost), "cudaMemcpy(D2H)");
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t k = 0; k < cols; ++k) {
          codes[r * cols + k] = codes_t[k * rows + r] = fp8_from_float(f, vals[r * cols + k]);
          got[r * cols + k] = hq[r * cols + k], got_t[k * rows + r] = hqt[k * rows + r];
        }
      Fp8DeviceStats gs;
      cuda_check(cudaMemcpy(&gs, st->ptr(), sizeof gs, cudaMemcpyDeviceToHost), "cudaMemcpy(D2H)");
      float gamax = 0.f;
      std::memcpy(&gamax, &gs.amax_bits, sizeof gamax);
      c.add(tag + ".bytes", got, codes, 0);
      c.add(tag + ".transposed", got_t, codes_t, 0);
      c.add(tag + ".scale_inv", down(si, 1), Vec(1, 1.f / want.scale), 0);
      c.add(tag + ".stats", Vec{gamax, float(gs.saturated), float(gs.underflowed)},
            Vec{amax, float(want.saturated), float(want.underflowed)}, 0);
    }
}

// The FP8 GEMM (CudaOps::fp8_gemm, cuBLASLt): an E5M2 a [M, K] (a gradient) times an E4M3 b [N, K]
// from the GPU's own casts, into bf16 with a bias and into fp32 with +=, against the double
// product of the codes' values (read back) times the two scale_inv.
void check_fp8_gemm(CudaOps& gpu, Ops&, const SelfCheckShape& s, Checker& c) {
  const int64_t M = int64_t{s.B} * s.T, K = s.C, N = 3 * s.C;
  Vec a = rnd(M * K, s.seed, 150, 1e-3f), b = rnd(N * K, s.seed, 151, 0.05f), bias = rnd(N, s.seed, 152, 0.1f),
      acc0 = rnd(M * N, s.seed, 153);
  round_bf16(a), round_bf16(b), round_bf16(bias);
  auto da = up_bf16(a), db = up_bf16(b), dbias = up_bf16(bias), dacc = up(acc0);
  Dev qa(M * K), qb(N * K), sc(16), out(M * N * sizeof(bf16));
  float* f = sc.as<float>();
  gpu.fp8_quantize(qa.as<uint8_t>(), f, f + 2, da->as<bf16>(), M * K, Fp8Format::e5m2);
  gpu.fp8_quantize(qb.as<uint8_t>(), f + 1, f + 3, db->as<bf16>(), N * K, Fp8Format::e4m3);
  Fp8Gemm g;
  g.M = M, g.K = K, g.N = N;
  g.a = qa.as<uint8_t>(), g.a_format = Fp8Format::e5m2, g.a_scale_inv = f;
  g.b = qb.as<uint8_t>(), g.b_format = Fp8Format::e4m3, g.b_scale_inv = f + 1;
  g.out = out.as<bf16>(), g.bias = dbias->as<bf16>();
  gpu.fp8_gemm(g);
  g.out = nullptr, g.bias = nullptr, g.acc = dacc->as<float>();
  gpu.fp8_gemm(g);
  c.sync();
  std::vector<uint8_t> ha(M * K), hb(N * K);
  cuda_check(cudaMemcpy(ha.data(), qa.ptr(), ha.size(), cudaMemcpyDeviceToHost), "cudaMemcpy(D2H)");
  cuda_check(cudaMemcpy(hb.data(), qb.ptr(), hb.size(), cudaMemcpyDeviceToHost), "cudaMemcpy(D2H)");
  const Vec si = down(sc, 2);
  Vec ref(M * N), ref_acc(M * N);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double d = 0;
      for (int64_t k = 0; k < K; ++k)
        d += double(float_from_fp8(Fp8Format::e5m2, ha[i * K + k])) * float_from_fp8(Fp8Format::e4m3, hb[j * K + k]);
      d *= double(si[0]) * si[1];
      ref[i * N + j] = static_cast<float>(d + bias[j]);
      ref_acc[i * N + j] = static_cast<float>(acc0[i * N + j] + d);
    }
  c.add("fp8_gemm.out", down_bf16(out, M * N), ref, kBf16Out);
  c.add("fp8_gemm.acc(+=)", down(*dacc, M * N), ref_acc, kF32Out);
}

void check_embedding(CudaOps& gpu, Ops& cpu, const SelfCheckShape& s, Checker& c) {
  const int B = s.B, T = s.T, C = s.C;
  const int64_t BT = static_cast<int64_t>(B) * T, vb = 16, ve = vb + s.V / 2, rows = ve - vb;
  std::vector<int32_t> tok(BT);
  for (int64_t i = 0; i < BT; ++i)  // a small id range: many repeated tokens, some outside the shard
    tok[i] = static_cast<int32_t>(counter_bits(s.seed, 41, i) % static_cast<uint64_t>(std::min<int64_t>(ve + 8, 300)));
  Vec wte = rnd(rows * C, s.seed, 42), wpe = rnd(static_cast<int64_t>(T) * C, s.seed, 43);
  round_bf16(wte), round_bf16(wpe);
  auto dtok = up(tok), dwte = up_bf16(wte), dwpe = up_bf16(wpe);
  Dev out(BT * C * 2);
  gpu.embedding_forward(out.as<bf16>(), dtok->as<int32_t>(), dwte->as<bf16>(), dwpe->as<bf16>(), B, T, C, vb, ve);
  c.sync();
  Vec rout(BT * C);
  cpu.embedding_forward(rout.data(), tok.data(), wte.data(), wpe.data(), B, T, C, vb, ve);
  c.add("embedding_forward", down_bf16(out, BT * C), rout, kBf16Out);

  Vec dout = rnd(BT * C, s.seed, 44), gwte = rnd(rows * C, s.seed, 45), gwpe = rnd(static_cast<int64_t>(T) * C, s.seed, 46);
  round_bf16(dout);
  auto ddout = up_bf16(dout), dgwte = up(gwte), dgwpe = up(gwpe);
  gpu.embedding_backward(dgwte->as<float>(), dgwpe->as<float>(), ddout->as<bf16>(), dtok->as<int32_t>(), B, T, C, vb, ve);
  c.sync();
  cpu.embedding_backward(gwte.data(), gwpe.data(), dout.data(), tok.data(), B, T, C, vb, ve);
  c.add("embedding_backward.dwte", down(*dgwte, rows * C), gwte, kF32Out);
  c.add("embedding_backward.dwpe", down(*dgwpe, static_cast<int64_t>(T) * C), gwpe, kF32Out);

  // Per-row positions (document masking): every row its own wpe row, positions restarting every
  // T/3 + 1 rows; dwpe sums the rows that share one (a reference in fp64 here).
  std::vector<int32_t> pos(BT);
  for (int64_t i = 0; i < BT; ++i) pos[i] = static_cast<int32_t>((i % T) % (T / 3 + 1));
  auto dpos = up(pos);
  Dev out2(BT * C * 2);
  gpu.embedding_forward(out2.as<bf16>(), dtok->as<int32_t>(), dwte->as<bf16>(), dwpe->as<bf16>(), B, T, C, vb, ve,
                        dpos->as<int32_t>(), true);
  c.sync();
  Vec rout2(BT * C), rgwpe(static_cast<int64_t>(T) * C, 0.f);
  std::vector<double> acc(rgwpe.size(), 0.0);
  for (int64_t i = 0; i < BT; ++i)
    for (int64_t k = 0; k < C; ++k) {
      const bool mine = tok[i] >= vb && tok[i] < ve;
      rout2[i * C + k] = (mine ? wte[(tok[i] - vb) * C + k] : 0.f) + wpe[pos[i] * C + k];
      acc[pos[i] * C + k] += dout[i * C + k];
    }
  for (size_t i = 0; i < acc.size(); ++i) rgwpe[i] = static_cast<float>(acc[i]);
  c.add("embedding_forward(per_row)", down_bf16(out2, BT * C), rout2, kBf16Out);
  auto dgwpe2 = up(Vec(static_cast<size_t>(T) * C, 0.f));
  gpu.embedding_backward(nullptr, dgwpe2->as<float>(), ddout->as<bf16>(), dtok->as<int32_t>(), B, T, C, vb, ve,
                         dpos->as<int32_t>(), true);
  c.sync();
  c.add("embedding_backward(per_row).dwpe", down(*dgwpe2, static_cast<int64_t>(T) * C), rgwpe, kF32Out);
}

void check_crossentropy(CudaOps& gpu, Ops& cpu, const SelfCheckShape& s, Checker& c) {
  const int64_t R = static_cast<int64_t>(s.B) * s.T, V = s.V, Vp = s.Vp;
  Vec logits = rnd(R * Vp, s.seed, 51, 2.f);
  round_bf16(logits);
  std::vector<int32_t> tgt(R);
  for (int64_t r = 0; r < R; ++r)
    tgt[r] = (r % 10 == 3) ? -1 : static_cast<int32_t>(counter_bits(s.seed, 52, r) % static_cast<uint64_t>(V));
  const float scale = 1.f / static_cast<float>(R);
  auto dtgt = up(tgt);
  Vec rloss(R), rlse(R), rgrad = logits;
  cpu.crossentropy_forward(rloss.data(), rlse.data(), logits.data(), tgt.data(), R, Vp, V);
  cpu.crossentropy_backward(rgrad.data(), rlse.data(), tgt.data(), R, Vp, V, scale);
  Dev loss(R * 4), lse(R * 4);
  {
    auto dl = up_bf16(logits);
    gpu.crossentropy_forward(loss.as<float>(), lse.as<float>(), dl->as<bf16>(), dtgt->as<int32_t>(), R, Vp, V);
    c.sync();
    c.add("crossentropy_forward.losses", down(loss, R), rloss, kF32Out);
    c.add("crossentropy_forward.lse", down(lse, R), rlse, kF32Out);
    gpu.crossentropy_backward(dl->as<bf16>(), lse.as<float>(), dtgt->as<int32_t>(), R, Vp, V, scale);
    c.sync();
    c.add("crossentropy_backward.dlogits", down_bf16(*dl, R * Vp), rgrad, kBf16Out);
  }
  {
    auto dl = up_bf16(logits);
    gpu.crossentropy_fused(loss.as<float>(), lse.as<float>(), dl->as<bf16>(), dtgt->as<int32_t>(), R, Vp, V, scale);
    c.sync();
    c.add("crossentropy_fused.losses", down(loss, R), rloss, kF32Out);
    c.add("crossentropy_fused.dlogits", down_bf16(*dl, R * Vp), rgrad, kBf16Out);
  }
  // Vocab-parallel over two shards [0, V0) and [V0, V); the all-reduces are done here on the host.
  const int64_t V0 = (V / 2) / 8 * 8, Vs[2] = {V0, V - V0}, Vps[2] = {V0, (V - V0 + 7) / 8 * 8}, begin[2] = {0, V0};
  std::unique_ptr<Dev> shard[2], mx[2], se[2], tl[2];
  Vec gmax(R, -INFINITY), gsum(R, 0.f), gtl(R, 0.f);
  Vec lmax[2];
  for (int k = 0; k < 2; ++k) {
    Vec part(R * Vps[k], 0.f);
    for (int64_t r = 0; r < R; ++r)
      for (int64_t j = 0; j < Vs[k]; ++j) part[r * Vps[k] + j] = logits[r * Vp + begin[k] + j];
    shard[k] = up_bf16(part);
    mx[k] = std::make_unique<Dev>(R * 4), se[k] = std::make_unique<Dev>(R * 4), tl[k] = std::make_unique<Dev>(R * 4);
    gpu.crossentropy_partial(mx[k]->as<float>(), se[k]->as<float>(), tl[k]->as<float>(), shard[k]->as<bf16>(),
                             dtgt->as<int32_t>(), R, Vps[k], Vs[k], begin[k]);
    c.sync();
    lmax[k] = down(*mx[k], R);
    for (int64_t r = 0; r < R; ++r) gmax[r] = std::max(gmax[r], lmax[k][r]);
  }
  auto dgmax = up(gmax);
  for (int k = 0; k < 2; ++k) {
    gpu.crossentropy_rescale(se[k]->as<float>(), mx[k]->as<float>(), dgmax->as<float>(), R);
    c.sync();
    Vec e = down(*se[k], R), t = down(*tl[k], R);
    for (int64_t r = 0; r < R; ++r) gsum[r] += e[r], gtl[r] += t[r];
  }
  auto dgsum = up(gsum), dgtl = up(gtl);
  gpu.crossentropy_combine(loss.as<float>(), lse.as<float>(), dgmax->as<float>(), dgsum->as<float>(),
                           dgtl->as<float>(), dtgt->as<int32_t>(), R);
  c.sync();
  c.add("crossentropy_vocab_parallel.losses", down(loss, R), rloss, kF32Out);
  c.add("crossentropy_vocab_parallel.lse", down(lse, R), rlse, kF32Out);
  Vec got(R * Vp, 0.f), ref(R * Vp, 0.f);
  for (int k = 0; k < 2; ++k) {
    gpu.crossentropy_backward_shard(shard[k]->as<bf16>(), lse.as<float>(), dtgt->as<int32_t>(), R, Vps[k], Vs[k],
                                    scale, begin[k]);
    c.sync();
    Vec g = down_bf16(*shard[k], R * Vps[k]);
    for (int64_t r = 0; r < R; ++r)
      for (int64_t j = 0; j < Vps[k]; ++j) {
        int64_t col = begin[k] + j;
        if (j < Vs[k]) {
          got[r * Vp + col] = g[r * Vps[k] + j];
        } else if (g[r * Vps[k] + j] != 0.f) {
          got[r * Vp + V] = INFINITY;  // a padded column was written: flag it
        }
      }
  }
  // Rows with an ignored target are zero in both; real columns compared; CPU padded columns are 0.
  for (int64_t r = 0; r < R; ++r)
    for (int64_t j = 0; j < V; ++j) ref[r * Vp + j] = rgrad[r * Vp + j];
  c.add("crossentropy_vocab_parallel.dlogits", got, ref, kBf16Out);
}

void check_optimizer(CudaOps& gpu, Ops& cpu, const SelfCheckShape& s, Checker& c) {
  const size_t n = 100003;
  Vec p = rnd(n, s.seed, 61), g = rnd(n, s.seed, 62, 0.1f), m = rnd(n, s.seed, 63, 0.01f), v(n);
  Vec vr = rnd(n, s.seed, 64, 0.01f);
  for (size_t i = 0; i < n; ++i) v[i] = vr[i] * vr[i];
  auto dp = up(p), dg = up(g), dm = up(m), dv = up(v);
  Dev pb(n * 2);
  // A clipping step: both use the gradients times 0.7.
  gpu.adamw(dp->as<float>(), pb.as<bf16>(), dg->as<float>(), 0.7f, dm->as<float>(), dv->as<float>(), n, 1e-3f, 0.9f,
            0.95f, 1e-8f, 0.1f, 3);
  c.sync();
  Vec p0 = p;
  cpu.adamw(p.data(), nullptr, g.data(), 0.7f, m.data(), v.data(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 3);
  Vec gp = down(*dp, n), dgot(n), dref(n);
  for (size_t i = 0; i < n; ++i) dgot[i] = gp[i] - p0[i], dref[i] = p[i] - p0[i];
  c.add("adamw.update(p_new - p_old)", dgot, dref, kF32Out);
  c.add("adamw.m", down(*dm, n), m, kF32Out);
  c.add("adamw.v", down(*dv, n), v, kF32Out);
  Vec pr = p;
  round_bf16(pr);
  c.add("adamw.p_bf16", down_bf16(pb, n), pr, kBf16Out);

  double ref = cpu.sum_squares(g.data(), n);
  double got = gpu.sum_squares_host(dg->as<float>(), n);
  c.add("sum_squares", {static_cast<float>(got)}, {static_cast<float>(ref)}, kExact);
  // From an element past a 16-byte boundary: the elements before the kernel's first whole pack.
  ref = cpu.sum_squares(g.data() + 1, n - 2);
  got = gpu.sum_squares_host(dg->as<float>() + 1, n - 2);
  c.add("sum_squares(unaligned)", {static_cast<float>(got)}, {static_cast<float>(ref)}, kExact);
}

}  // namespace

std::vector<OpCheck> check_cuda_ops_against_cpu(CudaOps& gpu, Ops& cpu, const SelfCheckShape& shape) {
  check(shape.C % shape.H == 0 && shape.C % 8 == 0 && shape.Vp >= shape.V && shape.Vp % 8 == 0 &&
            (shape.KV == 0 || shape.H % shape.KV == 0),
        "self-check shape: C must be a multiple of 8 and of H, Vp >= V and a multiple of 8, KV divide H");
  std::vector<OpCheck> out;
  Checker c(gpu, out);
  using Family = void (*)(CudaOps&, Ops&, const SelfCheckShape&, Checker&);
  const std::pair<const char*, Family> families[] = {
      {"matmul", check_matmul},
      {"layernorm", check_layernorm},
      {"gelu+elementwise", check_gelu_elementwise},
      {"attention", check_attention},
      {"attention gqa", check_attention_gqa},
      {"attention documents", check_attention_documents},
      {"attention block (ring)", check_attention_block_causal},
      {"attention block (ring) documents", check_attention_block_documents},
      {"rmsnorm", check_rmsnorm},
      {"rope", check_rope},
      {"swiglu", check_swiglu},
      {"moe rows", check_moe},
      {"moe router", check_moe_router},
      {"fp8 casts", check_fp8_casts},
      {"fp8 gemm", check_fp8_gemm},
      {"embedding", check_embedding},
      {"crossentropy", check_crossentropy},
      {"adamw+sum_squares", check_optimizer}};
  for (auto [name, run] : families) {
    try {
      run(gpu, cpu, shape, c);
    } catch (const std::exception& e) {
      out.push_back({std::string(name) + " (stopped)", INFINITY, 0, e.what()});
      cudaGetLastError();  // a failed launch must not fail the next family
    }
  }
  return out;
}

std::vector<OpCheck> check_attention_against_cpu(CudaOps& gpu, Ops& cpu, const SelfCheckShape& shape, int KV) {
  std::vector<OpCheck> out;
  Checker c(gpu, out);
  check_attention_kv(gpu, cpu, shape, c, KV);
  return out;
}

std::vector<OpCheck> check_attention_paths(CudaOps& a, CudaOps& b, int B, int T, int H, int hd, uint64_t seed,
                                           int KV) {
  const int kv = KV == 0 ? H : KV;
  const int64_t C = static_cast<int64_t>(H) * hd, n3 = static_cast<int64_t>(B) * T * (C + 2 * int64_t{kv} * hd),
                n = static_cast<int64_t>(B) * T * C, ns = static_cast<int64_t>(B) * H * T;
  Vec qkv = rnd(n3, seed, 71), dout = rnd(n, seed, 72);
  auto dq = up_bf16(round_bf16(qkv)), dd = up_bf16(round_bf16(dout));
  Vec res[2][3];
  CudaOps* ops[2] = {&a, &b};
  for (int k = 0; k < 2; ++k) {
    Dev out(n * 2), st(ns * 4), dqkv(n3 * 2);
    ops[k]->attention_forward(out.as<bf16>(), st.as<float>(), dq->as<bf16>(), B, T, H, hd, KV);
    ops[k]->attention_backward(dqkv.as<bf16>(), dd->as<bf16>(), dq->as<bf16>(), out.as<bf16>(), st.as<float>(), B, T,
                               H, hd, KV);
    ops[k]->synchronize();
    res[k][0] = down_bf16(out, n), res[k][1] = down(st, ns), res[k][2] = down_bf16(dqkv, n3);
  }
  std::string tag = "attention " + a.attention_kind() + " vs " + b.attention_kind() +
                    (kv == H ? "" : " gqa KV" + std::to_string(kv));
  return {{tag + ".out", rel_err(res[0][0], res[1][0]), kBf16Out, ""},
          {tag + ".stats", rel_err(res[0][1], res[1][1]), kF32Out, ""},
          {tag + ".dqkv", rel_err(res[0][2], res[1][2]), 2 * kBf16Out, ""}};
}

}  // namespace mpitron
