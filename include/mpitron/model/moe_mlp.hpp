// The mixture-of-experts MLP of a MoE block (transformer_block.hpp calls it in place of the
// dense MLP), in the Mixtral / Switch form:
//   logits = x Wr^T [R, E]; route (moe_routing.hpp: top-k, weights, drops, aux and z losses);
//   each kept copy (token t, expert e) -> y = w2_e(silu(w1_e x_t) * (w3_e x_t));
//   out_t = sum_j weight_tj y_tj  (+ the shared experts' SwiGLU of x_t, always on).
// Grouped expert GEMMs: the copies are sorted by expert, so each expert runs ONE GEMM over its
// contiguous rows (no padding to a capacity), w1 | w3 fused as one [2 Fe, C] weight.
//
// Expert parallel (ep > 1, the ep group from grid.hpp): rank r of ep runs experts
// [r E/ep, (r+1) E/ep). Dispatch: the per-expert copy counts are all-gathered over ep, then the
// copies' rows go to their experts' ranks by one all-to-all-v; the owner reorders what it got
// (source-major) expert-major, runs its experts, and the combine all-to-all-v sends the outputs
// back. Backward runs the same two exchanges on the gradients. A rank holds only its experts'
// parameters (the parameter table's; their gradients are reduced over expert_dp, the ranks with
// the same experts: data_parallel.hpp ParamSet), so w13/w2 of other experts are null here.
//
// Tensor parallel: the router and the routed experts are replicated over tp (every TP rank
// routes the same rows and computes the same outputs, no communication); the shared experts are
// split like a dense MLP (column-parallel gate|up, row-parallel down). Context parallel: a rank
// holds T / cp rows of each sequence; routing is per row, and the load-balancing loss, per whole
// sequence, gets its per-sequence sums (routed copies, probabilities) over the cp ranks, so every
// cp rank trains the single-rank objective. Sequence parallel: the block gathers the rows, every
// TP rank runs this layer on all of them (as without sp) and keeps its own. Capacity drops go in
// the micro-batch's token order: under cp each rank adds the copies the other cp ranks routed in
// the chunks before each of its own (cp_capacity_prior), so it drops what one rank would.
//
// Device: the routing and the row permutations run on the host, so the layer runs on CPU devices
// (A = float); the GEMMs and SwiGLU are the device's.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>

#include "mpitron/core/error.hpp"
#include "mpitron/core/memory.hpp"
#include "mpitron/core/trace.hpp"
#include "mpitron/distributed/comm.hpp"
#include "mpitron/model/block_tensors.hpp"
#include "mpitron/model/config.hpp"
#include "mpitron/model/moe_routing.hpp"
#include "mpitron/model/parallel_layers.hpp"

namespace mpitron {

// What a MoE block keeps from forward for backward (one per block and activation slot).
template <class A>
struct MoeActs {
  std::vector<float> logits;       // [R, E]
  MoeRouting route;
  std::vector<A> ys;               // [kept, C] expert outputs in this rank's expert-sorted order
  // Owner side (this rank's experts): rows expert-major, and where each came from.
  std::vector<A> xe, h, act;       // [n, C], [n, 2 Fe], [n, Fe]
  std::vector<int64_t> idx;        // [n] row of the source-major exchange buffer
  std::vector<int64_t> ne;         // [El] rows per local expert
  std::vector<size_t> send_rows, recv_rows;  // per ep rank
  std::vector<A> sh_h, sh_act;     // shared experts: [R, 2 Fs/tp], [R, Fs/tp]
  HeldBytes held;                  // the vectors' capacities, in the tracker as activations

  int64_t capacity_bytes() const {
    auto b = [](const auto& v) { return static_cast<int64_t>(v.capacity() * sizeof(v[0])); };
    const MoeRouting& r = route;
    return b(r.probs) + b(r.lse) + b(r.expert) + b(r.weight) + b(r.pos) + b(r.order) + b(r.counts) + b(r.routed) +
           b(r.seq_routed) + b(r.seq_psum) + b(logits) + b(ys) + b(xe) + b(h) + b(act) + b(sh_h) + b(sh_act) +
           b(idx) + b(ne) + b(send_rows) + b(recv_rows);
  }
};

template <class Dev>
class MoeMlp {
 public:
  using A = typename Dev::act_t;
  using Wt = typename Dev::weight_t;
  using Acts = MoeActs<A>;

  // ep: the expert-parallel group (nullptr: every expert on this rank); cp: the context-parallel
  // group (nullptr: whole sequences here).
  MoeMlp(Dev& dev, const ModelConfig& cfg, TpContext tp, Comm* ep, Comm* cp = nullptr)
      : dev_(dev),
        cp_(cp && cp->size() > 1 ? cp : nullptr),
        seq_len_(cfg.seq_len / (cp_ ? cp_->size() : 1)),
        m_(cfg.moe),
        c_(cfg.d_model),
        fe_(cfg.moe.d_ff),
        fs_(int64_t{cfg.moe.n_shared} * cfg.moe.d_ff),
        tp_(tp),
        ep_(ep && ep->size() > 1 ? ep : nullptr),
        sh_fc_(dev, tp, cfg.d_model, 2 * std::max<int64_t>(fs_, tp.size())),
        sh_fcp_(dev, tp, std::max<int64_t>(fs_, tp.size()), cfg.d_model) {
    const int P = ep_ ? ep_->size() : 1;
    usage_check(m_.n_experts % P == 0, "model.moe.n_experts = {} must be divisible by parallel.ep = {}",
                m_.n_experts, P);
    el_ = m_.n_experts / P;
    e0_ = (ep_ ? ep_->rank() : 0) * el_;
  }
  // Allocates a block's saved state for up to R rows at balanced routing (moe_activation_bytes,
  // checked), so the memory is there, and counted, before the first step.
  void reserve(Acts& a, int64_t R) {
    const int64_t E = m_.n_experts, Rk = R * m_.top_k, T = std::min<int64_t>(seq_len_, R), S = R / T;
    const int64_t fl = fs_ / tp_.size();
    const size_t P = ep_ ? static_cast<size_t>(ep_->size()) : 1;
    MoeRouting& r = a.route;
    r.probs.reserve(R * E), r.lse.reserve(R), r.expert.reserve(Rk), r.weight.reserve(Rk);
    r.pos.reserve(Rk), r.order.reserve(Rk), r.counts.reserve(E), r.routed.reserve(E);
    r.seq_routed.reserve(S * E), r.seq_psum.reserve(S * E);
    a.logits.reserve(R * E), a.ys.reserve(Rk * c_), a.xe.reserve(Rk * c_), a.h.reserve(Rk * 2 * fe_);
    a.act.reserve(Rk * fe_), a.idx.reserve(Rk), a.ne.reserve(el_), a.send_rows.reserve(P), a.recv_rows.reserve(P);
    if (fl > 0) a.sh_h.reserve(R * 2 * fl), a.sh_act.reserve(R * fl);
    a.held.set(a.capacity_bytes());
    check(a.held.bytes() == moe_activation_bytes_of(R),
          "MoeMlp::reserve: {} bytes allocated for {} rows, moe_activation_bytes says {}", a.held.bytes(), R,
          moe_activation_bytes_of(R));
  }
  int64_t moe_activation_bytes_of(int64_t R) const {
    ModelConfig c;
    c.d_model = static_cast<int>(c_), c.moe = m_;
    return moe_activation_bytes(c, R, std::min<int64_t>(seq_len_, R), ep_ ? ep_->size() : 1, tp_.size());
  }

  // The backward's scale of the routing losses: 1 / counted targets of the global batch, the
  // scale the LM loss's gradient got (set before each backward).
  void set_loss_scale(double s) { loss_scale_ = s; }
  double ep_seconds() const { return ep_seconds_; }  // in the token exchanges since construction

  // out [R, C] = the MoE MLP of x [R, C].
  void forward(const MoeTensors<const Wt>& w, Acts& a, A* out, const A* x, int64_t R) {
    const int E = m_.n_experts;
    a.logits.resize(static_cast<size_t>(R * E));
    dev_.matmul_forward(a.logits.data(), x, w.router, nullptr, R, c_, E);
    MoeCapacityHook prior;
    if (cp_ && m_.capacity_factor > 0) prior = [this](const MoeRouting& r) { return cp_capacity_prior(r); };
    moe_route(m_, a.logits.data(), R, std::min<int64_t>(seq_len_, R), a.route, prior);
    if (cp_) whole_sequence_aux(a.route);
    const MoeRouting& r = a.route;
    const int64_t kept = static_cast<int64_t>(r.order.size());
    // Dispatch: the copies' rows in expert-sorted order, to the experts' ranks.
    std::vector<A> xs(static_cast<size_t>(kept * c_));
    for (int64_t i = 0; i < kept; ++i)
      std::memcpy(&xs[i * c_], x + (r.order[i] / m_.top_k) * c_, sizeof(A) * c_);
    plan_exchange(a);
    a.xe.resize(a.idx.size() * c_);
    exchange_to_owners(xs.data(), a.xe.data(), a, "ep dispatch");
    // The local experts, one GEMM each over their rows.
    const int64_t n = static_cast<int64_t>(a.idx.size());
    a.h.resize(static_cast<size_t>(n * 2 * fe_));
    a.act.resize(static_cast<size_t>(n * fe_));
    std::vector<A> ye(static_cast<size_t>(n * c_));
    for (int el = 0, off = 0; el < el_; off += static_cast<int>(a.ne[el]), ++el) {
      const int64_t ni = a.ne[el];
      if (ni == 0) continue;
      A* h = a.h.data() + off * 2 * fe_;
      A* act = a.act.data() + off * fe_;
      dev_.matmul_forward(h, a.xe.data() + off * c_, w.w13[e0_ + el], nullptr, ni, c_, 2 * fe_);
      dev_.swiglu_forward(act, h, ni, fe_);
      dev_.matmul_forward(ye.data() + off * c_, act, w.w2[e0_ + el], nullptr, ni, fe_, c_);
    }
    a.ys.resize(static_cast<size_t>(kept * c_));
    exchange_to_sources(ye.data(), a.ys.data(), a, "ep combine");
    // Combine, each token's copies in rank order.
    for (int64_t t = 0; t < R; ++t) {
      A* o = out + t * c_;
      std::fill(o, o + c_, A{});
      for (int j = 0; j < m_.top_k; ++j) {
        const int64_t p = r.pos[t * m_.top_k + j];
        if (p < 0) continue;
        const float wt = r.weight[t * m_.top_k + j];
        const A* y = a.ys.data() + p * c_;
        for (int64_t c = 0; c < c_; ++c) o[c] += wt * y[c];
      }
    }
    if (fs_ > 0) {  // the shared experts, added to the routed output
      const int64_t fl = fs_ / tp_.size();
      a.sh_h.resize(static_cast<size_t>(R * 2 * fl));
      a.sh_act.resize(static_cast<size_t>(R * fl));
      std::vector<A> so(static_cast<size_t>(R * c_));
      sh_fc_.forward(a.sh_h.data(), x, nullptr, w.sh_fc, nullptr, R);
      dev_.swiglu_forward(a.sh_act.data(), a.sh_h.data(), R, fl);
      sh_fcp_.forward(so.data(), a.sh_act.data(), w.sh_fcp, nullptr, R, nullptr);
      dev_.residual_forward(out, out, so.data(), static_cast<size_t>(R * c_));
    }
    a.held.set(a.capacity_bytes());
  }

  // dx [R, C] = d/dx of the MoE MLP (overwritten) from dout [R, C]; the parameters' gradients
  // accumulate into g (this rank's experts only), the routing losses' terms included.
  void backward(const MoeTensors<const Wt>& w, const MoeTensors<float>& g, Acts& a, A* dx, const A* dout, const A* x,
                int64_t R) {
    const MoeRouting& r = a.route;
    const int E = m_.n_experts, k = m_.top_k;
    const int64_t kept = static_cast<int64_t>(r.order.size());
    // Through the combine: d weight and d y per copy.
    std::vector<float> dweight(static_cast<size_t>(R * k), 0.f);
    std::vector<A> dys(static_cast<size_t>(kept * c_));
    for (int64_t t = 0; t < R; ++t)
      for (int j = 0; j < k; ++j) {
        const int64_t p = r.pos[t * k + j];
        if (p < 0) continue;
        const A* d = dout + t * c_;
        const A* y = a.ys.data() + p * c_;
        A* dy = dys.data() + p * c_;
        const float wt = r.weight[t * k + j];
        double s = 0;
        for (int64_t c = 0; c < c_; ++c) s += double(d[c]) * y[c], dy[c] = wt * d[c];
        dweight[t * k + j] = static_cast<float>(s);
      }
    const int64_t n = static_cast<int64_t>(a.idx.size());
    std::vector<A> dye(static_cast<size_t>(n * c_)), dxe(static_cast<size_t>(n * c_));
    exchange_to_owners(dys.data(), dye.data(), a, "ep dispatch (backward)");
    std::vector<A> dact(static_cast<size_t>(n * fe_)), dh(static_cast<size_t>(n * 2 * fe_));
    for (int el = 0, off = 0; el < el_; off += static_cast<int>(a.ne[el]), ++el) {
      const int64_t ni = a.ne[el];
      if (ni == 0) continue;
      const int e = e0_ + el;
      dev_.matmul_backward(dact.data() + off * fe_, g.w2[e], nullptr, dye.data() + off * c_, a.act.data() + off * fe_,
                           w.w2[e], ni, fe_, c_);
      dev_.swiglu_backward(dh.data() + off * 2 * fe_, a.h.data() + off * 2 * fe_, dact.data() + off * fe_, ni, fe_);
      dev_.matmul_backward(dxe.data() + off * c_, g.w13[e], nullptr, dh.data() + off * 2 * fe_,
                           a.xe.data() + off * c_, w.w13[e], ni, c_, 2 * fe_);
    }
    std::vector<A> dxs(static_cast<size_t>(kept * c_));
    exchange_to_sources(dxe.data(), dxs.data(), a, "ep combine (backward)");
    // dx: the shared experts' (overwriting), or zero; then every copy's, then the router's.
    if (fs_ > 0) {
      const int64_t fl = fs_ / tp_.size();
      std::vector<A> dsa(static_cast<size_t>(R * fl)), dsh(static_cast<size_t>(R * 2 * fl));
      sh_fcp_.backward(dsa.data(), g.sh_fcp, nullptr, dout, nullptr, a.sh_act.data(), w.sh_fcp, R);
      dev_.swiglu_backward(dsh.data(), a.sh_h.data(), dsa.data(), R, fl);
      sh_fc_.backward(dx, g.sh_fc, nullptr, dsh.data(), x, w.sh_fc, R, nullptr);
    } else {
      std::fill(dx, dx + R * c_, A{});
    }
    for (int64_t t = 0; t < R; ++t)
      for (int j = 0; j < k; ++j) {
        const int64_t p = r.pos[t * k + j];
        if (p < 0) continue;
        dev_.add_grad(dx + t * c_, dxs.data() + p * c_, static_cast<size_t>(c_));
      }
    std::vector<float> dlogits(static_cast<size_t>(R * E));
    moe_router_backward(m_, r, dweight.data(), loss_scale_, dlogits.data());
    std::vector<A> dxr(static_cast<size_t>(R * c_));
    dev_.matmul_backward(dxr.data(), g.router, nullptr, dlogits.data(), x, w.router, R, c_, E);
    dev_.add_grad(dx, dxr.data(), static_cast<size_t>(R * c_));
  }

 private:
  // The per-sequence sums of the load-balancing loss over the context-parallel ranks (one
  // all-reduce of [S, 2E] values; counts are exact in fp64).
  void whole_sequence_aux(MoeRouting& r) {
    const size_t n = r.seq_routed.size();
    std::vector<double> v(2 * n);
    for (size_t i = 0; i < n; ++i) v[i] = double(r.seq_routed[i]), v[n + i] = r.seq_psum[i];
    cp_->all_reduce_host_f64(v.data(), v.size(), ReduceOp::sum);
    for (size_t i = 0; i < n; ++i) r.seq_routed[i] = static_cast<int64_t>(v[i]), r.seq_psum[i] = v[n + i];
    r.seq_tokens = r.seq_len * cp_->size();
    moe_aux_loss(r);
  }

  // Capacity under context parallel (moe_routing.hpp MoeCapacityPrior): this rank's rows are two
  // chunks of T / (2 cp) rows per sequence, chunks cp_rank and 2 cp - 1 - cp_rank; the per-chunk
  // routed counts are all-gathered over cp, and each chunk gets the other ranks' counts of the
  // chunks before it in token order (earlier sequences, then earlier chunks of its own).
  MoeCapacityPrior cp_capacity_prior(const MoeRouting& r) {
    const int P = cp_->size(), me = cp_->rank(), E = m_.n_experts, k = m_.top_k;
    const int64_t half = seq_len_ / 2, n = r.rows / half;
    std::vector<float> mine(static_cast<size_t>(n * E), 0.f), all(static_cast<size_t>(P * n * E));
    for (int64_t a = 0; a < r.rows * k; ++a) mine[(a / k) / half * E + r.expert[a]] += 1.f;  // exact below 2^24
    cp_->all_gather(mine.data(), all.data(), mine.size(), DType::f32);
    auto key = [&](int rank, int64_t c) { return c / 2 * 2 * P + (c % 2 == 0 ? rank : 2 * P - 1 - rank); };
    MoeCapacityPrior pr;
    pr.chunk_rows = half, pr.total_rows = r.rows * P;
    pr.before.assign(static_cast<size_t>(n * E), 0);
    for (int64_t c = 0; c < n; ++c)
      for (int s = 0; s < P; ++s)
        for (int64_t c2 = 0; c2 < n && s != me; ++c2)
          if (key(s, c2) < key(me, c))
            for (int e = 0; e < E; ++e)
              pr.before[c * E + e] += static_cast<int64_t>(all[(static_cast<size_t>(s) * n + c2) * E + e]);
    return pr;
  }

  // Counts over ep: every rank's per-expert copies (all-gathered), so each rank knows what it
  // sends, receives, and where each received row goes in its expert-major order.
  void plan_exchange(Acts& a) {
    const MoeRouting& r = a.route;
    const int E = m_.n_experts, P = ep_ ? ep_->size() : 1, me = ep_ ? ep_->rank() : 0;
    std::vector<float> all(static_cast<size_t>(P * E));
    std::vector<float> mine(r.counts.begin(), r.counts.end());  // exact below 2^24 copies
    if (ep_) ep_->all_gather(mine.data(), all.data(), static_cast<size_t>(E), DType::f32);
    else all = mine;
    auto cnt = [&](int s, int e) { return static_cast<int64_t>(all[static_cast<size_t>(s) * E + e]); };
    a.send_rows.assign(P, 0), a.recv_rows.assign(P, 0);
    for (int d = 0; d < P; ++d)
      for (int e = d * el_; e < (d + 1) * el_; ++e) a.send_rows[d] += static_cast<size_t>(r.counts[e]);
    std::vector<int64_t> src_off(P + 1, 0);
    for (int s = 0; s < P; ++s) {
      for (int el = 0; el < el_; ++el) a.recv_rows[s] += static_cast<size_t>(cnt(s, me * el_ + el));
      src_off[s + 1] = src_off[s] + static_cast<int64_t>(a.recv_rows[s]);
    }
    a.ne.assign(el_, 0);
    a.idx.clear();
    for (int el = 0; el < el_; ++el)
      for (int s = 0; s < P; ++s) {
        int64_t at = src_off[s];
        for (int e2 = 0; e2 < el; ++e2) at += cnt(s, me * el_ + e2);
        const int64_t c = cnt(s, me * el_ + el);
        for (int64_t i = 0; i < c; ++i) a.idx.push_back(at + i);
        a.ne[el] += c;
      }
  }
  // Source-side rows (expert-sorted) -> this rank's experts' rows (expert-major).
  void exchange_to_owners(const A* src, A* owner, const Acts& a, const char* what) {
    if (!ep_) {
      std::memcpy(owner, src, sizeof(A) * a.idx.size() * c_);
      return;
    }
    std::vector<A> buf(a.idx.size() * c_);
    exchange(src, a.send_rows, buf.data(), a.recv_rows, what);
    for (size_t i = 0; i < a.idx.size(); ++i) std::memcpy(owner + i * c_, &buf[a.idx[i] * c_], sizeof(A) * c_);
  }
  // The reverse: expert-major rows back to the ranks (and the order) they came from.
  void exchange_to_sources(const A* owner, A* src, const Acts& a, const char* what) {
    if (!ep_) {
      std::memcpy(src, owner, sizeof(A) * a.idx.size() * c_);
      return;
    }
    std::vector<A> buf(a.idx.size() * c_);
    for (size_t i = 0; i < a.idx.size(); ++i) std::memcpy(&buf[a.idx[i] * c_], owner + i * c_, sizeof(A) * c_);
    exchange(buf.data(), a.recv_rows, src, a.send_rows, what);
  }
  void exchange(const A* send, const std::vector<size_t>& send_rows, A* recv, const std::vector<size_t>& recv_rows,
                const char* what) {
    std::vector<size_t> sc(send_rows.size()), rc(recv_rows.size());
    for (size_t i = 0; i < sc.size(); ++i) sc[i] = send_rows[i] * c_, rc[i] = recv_rows[i] * c_;
    const auto t0 = std::chrono::steady_clock::now();
    {
      trace::Span span(what, trace::ep);
      ep_->all_to_allv(send, sc.data(), recv, rc.data(), dtype_of<A>());
    }
    ep_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  Dev& dev_;
  Comm* cp_;
  int64_t seq_len_;
  MoeConfig m_;
  int64_t c_, fe_, fs_;
  TpContext tp_;
  Comm* ep_;
  ColumnParallelLinear<Dev> sh_fc_;
  RowParallelLinear<Dev> sh_fcp_;
  int el_ = 0, e0_ = 0;
  double loss_scale_ = 1.0, ep_seconds_ = 0.0;
};

}  // namespace mpitron
