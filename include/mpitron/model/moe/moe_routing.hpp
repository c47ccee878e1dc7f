// The router of a mixture-of-experts MLP (moe_mlp.hpp) on the host: top-k selection, routing
// weights, capacity drops, the expert-sorted order of the token copies, the load-balancing and
// z losses and the router's backward. Pure arithmetic on one micro-batch's router logits, the
// same on every rank and layout.
//
// Per token t (rows R, experts E, k = top_k):
//   p_t = softmax(logits_t) over all E experts; the top k by logit, ties to the lower expert
//   index (so every layout routes alike); routing weights
//     softmax_topk:                  w = softmax over the k selected logits (Mixtral)
//     topk_softmax:                  w = p of the selected (Switch, OLMoE)
//     topk_softmax + norm_topk_prob: w = p of the selected / their sum (Qwen-MoE)
//   capacity_factor c > 0: each expert keeps the first ceil(c R k / E) token copies in token
//   order (Megatron's "position" drop policy); the rest are dropped (their weight goes nowhere).
// Losses (Switch / GShard, Megatron's normalisation), per sequence of T rows (DeepSeek-V3's
// sequence-wise balance loss, Megatron's "seq_aux_loss"):
//   aux_s = E * sum_e f_se P_se,  f_se = copies of sequence s routed to e (before drops) / (T k),
//           P_se = mean over s's tokens of p_te;   aux = mean_s aux_s
//   z     = mean_t logsumexp(logits_t)^2
// Both enter the training objective as coef * value * R / N (N: counted targets of the global
// batch; moe_router_backward's loss_scale is 1 / N): over a step, the mean over sequences (aux)
// and tokens (z). Per sequence, not per micro-batch, so that how the sequences are grouped into
// micro-batches and data-parallel ranks changes nothing: every layout trains the same objective.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "mpitron/model/config.hpp"
#include "mpitron/ops/moe_router.hpp"

namespace mpitron {

struct MoeRouting {
  int64_t rows = 0;
  int n_experts = 0, top_k = 0;
  std::vector<float> probs;       // [R, E] softmax over all logits
  std::vector<float> lse;         // [R]
  std::vector<int32_t> expert;    // [R k] the chosen experts, best first
  std::vector<float> weight;      // [R k] their routing weights
  std::vector<int64_t> pos;       // [R k] the copy's row in expert-sorted order, -1 when dropped
  std::vector<int64_t> order;     // [kept] copy index t k + j, sorted by expert (stable in t, j)
  std::vector<int64_t> counts;    // [E] kept copies per expert
  std::vector<int64_t> routed;    // [E] copies routed per expert before drops
  int64_t seq_len = 0;            // T: rows per sequence (on this rank)
  std::vector<int64_t> seq_routed;  // [R / T, E] the same per sequence
  std::vector<double> seq_psum;     // [R / T, E] the probabilities summed per sequence
  // The whole sequence's tokens: T, or T x cp under context parallel, where seq_routed and
  // seq_psum hold the sums over the context-parallel ranks (moe_aux_loss then gives every rank the
  // whole sequences' aux loss, and the backward the whole sequences' gradient).
  int64_t seq_tokens = 0;
  int64_t dropped = 0;
  double aux = 0, z = 0;
};

// Running statistics of one MoE block (metrics): over the micro-batches since the last reset.
struct MoeStats {
  std::vector<int64_t> tokens;  // [E] kept copies per expert
  int64_t dropped = 0, routed = 0;
  double aux = 0, z = 0;  // sums over micro-batches of value * rows
  int64_t rows = 0;
  void add(const MoeRouting& r) {
    if (tokens.size() != r.counts.size()) tokens.assign(r.counts.size(), 0);
    for (size_t e = 0; e < r.counts.size(); ++e) tokens[e] += r.counts[e];
    dropped += r.dropped, routed += r.rows * r.top_k;
    aux += r.aux * double(r.rows), z += r.z * double(r.rows), rows += r.rows;
  }
};

// Capacity drops under context parallel: the single-rank run keeps an expert's first copies in
// the micro-batch's token order over all of its rows, and a cp rank holds only some chunks of each
// sequence (model_chunk.hpp, cp_global_position). Per chunk of `chunk_rows` local rows and expert:
// the copies the other cp ranks' rows that come before the chunk in token order routed to it
// (before drops); `total_rows` the micro-batch's rows on all of them (the capacity's base).
struct MoeCapacityPrior {
  int64_t chunk_rows = 0, total_rows = 0;
  std::vector<int64_t> before;  // [rows / chunk_rows, E]
};
// Called with the routing before drops, when a capacity factor is set (MoeMlp: an all-gather of
// the per-chunk counts over cp).
using MoeCapacityHook = std::function<MoeCapacityPrior(const MoeRouting&)>;

// An expert's capacity: the kept copies of base_rows rows (R, or R x cp under context parallel),
// ceil(capacity_factor base_rows top_k / E); INT64_MAX when dropless.
int64_t moe_capacity(const MoeConfig& cfg, int64_t base_rows);

// The device router's shape (ops/moe_router.hpp) for R rows in sequences of T here, whole sequences
// of seq_tokens, capacity drops counted over base_rows (R, or R x cp: moe_route's base), and a
// prior in chunks of chunk_rows (0: none).
MoeRouterShape moe_router_shape(const MoeConfig& cfg, int64_t rows, int64_t seq_len, int64_t seq_tokens,
                                int64_t base_rows, int64_t chunk_rows = 0);

// Routing of R rows of router logits [R, E] (E = cfg.n_experts), sequences of seq_len rows.
void moe_route(const MoeConfig& cfg, const float* logits, int64_t rows, int64_t seq_len, MoeRouting& r,
               const MoeCapacityHook& cp_prior = {});

// Bytes of a MoE block's saved state (MoeActs in moe_mlp.hpp: the routing, the router logits,
// the copies' inputs, gate|up, SwiGLU and outputs, the exchange plan, the shared experts') for
// `rows` rows in sequences of `seq_rows`, ep and tp ranks, at balanced dropless routing (every
// rank's experts get rows x top_k copies): what MoeMlp::reserve allocates, the memory ledger's
// number. Routing that sends a rank more copies grows its owner-side part, and the tracker sees it.
int64_t moe_activation_bytes(const ModelConfig& cfg, int64_t rows, int64_t seq_rows, int ep, int tp);
// The GPU's (TransformerModelCuda): the device arrays (bf16 rows; the device router's probabilities,
// logsumexp, chosen experts, routing weights, sorted positions and per-sequence counts, which the
// backward reads; with ep > 1 the exchange order); only the counts come to the host.
int64_t moe_gpu_activation_bytes(const ModelConfig& cfg, int64_t rows, int64_t seq_rows, int ep, int tp);

// r.aux from r.seq_routed, r.seq_psum and r.seq_tokens (moe_route calls it; context parallel
// calls it again once those hold the sums over the cp ranks).
void moe_aux_loss(MoeRouting& r);

// d(objective)/d logits [R, E] (overwritten) from the gradient of the routing weights dweight
// [R k] (0 for dropped copies) plus the auxiliary and z losses' terms, those scaled by
// coef * loss_scale * R (the objective above).
void moe_router_backward(const MoeConfig& cfg, const MoeRouting& r, const float* dweight, double loss_scale,
                         float* dlogits);

}  // namespace mpitron
