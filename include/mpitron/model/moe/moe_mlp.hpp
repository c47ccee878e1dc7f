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
// Device: on the CPU the routing is moe_routing.hpp's, on the host (the reference). On a GPU
// (Dev::kDeviceRouter) it is the device's (CudaOps::moe_router_*, ops/moe_router.hpp): softmax,
// top-k, weights, capacity drops, the sorted positions, the losses and the router's backward run as
// kernels, and the host gets one small copy per MoE block, the kept copies per expert (with the
// dropped count and the two losses), which size the exchange. Under context parallel the
// per-sequence sums ([S, 2E]) also go over the cp ranks through the host, and with a capacity
// factor so do the chosen experts (the cp ranks' chunk counts). Everything else runs on the device
// either way: the token copies' rows are gathered, exchanged, scattered and combined by the
// device's MoE row ops (Ops / CudaOps moe_*), the expert GEMMs and SwiGLU are the device's, the
// arrays DeviceVectors in its memory. The exchange order (from the counts) is staged to the device
// per micro-batch (the CPU reads it where it is).
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "mpitron/core/error.hpp"
#include "mpitron/core/memory.hpp"
#include "mpitron/core/trace.hpp"
#include "mpitron/distributed/comm.hpp"
#include "mpitron/model/block_tensors.hpp"
#include "mpitron/model/config.hpp"
#include "mpitron/model/device_vector.hpp"
#include "mpitron/model/moe/moe_routing.hpp"
#include "mpitron/model/tensor_parallel/parallel_layers.hpp"
#include "mpitron/ops/moe_router.hpp"

namespace mpitron {

// What a MoE block keeps from forward for backward (one per block and activation slot): the
// routing and the exchange plan on the host, the expert rows in the device's memory.
template <class A>
struct MoeActs {
  std::vector<float> logits;       // [R, E]
  MoeRouting route;
  DeviceVector<A> ys;              // [kept, C] expert outputs in this rank's expert-sorted order
  // Owner side (this rank's experts): rows expert-major, and where each came from.
  DeviceVector<A> xe, h, act;      // [n, C], [n, 2 Fe], [n, Fe]
  std::vector<int64_t> idx;        // [n] row of the source-major exchange buffer
  std::vector<int64_t> ne;         // [El] rows per local expert
  std::vector<size_t> send_rows, recv_rows;  // per ep rank
  DeviceVector<A> sh_h, sh_act;    // shared experts: [R, 2 Fs/tp], [R, Fs/tp]
  // The device's view of route.pos, route.weight and idx (on a GPU its router's arrays and the
  // staged exchange order; on the CPU the host arrays themselves), set by forward for backward.
  DeviceVector<int64_t> pos_d, idx_d;
  DeviceVector<float> weight_d;
  // The device router's arrays that its backward reads (ops/moe_router.hpp), and its shape.
  DeviceVector<float> probs_d, lse_d;
  DeviceVector<int32_t> expert_d;
  DeviceVector<int64_t> seq_routed_d;
  MoeRouterShape shape;
  const int64_t *pos_dev = nullptr, *idx_dev = nullptr;
  const float* weight_dev = nullptr;
  HeldBytes held;                  // the host vectors' capacities, in the tracker as activations

  int64_t host_bytes() const {
    auto b = [](const auto& v) { return static_cast<int64_t>(v.capacity() * sizeof(v[0])); };
    const MoeRouting& r = route;
    return b(r.probs) + b(r.lse) + b(r.expert) + b(r.weight) + b(r.pos) + b(r.order) + b(r.counts) + b(r.routed) +
           b(r.seq_routed) + b(r.seq_psum) + b(logits) + b(idx) + b(ne) + b(send_rows) + b(recv_rows);
  }
  // The device arrays (counted by their own buffers in the device's tracker).
  int64_t device_bytes() const {
    auto b = [](const auto& v) { return static_cast<int64_t>(v.capacity() * sizeof(*v.data())); };
    return b(ys) + b(xe) + b(h) + b(act) + b(sh_h) + b(sh_act) + b(pos_d) + b(idx_d) + b(weight_d) + b(probs_d) +
           b(lse_d) + b(expert_d) + b(seq_routed_d);
  }
  int64_t capacity_bytes() const { return host_bytes() + device_bytes(); }
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
    for (DeviceVector<A>* v : {&xs_, &ye_, &so_, &lg_, &dys_, &dye_, &dxe_, &dact_, &dh_, &dxs_, &dsa_, &dsh_, &dl_,
                               &dxr_, &buf_})
      v->bind(Mem::workspace, dev_.allocator());
    srow_d_.bind(Mem::workspace, dev_.allocator());
    dweight_d_.bind(Mem::workspace, dev_.allocator());
    scratch_d_.bind(Mem::workspace, dev_.allocator());
    before_d_.bind(Mem::workspace, dev_.allocator());
    seq_psum_d_.bind(Mem::workspace, dev_.allocator());
    dscratch_d_.bind(Mem::workspace, dev_.allocator());
    summary_d_.bind(Mem::workspace, dev_.allocator());
    if constexpr (Dev::kDeviceRouter)
      usage_check(m_.top_k <= kRouterMaxTopK && m_.n_experts <= kRouterMaxExperts,
                  "model.moe: the GPU router takes top_k <= {} of at most {} experts, not {} of {}", kRouterMaxTopK,
                  kRouterMaxExperts, m_.top_k, m_.n_experts);
  }
  // Allocates a block's saved state for up to R rows at balanced routing (checked against
  // moe_activation_bytes, or on a GPU moe_gpu_activation_bytes), so the memory is there, and
  // counted, before the first step.
  void reserve(Acts& a, int64_t R) {
    const int64_t E = m_.n_experts, Rk = R * m_.top_k, T = std::min<int64_t>(seq_len_, R), S = R / T;
    const int64_t fl = fs_ / tp_.size();
    const size_t P = ep_ ? static_cast<size_t>(ep_->size()) : 1;
    for (DeviceVector<A>* v : {&a.ys, &a.xe, &a.h, &a.act, &a.sh_h, &a.sh_act}) v->bind(Mem::activations, dev_.allocator());
    a.pos_d.bind(Mem::activations, dev_.allocator());
    a.idx_d.bind(Mem::activations, dev_.allocator());
    a.weight_d.bind(Mem::activations, dev_.allocator());
    a.probs_d.bind(Mem::activations, dev_.allocator());
    a.lse_d.bind(Mem::activations, dev_.allocator());
    a.expert_d.bind(Mem::activations, dev_.allocator());
    a.seq_routed_d.bind(Mem::activations, dev_.allocator());
    MoeRouting& r = a.route;
    r.counts.reserve(E);
    if constexpr (!Dev::kDeviceRouter) {  // the host router's arrays (on a GPU the device's, below)
      r.probs.reserve(R * E), r.lse.reserve(R), r.expert.reserve(Rk), r.weight.reserve(Rk);
      r.pos.reserve(Rk), r.order.reserve(Rk), r.routed.reserve(E);
      r.seq_routed.reserve(S * E), r.seq_psum.reserve(S * E);
      a.logits.reserve(R * E);
    }
    a.ys.reserve(Rk * c_), a.xe.reserve(Rk * c_), a.h.reserve(Rk * 2 * fe_);
    a.act.reserve(Rk * fe_), a.idx.reserve(Rk), a.ne.reserve(el_), a.send_rows.reserve(P), a.recv_rows.reserve(P);
    if (fl > 0) a.sh_h.reserve(R * 2 * fl), a.sh_act.reserve(R * fl);
    a.held.set(a.host_bytes());
    if constexpr (Dev::kDeviceRouter) {  // device memory: the router's arrays too
      a.pos_d.reserve(Rk), a.weight_d.reserve(Rk), a.expert_d.reserve(Rk);
      a.probs_d.reserve(R * E), a.lse_d.reserve(R), a.seq_routed_d.reserve(S * E);
      if (ep_) a.idx_d.reserve(Rk);
      const int64_t want = moe_gpu_activation_bytes(sizes(), R, T, static_cast<int>(P), tp_.size());
      check(a.device_bytes() == want, "MoeMlp::reserve: {} device bytes for {} rows, moe_gpu_activation_bytes says {}",
            a.device_bytes(), R, want);
    } else {
      check(a.capacity_bytes() == moe_activation_bytes_of(R),
            "MoeMlp::reserve: {} bytes allocated for {} rows, moe_activation_bytes says {}", a.capacity_bytes(), R,
            moe_activation_bytes_of(R));
    }
  }
  int64_t moe_activation_bytes_of(int64_t R) const {
    return moe_activation_bytes(sizes(), R, std::min<int64_t>(seq_len_, R), ep_ ? ep_->size() : 1, tp_.size());
  }

  // The backward's scale of the routing losses: 1 / counted targets of the global batch, the
  // scale the LM loss's gradient got (set before each backward).
  void set_loss_scale(double s) { loss_scale_ = s; }
  double ep_seconds() const { return ep_seconds_; }  // in the token exchanges since construction

  // out [R, C] = the MoE MLP of x [R, C].
  void forward(const MoeTensors<const Wt>& w, Acts& a, A* out, const A* x, int64_t R) {
    const int E = m_.n_experts;
    lg_.resize(static_cast<size_t>(R * E));
    dev_.matmul_forward(lg_.data(), x, w.router, nullptr, R, c_, E);
    const int64_t kept = route(a, R);
    // Dispatch: the copies' rows in expert-sorted order, to the experts' ranks. Without expert
    // parallel the experts' rows are the sorted copies themselves: gathered straight into a.xe,
    // and the experts write a.ys (the exchanges would be copies; the workspace is sized alike).
    xs_.resize(static_cast<size_t>(kept * c_));
    plan_exchange(a);
    const int64_t n = static_cast<int64_t>(a.idx.size());
    a.xe.resize(static_cast<size_t>(n * c_));
    if (ep_) {
      dev_.moe_gather_rows(xs_.data(), x, srow_dev_, kept, c_);
      exchange_to_owners(xs_.data(), a.xe.data(), a, "ep dispatch");
    } else {
      dev_.moe_gather_rows(a.xe.data(), x, srow_dev_, kept, c_);
    }
    // The local experts, one GEMM each over their rows.
    a.h.resize(static_cast<size_t>(n * 2 * fe_));
    a.act.resize(static_cast<size_t>(n * fe_));
    fit_rows(ye_, static_cast<size_t>(n * c_));
    a.ys.resize(static_cast<size_t>(kept * c_));
    A* ye = ep_ ? ye_.data() : a.ys.data();
    for (int el = 0, off = 0; el < el_; off += static_cast<int>(a.ne[el]), ++el) {
      const int64_t ni = a.ne[el];
      if (ni == 0) continue;
      A* h = a.h.data() + off * 2 * fe_;
      A* act = a.act.data() + off * fe_;
      dev_.matmul_forward(h, a.xe.data() + off * c_, w.w13[e0_ + el], nullptr, ni, c_, 2 * fe_);
      dev_.swiglu_forward(act, h, ni, fe_);
      dev_.matmul_forward(ye + off * c_, act, w.w2[e0_ + el], nullptr, ni, fe_, c_);
    }
    if (ep_) exchange_to_sources(ye_.data(), a.ys.data(), a, "ep combine");
    // Combine, each token's copies in rank order.
    dev_.moe_combine(out, a.ys.data(), a.pos_dev, a.weight_dev, R, m_.top_k, c_);
    if (fs_ > 0) {  // the shared experts, added to the routed output
      const int64_t fl = fs_ / tp_.size();
      a.sh_h.resize(static_cast<size_t>(R * 2 * fl));
      a.sh_act.resize(static_cast<size_t>(R * fl));
      so_.resize(static_cast<size_t>(R * c_));
      sh_fc_.forward(a.sh_h.data(), x, nullptr, w.sh_fc, nullptr, R);
      dev_.swiglu_forward(a.sh_act.data(), a.sh_h.data(), R, fl);
      sh_fcp_.forward(so_.data(), a.sh_act.data(), w.sh_fcp, nullptr, R, nullptr);
      dev_.residual_forward(out, out, so_.data(), static_cast<size_t>(R * c_));
    }
    a.held.set(a.host_bytes());
  }

  // dx [R, C] = d/dx of the MoE MLP (overwritten) from dout [R, C]; the parameters' gradients
  // accumulate into g (this rank's experts only), the routing losses' terms included.
  void backward(const MoeTensors<const Wt>& w, const MoeTensors<float>& g, Acts& a, A* dx, const A* dout, const A* x,
                int64_t R) {
    const int E = m_.n_experts, k = m_.top_k;
    int64_t kept = 0;
    for (int64_t c : a.route.counts) kept += c;
    // Through the combine: d weight (for the router) and d y per copy.
    dys_.resize(static_cast<size_t>(kept * c_));
    dweight_d_.resize(static_cast<size_t>(R * k));
    dev_.moe_combine_backward(dys_.data(), dweight_d_.data(), dout, a.ys.data(), a.pos_dev, a.weight_dev, R, k, c_);
    const int64_t n = static_cast<int64_t>(a.idx.size());
    fit_rows(dye_, static_cast<size_t>(n * c_)), fit_rows(dxe_, static_cast<size_t>(n * c_));
    dxs_.resize(static_cast<size_t>(kept * c_));
    // Without expert parallel, as forward: the experts read dys_ and write dxs_ themselves.
    if (ep_) exchange_to_owners(dys_.data(), dye_.data(), a, "ep dispatch (backward)");
    const A* dye = ep_ ? dye_.data() : dys_.data();
    A* dxe = ep_ ? dxe_.data() : dxs_.data();
    fit_rows(dact_, static_cast<size_t>(n * fe_)), fit_rows(dh_, static_cast<size_t>(n * 2 * fe_));
    for (int el = 0, off = 0; el < el_; off += static_cast<int>(a.ne[el]), ++el) {
      const int64_t ni = a.ne[el];
      if (ni == 0) continue;
      const int e = e0_ + el;
      dev_.matmul_backward(dact_.data() + off * fe_, g.w2[e], nullptr, dye + off * c_,
                           a.act.data() + off * fe_, w.w2[e], ni, fe_, c_);
      dev_.swiglu_backward(dh_.data() + off * 2 * fe_, a.h.data() + off * 2 * fe_, dact_.data() + off * fe_, ni, fe_);
      dev_.matmul_backward(dxe + off * c_, g.w13[e], nullptr, dh_.data() + off * 2 * fe_,
                           a.xe.data() + off * c_, w.w13[e], ni, c_, 2 * fe_);
    }
    if (ep_) exchange_to_sources(dxe_.data(), dxs_.data(), a, "ep combine (backward)");
    // dx: the shared experts' (overwriting), or zero; then every copy's, then the router's.
    if (fs_ > 0) {
      const int64_t fl = fs_ / tp_.size();
      dsa_.resize(static_cast<size_t>(R * fl)), dsh_.resize(static_cast<size_t>(R * 2 * fl));
      sh_fcp_.backward(dsa_.data(), g.sh_fcp, nullptr, dout, nullptr, a.sh_act.data(), w.sh_fcp, R);
      dev_.swiglu_backward(dsh_.data(), a.sh_h.data(), dsa_.data(), R, fl);
      sh_fc_.backward(dx, g.sh_fc, nullptr, dsh_.data(), x, w.sh_fc, R, nullptr);
    } else {
      dev_.zero(dx, static_cast<size_t>(R * c_));
    }
    dev_.moe_uncombine_add(dx, dxs_.data(), a.pos_dev, R, k, c_);
    dl_.resize(static_cast<size_t>(R * E));
    if constexpr (Dev::kDeviceRouter) {
      dev_.moe_router_backward(dl_.data(), dweight_d_.data(), m_.aux_loss_coef * loss_scale_,
                               m_.z_loss_coef * loss_scale_, a.shape, router_arrays(a));
    } else {
      dlogits_.resize(static_cast<size_t>(R * E));
      moe_router_backward(m_, a.route, dweight_d_.data(), loss_scale_, dlogits_.data());
      dev_.from_host(dl_.data(), dlogits_.data(), dlogits_.size());
    }
    dxr_.resize(static_cast<size_t>(R * c_));
    dev_.matmul_backward(dxr_.data(), g.router, nullptr, dl_.data(), x, w.router, R, c_, E);
    dev_.residual_forward(dx, dx, dxr_.data(), static_cast<size_t>(R * c_));
  }

 private:
  // The routing of R rows from the router logits in lg_: a.route on the host (on a GPU only the
  // counts and the statistics), the device's positions, weights (a.pos_dev, a.weight_dev) and the
  // sorted copies' source rows (srow_dev_). Returns the kept copies.
  int64_t route(Acts& a, int64_t R) {
    const int E = m_.n_experts, k = m_.top_k;
    const int64_t T = std::min<int64_t>(seq_len_, R);
    MoeRouting& r = a.route;
    if constexpr (!Dev::kDeviceRouter) {
      a.logits.resize(static_cast<size_t>(R * E));
      dev_.to_host(a.logits.data(), lg_.data(), a.logits.size());
      MoeCapacityHook prior;
      if (cp_ && m_.capacity_factor > 0) prior = [this](const MoeRouting& rt) { return cp_capacity_prior(rt); };
      moe_route(m_, a.logits.data(), R, T, r, prior);
      if (cp_) whole_sequence_aux(r);
      srow_.resize(r.order.size());
      for (size_t i = 0; i < r.order.size(); ++i) srow_[i] = r.order[i] / k;
      srow_dev_ = dev_.stage(srow_d_, srow_);
      a.pos_dev = dev_.stage(a.pos_d, r.pos);
      a.weight_dev = dev_.stage(a.weight_d, r.weight);
      return static_cast<int64_t>(r.order.size());
    } else {
      const int P = cp_ ? cp_->size() : 1;
      MoeRouterShape& s = a.shape;
      s = moe_router_shape(m_, R, T, T * P, R * P);
      const int64_t Rk = R * k, S = R / T;
      a.probs_d.resize(static_cast<size_t>(R * E)), a.lse_d.resize(static_cast<size_t>(R));
      a.expert_d.resize(static_cast<size_t>(Rk)), a.weight_d.resize(static_cast<size_t>(Rk));
      a.pos_d.resize(static_cast<size_t>(Rk)), a.seq_routed_d.resize(static_cast<size_t>(S * E));
      seq_psum_d_.resize(static_cast<size_t>(S * E)), srow_d_.resize(static_cast<size_t>(Rk));
      scratch_d_.resize(static_cast<size_t>(s.scratch_elems()));
      dscratch_d_.resize(static_cast<size_t>(s.dscratch_elems()));
      summary_d_.resize(static_cast<size_t>(E + 3));
      dev_.moe_router_select(lg_.data(), s, router_arrays(a));
      r.rows = R, r.n_experts = E, r.top_k = k, r.seq_len = T;
      if (cp_) {  // the whole sequences' sums over the cp ranks (through the host)
        r.seq_routed.resize(static_cast<size_t>(S * E)), r.seq_psum.resize(static_cast<size_t>(S * E));
        dev_.download(r.seq_routed.data(), a.seq_routed_d.data(), r.seq_routed.size());
        dev_.download(r.seq_psum.data(), seq_psum_d_.data(), r.seq_psum.size());
        if (m_.capacity_factor > 0) {  // the cp ranks' routed counts per chunk, from the chosen experts
          r.expert.resize(static_cast<size_t>(Rk));
          dev_.download(r.expert.data(), a.expert_d.data(), r.expert.size());
          const MoeCapacityPrior pr = cp_capacity_prior(r);
          s.chunk_rows = pr.chunk_rows;
          dev_.stage(before_d_, pr.before);
        }
        whole_sequence_aux(r);
        dev_.stage(a.seq_routed_d, r.seq_routed);
        dev_.stage(seq_psum_d_, r.seq_psum);
      }
      dev_.moe_router_place(s, router_arrays(a));
      // The one copy to the host: kept copies per expert, dropped, aux, z.
      summary_.resize(static_cast<size_t>(E + 3));
      dev_.download(summary_.data(), summary_d_.data(), summary_.size());
      r.counts.resize(static_cast<size_t>(E));
      int64_t kept = 0;
      for (int e = 0; e < E; ++e) kept += (r.counts[e] = static_cast<int64_t>(summary_[e]));
      r.dropped = static_cast<int64_t>(summary_[E]), r.aux = summary_[E + 1], r.z = summary_[E + 2];
      srow_dev_ = srow_d_.data(), a.pos_dev = a.pos_d.data(), a.weight_dev = a.weight_d.data();
      return kept;
    }
  }
  // The device router's arrays of a (and this layer's scratch).
  MoeRouterArrays router_arrays(Acts& a) {
    MoeRouterArrays d;
    d.probs = a.probs_d.data(), d.lse = a.lse_d.data(), d.expert = a.expert_d.data(), d.weight = a.weight_d.data();
    d.pos = a.pos_d.data(), d.seq_routed = a.seq_routed_d.data(), d.seq_psum = seq_psum_d_.data();
    d.srow = srow_d_.data(), d.before = a.shape.chunk_rows > 0 ? before_d_.data() : nullptr;
    d.summary = summary_d_.data(), d.scratch = scratch_d_.data(), d.dscratch = dscratch_d_.data();
    return d;
  }

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
    std::vector<double> all(static_cast<size_t>(P * n * E), 0.0);
    double* mine = all.data() + static_cast<size_t>(me) * n * E;
    for (int64_t a = 0; a < r.rows * k; ++a) mine[(a / k) / half * E + r.expert[a]] += 1.0;
    gather_host(*cp_, all);
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

  // What the byte counts (moe_routing.hpp) read of the model: d_model and the MoE section.
  ModelConfig sizes() const {
    ModelConfig c;
    c.d_model = static_cast<int>(c_), c.moe = m_;
    return c;
  }
  // An all-gather of host counts that works on every Comm (NCCL's collectives take device
  // memory): each rank has filled its own slice of `all` (the rest zeros), the sum fills the rest.
  // Counts are exact in fp64.
  static void gather_host(Comm& c, std::vector<double>& all) { c.all_reduce_host_f64(all.data(), all.size(), ReduceOp::sum); }

  // Counts over ep: every rank's per-expert copies (all-gathered), so each rank knows what it
  // sends, receives, and where each received row goes in its expert-major order.
  void plan_exchange(Acts& a) {
    const MoeRouting& r = a.route;
    const int E = m_.n_experts, P = ep_ ? ep_->size() : 1, me = ep_ ? ep_->rank() : 0;
    std::vector<double> all(static_cast<size_t>(P * E), 0.0);
    for (int e = 0; e < E; ++e) all[static_cast<size_t>(me) * E + e] = double(r.counts[e]);
    if (ep_) {
      trace::Span span("ep counts", trace::ep);
      gather_host(*ep_, all);
    }
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
    if (ep_) a.idx_dev = dev_.stage(a.idx_d, a.idx);
  }
  // Resizes v, scratch for `size` values of this rank's experts' rows. Under expert parallel those
  // rows follow every rank's routing and creep up a few at a time while a router leaves balance:
  // past the capacity the scratch doubles (or grows to `size` if more), as std::vector does,
  // rather than fit; at ep 2 (at most twice the balanced rows) once. Each new buffer's pages are
  // faulted in afresh, 2.8 ms per MB on a 2-core AMD EPYC VM: refitted to each new maximum, the
  // scratch and a block's saved state took 15-58 ms at a time, five times in four steps of moe dp 2
  // x ep 2, the other rank waiting in the combine meanwhile. The saved state (Acts) still fits:
  // it is what the ledger counts, at balanced routing (within 10% at step 1; doubled it read up
  // to 27% over).
  template <class T>
  void fit_rows(DeviceVector<T>& v, size_t size) {
    if (ep_ && size > v.capacity()) v.reserve(std::max(size, 2 * v.capacity()));
    v.resize(size);
  }
  // Under expert parallel: source-side rows (expert-sorted) -> this rank's experts' rows (expert-major).
  void exchange_to_owners(const A* src, A* owner, const Acts& a, const char* what) {
    const size_t n = a.idx.size();
    fit_rows(buf_, n * c_);
    exchange(src, a.send_rows, buf_.data(), a.recv_rows, what);
    dev_.moe_gather_rows(owner, buf_.data(), a.idx_dev, static_cast<int64_t>(n), c_);
  }
  // The reverse: expert-major rows back to the ranks (and the order) they came from.
  void exchange_to_sources(const A* owner, A* src, const Acts& a, const char* what) {
    const size_t n = a.idx.size();
    fit_rows(buf_, n * c_);
    dev_.moe_scatter_rows(buf_.data(), owner, a.idx_dev, static_cast<int64_t>(n), c_);
    exchange(buf_.data(), a.recv_rows, src, a.send_rows, what);
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
  // Per-call scratch in the device's memory (workspace), and the host arrays behind it.
  DeviceVector<A> xs_, ye_, so_, lg_, dys_, dye_, dxe_, dact_, dh_, dxs_, dsa_, dsh_, dl_, dxr_, buf_;
  DeviceVector<int64_t> srow_d_, scratch_d_, before_d_;
  DeviceVector<float> dweight_d_;
  DeviceVector<double> seq_psum_d_, dscratch_d_, summary_d_;
  const int64_t* srow_dev_ = nullptr;
  std::vector<int64_t> srow_;
  std::vector<float> dlogits_;
  std::vector<double> summary_;
};

// A model chunk's MoE blocks, the same for the CPU TransformerModel and TransformerModelCuda: the
// MoE MLP, each MoE block's saved state per activation slot ([slot][local layer]; one shared under
// recompute, whose blocks run their MoE forward again before backward), reserved at construction
// for a full micro-batch of `rows` rows (what the memory ledger counts), and the routing statistics
// per local layer since the last take. The device's allocator must be set before construction.
template <class Dev>
class MoeBlocks {
 public:
  using A = typename Dev::act_t;
  MoeBlocks(Dev& dev, const ModelConfig& cfg, TpContext tp, Comm* ep, Comm* cp, int layer_begin, int n_local,
            int slots, bool recompute, int64_t rows)
      : moe_(cfg.moe), layer_begin_(layer_begin), recompute_(recompute), mlp_(dev, cfg, tp, ep, cp) {
    const int n = std::max(n_local, 0), kept_slots = recompute ? 1 : slots;
    acts_.assign(kept_slots, std::vector<MoeActs<A>>(recompute ? 1 : n));
    stats_.assign(n, {});
    for (int l = 0; l < n; ++l)
      if (moe_.is_moe_layer(layer_begin + l))
        for (int s = 0; s < kept_slots; ++s)
          if (MoeActs<A>& a = *acts(s, l); a.held.bytes() == 0) mlp_.reserve(a, rows);
  }
  MoeMlp<Dev>& mlp() { return mlp_; }
  const MoeMlp<Dev>& mlp() const { return mlp_; }
  MoeActs<A>* acts(int slot, int l) { return &acts_[recompute_ ? 0 : slot][recompute_ ? 0 : l]; }
  void record(int l, const MoeRouting& r) { stats_[l].add(r); }  // a forward with gradients
  // The MoE blocks' statistics since the last take (global layer, stats), reset.
  std::vector<std::pair<int, MoeStats>> take_stats() {
    std::vector<std::pair<int, MoeStats>> out;
    for (int l = 0; l < static_cast<int>(stats_.size()); ++l)
      if (moe_.is_moe_layer(layer_begin_ + l)) out.emplace_back(layer_begin_ + l, std::exchange(stats_[l], {}));
    return out;
  }

 private:
  MoeConfig moe_;
  int layer_begin_;
  bool recompute_;
  MoeMlp<Dev> mlp_;
  std::vector<std::vector<MoeActs<A>>> acts_;
  std::vector<MoeStats> stats_;
};

}  // namespace mpitron
