// The strategy advisor and the strategy comparison (plan/advisor.hpp has the cost model).
#include "mpitron/plan/advisor.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "mpitron/core/error.hpp"
#include "mpitron/model/rope_scaling.hpp"

namespace mpitron {
namespace {

int elt(Precision p) { return p == Precision::fp32 ? 4 : 2; }

double flops_per_step(const PlanInput& in) {
  const ModelConfig& m = in.model;
  const double tokens = static_cast<double>(in.global_batch()) * m.seq_len;
  // Parameters touched by matmuls: every layer plus the head (embedding lookup is free, but the
  // tied/untied head is a GEMM); 12*L*s*h for attention scores and values.
  const double h = m.d_model, hd = m.head_dim();
  const double layer = 2 * h * m.n_head * hd + 2 * h * m.n_kv_head * hd +
                       (m.arch == Arch::llama ? 3.0 : 2.0) * h * m.d_ff;
  double n = m.n_layer * layer + static_cast<double>(m.padded_vocab()) * h;
  // A MoE layer's MLP as a token sees it: the router, its top_k experts and the shared ones.
  const double moe_mlp = h * m.moe.n_experts + 3.0 * h * m.moe.d_ff * (m.moe.top_k + m.moe.n_shared);
  for (int i = 0; i < m.n_layer; ++i)
    if (m.moe.is_moe_layer(i)) n += moe_mlp - (m.arch == Arch::llama ? 3.0 : 2.0) * h * m.d_ff;
  return (6 * n + 12.0 * m.n_layer * m.seq_len * h) * tokens;
}

// MoE blocks among this rank's layers (the heaviest pipeline rank: its share, rounded up).
double moe_layers_of_rank(const ModelConfig& m, int pp) {
  int n = 0;
  for (int i = 0; i < m.n_layer; ++i) n += m.moe.is_moe_layer(i);
  return std::ceil(double(n) / pp);
}

double ib_gbs(const ClusterSpec& c) { return c.ib_gbps / 8.0; }

// Is the group whose members are `stride` ranks apart and `size` long inside one node?
bool in_node(const ClusterSpec& c, int stride, int size) { return int64_t{stride} * size <= c.gpus_per_node; }

std::vector<int> divisors(int n) {
  std::vector<int> d;
  for (int i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(i);
  return d;
}

// Interleaving v = 2 needs at least one layer per virtual stage.
int complexity(const PlanLayout& l) {
  return 100 * ((l.tp > 1) + (l.pp > 1) + (l.cp > 1) + (l.ep > 1)) + 10 * l.zero + 4 * (l.virtual_stages > 1) + 2 * l.recompute + l.sp;
}

bool fits(const Ledger& l, const ClusterSpec& c) {
  return static_cast<double>(l.stages[l.heaviest].total()) <= (1.0 - c.headroom) * c.gpu_mem_gb * 1e9;
}

PlanInput with_layout(const PlanInput& base, int dp, int tp, int pp, int zero, bool sp, bool rc, int micro, int global,
                      int cp = 1, int ep = 1) {
  PlanInput in = base;
  PlanLayout& l = in.layout;
  l.dp = dp, l.tp = tp, l.pp = pp, l.cp = cp, l.ep = ep, l.zero = zero, l.sp = sp, l.recompute = rc;
  l.micro_batch = micro;
  l.microbatches = std::max(1, global / (micro * dp));
  l.schedule = pp > 1 ? "1f1b" : base.layout.schedule;
  l.virtual_stages = 1;
  l.pp_layers.clear();
  return in;
}

std::string layout_name(const PlanLayout& l) {
  return fmt::format("dp {}{}{} x tp {} x pp {}{}, zero {}, sp {}, recompute {}, micro-batch {} x {}", l.dp,
                     l.cp > 1 ? fmt::format(" x cp {}", l.cp) : "", l.ep > 1 ? fmt::format(" (ep {})", l.ep) : "", l.tp, l.pp,
                     l.pp > 1 ? fmt::format(" {}{}", l.schedule, l.virtual_stages > 1 ? fmt::format(" v{}", l.virtual_stages) : "") : "",
                     l.zero, l.sp ? "on" : "off", l.recompute ? "full" : "none", l.micro_batch, l.microbatches);
}

}  // namespace

StepEstimate estimate_step(const PlanInput& in, const Ledger& led) {
  const PlanLayout& l = in.layout;
  const ClusterSpec& c = in.cluster;
  const ModelConfig& m = in.model;
  const double e = elt(in.precision);
  StepEstimate est;
  const double rate = c.peak_tflops * 1e12 * c.mfu;
  est.compute_s = flops_per_step(in) / (static_cast<double>(l.world()) * rate) * (l.recompute ? 4.0 / 3.0 : 1.0);
  est.bubble = l.pp > 1 ? (l.pp - 1.0) / (l.virtual_stages * l.microbatches + l.pp - 1.0) : 0.0;
  est.compute_s /= 1.0 - est.bubble;

  const RankLedger& r = led.stages[led.heaviest];
  const double layers = r.n_layers;
  const double bsh = static_cast<double>(l.micro_batch) * (m.seq_len / l.cp) * m.d_model * e;
  if (l.tp > 1) {
    est.tp_bytes = (4 + (l.recompute ? 2 : 0)) * layers * l.microbatches * bsh * 2.0 * (l.tp - 1) / l.tp;
    est.tp_s = est.tp_bytes / ((in_node(c, 1, l.tp) ? c.nvlink_gbs : ib_gbs(c)) * 1e9);
  }
  if (l.dp > 1) {
    est.dp_bytes = 2.0 * (l.dp - 1) / l.dp * static_cast<double>(r.local_params) * e * (l.zero >= 3 ? 1.5 : 1.0);
    // Gradient buckets (and ZeRO-3's prefetched gathers) overlap the backward pass, 2/3 of the
    // compute: only the part that exceeds it is exposed.
    const double t = est.dp_bytes / ((in_node(c, l.tp * l.cp, l.dp) ? c.nvlink_gbs : ib_gbs(c)) * 1e9);
    est.dp_s = std::max(0.0, t - est.compute_s * (1.0 - est.bubble) * 2.0 / 3.0);
  }
  if (l.cp > 1) {
    // The ring (ring_attention.hpp), per layer and micro-batch: forward passes cp - 1 k|v blocks
    // of micro x seq/cp x 2 KV/tp x hd, backward the k|v again plus cp hops of dk|dv. It overlaps
    // the attention compute (12 T d FLOPs per token per layer, fwd + bwd): only what exceeds it
    // is exposed.
    const double kv = static_cast<double>(l.micro_batch) * (m.seq_len / l.cp) * 2.0 * (m.n_kv_head / l.tp) *
                      m.head_dim() * e;
    est.cp_bytes = layers * l.microbatches * kv * (2.0 * (l.cp - 1) + l.cp);
    const double attn_s = static_cast<double>(l.microbatches) * l.micro_batch * (m.seq_len / l.cp) * 12.0 *
                          m.seq_len * m.d_model / l.tp * layers / rate * (l.recompute ? 4.0 / 3.0 : 1.0);
    const double t = est.cp_bytes / ((in_node(c, l.tp, l.cp) ? c.nvlink_gbs : ib_gbs(c)) * 1e9);
    est.cp_s = std::max(0.0, t - attn_s);
  }
  if (l.ep > 1) {  // the routed copies' dispatch and combine, forward and backward (+ recompute's)
    const double copies = static_cast<double>(l.micro_batch) * (m.seq_len / l.cp) * m.moe.top_k * m.d_model * e;
    est.ep_bytes = moe_layers_of_rank(m, l.pp) * l.microbatches * (4 + (l.recompute ? 2 : 0)) * copies *
                   (l.ep - 1.0) / l.ep;
    est.ep_s = est.ep_bytes / ((in_node(c, l.tp, l.ep) ? c.nvlink_gbs : ib_gbs(c)) * 1e9);
  }
  if (l.pp > 1) {
    est.pp_bytes = 2.0 * l.microbatches * bsh / (l.sp ? l.tp : 1);
    est.pp_s = est.pp_bytes / ((in_node(c, l.tp * l.cp * l.dp, l.pp) ? c.nvlink_gbs : ib_gbs(c)) * 1e9);
  }
  return est;
}

Advice advise(const PlanInput& base, const MachineProfile* profile) {
  const ModelConfig& m = base.model;
  const ClusterSpec& c = base.cluster;
  const int G = base.job_global_batch > 0 ? base.job_global_batch : base.global_batch();
  const int gpus = c.gpus;
  usage_check(gpus >= 1, "--gpus must be >= 1");
  usage_check(c.gpus_per_node >= 1, "--gpus-per-node must be >= 1");
  usage_check(G >= 1, "the global batch must be >= 1");
  Advice a;
  const double mem = c.gpu_mem_gb * 1e9;
  auto try_ledger = [&](const PlanInput& in, Ledger* out) {
    try {
      *out = compute_ledger(in);
      return true;
    } catch (const UsageError&) {
      return false;
    }
  };

  // The decision tree.
  Ledger ddp, zero3, tp_node;
  const int dp_all_global = std::max(G, gpus);
  bool ddp_ok = try_ledger(with_layout(base, gpus, 1, 1, 0, false, false, 1, dp_all_global), &ddp);
  const int64_t state = static_cast<int64_t>(ddp.total_params) * static_bytes_per_param(base.precision);
  if (ddp_ok && fits(ddp, c)) {
    a.tree.push_back(fmt::format("1. fits on one device? yes: {} of state + {} of activations (micro-batch 1) <= {:.0f} GB -> DDP "
                                 "(data parallel over all {} GPUs)",
                                 fmt_gb(state), fmt_gb(ddp.stages[0].activations), c.gpu_mem_gb, gpus));
  } else {
    a.tree.push_back(fmt::format("1. fits on one device? no: {} of parameters+gradients+optimizer ({} B/param) + {} activations > {:.0f} GB",
                                 fmt_gb(state), static_bytes_per_param(base.precision),
                                 ddp_ok ? fmt_gb(ddp.stages[0].activations) : "?", c.gpu_mem_gb));
    bool z3_ok = try_ledger(with_layout(base, gpus, 1, 1, 3, false, true, 1, dp_all_global), &zero3);
    if (z3_ok && fits(zero3, c)) {
      a.tree.push_back(fmt::format("2. state sharded by ZeRO-3/FSDP over {} GPUs fits? yes: {} per GPU -> ZeRO/FSDP",
                                   gpus, fmt_gb(zero3.stages[0].total())));
    } else {
      a.tree.push_back(fmt::format("2. state sharded by ZeRO-3/FSDP over {} GPUs fits? no ({} per GPU)", gpus,
                                   z3_ok ? fmt_gb(zero3.stages[0].total()) : "?"));
      // One layer: its state plus its activations at micro-batch 1.
      const double layer_state = (static_cast<double>(ddp.total_params) / m.n_layer) * static_bytes_per_param(base.precision);
      const double layer_total = layer_state + (ddp_ok ? ddp.stages[0].act_per_layer : 0);
      if (layer_total > 0.5 * mem)
        a.tree.push_back(fmt::format("3. one layer too big? yes ({} of state + activations, over half a GPU) -> TP inside a node, tp <= {}",
                                     fmt_gb(layer_total), c.gpus_per_node));
      else
        a.tree.push_back(fmt::format("3. one layer too big? no ({})", fmt_gb(layer_total)));
      int tpn = 1;
      for (int t : divisors(c.gpus_per_node))
        if (m.n_head % t == 0 && gpus % t == 0) tpn = t;
      bool tpn_ok = try_ledger(with_layout(base, gpus / tpn, tpn, 1, 1, tpn > 1, true, 1, std::max(G, gpus / tpn)), &tp_node);
      if (tpn_ok && fits(tp_node, c))
        a.tree.push_back(fmt::format("4. too many layers for tp {} + ZeRO-1? no ({} per GPU) -> TP inside a node + DP", tpn,
                                     fmt_gb(tp_node.stages[0].total())));
      else
        a.tree.push_back(fmt::format("4. too many layers for tp {} + ZeRO-1? yes -> PP across nodes; with TP as well: 3D "
                                     "(tp inside a node, pp across nodes, dp over the rest)",
                                     tpn));
    }
  }

  // The search.
  // Which layouts a run accepts is the layout rules' (parallel/layout_rules.hpp) say, asked by
  // compute_ledger through validate_plan: the search only chooses what to try.
  for (int tp : divisors(std::min(gpus, c.gpus_per_node))) {
    for (int pp : divisors(gpus / tp))
    // Context parallel for long sequences (>= 8192 tokens): cp up to 8.
    for (int cp : divisors(gpus / tp / pp)) {
      if (cp > 1 && (m.seq_len < 8192 || cp > 8)) continue;
      const int dp = gpus / tp / pp / cp;
      if (G % dp) continue;
      for (int micro : {1, 2, 4, 8}) {
        if ((G / dp) % micro) continue;
        if (pp > 1 && G / dp / micro < pp) continue;
        // Expert parallel (MoE): each divisor of the dp x cp ranks that divides the experts.
        for (int ep : divisors(dp * cp))
        for (int zero = 0; zero <= (dp * cp > 1 ? 3 : 0); ++zero)
          for (int sp = 0; sp <= (tp > 1 ? 1 : 0); ++sp)
            for (int rc = 0; rc <= 1; ++rc)
              for (const char* sched : {"1f1b", "gpipe", "interleaved"}) {
                // Without a profile the fixed model cannot tell schedules apart: 1F1B only.
                if (std::string(sched) != "1f1b" && (!profile || pp == 1)) continue;
                PlanInput in = with_layout(base, dp, tp, pp, zero, sp, rc, micro, G, cp, ep);
                if (pp > 1) {
                  in.layout.schedule = sched;
                  in.layout.virtual_stages = std::string(sched) == "interleaved" ? 2 : 1;
                }
                if (!layout_problem(m, plan_layout_request(in)).empty()) continue;
                ++a.considered;
                Candidate cand;
                if (!try_ledger(in, &cand.ledger) || !fits(cand.ledger, c)) continue;
                cand.in = in;
                cand.est = estimate_step(in, cand.ledger);
                if (profile) {
                  try {
                    cand.pred = predict_step(in, *profile);
                    cand.predicted = true;
                  } catch (const UsageError&) {
                    continue;
                  }
                }
                cand.peak_bytes = cand.ledger.stages[cand.ledger.heaviest].total();
                a.ranked.push_back(std::move(cand));
              }
      }
    }
  }
  usage_check(!a.ranked.empty(),
              "no layout of {} GPUs ({} per node, {:.0f} GB each) fits {} at global batch {} x seq {} ({} layouts tried); "
              "add GPUs or memory",
              gpus, c.gpus_per_node, c.gpu_mem_gb, m.name, G, m.seq_len, a.considered);
  std::stable_sort(a.ranked.begin(), a.ranked.end(), [](const Candidate& x, const Candidate& y) {
    double tx = x.step_s(), ty = y.step_s();
    if (std::abs(tx - ty) > 1e-6 * std::max(tx, ty)) return tx < ty;
    // Same time: the simpler layout (fewer parallel dimensions, lower ZeRO stage, no recompute),
    // then less memory.
    auto cx = complexity(x.in.layout), cy = complexity(y.in.layout);
    if (cx != cy) return cx < cy;
    return x.peak_bytes < y.peak_bytes;
  });
  return a;
}

std::string format_advice(const Advice& a, int top) {
  std::string o = "decision tree:\n";
  for (const auto& t : a.tree) o += "  " + t + "\n";
  const PlanInput& b = a.ranked.front().in;
  if (a.ranked.front().predicted) {
    o += fmt::format(
        "\nsearch: {} layouts considered, {} fit with {:.0f}% headroom; ranked by predicted step time on the machine profile "
        "(global batch {} x seq {}; plan/step_time.hpp: the schedule's critical path from each op's FLOPs and bytes)\n",
        a.considered, a.ranked.size(), 100 * b.cluster.headroom, b.global_batch(), b.model.seq_len);
    o += fmt::format("{:>3}  {:<90} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>10} {:>6} {:>10}\n", "#", "layout",
                     "step s", "compute", "tp", "cp", "ep", "bubble", "dp", "optim", "tokens/s", "MFU", "peak mem");
    for (int i = 0; i < std::min<int>(top, static_cast<int>(a.ranked.size())); ++i) {
      const Candidate& c = a.ranked[i];
      const StepPrediction& p = c.pred;
      o += fmt::format("{:>3}  {:<90} {:>9.4g} {:>9.4g} {:>8.3g} {:>8.3g} {:>8.3g} {:>8.3g} {:>8.3g} {:>8.3g} {:>10.4g} {:>5.1f}% {:>10}\n",
                       i + 1, layout_name(c.in.layout), p.step_s, p.compute_s, p.tp_s, p.cp_s, p.ep_s, p.bubble_s, p.dp_s,
                       p.optimizer_s, p.tokens_per_s, 100 * p.gflops_per_rank / p.peak_gflops,
                       fmt_gb(static_cast<double>(c.peak_bytes)));
    }
  } else {
    o += fmt::format(
        "\nsearch: {} layouts considered, {} fit with {:.0f}% headroom; ranked by estimated step time (global batch {} x seq {}; compute at "
        "{:.0f} TFLOP/s x {:.0f}% MFU per GPU; NVLink {:.0f} GB/s inside a node, InfiniBand {:.0f} Gb/s per GPU across; "
        "DP overlaps backward, TP and PP do not; --profile replaces this with the measured model)\n",
        a.considered, a.ranked.size(), 100 * b.cluster.headroom, b.global_batch(), b.model.seq_len, b.cluster.peak_tflops,
        100 * b.cluster.mfu, b.cluster.nvlink_gbs, b.cluster.ib_gbps);
    o += fmt::format("{:>3}  {:<90} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8} {:>7} {:>10}\n", "#", "layout", "step s",
                     "compute", "tp", "cp", "ep", "dp", "pp", "bubble", "peak mem");
    for (int i = 0; i < std::min<int>(top, static_cast<int>(a.ranked.size())); ++i) {
      const Candidate& c = a.ranked[i];
      o += fmt::format("{:>3}  {:<90} {:>9.3f} {:>9.3f} {:>8.3f} {:>8.3f} {:>8.3f} {:>8.3f} {:>8.3f} {:>6.1f}% {:>10}\n", i + 1,
                       layout_name(c.in.layout), c.est.total_s(), c.est.compute_s, c.est.tp_s, c.est.cp_s, c.est.ep_s,
                       c.est.dp_s, c.est.pp_s, 100 * c.est.bubble, fmt_gb(static_cast<double>(c.peak_bytes)));
    }
  }
  const Candidate& best = a.ranked.front();
  const PlanLayout& l = best.in.layout;
  std::vector<std::string> why;
  why.push_back(fmt::format("heaviest rank {} of {:.0f} GB", fmt_gb(static_cast<double>(best.peak_bytes)),
                            best.in.cluster.gpu_mem_gb));
  if (l.tp > 1) why.push_back(fmt::format("tp {} stays inside a node (NVLink)", l.tp));
  if (l.pp > 1) why.push_back(fmt::format("pp {} splits the layers (bubble {:.1f}%)", l.pp, 100 * best.est.bubble));
  if (l.cp > 1)
    why.push_back(fmt::format("cp {} splits each {}-token sequence (activations / {}; ring traffic {} per step, "
                              "{:.3f} s exposed)",
                              l.cp, best.in.model.seq_len, l.cp, fmt_gb(best.est.cp_bytes), best.est.cp_s));
  if (l.ep > 1)
    why.push_back(fmt::format("ep {} splits the experts' work and parameters (all-to-all {} per step{})", l.ep,
                              fmt_gb(best.predicted ? best.pred.ep_bytes : best.est.ep_bytes),
                              best.predicted ? fmt::format(", {:.3g} s", best.pred.ep_s) : ""));
  if (l.zero > 0)
    why.push_back(fmt::format("ZeRO-{} shards {} over dp {}", l.zero,
                              l.zero == 1 ? "optimizer state" : l.zero == 2 ? "optimizer state + gradients" : "all model state",
                              l.cp > 1 ? fmt::format("{} x cp {}", l.dp, l.cp) : fmt::format("{}", l.dp)));
  if (l.recompute) why.push_back("full recompute trades 1/3 more compute for activation memory");
  if (l.tp == 1 && l.pp == 1 && l.zero == 0) why.push_back("plain DDP: the least communication");
  o += "\nchosen: " + layout_name(l) + "\n  why: ";
  for (size_t i = 0; i < why.size(); ++i) o += (i ? "; " : "") + why[i];
  o += "\n";
  return o;
}

std::string layout_job_toml(const PlanInput& in, const std::string& profile) {
  check_layout(in.model, plan_layout_request(in));  // a job `train` accepts, or none
  const PlanLayout& l = in.layout;
  std::string o = "# written by `mpitron plan --advise --emit-job`\n[job]\n";
  // The preset the config came from ("+custom" marks job overrides), with the sizes spelled out.
  std::string preset = in.model.name;
  if (auto k = preset.find('+'); k != std::string::npos) preset.resize(k);
  o += fmt::format("name = \"{}-{}gpu\"\n\n[model]\npreset = \"{}\"\nn_layer = {}\nn_head = {}\nd_model = {}\n", preset,
                   l.world(), preset, in.model.n_layer, in.model.n_head, in.model.d_model);
  o += fmt::format("vocab_size = {}\nseq_len = {}\ntie_embeddings = {}\n", in.model.vocab_size, in.model.seq_len,
                   in.model.tied_embeddings ? "true" : "false");
  if (const ModelConfig& m = in.model; m.arch == Arch::llama) {  // the preset's own keys as planned (GQA, widths, RoPE)
    o += fmt::format("arch = \"llama\"\nn_kv_head = {}\nhead_dim = {}\nd_ff = {}\nnorm_eps = {}\nrope_theta = {}\n", m.n_kv_head,
                     m.head_dim(), m.d_ff, m.norm_eps, m.rope_theta);
    o += fmt::format("qkv_bias = {}\nqk_norm = {}\nrope_scaling = \"{}\"\n", m.qkv_bias ? "true" : "false",
                     m.qk_norm ? "true" : "false", rope_scaling_name(m.rope_scaling.type));
    if (const RopeScaling& r = m.rope_scaling; r.enabled()) {
      o += fmt::format("rope_factor = {}\nrope_original_max_pos = {}\n", r.factor, r.original_max_pos);
      if (r.type == RopeScalingType::llama3)
        o += fmt::format("rope_low_freq_factor = {}\nrope_high_freq_factor = {}\n", r.low_freq_factor, r.high_freq_factor);
      else
        o += fmt::format("rope_beta_fast = {}\nrope_beta_slow = {}\nrope_attention_factor = {}\n", r.beta_fast, r.beta_slow,
                         r.attention_factor);
    }
  }
  o += "\n";
  if (const MoeConfig& e = in.model.moe; e.enabled()) {  // the experts spelled out as well
    o += fmt::format("[model.moe]\nn_experts = {}\ntop_k = {}\nexpert_d_ff = {}\nn_shared_experts = {}\nlayer_freq = {}\n",
                     e.n_experts, e.top_k, e.d_ff, e.n_shared, e.layer_freq);
    o += fmt::format("router = \"{}\"\nnorm_topk_prob = {}\naux_loss_coef = {}\nz_loss_coef = {}\ncapacity_factor = {}\n\n",
                     e.router == MoeRouter::softmax_topk ? "softmax_topk" : "topk_softmax",
                     e.norm_topk_prob ? "true" : "false", e.aux_loss_coef, e.z_loss_coef, e.capacity_factor);
  }
  o += fmt::format("[parallel]\ndp = {}\ntp = {}\npp = {}\ncp = {}\nzero = {}\nsp = {}\nschedule = \"{}\"\nmicrobatches = {}\n",
                   l.dp, l.tp, l.pp, l.cp, l.zero, l.sp ? "true" : "false", l.schedule, l.microbatches);
  if (l.virtual_stages > 1) o += fmt::format("virtual_stages = {}\n", l.virtual_stages);
  if (l.ep > 1) o += fmt::format("ep = {}\n", l.ep);
  o += "\n";
  const bool gpu = in.precision != Precision::fp32;
  o += fmt::format("[train]\nbackend = \"{}\"\nmicro_batch = {}\nglobal_batch = {}\nrecompute = \"{}\"\n", gpu ? "nccl" : "cpu",
                   l.micro_batch, in.global_batch(), l.recompute ? "full" : "none");
  // The GEMMs planned for, pinned: the CPU trainer's default ("auto") picks bf16 or fp32 by a
  // start-up probe, which the plan does not know.
  if (in.fp8_linears) o += "precision = \"fp8\"\n";
  else if (!gpu) o += fmt::format("precision = \"{}\"\n", in.cpu_bf16_gemms ? "bf16" : "fp32");
  if (!gpu && in.cpu_threads > 0) o += fmt::format("threads = {}\n", in.cpu_threads);  // as priced
  // The run checks the prediction it was chosen by (train.check_prediction).
  if (!profile.empty()) o += fmt::format("profile = \"{}\"\ncheck_prediction = true\n", profile);
  return o;
}

std::string explain_strategies(const PlanInput& in) {
  const ModelConfig& m = in.model;
  const ClusterSpec& c = in.cluster;
  const PlanLayout& l = in.layout;
  const double e = elt(in.precision);
  // Degrees: the layout's when > 1, else a representative one for this cluster.
  const int d = l.dp > 1 ? l.dp : std::max(2, c.gpus);
  int t = l.tp > 1 ? l.tp : 1;
  if (l.tp == 1)
    for (int x : divisors(c.gpus_per_node))
      if (m.n_head % x == 0 && m.d_ff % x == 0) t = x;
  const int p = l.pp > 1 ? l.pp : std::min(m.n_layer, std::max(2, c.gpus / std::max(1, c.gpus_per_node)));
  const int cp = l.cp > 1 ? l.cp : 2;
  const int mb = l.microbatches, b = l.micro_batch;
  const double s = m.seq_len, h = m.d_model;
  // Parameters of the whole model (16 B/param state aside): one ledger over one rank.
  PlanInput one = in;
  one.layout = PlanLayout{};
  one.layout.micro_batch = b;
  one.cluster.gpus = 1;
  const double P = static_cast<double>(compute_ledger(one).total_params);
  const double bsh = b * s * h * e;
  const double dp_bytes = 2.0 * (d - 1) / d * P * e;
  const double z3_bytes = 3.0 * (d - 1) / d * P * e;
  const double tp_bytes = 4.0 * m.n_layer / l.pp * mb * bsh * 2.0 * (t - 1) / t;  // the layers this rank holds
  const double pp_bytes = 2.0 * mb * bsh;
  const double kv_bytes = b * s * 2.0 * m.n_kv_head * m.head_dim() * e;
  const double cp_bytes = 2.0 * m.n_layer * mb * kv_bytes * (cp - 1) / cp;  // all-gather K,V forward + reduce-scatter of their grads backward
  std::string o = fmt::format(
      "strategies for {} ({:.2f}B parameters) on {} GPUs ({} per node), micro-batch {} x {} micro-batches, seq {}, {} "
      "(e = {} B/element); bytes are per rank per optimizer step\n\n",
      m.name, P / 1e9, c.gpus, c.gpus_per_node, b, mb, m.seq_len, precision_name(in.precision), e);
  o += fmt::format("{:<12} {:<50} {:<52} {:>22}  {}\n", "strategy", "splits", "collective (group)", "bytes/step",
                   "belongs");
  o += fmt::format("{:<12} {:<50} {:<52} {:>22}  {}\n", fmt::format("DP (d={})", d), "the batch; every rank holds the whole model",
                   "all-reduce of gradients (dp), 2(d-1)/d*P*e", fmt_gb(dp_bytes),
                   "anywhere: the least bandwidth-hungry, overlaps backward");
  o += fmt::format("{:<12} {:<50} {:<52} {:>22}  {}\n", fmt::format("ZeRO (d={})", d),
                   "optimizer state (1), + gradients (2), + params (3)",
                   "reduce-scatter grads + all-gather params (dp)", fmt::format("{} / {}", fmt_gb(dp_bytes), fmt_gb(z3_bytes)),
                   "when model state does not fit; stage 3 moves 1.5x DP");
  o += fmt::format("{:<12} {:<50} {:<52} {:>22}  {}\n", fmt::format("TP (t={})", t), "each layer's weight matrices (heads, FFN columns)",
                   "all-reduce of activations, 4 per layer (tp)", fmt_gb(tp_bytes),
                   fmt::format("inside a node on NVLink (t <= {})", c.gpus_per_node));
  o += fmt::format("{:<12} {:<50} {:<52} {:>22}  {}\n", fmt::format("PP (p={})", p), "the layers into stages",
                   "send/recv activations + their grads (pp)", fmt_gb(pp_bytes),
                   fmt::format("across nodes (bubble {:.1f}% at m={})", 100.0 * (p - 1) / (mb + p - 1), mb));
  o += fmt::format("{:<12} {:<50} {:<52} {:>22}  {}\n", fmt::format("SP (t={})", t), "the sequence in norm/dropout regions",
                   "all-gather + reduce-scatter, replaces TP's all-reduce", fmt_gb(tp_bytes),
                   "with TP, inside a node: same bytes, activations / t");
  o += fmt::format("{:<12} {:<50} {:<52} {:>22}  {}\n", fmt::format("CP (c={})", cp), "the sequence in attention",
                   "all-gather K,V fwd + reduce-scatter bwd (cp)", fmt_gb(cp_bytes), "long sequences; inside a node or next to it");
  if (m.moe.enabled()) {  // the routed copies of every MoE layer this rank holds, 4 exchanges each
    int ep = l.ep > 1 ? l.ep : 1;
    if (l.ep == 1)
      for (int x : divisors(d))
        if (m.moe.n_experts % x == 0 && x <= c.gpus_per_node) ep = x;
    const double ep_bytes = moe_layers_of_rank(m, l.pp) * mb * 4.0 * b * (s / l.cp) * m.moe.top_k * h * e *
                            (ep - 1.0) / ep;
    o += fmt::format("{:<12} {:<50} {:<52} {:>22}  {}\n", fmt::format("EP (e={})", ep), "the experts of each MoE layer",
                     "all-to-all dispatch + combine of routed tokens (ep)", fmt_gb(ep_bytes),
                     "MoE: inside a node; ep of the dp x cp ranks, ep | experts");
  }
  o += fmt::format(
      "\nP = {:.3e} parameters; one activation b*s*h*e = {}; the seed's rule: TP inside a node (NVLink, it talks every "
      "layer), PP across nodes (point-to-point, once per micro-batch), DP/ZeRO over the rest (once per step).\n",
      P, fmt_gb(bsh));
  return o;
}

}  // namespace mpitron
