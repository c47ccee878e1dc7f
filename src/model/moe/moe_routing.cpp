// The MoE router's arithmetic (moe_routing.hpp).
#include "mpitron/model/moe/moe_routing.hpp"

#include <algorithm>
#include <cmath>

#include "mpitron/core/error.hpp"

namespace mpitron {

void moe_route(const MoeConfig& cfg, const float* logits, int64_t R, int64_t T, MoeRouting& r,
               const MoeCapacityHook& cp_prior) {
  const int E = cfg.n_experts, k = cfg.top_k;
  check(E >= 1 && k >= 1 && k <= E, "moe_route: top_k {} of {} experts", k, E);
  check(T > 0 && R % T == 0, "moe_route: {} rows are not whole sequences of {}", R, T);
  r.rows = R, r.n_experts = E, r.top_k = k, r.seq_len = T;
  r.seq_routed.assign(static_cast<size_t>(R / T * E), 0);
  r.seq_psum.assign(static_cast<size_t>(R / T * E), 0.0);
  r.seq_tokens = T;
  r.probs.assign(static_cast<size_t>(R * E), 0.f);
  r.lse.assign(static_cast<size_t>(R), 0.f);
  r.expert.assign(static_cast<size_t>(R * k), 0);
  r.weight.assign(static_cast<size_t>(R * k), 0.f);
  r.routed.assign(static_cast<size_t>(E), 0);
  std::vector<int> idx(static_cast<size_t>(E));
  std::vector<double> ex(static_cast<size_t>(E));
  double zsum = 0;
  for (int64_t t = 0; t < R; ++t) {
    const float* l = logits + t * E;
    float mx = l[0];
    for (int e = 1; e < E; ++e) mx = std::max(mx, l[e]);
    double sum = 0;
    for (int e = 0; e < E; ++e) sum += (ex[e] = std::exp(double(l[e]) - mx));
    const double lse = mx + std::log(sum);
    r.lse[t] = static_cast<float>(lse);
    zsum += lse * lse;
    float* p = r.probs.data() + t * E;
    for (int e = 0; e < E; ++e) p[e] = static_cast<float>(ex[e] / sum);  // exp(l - lse), one exp per logit
    // The top k by logit, ties to the lower index: one pass in index order, inserting an expert
    // after every kept one with a logit >= its own (an insertion list of k; the same order as
    // sorting by (logit descending, index ascending), without a sort per token).
    int n = 0;
    for (int e = 0; e < E; ++e) {
      if (n == k && !(l[e] > l[idx[k - 1]])) continue;
      int at = n < k ? n++ : k - 1;
      for (; at > 0 && l[e] > l[idx[at - 1]]; --at) idx[at] = idx[at - 1];
      idx[at] = e;
    }
    int32_t* chosen = r.expert.data() + t * k;
    float* w = r.weight.data() + t * k;
    double wsum = 0;
    for (int j = 0; j < k; ++j) {
      chosen[j] = idx[j];
      ++r.routed[idx[j]];
      ++r.seq_routed[t / T * E + idx[j]];
      // softmax_topk: exp(l - l_best) / sum over the selected, the best logit the max.
      w[j] = cfg.router == MoeRouter::softmax_topk ? static_cast<float>(std::exp(double(l[idx[j]]) - l[idx[0]]))
                                                   : p[idx[j]];
      wsum += w[j];
    }
    if (cfg.router == MoeRouter::softmax_topk || cfg.norm_topk_prob)
      for (int j = 0; j < k; ++j) w[j] = static_cast<float>(w[j] / wsum);
  }
  // Capacity drops in token order (a copy is kept while fewer than cap copies to its expert came
  // before it, here or, under cp, in the other ranks' earlier chunks), then the stable
  // expert-sorted order of the kept copies.
  MoeCapacityPrior prior;
  if (cfg.capacity_factor > 0 && cp_prior) {
    prior = cp_prior(r);
    check(prior.chunk_rows > 0 && R % prior.chunk_rows == 0 &&
              prior.before.size() == static_cast<size_t>(R / prior.chunk_rows * E) && prior.total_rows >= R,
          "moe_route: a capacity prior of {} values for {} rows in chunks of {}", prior.before.size(), R,
          prior.chunk_rows);
  }
  const int64_t base_rows = prior.total_rows > 0 ? prior.total_rows : R;
  const int64_t cap = moe_capacity(cfg, base_rows);
  r.counts.assign(static_cast<size_t>(E), 0);
  r.pos.assign(static_cast<size_t>(R * k), -1);
  r.dropped = 0;
  std::vector<uint8_t> kept(static_cast<size_t>(R * k), 0);
  std::vector<int64_t> seen(static_cast<size_t>(E), 0);  // copies routed so far here, before drops
  for (int64_t a = 0; a < R * k; ++a) {
    const int e = r.expert[a];
    const int64_t before = prior.chunk_rows ? prior.before[(a / k) / prior.chunk_rows * E + e] : 0;
    if (seen[e]++ + before < cap) {
      ++r.counts[e];
      kept[a] = 1;
    } else {
      ++r.dropped;
    }
  }
  std::vector<int64_t> next(static_cast<size_t>(E), 0);
  for (int e = 1; e < E; ++e) next[e] = next[e - 1] + r.counts[e - 1];
  r.order.assign(static_cast<size_t>(R * k - r.dropped), 0);
  for (int64_t a = 0; a < R * k; ++a) {
    if (!kept[a]) continue;
    const int64_t at = next[r.expert[a]]++;
    r.order[at] = a;
    r.pos[a] = at;
  }
  // The auxiliary losses, aux per sequence.
  for (int64_t t = 0; t < R; ++t)
    for (int e = 0; e < E; ++e) r.seq_psum[t / T * E + e] += r.probs[t * E + e];
  moe_aux_loss(r);
  r.z = R > 0 ? zsum / double(R) : 0.0;
}

int64_t moe_capacity(const MoeConfig& cfg, int64_t base_rows) {
  return cfg.capacity_factor > 0
             ? static_cast<int64_t>(std::ceil(cfg.capacity_factor * double(base_rows) * cfg.top_k / cfg.n_experts))
             : INT64_MAX;
}

MoeRouterShape moe_router_shape(const MoeConfig& cfg, int64_t R, int64_t T, int64_t seq_tokens, int64_t base_rows,
                                int64_t chunk_rows) {
  MoeRouterShape s;
  s.rows = R, s.seq_len = T, s.seq_tokens = seq_tokens, s.n_experts = cfg.n_experts, s.top_k = cfg.top_k;
  s.weights = cfg.router == MoeRouter::softmax_topk ? MoeWeights::softmax_topk
              : cfg.norm_topk_prob                  ? MoeWeights::probs_renorm
                                                    : MoeWeights::probs;
  s.capacity = moe_capacity(cfg, base_rows);
  s.chunk_rows = chunk_rows;
  return s;
}

int64_t moe_activation_bytes(const ModelConfig& cfg, int64_t R, int64_t T, int ep, int tp) {
  const MoeConfig& m = cfg.moe;
  const int64_t E = m.n_experts, Rk = R * m.top_k, S = T > 0 ? R / T : 0, C = cfg.d_model, Fe = m.d_ff;
  const int64_t fl = int64_t{m.n_shared} * Fe / tp;
  // The routing (MoeRouting): probs, lse, expert, weight, pos, order, counts, routed, seq_routed, seq_psum.
  const int64_t routing = 4 * (R * E + R + Rk + Rk) + 8 * (Rk + Rk + 2 * E + S * E) + 8 * S * E;
  // MoeActs: logits, ys, xe, h, act, sh_h, sh_act (fp32 on the CPU), idx, ne, send_rows, recv_rows.
  const int64_t acts = 4 * (R * E + Rk * C * 2 + Rk * 3 * Fe + (fl > 0 ? R * 3 * fl : 0)) +
                       8 * (Rk + E / ep) + 2 * int64_t{sizeof(size_t)} * ep;
  return routing + acts;
}

int64_t moe_gpu_activation_bytes(const ModelConfig& cfg, int64_t R, int64_t T, int ep, int tp) {
  const MoeConfig& m = cfg.moe;
  const int64_t Rk = R * m.top_k, C = cfg.d_model, Fe = m.d_ff, fl = int64_t{m.n_shared} * Fe / tp;
  const int64_t E = m.n_experts, S = T > 0 ? R / T : 0;
  // MoeActs' device arrays: ys, xe, h, act, sh_h, sh_act (bf16); pos_d (int64), weight_d (fp32),
  // expert_d (int32), probs_d [R, E] and lse_d [R] (fp32), seq_routed_d [S, E] (int64); idx_d
  // (int64, ep > 1: balanced, the owner gets Rk rows).
  return 2 * (Rk * C * 2 + Rk * 3 * Fe + (fl > 0 ? R * 3 * fl : 0)) + 16 * Rk + 4 * (R * E + R) + 8 * S * E +
         (ep > 1 ? 8 * Rk : 0);
}

void moe_aux_loss(MoeRouting& r) {
  const int E = r.n_experts, k = r.top_k;
  const int64_t S = r.seq_len > 0 ? r.rows / r.seq_len : 0;
  const double T = double(r.seq_tokens);
  double aux = 0;
  for (int64_t s = 0; s < S; ++s)
    for (int e = 0; e < E; ++e) aux += (double(r.seq_routed[s * E + e]) / (T * k)) * (r.seq_psum[s * E + e] / T);
  r.aux = S > 0 ? E * aux / double(S) : 0.0;
}

void moe_router_backward(const MoeConfig& cfg, const MoeRouting& r, const float* dweight, double loss_scale,
                         float* dlogits) {
  const int E = r.n_experts, k = r.top_k;
  const int64_t R = r.rows;
  const bool renorm = cfg.router == MoeRouter::softmax_topk || cfg.norm_topk_prob;
  // d objective / d p_te of the load-balancing loss: objective coef * loss_scale * sum_s T aux_s,
  // so coef * loss_scale * E f_se for t in sequence s.
  const int64_t T = r.seq_len;
  const double Tn = double(r.seq_tokens);
  std::vector<double> dp(static_cast<size_t>(E));
  for (int64_t t = 0; t < R; ++t) {
    const int64_t* routed = r.seq_routed.data() + t / T * E;
    const float* p = r.probs.data() + t * E;
    const int32_t* ex = r.expert.data() + t * k;
    const float* w = r.weight.data() + t * k;
    const float* dw = dweight + t * k;
    for (int e = 0; e < E; ++e) dp[e] = cfg.aux_loss_coef * loss_scale * E * (double(routed[e]) / (Tn * k));
    if (renorm) {  // w_j = p_j / S, S = sum of the selected p
      double s = 0, wdw = 0;
      for (int j = 0; j < k; ++j) s += p[ex[j]], wdw += double(w[j]) * dw[j];
      for (int j = 0; j < k; ++j) dp[ex[j]] += (dw[j] - wdw) / s;
    } else {
      for (int j = 0; j < k; ++j) dp[ex[j]] += dw[j];
    }
    double pdp = 0;
    for (int e = 0; e < E; ++e) pdp += p[e] * dp[e];
    // z-loss: coef * loss_scale * R * (1/R) 2 lse p_te.
    const double dz = cfg.z_loss_coef * loss_scale * 2.0 * r.lse[t];
    float* dl = dlogits + t * E;
    for (int e = 0; e < E; ++e) dl[e] = static_cast<float>(p[e] * (dp[e] - pdp) + dz * p[e]);
  }
}

}  // namespace mpitron
