// The step-time model (plan/step_time.hpp has what it counts and why).
#include "mpitron/plan/step_time.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "mpitron/core/error.hpp"
#include "mpitron/model/param_tables.hpp"
#include "mpitron/parallel/grad_buckets.hpp"
#include "mpitron/parallel/schedule.hpp"

namespace mpitron {
namespace {

// Whether a collective in flight hides behind compute on this machine's backend: not on the CPU,
// whose cores, all busy computing (cores / ranks threads each), also copy the collectives' bytes
// (shared memory), and MPI moves a large message only inside a call, so the time is added, not
// hidden (a trace of gpt 4 x 256, cp 2, ZeRO-3, 16 micro-batches on the 2-core Xeon: 113 ms a step
// over ZeRO-1 for the 68 ms of all-gathers and reduce-scatters, the blocks themselves 25% slower).
bool collectives_hide(const MachineProfile& p) { return p.backend != "cpu"; }

struct Ctx {
  const PlanInput& in;
  const MachineProfile& p;
  bool bf16 = false;
  double e = 4;       // bytes of an activation element
  double cf = 1, sf = 1;
  bool gpu_fp8 = false;  // train.precision = "fp8" on a GPU: the linears' GEMMs at the FP8 rates
  int k = 1;          // ranks of a node computing at once
  int threads = 0;    // per rank (0: the profile's first rates)
  int k_comm = 1;     // ranks busy beside a collective: at most the cores (the rest wait their turn)
  double over = 1.0;  // < 1: more ranks than cores (the node's throughput relative to k_comm ranks')
  bool comm_hides = true;  // collectives_hide
  // The seconds of `compute_s` that a collective in flight can hide behind.
  double hiding(double compute_s) const { return comm_hides ? compute_s : 0.0; }

  double gemm(double M, double N, double K, bool bwd) const {
    const double flops = 2.0 * M * N * K * (bwd ? 2 : 1);
    return flops / (p.gemm_gflops(M, N, K, bwd, bf16, threads) * 1e9 * cf);
  }
  double fp8_gemm(double M, double N, double K, bool bwd) const {
    return 2.0 * M * N * K * (bwd ? 2 : 1) / (p.fp8_gemm_gflops(M, N, K, bwd) * 1e9 * cf);
  }
  // Elementwise kernels moving `bytes` over activations of `act` bytes each (the rate of that size:
  // cache-resident ones run faster; 0: larger than the caches).
  double stream(double bytes, double act) const { return bytes / (p.stream_gbs(threads, act) * 1e9 * sf); }
  bool inter(int stride, int size) const { return int64_t{stride} * size > in.cluster.gpus_per_node; }
  double coll(const char* op, int n, double bytes, int stride) const {
    return p.collective_s(op, n, bytes, k_comm, inter(stride, n));
  }
};

struct FwdBwd {
  double fwd = 0, bwd = 0;
};
// A linear layer y [rows, n] = x [rows, k] w^T in FP8 on a GPU (cuda_fp8_linear.cpp): its three
// GEMMs at the FP8 rates, and the casts: an amax pass (2 B per bf16 element) and a cast pass (2 B
// read, 1 B per copy written) of the input and the weight forward, of the gradient (with its
// transposed copy), the weight and the input backward.
FwdBwd gpu_fp8_linear(const Ctx& c, double rows, double n, double k) {
  const double act = rows * k * c.e;
  return {c.fp8_gemm(rows, n, k, false) + c.stream(5 * (rows * k + n * k), act),
          c.fp8_gemm(rows, n, k, true) + c.stream(6 * rows * n + 5 * (n * k + rows * k), act)};
}

// The block's four linear layers on one rank: name, and y [rows, n] = x [rows, k] w^T (a MoE
// block's MLP is its experts: the attention's two only).
struct LinearShape {
  const char* name;
  double n, k;
};
std::vector<LinearShape> block_linears(const ModelConfig& m, const PlanLayout& l, bool moe) {
  const double tp = l.tp, d = m.d_model, hd = m.head_dim(), H = m.n_head, KV = m.n_kv_head, F = m.d_ff;
  std::vector<LinearShape> v = {{"qkv", (H + 2 * KV) * hd / tp, d}, {"attn out", d, H * hd / tp}};
  if (!moe) {
    const bool llama = m.arch == Arch::llama;
    v.push_back({llama ? "gate|up" : "fc", (llama ? 2 : 1) * F / tp, d});
    v.push_back({llama ? "down" : "fc proj", d, F / tp});
  }
  return v;
}

// One transformer layer, one micro-batch: {forward, backward} compute seconds and TP seconds
// (forward, backward), and the CP ring's exposed seconds.
struct LayerCost {
  double fwd = 0, bwd = 0, tp_fwd = 0, tp_bwd = 0, cp = 0, ep_fwd = 0, ep_bwd = 0;
  double ep_bytes = 0;  // all-to-all bytes this rank sends per micro-batch, forward + backward
};

// A MoE block's MLP (moe_mlp.hpp) on M rows: the copies a rank's experts run, balanced over the
// experts and dropless (the load-balancing loss's aim; a skewed router is slower than this).
struct MoeShape {
  double copies = 0, local_experts = 0, rows_per_expert = 0, shared_ff = 0;
};
MoeShape moe_shape(const ModelConfig& m, double M, int ep) {
  MoeShape s;
  s.copies = M * m.moe.top_k;  // dispatched by this rank = received by it, in balance
  s.local_experts = double(m.moe.n_experts) / ep;
  s.rows_per_expert = s.copies / s.local_experts;
  s.shared_ff = double(m.moe.n_shared) * m.moe.d_ff;
  return s;
}

LayerCost layer_cost(const Ctx& c, bool moe) {
  const ModelConfig& m = c.in.model;
  const PlanLayout& l = c.in.layout;
  const double tp = l.tp, cpn = l.cp;
  const double M = double(l.micro_batch) * m.seq_len / l.cp;  // tokens of this rank
  const double d = m.d_model, hd = m.head_dim(), H = m.n_head, KV = m.n_kv_head, F = m.d_ff;
  const bool llama = m.arch == Arch::llama;
  LayerCost r;
  auto gemm = [&](double rows, double n, double k, double times = 1) {
    r.fwd += times * c.gemm(rows, n, k, false);
    r.bwd += times * c.gemm(rows, n, k, true);
  };
  double amax_f = 0, amax_b = 0;  // fp8: the casts' amax all-reduces
  // One of the block's four linear layers (y [rows, n] = x [rows, k] w^T) under train.precision:
  //   - not fp8: its GEMMs;
  //   - fp8 on the CPU (cpu_fp8_linear.cpp): the same GEMMs (bf16: the codes' values), and each
  //     operand's amax read, then read and written as its cast copy (12 B per fp32 element): forward
  //     the input and the weight, backward the output gradient, the weight and the input; the result
  //     scaled in place (8 B per element of y, and of dx), the weight gradient through a zeroed
  //     product and an axpy (16 B per weight element);
  //   - fp8 on a GPU: gpu_fp8_linear.
  // Each cast's amax is one scalar all-reduce over tp (and cp).
  auto linear = [&](double rows, double n, double k) {
    if (!c.in.fp8_linears) return gemm(rows, n, k);
    if (c.gpu_fp8) {
      const FwdBwd f = gpu_fp8_linear(c, rows, n, k);
      r.fwd += f.fwd, r.bwd += f.bwd;
    } else {
      gemm(rows, n, k);
      const double act = rows * k * c.e;
      r.fwd += c.stream(12 * (rows * k + n * k) + 8 * rows * n, act);
      r.bwd += c.stream(12 * (rows * n + n * k + rows * k) + 8 * rows * k + 16 * n * k, act);
    }
    const double amax = (l.tp > 1 ? c.coll("all_reduce", l.tp, 4, 1) : 0) + (l.cp > 1 ? c.coll("all_reduce", l.cp, 4, l.tp) : 0);
    amax_f += 2 * amax, amax_b += 3 * amax;
  };
  // Recompute runs the block's forward again up to the MLP activation (TransformerBlock::forward
  // with full = false): a dense block's output projection, its TP reduction and the last residual
  // add are not recomputed (a trace of gpt 4 x 256 on a Xeon: the recomputed forward took 68% of
  // the forward; this projection is a third of its GEMM FLOPs). A MoE block recomputes all of it.
  double not_recomputed = 0;
  const std::vector<LinearShape> linears = block_linears(m, l, moe);
  for (size_t i = 0; i < linears.size(); ++i) {
    const double before = r.fwd;
    linear(M, linears[i].n, linears[i].k);
    if (!moe && i + 1 == linears.size()) not_recomputed += r.fwd - before;
  }
  const MoeShape ms = moe_shape(m, M, l.ep);
  if (moe) {  // the router, one GEMM pair per local expert over its rows (w1|w3, w2), the shared experts
    const double Fe = m.moe.d_ff;
    gemm(M, m.moe.n_experts, d);
    gemm(ms.rows_per_expert, 2 * Fe, d, ms.local_experts);
    gemm(ms.rows_per_expert, d, Fe, ms.local_experts);
    if (ms.shared_ff > 0) {
      gemm(M, 2 * ms.shared_ff / tp, d);
      gemm(M, d, ms.shared_ff / tp);
    }
  }
  // Attention: 4 T^2 hd per head and sequence forward; under cp each rank does 1/cp of it.
  const double T = m.seq_len;
  const double attn_flops = l.micro_batch * (H / tp) * 4.0 * T * T * hd / cpn;
  const double attn_f = attn_flops / (c.p.attention_gflops(T / cpn, false, c.threads) * 1e9 * c.cf);
  const double attn_b = 2 * attn_flops / (c.p.attention_gflops(T / cpn, true, c.threads) * 1e9 * c.cf);
  r.fwd += attn_f, r.bwd += attn_b;
  // Elementwise bytes, forward and backward, each kernel's reads and writes as calibrate's probe
  // counts them: a norm 2 d forward (x, y), 4 d backward (x, dy read, dx written, the weights'
  // gradients); a residual add 3 d forward, its backward one add into the gradient (3 d); GELU 2 F/tp
  // forward, 3 F/tp backward; SwiGLU 3 F/tp (gate, up, out), 5 F/tp backward; RoPE on q and k read
  // and written each way. SP: the norms and residuals on M/tp rows. MoE: the router's softmax (3 E)
  // and the copies gathered to their experts and combined back (4 d each), twice that backward;
  // their SwiGLU (Fe) and the shared experts'. (Counting backward as twice the forward priced a
  // GPT block's kernels 1.2x over the probe's count: bench/model/run.sh --only heldout.)
  const double rows_nr = l.sp ? M / tp : M;
  double fwd = rows_nr * (2 * 2 * d + 2 * 3 * d), bwd = rows_nr * (2 * 4 * d + 2 * 3 * d);
  const double glu_rows = moe ? ms.copies * m.moe.d_ff + M * ms.shared_ff / tp : llama ? M * F / tp : 0;
  fwd += 3 * glu_rows, bwd += 5 * glu_rows;
  if (moe) {
    const double route = M * 3 * m.moe.n_experts + ms.copies * 4 * d;
    fwd += route, bwd += 2 * route;
  } else if (!llama) {
    fwd += M * 2 * F / tp, bwd += M * 3 * F / tp;
  }
  if (llama) fwd += M * 2 * (H + KV) * hd / tp, bwd += M * 2 * (H + KV) * hd / tp;
  const double act = rows_nr * d * c.e;  // the rate's size: the block's [rows, d] activation
  r.fwd += c.stream(fwd * c.e, act);
  r.bwd += c.stream(bwd * c.e, act);
  if (!moe) not_recomputed += c.stream(rows_nr * 3 * d * c.e, act);  // the block output's residual add
  if (l.recompute) r.bwd += r.fwd - not_recomputed;
  if (l.tp > 1) {
    const double act = M * d * c.e;
    // Two sublayers (attention, MLP), each one all-reduce, or with SP an all-gather before and a
    // reduce-scatter after: the same bytes. A MoE MLP: its rows gathered under SP (each TP rank
    // runs the routed experts on all of them and keeps its own), and the shared experts' all-reduce.
    const double sub = l.sp ? c.coll("all_gather", l.tp, act, 1) + c.coll("reduce_scatter", l.tp, act, 1)
                            : c.coll("all_reduce", l.tp, act, 1);
    const double mlp = !moe ? sub
                            : (l.sp ? c.coll("all_gather", l.tp, act, 1) : 0) +
                                  (ms.shared_ff > 0 ? c.coll("all_reduce", l.tp, act, 1) : 0);
    r.tp_fwd = sub + mlp;
    // Recomputed: all but a dense MLP's reduction after its output projection (see above).
    const double not_again = moe ? 0
                             : l.sp ? c.coll("reduce_scatter", l.tp, act, 1)
                                    : c.coll("all_reduce", l.tp, act, 1);
    r.tp_bwd = r.tp_fwd + (l.recompute ? r.tp_fwd - not_again : 0);
  }
  r.tp_fwd += amax_f, r.tp_bwd += amax_b + (l.recompute ? amax_f : 0);
  if (moe && l.ep > 1) {
    // Expert parallel: the per-expert counts all-gathered, then dispatch and combine, each one
    // all-to-all of the copies' rows; backward the two again on the gradients; a recomputed block
    // runs its forward's again. On the critical path (the exchange is not overlapped).
    const double rows = ms.copies * d * c.e;
    const double a2a = c.coll("all_to_all", l.ep, rows, l.tp);
    r.ep_fwd = c.coll("all_gather", l.ep, l.ep * m.moe.n_experts * 4.0, l.tp) + 2 * a2a;
    r.ep_bwd = 2 * a2a + (l.recompute ? r.ep_fwd : 0);
    r.ep_bytes = (4 + (l.recompute ? 2 : 0)) * rows * (l.ep - 1) / l.ep;
  }
  if (l.cp > 1) {
    const double kv = l.micro_batch * (T / cpn) * 2 * std::max(1.0, KV / tp) * hd * c.e;
    const int stride = l.tp;
    const double ring_f = (cpn - 1) * c.coll("sendrecv", 2, kv, stride);
    const double ring_b = (2 * cpn - 1) * c.coll("sendrecv", 2, kv, stride) * (l.recompute ? 1.5 : 1.0);
    r.cp = std::max(0.0, ring_f - c.hiding(attn_f)) + std::max(0.0, ring_b - c.hiding(attn_b));
  }
  return r;
}

// The embedding (first virtual stage) and the head with its loss (last): {fwd, bwd, tp}.
struct EndCost {
  double fwd = 0, bwd = 0, tp = 0;
};

EndCost embedding_cost(const Ctx& c) {
  const PlanLayout& l = c.in.layout;
  const double M = double(l.micro_batch) * c.in.model.seq_len / l.cp, d = c.in.model.d_model;
  EndCost r;
  r.fwd = c.stream(M * d * c.e * 3, M * d * c.e);
  r.bwd = c.stream(M * d * c.e * 3, M * d * c.e);
  if (l.tp > 1) r.tp = c.coll(l.sp ? "reduce_scatter" : "all_reduce", l.tp, M * d * c.e, 1);
  return r;
}

EndCost head_cost(const Ctx& c) {
  const ModelConfig& m = c.in.model;
  const PlanLayout& l = c.in.layout;
  const double M = double(l.micro_batch) * m.seq_len / l.cp, d = m.d_model, V = double(m.padded_vocab(l.tp)) / l.tp;
  EndCost r;
  r.fwd = c.gemm(M, V, d, false) + c.stream(M * V * c.e * 3 + M * d * c.e * 2, M * V * c.e);
  r.bwd = c.gemm(M, V, d, true) + c.stream(M * V * c.e * 2 + M * d * c.e * 4, M * V * c.e);
  if (l.tp > 1) r.tp = 3 * c.coll("all_reduce", l.tp, M * 4, 1) + (l.sp ? c.coll("all_gather", l.tp, M * d * c.e, 1) : 0);
  return r;
}

// The step's precision and the contention its kernels and collectives run at.
Ctx make_ctx(const PlanInput& in, const MachineProfile& prof) {
  const PlanLayout& l = in.layout;
  Ctx c{in, prof};
  c.bf16 = in.precision != Precision::fp32 || in.cpu_bf16_gemms;
  c.e = in.precision == Precision::fp32 ? 4 : 2;
  if (in.fp8_linears && prof.backend == "nccl") {
    usage_check(prof.has_fp8(), "train.precision = \"fp8\": the profile of {} has no FP8 GEMM rates ({})", prof.device,
                prof.source == "datasheet" ? "it has no FP8 tensor cores: compute capability 8.9 or later is needed"
                                           : "a calibrated GPU profile lacks them: use a datasheet profile, --profile h100 or h200");
    c.gpu_fp8 = true;
  }
  c.k = std::max(1, std::min(l.world(), in.cluster.gpus_per_node));
  // The trainer's threads per rank: train.threads where the job sets it, or the cores shared out.
  // More threads than that share the cores: priced at the cores' share (the bound; OpenMP threads
  // beyond the cores often run slower).
  c.threads = prof.threads_for(c.k);
  if (in.cpu_threads > 0) c.threads = std::min(in.cpu_threads, c.threads);
  // Durations at the contention of the ranks that can run at once (no more than the cores); a
  // node with more ranks than cores is a throughput bound below (ranks waiting in a bubble or a
  // collective leave their core to the others).
  const int k_run = std::min(c.k, std::max(1, prof.cores_per_node));
  c.cf = prof.compute_factor(k_run);
  c.k_comm = k_run;
  c.sf = prof.stream_factor(k_run);
  c.over = c.k > k_run ? prof.compute_factor(c.k) / prof.compute_factor(k_run) : 1.0;
  c.comm_hides = collectives_hide(prof);
  return c;
}

// Per virtual stage: forward and backward seconds of one micro-batch, and the TP and EP parts
// of them (each stage's dense and MoE layers at their own cost).
struct StageCosts {
  int P = 1, V = 1;         // pipeline ranks, chunks per rank (virtual stage vs = chunk * P + rank)
  std::vector<int> layers;  // per virtual stage
  double cp_per_layer = 0;  // the CP ring's exposed seconds of one layer
  std::vector<double> f, b;      // compute forward, backward (the CP ring's share included)
  std::vector<double> tpf, tpb;  // TP forward, backward, the EP parts included
  std::vector<double> epf, epb;  // EP forward, backward
  std::vector<double> ep_sent;   // all-to-all bytes sent
};

StageCosts stage_costs(const Ctx& c) {
  const PlanLayout& l = c.in.layout;
  const ModelConfig& m = c.in.model;
  const LayerCost dense = layer_cost(c, false), moe = m.moe.enabled() ? layer_cost(c, true) : dense;
  const EndCost emb = embedding_cost(c), head = head_cost(c);
  StageCosts s;
  s.V = std::max(1, l.virtual_stages), s.P = l.pp;
  const int n_vs = s.P * s.V;
  s.layers = pipeline_stage_layers(m.n_layer, n_vs, l.pp_layers);
  s.cp_per_layer = dense.cp;
  for (auto* v : {&s.f, &s.b, &s.tpf, &s.tpb, &s.epf, &s.epb, &s.ep_sent}) v->resize(n_vs);
  const std::vector<int>& layers = s.layers;
  std::vector<double> &f = s.f, &b = s.b, &tpf = s.tpf, &tpb = s.tpb;
  std::vector<double> &epf = s.epf, &epb = s.epb, &ep_sent = s.ep_sent;
  for (int vs = 0, first = 0; vs < n_vs; first += layers[vs++]) {
    double nm = 0;
    for (int i = first; i < first + layers[vs]; ++i) nm += m.moe.is_moe_layer(i);
    const double nd = layers[vs] - nm;
    auto sum = [&](double LayerCost::*x) { return nd * dense.*x + nm * moe.*x; };
    const double cp = layers[vs] * dense.cp;
    f[vs] = sum(&LayerCost::fwd) + cp / 3, b[vs] = sum(&LayerCost::bwd) + cp * 2 / 3;
    tpf[vs] = sum(&LayerCost::tp_fwd), tpb[vs] = sum(&LayerCost::tp_bwd);
    epf[vs] = sum(&LayerCost::ep_fwd), epb[vs] = sum(&LayerCost::ep_bwd), ep_sent[vs] = nm * moe.ep_bytes;
    if (vs == 0) f[vs] += emb.fwd, b[vs] += emb.bwd, tpf[vs] += emb.tp, tpb[vs] += emb.tp;
    if (vs == n_vs - 1) f[vs] += head.fwd, b[vs] += head.bwd, tpf[vs] += head.tp, tpb[vs] += head.tp;
    // The collectives ride on compute's durations from here on (the pipeline's actions).
    tpf[vs] += epf[vs], tpb[vs] += epb[vs];
  }
  return s;
}

// Per pipeline rank: compute (with TP and EP) of all its chunks over the step, and its parts.
struct RankTotals {
  std::vector<double> busy, last_bwd, tp, ep, cp, ep_bytes;
};

RankTotals rank_totals(const StageCosts& s, double mb) {
  const int P = s.P;
  RankTotals t;
  for (auto* v : {&t.busy, &t.last_bwd, &t.tp, &t.ep, &t.cp, &t.ep_bytes}) v->assign(P, 0.0);
  for (int r = 0; r < P; ++r)
    for (int ch = 0; ch < s.V; ++ch) {
      const int vs = ch * P + r;
      t.busy[r] += mb * (s.f[vs] + s.b[vs] + s.tpf[vs] + s.tpb[vs]);
      t.tp[r] += mb * (s.tpf[vs] + s.tpb[vs] - s.epf[vs] - s.epb[vs]);
      t.ep[r] += mb * (s.epf[vs] + s.epb[vs]);
      t.cp[r] += mb * s.layers[vs] * s.cp_per_layer;
      t.last_bwd[r] += s.b[vs];
      t.ep_bytes[r] += mb * s.ep_sent[vs];
    }
  return t;
}

// The step's compute span: the pipeline schedule's makespan (with its p2p transfers), or the one
// rank's busy time without a pipeline.
double pipeline_makespan(const Ctx& c, const StageCosts& s, const RankTotals& t) {
  const PlanLayout& l = c.in.layout;
  const ModelConfig& m = c.in.model;
  const int P = s.P;
  if (P <= 1) return t.busy[0];
  const PipelineSchedule sched = make_schedule(l.schedule, P, l.microbatches, s.V);
  const double act = double(l.micro_batch) * m.seq_len / l.cp * m.d_model * c.e / (l.sp ? l.tp : 1);
  const double p2p = c.coll("sendrecv", 2, act, l.tp * l.cp * l.dp);
  const PipelineTimeline tl = simulate(
      sched,
      [&](int r, const PipeAction& a) {
        const int vs = a.chunk * P + r;
        return a.op == PipeOp::forward ? s.f[vs] + s.tpf[vs] : s.b[vs] + s.tpb[vs];
      },
      p2p);
  return tl.makespan;
}

// The busiest pipeline rank's time split into compute, TP, CP and EP; the bubble is the rest of
// the makespan.
void split_busiest(StepPrediction& out, const RankTotals& t, double makespan) {
  const std::vector<double>& busy = t.busy;
  const int busiest = static_cast<int>(std::max_element(busy.begin(), busy.end()) - busy.begin());
  out.tp_s = t.tp[busiest];
  out.cp_s = t.cp[busiest];
  out.ep_s = t.ep[busiest];
  out.ep_bytes = *std::max_element(t.ep_bytes.begin(), t.ep_bytes.end());
  out.compute_s = busy[busiest] - out.tp_s - out.cp_s - out.ep_s;
  out.bubble_s = std::max(0.0, makespan - busy[busiest]);
}

// DP / ZeRO communication (exposed and in all) and AdamW seconds of pipeline rank r.
struct DpCost {
  double exposed = 0, total = 0, opt = 0;
};

DpCost dp_cost(const Ctx& c, const RankLedger& rl, const StageCosts& s, const RankTotals& t, int r) {
  const PlanLayout& l = c.in.layout;
  const MachineProfile& prof = c.p;
  const double mb = l.microbatches;
  const double g_bytes = c.in.precision == Precision::bf16 ? 2 : 4;
  DpCost d;
  const double n_exp = static_cast<double>(rl.local_expert_params);
  for (int set = 0; set < (n_exp > 0 ? 2 : 1); ++set) {
    const int dpn = set == 0 ? l.dp * l.cp : l.dp * l.cp / l.ep;  // the set's gradient group
    const double n_flat = set == 0 ? static_cast<double>(rl.local_params) - n_exp : n_exp;
    if (dpn > 1) {
      const double bucket = static_cast<double>(grad_bucket_floats(l.bucket_mb, static_cast<size_t>(n_flat)));
      const double n_buckets = std::max(1.0, std::ceil(n_flat / bucket));
      const double bucket_bytes = std::min(bucket, n_flat) * g_bytes;
      const char* red = l.zero == 0 ? "all_reduce" : "reduce_scatter";
      const double per_bucket = c.coll(red, dpn, bucket_bytes, l.tp);
      const double reduce = n_buckets * per_bucket;
      const double rounds = l.zero >= 2 ? mb : 1;  // ZeRO-2/3 reduce every micro-batch
      const double window = c.hiding(t.last_bwd[r]);
      const double hidden = std::min(std::max(0.0, reduce - per_bucket), window);
      d.exposed += rounds * (reduce - hidden + hidden * (prof.overlap_factor(c.k) - 1));
      d.total += rounds * reduce;
      if (l.zero >= 1) {  // the updated parameters gathered after the step
        const double ag = c.coll("all_gather", dpn, n_flat * 4, l.tp);
        d.exposed += ag, d.total += ag;
      }
      if (l.zero >= 3) {  // each unit gathered ahead of forward and backward, overlapped
        const double ag = c.coll("all_gather", dpn, n_flat * c.e, l.tp);
        double fwd_sum = 0, bwd_sum = 0;
        for (int ch = 0; ch < s.V; ++ch) fwd_sum += s.f[ch * s.P + r], bwd_sum += s.b[ch * s.P + r];
        if (c.comm_hides) {
          d.exposed += mb * (std::max(0.0, ag - fwd_sum) + std::max(0.0, ag - window) +
                             std::min(ag, fwd_sum + window) * (prof.overlap_factor(c.k) - 1));
        } else {
          // The CPU: the gathers' copies are exposed, and with the next unit's gather always
          // posted, the progress thread runs beside every block's forward and backward, which
          // run at the profile's in-flight slowdown (a trace of gpt 4 x 256, dp 2 at np 2 on 2
          // cores: the blocks 1.26-1.28x slower than under ZeRO-1, calibrate's mix 1.16-1.26x).
          d.exposed += mb * (2 * ag + (fwd_sum + bwd_sum) * (prof.overlap_factor(c.k) - 1));
        }
        d.total += 2 * mb * ag;
      }
    }
    // AdamW over this rank's shard and the one-pass kernels around it, at their own calibrated
    // rates over arrays larger than the caches (the parameters and their moments). All the node's
    // ranks run them at once: with more ranks than cores, at the cores' share (c.over; a harness's
    // AdamW on 5.3M floats at 4 ranks on 2 cores took 15 ms a call, 5-7 at 2 ranks).
    const double shard = l.zero >= 1 && dpn > 1 ? n_flat / dpn : n_flat;
    // The one-pass kernels. ZeRO-2/3 (DataParallel::alloc_bucket, launch_bucket): every micro-batch
    // the buckets get fresh zeroed memory (the full gradient's bytes written) and each reduced part
    // is added into the shard (read two, write one); per step the shard is zeroed and its norm
    // taken. Otherwise the full gradient is zeroed and its norm taken.
    const double flat_bytes = l.zero >= 2 && dpn > 1 ? shard * 4 * 2 + mb * (n_flat * 4 + shard * 4 * 3) : n_flat * 4 * 2;
    d.opt += (prof.adamw_seconds(shard, c.threads) + flat_bytes / (prof.flat_gbs(c.threads) * 1e9)) / (c.sf * c.over);
  }
  // With more ranks than cores the collectives' copies share the cores too (they are priced at
  // the ranks that can run at once), as the ranks' compute does (shared_cores_s).
  d.exposed /= c.over, d.total /= c.over;
  return d;
}

// DP / ZeRO, per pipeline rank (its own parameters); the slowest decides. Under expert parallel
// the rank's routed experts are a second set, synchronised over expert_dp (dp x cp / ep).
void add_dp_and_optimizer(StepPrediction& out, const Ctx& c, const Ledger& led, const StageCosts& s,
                          const RankTotals& t) {
  double tail = 0;
  for (int r = 0; r < s.P; ++r) {
    const RankLedger& rl = led.stages[std::min<size_t>(r, led.stages.size() - 1)];
    const DpCost d = dp_cost(c, rl, s, t, r);
    if (d.exposed + d.opt > tail) {
      tail = d.exposed + d.opt;
      out.dp_s = d.exposed;
      out.dp_total_s = d.total;
      out.optimizer_s = d.opt;
    }
  }
}

}  // namespace

std::string StepPrediction::dominant() const {
  std::pair<double, const char*> parts[] = {{compute_s, "compute"},         {tp_s, "TP comm"}, {ep_s, "EP all-to-all"},
                                            {cp_s, "CP ring"},             {bubble_s, "pipeline bubble"},
                                            {shared_cores_s, "shared cores"}, {dp_s, "DP/ZeRO comm"},
                                            {optimizer_s, "optimizer"},     {overhead_s, "overhead"}};
  return std::max_element(std::begin(parts), std::end(parts))->second;
}

double step_model_flops(const PlanInput& in) {
  return gpt_flops_per_token(in.model) * double(in.global_batch()) * in.model.seq_len;
}

StepPrediction predict_step(const PlanInput& in, const MachineProfile& prof) {
  const Ledger led = compute_ledger(in);  // validates the layout
  const PlanLayout& l = in.layout;
  const Ctx c = make_ctx(in, prof);
  StepPrediction out;
  out.ranks_per_node = c.k;
  out.threads = prof.backend == "cpu" ? c.threads : 0;
  out.gemm_bf16 = c.bf16 && prof.has_bf16();

  const StageCosts stages = stage_costs(c);
  const RankTotals ranks = rank_totals(stages, l.microbatches);
  double makespan = pipeline_makespan(c, stages, ranks);
  split_busiest(out, ranks, makespan);
  if (c.over < 1) {  // the node's cores, shared by all its ranks' work
    double mean_busy = 0;
    for (double x : ranks.busy) mean_busy += x / stages.P;
    out.shared_cores_s = std::max(0.0, mean_busy / c.over - makespan);
    makespan += out.shared_cores_s;
  }
  add_dp_and_optimizer(out, c, led, stages, ranks);

  // Loss and gradient-norm scalars over the world.
  out.overhead_s = l.world() > 1 ? 2 * c.coll("all_reduce", l.world(), 8, 1) : 0;
  out.step_s = makespan + out.dp_s + out.optimizer_s + out.overhead_s;
  out.flops = step_model_flops(in);
  out.tokens_per_s = double(in.global_batch()) * in.model.seq_len / out.step_s;
  out.gflops_per_rank = out.flops / out.step_s / l.world() / 1e9;
  out.peak_gflops = prof.peak_gflops();
  if (c.gpu_fp8) {  // the linears of a dense block, one micro-batch: FP8 against bf16
    const double M = double(l.micro_batch) * in.model.seq_len / l.cp;
    for (const LinearShape& s : block_linears(in.model, l, false)) {
      const FwdBwd f = gpu_fp8_linear(c, M, s.n, s.k);
      out.fp8_linears.push_back({s.name, M, s.n, s.k,
                                 c.gemm(M, s.n, s.k, false) + c.gemm(M, s.n, s.k, true), f.fwd + f.bwd});
    }
  }
  return out;
}

// ", T thread(s) each" on the CPU, and what train.threads beyond the cores' share was priced at.
static std::string threads_note(const PlanInput& in, const MachineProfile& prof, const StepPrediction& p) {
  if (p.threads <= 0) return "";
  std::string s = fmt::format(", {} thread(s) each", p.threads);
  if (in.cpu_threads > p.threads)
    s += fmt::format(" (train.threads = {} x {} rank(s) is more than the {} cores: priced at the cores' share)", in.cpu_threads,
                     p.ranks_per_node, prof.cores_per_node);
  return s;
}

std::string format_prediction(const PlanInput& in, const MachineProfile& prof, const StepPrediction& p) {
  const PlanLayout& l = in.layout;
  std::string o = fmt::format("predicted step time on {} ({} profile{}): {:.4g} s  ({:.0f} tokens/s, {:.1f} GFLOP/s per rank, "
                              "{:.1f}% of {:.0f} GFLOP/s{})\n",
                              prof.device, prof.source, prof.date.empty() ? "" : ", " + prof.date, p.step_s, p.tokens_per_s,
                              p.gflops_per_rank, 100 * p.gflops_per_rank / p.peak_gflops, p.peak_gflops,
                              prof.source == "datasheet" ? " peak" : ", the best GEMM calibrated");
  auto row = [&](const char* name, double s, const std::string& why) {
    o += fmt::format("  {:<16} {:>10.4g} s {:>6.1f}%  {}\n", name, s, 100 * s / p.step_s, why);
  };
  row("compute", p.compute_s,
      fmt::format("forward + backward{} of {} micro-batch(es) x {} tokens, {} GEMMs, {} rank(s) per node computing at once{}{}",
                  l.recompute ? " + recompute" : "", l.microbatches, l.micro_batch * in.model.seq_len / l.cp,
                  p.fp8_linears.empty() ? (p.gemm_bf16 ? "bf16" : "fp32") : "the blocks' linears in FP8, the other bf16",
                  p.ranks_per_node, threads_note(in, prof, p),
                  in.model.moe.enabled() ? "; the experts at balanced routing (train.check_prediction reports the run's)" : ""));
  if (l.tp > 1) row("TP comm", p.tp_s, fmt::format("{} per layer, on the critical path", l.sp ? "all-gather + reduce-scatter" : "all-reduces"));
  const bool hides = collectives_hide(prof);
  if (l.cp > 1) row("CP ring", p.cp_s, hides ? "k|v hops beyond what attention hides" : "k|v hops (the CPU backend's cores copy them: not hidden)");
  if (l.ep > 1)
    row("EP all-to-all", p.ep_s,
        fmt::format("MoE dispatch + combine over ep {}, forward and backward: {} sent per step, on the critical path",
                    l.ep, fmt_gb(p.ep_bytes)));
  if (l.pp > 1) row("pipeline bubble", p.bubble_s, fmt::format("{} schedule, pp {}, {} micro-batches{}", l.schedule, l.pp, l.microbatches,
                                                               l.virtual_stages > 1 ? fmt::format(", v {}", l.virtual_stages) : ""));
  if (p.shared_cores_s > 0)
    row("shared cores", p.shared_cores_s,
        fmt::format("{} ranks on {} cores: the node's throughput bounds the step", p.ranks_per_node, prof.cores_per_node));
  if (l.dp * l.cp > 1)
    row("DP/ZeRO comm", p.dp_s,
        fmt::format("exposed of {:.4g} s (ZeRO {}; {}{})", p.dp_total_s, l.zero,
                    hides ? "buckets overlap backward" : "the CPU backend's cores copy them: not hidden",
                    !hides && l.zero >= 3 ? "; the blocks computed beside the parameters' gathers, at the in-flight slowdown"
                                          : ""));
  row("optimizer", p.optimizer_s,
      l.zero >= 2 && l.dp * l.cp > 1
          ? "AdamW over the rank's shard; the gradient buckets zeroed and added into it every micro-batch"
          : "AdamW over the rank's shard");
  if (!p.fp8_linears.empty()) {
    std::string gains, losers;
    for (const Fp8LinearCost& g : p.fp8_linears) {
      gains += fmt::format("{}{} {:.2f}x", gains.empty() ? "" : ", ", g.name, g.bf16_s / g.fp8_s);
      if (g.fp8_s >= g.bf16_s) losers += fmt::format("{}{}", losers.empty() ? "" : ", ", g.name);
    }
    o += fmt::format("  fp8 linears: bf16 / FP8 time per micro-batch (GEMMs + casts): {}\n", gains);
    if (!losers.empty())
      o += fmt::format("  fp8 LOSES on {}: a GEMM this small gains less than its operands' casts cost; train.precision "
                       "= \"bf16\" is faster here (or larger micro-batches, less tensor parallel)\n",
                       losers);
  }
  if (p.overhead_s > 0) row("overhead", p.overhead_s, "loss and gradient-norm all-reduces");
  o += fmt::format("  dominant: {}\n", p.dominant());
  return o;
}

}  // namespace mpitron
