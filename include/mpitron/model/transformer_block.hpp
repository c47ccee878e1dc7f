// One transformer block, forward and backward, written once for both devices: the CPU
// TransformerModel (transformer_model.cpp, Dev = CpuDevice) and the GPU TransformerModelCuda
// (cuda/transformer_model_cuda.cpp, Dev = CudaDevice) each own their memory (parameters,
// activations, ZeRO-3 copies) and run their blocks through this. What differs per architecture is
// the BlockSpec (arch.hpp): the norm (LayerNorm with bias or RMSNorm), the MLP (GELU or SwiGLU over
// a fused [gate | up]), RoPE on q and k, grouped KV heads; the LLaMA family's optional q/k/v biases
// (Qwen2) and per-head q/k RMSNorm (Qwen3) come with their tensors (a nullptr q_norm: none).
//
// The block (pre-norm, Megatron's tensor-parallel split, parallel_layers.hpp):
//   ln1 = norm(x); qkv = ColumnParallel(ln1); [q/k norm]; RoPE; atty = attention(qkv) (the cp ring when
//   context parallel); res2 = x + RowParallel(atty); ln2 = norm(res2); fch = ColumnParallel(ln2);
//   fch_gelu = act(fch); out = res2 + RowParallel(fch_gelu).
// The last residual add is left pending (the MLP projection stays in scratch.proj_out) for the
// next block's first norm or the head to fuse with its own (one kernel for LayerNorm on the
// GPU; two ops on the CPU), unless the caller asks for the output at once (recompute keeps
// only block outputs).
//
// Under sequence parallel the residual stream, norms and res2/res3 hold this rank's rows (Rl =
// BT / tp); the column-parallel inputs are all-gathered and the row-parallel outputs
// reduce-scattered. The norms' weight gradients from this rank's rows are summed over the TP
// group (Megatron's rule).
#pragma once
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "mpitron/model/arch.hpp"
#include "mpitron/model/block_tensors.hpp"
#include "mpitron/model/config.hpp"
#include "mpitron/model/context_parallel/ring_attention.hpp"
#include "mpitron/model/moe/moe_mlp.hpp"
#include "mpitron/model/shard_geometry.hpp"
#include "mpitron/model/tensor_parallel/parallel_layers.hpp"
#include "mpitron/model/tensor_parallel/tp_mappings.hpp"

namespace mpitron {

template <class Dev>
class TransformerBlock {
 public:
  using A = typename Dev::act_t;
  using Wt = typename Dev::weight_t;
  using Weights = BlockTensors<const Wt>;
  using Grads = BlockTensors<float>;
  using Acts = BlockActs<A>;
  using Scratch = BlockScratch<A>;

  // cfg with n_kv_head set (kv_heads); geo: this shard's widths and positions; tp: the TP group.
  // All three must outlive the block. set_ring: the context-parallel ring (none: local
  // attention). set_norm_grad_scratch: [2 C] fp32 under sequence parallel (a norm's weight |
  // bias gradient from this rank's rows before the TP sum).
  TransformerBlock(Dev& dev, const ModelConfig& cfg, const ShardGeometry& geo, TpContext tp)
      : dev_(dev),
        cfg_(cfg),
        spec_(block_spec(cfg)),
        geo_(geo),
        tp_(tp),
        qkv_(dev, tp, cfg.d_model, geo.qkv_local * tp.size()),
        proj_(dev, tp, geo.c_local * tp.size(), cfg.d_model),
        fc_(dev, tp, cfg.d_model, geo.fc_local * tp.size()),
        fcp_(dev, tp, geo.f_local * tp.size(), cfg.d_model) {
    qk_grad_.bind(Mem::workspace, dev_.allocator());
  }
  void set_ring(RingAttention* ring) { ring_ = ring; }
  // train.precision = "fp8": the four linear layers' GEMMs in FP8 with this recipe (nullptr: off).
  void set_fp8(Fp8Recipe* r) {
    qkv_.set_fp8(r), proj_.set_fp8(r), fc_.set_fp8(r), fcp_.set_fp8(r);
  }
  void set_norm_grad_scratch(float* ln_grad) { ln_grad_ = ln_grad; }
  // The next forward or backward's micro-batch's documents (data.document_mask; default: none).
  void set_documents(DocumentRows docs) { docs_ = docs; }
  // The MoE MLP that blocks with a router (w.moe.router) run in place of the dense MLP.
  void set_moe(MoeMlp<Dev>* moe) {
    moe_ = moe;
    moe_dx_.bind(Mem::workspace, dev_.allocator());
  }

  // Block forward for micro-batch B. Input: res_in, or, with `prev` (the previous block's
  // activations, its output pending), prev->res2 + s.proj_out, written to prev->res3 (= res_in)
  // fused with ln1. Output: pending in s.proj_out, or written to `out` when given. full = false
  // stops after the MLP activation: what backward needs when it recomputes a block.
  void forward(const Weights& w, const Acts& a, const Scratch& s, const A* res_in, const Acts* prev, A* out, int B,
               bool full = true) {
    const int T = geo_.Tl, hd = cfg_.head_dim(), H = static_cast<int>(geo_.h_local), KV = static_cast<int>(geo_.kv_local);
    const int64_t BT = int64_t{B} * T, Rl = rows(BT);
    if (prev) residual_norm_forward(prev->res3, a.ln1, a.ln1_mean, a.ln1_rstd, prev->res2, s.proj_out, w.ln1_w, w.ln1_b, Rl);
    else norm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, res_in, w.ln1_w, w.ln1_b, Rl);
    qkv_.forward(a.qkv, a.ln1, s.gath, w.qkv_w, w.qkv_b, BT);
    if (w.q_norm) qk_norm_forward(w, a, s, BT);
    if (spec_.rope()) geo_.rope(dev_.ops, a.qkv, B, /*inverse=*/false, docs_.pos);  // this rank's heads, global positions
    if (ring_) ring_->forward(a.atty, a.att, a.qkv, B, docs_.start);  // context parallel: k|v around the cp ring
    else dev_.attention_forward(a.atty, a.att, a.qkv, B, T, H, hd, KV, docs_);
    proj_.forward(s.proj_out, a.atty, w.proj_w, w.proj_b, BT, s.full);
    const A* x = prev ? prev->res3 : res_in;
    residual_norm_forward(a.res2, a.ln2, a.ln2_mean, a.ln2_rstd, x, s.proj_out, w.ln2_w, w.ln2_b, Rl);
    if (w.moe.router) {  // MoE: its whole forward even when recomputing (backward reads its state)
      check(moe_ && a.moe, "TransformerBlock: a MoE block needs the MoE MLP and its activations");
      if (tp_.sp()) {  // every TP rank runs the MoE on all BT rows (its experts are replicated); keeps its own
        moe_->forward(w.moe, *a.moe, s.full, gather_rows(a.ln2, s.gath, BT), BT);
        const int64_t C = cfg_.d_model;
        dev_.copy(s.proj_out, s.full + tp_.rank() * Rl * C, static_cast<size_t>(Rl * C));
      } else {
        moe_->forward(w.moe, *a.moe, s.proj_out, a.ln2, Rl);
      }
      if (full && out) dev_.residual_forward(out, a.res2, s.proj_out, static_cast<size_t>(Rl * cfg_.d_model));
      return;
    }
    if (spec_.mlp == MlpKind::swiglu) {  // fch = [gate | up], fch_gelu = silu(gate) * up
      fc_.forward(a.fch, a.ln2, s.gath, w.fc_w, w.fc_b, BT);
      dev_.swiglu_forward(a.fch_gelu, a.fch, BT, geo_.f_local);
    } else {  // fch = the GELU's input, fch_gelu its output
      fc_.forward(a.fch_gelu, a.ln2, s.gath, w.fc_w, w.fc_b, BT, a.fch);
    }
    if (!full) return;
    fcp_.forward(s.proj_out, a.fch_gelu, w.fcp_w, w.fcp_b, BT, s.full);
    if (out) dev_.residual_forward(out, a.res2, s.proj_out, static_cast<size_t>(Rl * cfg_.d_model));
  }

  // Block backward. On entry s.dres = d loss / d(block output) [Rl, C]; on exit d loss / d(block
  // input). res_in: the block's input (materialized). Gradients accumulate into g. With
  // recompute the block's activations are computed again first (into a).
  void backward(const Weights& w, const Grads& g, const Acts& a, const Scratch& s, const A* res_in, int B,
                bool recompute) {
    const int T = geo_.Tl, hd = cfg_.head_dim(), H = static_cast<int>(geo_.h_local), KV = static_cast<int>(geo_.kv_local);
    const int64_t BT = int64_t{B} * T, Rl = rows(BT), Cl = geo_.c_local;
    if (recompute) forward(w, a, s, res_in, nullptr, nullptr, B, /*full=*/false);
    if (w.moe.router) {  // MoE: d ln2 into dC, from dres
      if (tp_.sp()) {  // the same on all BT rows: d out gathered, this rank's rows of d x kept
        const int64_t C = cfg_.d_model;
        moe_dx_.resize(static_cast<size_t>(BT * C));
        const A* dout = gather_rows(s.dres, s.dres_full, BT);
        moe_->backward(w.moe, g.moe, *a.moe, moe_dx_.data(), dout, gather_rows(a.ln2, s.gath, BT), BT);
        dev_.copy(s.dC, moe_dx_.data() + tp_.rank() * Rl * C, static_cast<size_t>(Rl * C));
      } else {
        moe_->backward(w.moe, g.moe, *a.moe, s.dC, s.dres, a.ln2, Rl);
      }
    } else {
      dense_mlp_backward(w, g, a, s, BT);
    }
    norm_backward(s.dres, g.ln2_w, g.ln2_b, s.dC, a.res2, w.ln2_w, a.ln2_mean, a.ln2_rstd, Rl);
    // Attention: proj, attention (d qkv), RoPE's inverse, qkv, ln1 (adds into dres).
    proj_.backward(s.dC, g.proj_w, g.proj_b, s.dres, s.dres_full, a.atty, w.proj_w, BT);
    if (ring_) ring_->backward(s.dqkv, s.dC, a.qkv, a.atty, a.att, B, docs_.start);
    else dev_.attention_backward(s.dqkv, s.dC, a.qkv, a.atty, a.att, B, T, H, hd, KV, docs_);
    if (spec_.rope()) geo_.rope_backward(dev_.ops, s.dqkv, B, docs_.pos);
    if (w.q_norm) qk_norm_backward(w, g, a, s, BT);
    qkv_.backward(s.dC, g.qkv_w, g.qkv_b, s.dqkv, gather_rows(a.ln1, s.gath, BT), w.qkv_w, BT, s.full);
    // Without RoPE the key bias adds q.b_k to every score of a softmax row, so its gradient is
    // exactly zero; computed, it is pure rounding noise that Adam would amplify into lr-sized steps
    // (and into differences between parallel layouts). Keep it exactly zero. Layout [q | k | v].
    // (RoPE rotates b_k by each key's position: Qwen2's key bias has a true gradient.)
    if (g.qkv_b && !spec_.rope()) dev_.zero_grad(g.qkv_b + Cl, static_cast<size_t>(geo_.kv_local * hd));
    norm_backward(s.dres, g.ln1_w, g.ln1_b, s.dC, res_in, w.ln1_w, a.ln1_mean, a.ln1_rstd, Rl);
  }

  // Qwen3's q/k norm: an RMSNorm over each of this rank's query heads (weight w.q_norm) and key
  // heads (w.k_norm) of a.qkv, in place. a.qk_in keeps the norm's input, [BT Hq rows | BT Hk rows]
  // of hd, a.qk_rstd their rstd; s.qk_tmp (twice that size) is scratch.
  void qk_norm_forward(const Weights& w, const Acts& a, const Scratch& s, int64_t BT) {
    const int64_t hd = geo_.hd, Hq = geo_.h_local, Hk = geo_.kv_local, Wq = Hq * hd, Wk = Hk * hd;
    const int64_t ld = geo_.qkv_local;
    dev_.copy_rows(a.qk_in, Wq, a.qkv, ld, Wq, BT);
    dev_.copy_rows(a.qk_in + BT * Wq, Wk, a.qkv + Wq, ld, Wk, BT);
    dev_.rmsnorm_forward(s.qk_tmp, a.qk_rstd, a.qk_in, w.q_norm, BT * Hq, hd, cfg_.norm_eps);
    dev_.rmsnorm_forward(s.qk_tmp + BT * Wq, a.qk_rstd + BT * Hq, a.qk_in + BT * Wq, w.k_norm, BT * Hk, hd,
                         cfg_.norm_eps);
    dev_.copy_rows(a.qkv, ld, s.qk_tmp, Wq, Wq, BT);
    dev_.copy_rows(a.qkv + Wq, ld, s.qk_tmp + BT * Wq, Wk, Wk, BT);
  }
  // Its backward on s.dqkv in place (d normed q|k -> d projected q|k). The norm weights see only
  // this rank's heads: under tensor parallel their gradients are summed over the TP group.
  void qk_norm_backward(const Weights& w, const Grads& g, const Acts& a, const Scratch& s, int64_t BT) {
    const int64_t hd = geo_.hd, Hq = geo_.h_local, Hk = geo_.kv_local, Wq = Hq * hd, Wk = Hk * hd;
    const int64_t ld = geo_.qkv_local, n = BT * (Wq + Wk);
    A *dout = s.qk_tmp, *din = s.qk_tmp + n;
    dev_.copy_rows(dout, Wq, s.dqkv, ld, Wq, BT);
    dev_.copy_rows(dout + BT * Wq, Wk, s.dqkv + Wq, ld, Wk, BT);
    dev_.zero(din, static_cast<size_t>(n));
    float *gq = g.q_norm, *gk = g.k_norm;
    if (tp_.size() > 1) {
      qk_grad_.resize(static_cast<size_t>(2 * hd));
      gq = qk_grad_.data(), gk = gq + hd;
      dev_.zero_grad(gq, static_cast<size_t>(2 * hd));
    }
    dev_.rmsnorm_backward(din, gq, dout, a.qk_in, w.q_norm, a.qk_rstd, BT * Hq, hd);
    dev_.rmsnorm_backward(din + BT * Wq, gk, dout + BT * Wq, a.qk_in + BT * Wq, w.k_norm, a.qk_rstd + BT * Hq,
                          BT * Hk, hd);
    if (tp_.size() > 1) {
      {
        TpCommTimer timer(tp_);
        sum_sequence_parallel_grads(*tp_.comm, gq, static_cast<size_t>(2 * hd));
      }
      dev_.add_grad(g.q_norm, gq, static_cast<size_t>(hd));
      dev_.add_grad(g.k_norm, gk, static_cast<size_t>(hd));
    }
    dev_.copy_rows(s.dqkv, ld, din, Wq, Wq, BT);
    dev_.copy_rows(s.dqkv + Wq, ld, din + BT * Wq, Wk, Wk, BT);
  }

  // The dense MLP's backward: d ln2 into s.dC from s.dres.
  void dense_mlp_backward(const Weights& w, const Grads& g, const Acts& a, const Scratch& s, int64_t BT) {
    // MLP: fcp's input gradient (times GELU' in the same call), or SwiGLU's backward after it;
    // then fc (under SP its input, ln2, all-gathered again: Megatron keeps only this rank's rows)
    // and ln2, which adds into dres.
    if (spec_.mlp == MlpKind::swiglu) {
      fcp_.backward(s.dmlp, g.fcp_w, g.fcp_b, s.dres, s.dres_full, a.fch_gelu, w.fcp_w, BT);
      dev_.swiglu_backward(s.d4C, a.fch, s.dmlp, BT, geo_.f_local);
    } else {
      fcp_.backward(s.d4C, g.fcp_w, g.fcp_b, s.dres, s.dres_full, a.fch_gelu, w.fcp_w, BT, a.fch);
    }
    fc_.backward(s.dC, g.fc_w, g.fc_b, s.d4C, gather_rows(a.ln2, s.gath, BT), w.fc_w, BT, s.full);
  }

  // The architecture's norm (LayerNorm: mean, rstd and bias; RMSNorm: rstd) over `rows` rows.
  void norm_forward(A* out, float* mean, float* rstd, const A* inp, const Wt* w, const Wt* b, int64_t rows) {
    if (spec_.norm == NormKind::rmsnorm) dev_.rmsnorm_forward(out, rstd, inp, w, rows, cfg_.d_model, cfg_.norm_eps);
    else dev_.layernorm_forward(out, mean, rstd, inp, w, b, rows, cfg_.d_model);
  }
  // residual = x + y, out = norm(residual).
  void residual_norm_forward(A* residual, A* out, float* mean, float* rstd, const A* x, const A* y, const Wt* w,
                             const Wt* b, int64_t rows) {
    if (spec_.norm == NormKind::layernorm) {
      dev_.residual_layernorm_forward(residual, out, mean, rstd, x, y, w, b, rows, cfg_.d_model);
      return;
    }
    dev_.residual_forward(residual, x, y, static_cast<size_t>(rows * cfg_.d_model));
    dev_.rmsnorm_forward(out, rstd, residual, w, rows, cfg_.d_model, cfg_.norm_eps);
  }
  // The norm's backward (dinp +=; dw, db +=). Under SP this rank's rows give only part of the
  // weight (and bias) gradients: they are summed over the TP group before they join dw, db.
  void norm_backward(A* dinp, float* dw, float* db, const A* dout, const A* inp, const Wt* w, const float* mean,
                     const float* rstd, int64_t rows) {
    const int64_t C = cfg_.d_model, nw = spec_.norm_params() * C;  // weight (and bias) gradient floats
    auto run = [&](float* gw, float* gb) {
      if (spec_.norm == NormKind::rmsnorm) dev_.rmsnorm_backward(dinp, gw, dout, inp, w, rstd, rows, C);
      else dev_.layernorm_backward(dinp, gw, gb, dout, inp, w, mean, rstd, rows, C);
    };
    if (!tp_.sp()) {
      run(dw, db);
      return;
    }
    check(ln_grad_ != nullptr, "TransformerBlock: sequence parallel needs the norms' gradient scratch");
    dev_.zero_grad(ln_grad_, static_cast<size_t>(nw));
    run(ln_grad_, ln_grad_ + C);
    {
      TpCommTimer timer(tp_);
      sum_sequence_parallel_grads(*tp_.comm, ln_grad_, static_cast<size_t>(nw));
    }
    dev_.add_grad(dw, ln_grad_, static_cast<size_t>(C));
    if (spec_.biases) dev_.add_grad(db, ln_grad_ + C, static_cast<size_t>(C));
  }
  // Sequence parallel: `local` rows all-gathered into `buf` (returned); else `local` itself.
  const A* gather_rows(const A* local, A* buf, int64_t BT) {
    if (!tp_.sp()) return local;
    TpCommTimer timer(tp_);
    gather_from_sequence_forward(*tp_.comm, local, buf, static_cast<size_t>(rows(BT) * cfg_.d_model));
    return buf;
  }
  int64_t rows(int64_t BT) const { return geo_.local_rows(BT); }  // this rank's rows of BT

 private:
  Dev& dev_;
  const ModelConfig& cfg_;
  const BlockSpec& spec_;
  const ShardGeometry& geo_;
  TpContext tp_;
  ColumnParallelLinear<Dev> qkv_;
  RowParallelLinear<Dev> proj_;
  ColumnParallelLinear<Dev> fc_;
  RowParallelLinear<Dev> fcp_;
  RingAttention* ring_ = nullptr;
  DocumentRows docs_;
  MoeMlp<Dev>* moe_ = nullptr;
  DeviceVector<A> moe_dx_;  // sequence parallel: a MoE block's d x over all rows
  DeviceVector<float> qk_grad_;  // tensor parallel: the q/k norms' weight gradients before the TP sum
  float* ln_grad_ = nullptr;
};

}  // namespace mpitron
