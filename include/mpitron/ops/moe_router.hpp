// The MoE router on the device (CudaOps::moe_router_*, src/ops/cuda/moe_router.cu): the arithmetic
// of moe_routing.hpp (softmax, top-k with ties to the lower index, routing weights, capacity drops
// in token order, the expert-sorted order, the load-balancing and z losses, the router's backward)
// cut into the work of one GPU thread each. The kernels are thin loops over these functions; the
// CPU emulation of CudaOps (bench/gpu/emulate) and tests/unit/test_moe_router_steps.cpp run the
// same functions in one thread (select_serial, place_serial, backward_serial at the end), so the
// device's decomposition (chunked ranks, fixed-order partial sums) is checked against the host
// router without a GPU; only the loops' scheduling is the GPU's.
//
// The steps (MoeMlp, moe_mlp.hpp, calls them in this order):
//   select:  per row, softmax, logsumexp, top k, weights; per sequence, the copies routed to each
//            expert (before drops) and the probabilities' sums (fixed-order partial sums).
//   (context parallel: the per-sequence sums go over the cp ranks on the host, and come back.)
//   place:   each copy's rank among its expert's copies in token order (chunks of kRouterChunk
//            copies: a histogram per chunk, a scan over chunks, a count inside the chunk); a copy
//            is kept while rank + before < capacity (before: under context parallel, what the
//            other cp ranks routed to the expert in the chunks before; kept copies are then a
//            prefix of each expert's); counts; each copy's row in expert-sorted order (pos) and
//            each sorted row's source row (srow); a summary for the host: kept copies per expert,
//            dropped copies, aux and z.
//   backward: d objective / d logits per row from the routing weights' gradient and the two losses.
// Everything is deterministic: integer counts, and floating-point sums in a fixed order.
#pragma once
#include <cmath>
#include <cstdint>

#ifdef __CUDACC__
#define MPITRON_HD __host__ __device__
#else
#define MPITRON_HD
#endif

namespace mpitron {

// How the selected experts' weights come from the logits (moe_routing.hpp): softmax over the k
// selected logits (Mixtral); the selected probabilities (Switch, OLMoE); those over their sum (Qwen).
enum class MoeWeights : uint8_t { softmax_topk, probs, probs_renorm };

constexpr int kRouterMaxTopK = 32;        // a thread's insertion list
constexpr int kRouterMaxExperts = 1024;   // a chunk histogram in shared memory
constexpr int64_t kRouterChunk = 256;     // copies per rank chunk (one block)
constexpr int kRouterPsumGroups = 32;     // row groups per sequence of the probabilities' sums
constexpr int kRouterReduceThreads = 256; // the fixed reduction width of aux and z

struct MoeRouterShape {
  int64_t rows = 0, seq_len = 0;  // R, T (rows of one sequence on this rank)
  int64_t seq_tokens = 0;         // the whole sequence's tokens (T, or T x cp)
  int n_experts = 0, top_k = 0;
  MoeWeights weights = MoeWeights::softmax_topk;
  int64_t capacity = INT64_MAX;   // kept copies per expert (INT64_MAX: dropless)
  int64_t chunk_rows = 0;         // rows per entry of before (0: no before)
  MPITRON_HD int64_t copies() const { return rows * top_k; }
  MPITRON_HD int64_t seqs() const { return seq_len > 0 ? rows / seq_len : 0; }
  MPITRON_HD int64_t chunks() const { return (copies() + kRouterChunk - 1) / kRouterChunk; }
  // Scratch the steps need (MoeRouterArrays::scratch, ::dscratch), in elements.
  MPITRON_HD int64_t scratch_elems() const { return copies() + chunks() * n_experts + 2 * n_experts + 1; }
  // dscratch: the probabilities' and the counts' partial sums [S, G, E] each, then the loss partials.
  MPITRON_HD int64_t psum_partials() const { return seqs() * kRouterPsumGroups * n_experts; }
  MPITRON_HD int64_t dscratch_elems() const { return 2 * psum_partials() + 2 * kRouterReduceThreads; }
};

// Device arrays of one MoE block's routing (sizes in rows R, copies R k, sequences S, experts E).
struct MoeRouterArrays {
  float* probs = nullptr;        // [R, E]   kept for backward
  float* lse = nullptr;          // [R]      kept
  int32_t* expert = nullptr;     // [R k]    kept: the chosen experts, best first
  float* weight = nullptr;       // [R k]    kept: routing weights
  int64_t* pos = nullptr;        // [R k]    kept: row in expert-sorted order, -1 when dropped
  int64_t* seq_routed = nullptr; // [S, E]   kept: copies routed per sequence (before drops)
  double* seq_psum = nullptr;    // [S, E]   probabilities summed per sequence
  int64_t* srow = nullptr;       // [R k]    the first sum(counts) entries: each sorted copy's token row
  const int64_t* before = nullptr;  // [R / chunk_rows, E] or null (MoeRouterShape::chunk_rows)
  double* summary = nullptr;     // [E + 3]  kept copies per expert, dropped, aux, z (the host's copy)
  int64_t* scratch = nullptr;    // [scratch_elems]: ranks, chunk counts, counts, offsets, dropped
  double* dscratch = nullptr;    // [dscratch_elems]: partial sums
};

namespace moe_router {

// The scratch array's layout: ranks [R k], chunk counts [chunks, E], counts [E], offsets [E].
struct RouterScratch {
  int64_t *rank, *chunk, *counts, *offsets;
  MPITRON_HD RouterScratch(const MoeRouterShape& s, int64_t* p)
      : rank(p), chunk(p + s.copies()), counts(chunk + s.chunks() * s.n_experts), offsets(counts + s.n_experts) {}
};

// Row t: softmax over the E logits (logit(i): element i of the [R, E] logits as float), logsumexp,
// the top k by logit (ties to the lower index: an insertion list in index order), the weights.
template <class Logit>
MPITRON_HD void select_row(const MoeRouterShape& s, const Logit& logit, int64_t t, const MoeRouterArrays& a) {
  const int E = s.n_experts, k = s.top_k;
  const int64_t r0 = t * E;
  float mx = logit(r0);
  for (int e = 1; e < E; ++e) mx = fmaxf(mx, logit(r0 + e));
  double sum = 0;
  for (int e = 0; e < E; ++e) sum += ::exp(double(logit(r0 + e)) - mx);
  a.lse[t] = static_cast<float>(mx + ::log(sum));
  int idx[kRouterMaxTopK];
  int n = 0;
  for (int e = 0; e < E; ++e) {
    const float le = logit(r0 + e);
    a.probs[r0 + e] = static_cast<float>(::exp(double(le) - mx) / sum);
    if (n == k && !(le > logit(r0 + idx[k - 1]))) continue;
    int at = n < k ? n++ : k - 1;
    for (; at > 0 && le > logit(r0 + idx[at - 1]); --at) idx[at] = idx[at - 1];
    idx[at] = e;
  }
  double wsum = 0;
  const float best = logit(r0 + idx[0]);
  for (int j = 0; j < k; ++j) {
    a.expert[t * k + j] = idx[j];
    const float w = s.weights == MoeWeights::softmax_topk ? static_cast<float>(::exp(double(logit(r0 + idx[j])) - best))
                                                           : a.probs[r0 + idx[j]];
    a.weight[t * k + j] = w;
    wsum += w;
  }
  if (s.weights != MoeWeights::probs)
    for (int j = 0; j < k; ++j) a.weight[t * k + j] = static_cast<float>(a.weight[t * k + j] / wsum);
}

// Sequence sq's row group g (of kRouterPsumGroups), expert e: the routed copies and the summed
// probabilities of its rows, into the partials [S, G, E] (counts as doubles: exact).
MPITRON_HD inline void seq_partial(const MoeRouterShape& s, int64_t sq, int g, int e, const MoeRouterArrays& a) {
  const int64_t T = s.seq_len, per = (T + kRouterPsumGroups - 1) / kRouterPsumGroups;
  const int64_t t0 = sq * T + g * per, t1 = sq * T + (g + 1 < kRouterPsumGroups ? (g + 1) * per : T);
  double p = 0, c = 0;
  for (int64_t t = t0; t < t1 && t < (sq + 1) * T; ++t) {
    p += a.probs[t * s.n_experts + e];
    for (int j = 0; j < s.top_k; ++j) c += a.expert[t * s.top_k + j] == e ? 1.0 : 0.0;
  }
  const int64_t at = (sq * kRouterPsumGroups + g) * s.n_experts + e, half = s.psum_partials();
  a.dscratch[at] = p, a.dscratch[half + at] = c;
}
// ... and the groups added in order.
MPITRON_HD inline void seq_sum(const MoeRouterShape& s, int64_t sq, int e, const MoeRouterArrays& a) {
  const int64_t half = s.psum_partials();
  double p = 0, c = 0;
  for (int g = 0; g < kRouterPsumGroups; ++g) {
    const int64_t at = (sq * kRouterPsumGroups + g) * s.n_experts + e;
    p += a.dscratch[at], c += a.dscratch[half + at];
  }
  a.seq_psum[sq * s.n_experts + e] = p;
  a.seq_routed[sq * s.n_experts + e] = static_cast<int64_t>(c);
}

// Chunk c's copies routed to expert e (the kernel counts a chunk in shared memory at once).
MPITRON_HD inline int64_t chunk_count(const MoeRouterShape& s, int64_t c, int e, const MoeRouterArrays& a) {
  const int64_t end = c * kRouterChunk + kRouterChunk < s.copies() ? c * kRouterChunk + kRouterChunk : s.copies();
  int64_t n = 0;
  for (int64_t i = c * kRouterChunk; i < end; ++i) n += a.expert[i] == e;
  return n;
}
// Expert e: the chunk counts in place -> the copies of e in the chunks before (exclusive scan).
MPITRON_HD inline void chunk_scan(const MoeRouterShape& s, int e, const RouterScratch& sc) {
  int64_t run = 0;
  for (int64_t c = 0; c < s.chunks(); ++c) {
    const int64_t n = sc.chunk[c * s.n_experts + e];
    sc.chunk[c * s.n_experts + e] = run;
    run += n;
  }
}
// Copy i: its rank among its expert's copies in token order, -1 when over the capacity. Returns
// whether it is kept (the kernel then adds it to counts[e]).
MPITRON_HD inline bool rank_copy(const MoeRouterShape& s, int64_t i, const MoeRouterArrays& a, const RouterScratch& sc) {
  const int e = a.expert[i];
  const int64_t c = i / kRouterChunk;
  int64_t r = sc.chunk[c * s.n_experts + e];
  for (int64_t j = c * kRouterChunk; j < i; ++j) r += a.expert[j] == e;
  const int64_t before = s.chunk_rows > 0 ? a.before[(i / s.top_k) / s.chunk_rows * s.n_experts + e] : 0;
  const bool kept = r + before < s.capacity;
  sc.rank[i] = kept ? r : -1;
  return kept;
}
// One thread: the experts' offsets in sorted order, the summary's counts and dropped copies.
MPITRON_HD inline void offsets(const MoeRouterShape& s, const MoeRouterArrays& a, const RouterScratch& sc) {
  int64_t run = 0;
  for (int e = 0; e < s.n_experts; ++e) {
    sc.offsets[e] = run;
    a.summary[e] = double(sc.counts[e]);
    run += sc.counts[e];
  }
  a.summary[s.n_experts] = double(s.copies() - run);
}
// Copy i: its sorted row, and that row's source token.
MPITRON_HD inline void place_copy(const MoeRouterShape& s, int64_t i, const MoeRouterArrays& a, const RouterScratch& sc) {
  const int64_t r = sc.rank[i];
  if (r < 0) {
    a.pos[i] = -1;
    return;
  }
  const int64_t p = sc.offsets[a.expert[i]] + r;
  a.pos[i] = p;
  a.srow[p] = i / s.top_k;
}
// Thread j of kRouterReduceThreads: its partial sums of aux's terms and of lse^2 (strided) ...
MPITRON_HD inline void loss_partial(const MoeRouterShape& s, int j, const MoeRouterArrays& a) {
  const int E = s.n_experts;
  const double T = double(s.seq_tokens);
  double aux = 0, z = 0;
  for (int64_t i = j; i < s.seqs() * E; i += kRouterReduceThreads)
    aux += (double(a.seq_routed[i]) / (T * s.top_k)) * (a.seq_psum[i] / T);
  for (int64_t t = j; t < s.rows; t += kRouterReduceThreads) z += double(a.lse[t]) * a.lse[t];
  double* out = a.dscratch + 2 * s.psum_partials();
  out[j] = aux, out[kRouterReduceThreads + j] = z;
}
// ... added in thread order by one thread: aux = E / S sum_s sum_e f_se P_se, z = mean lse^2.
MPITRON_HD inline void loss_total(const MoeRouterShape& s, const MoeRouterArrays& a) {
  const double* in = a.dscratch + 2 * s.psum_partials();
  double aux = 0, z = 0;
  for (int j = 0; j < kRouterReduceThreads; ++j) aux += in[j], z += in[kRouterReduceThreads + j];
  a.summary[s.n_experts + 1] = s.seqs() > 0 ? s.n_experts * aux / double(s.seqs()) : 0.0;
  a.summary[s.n_experts + 2] = s.rows > 0 ? z / double(s.rows) : 0.0;
}

// Row t of the router's backward (moe_routing.hpp moe_router_backward): dlogits_te =
// p_te (dp_te - sum_e' p_te' dp_te') + dz p_te, dp from the load-balancing loss (aux_scale =
// coef x loss scale), the routing weights' gradient dweight (0 for dropped copies) and the z loss
// (z_scale = coef x loss scale). store(i, v) writes element i of dlogits [R, E].
template <class Store>
MPITRON_HD void backward_row(const MoeRouterShape& s, int64_t t, const float* dweight, double aux_scale,
                             double z_scale, const MoeRouterArrays& a, const Store& store) {
  const int E = s.n_experts, k = s.top_k;
  const int64_t* routed = a.seq_routed + t / s.seq_len * E;
  const float* p = a.probs + t * E;
  const int32_t* ex = a.expert + t * k;
  const float* w = a.weight + t * k;
  const float* dw = dweight + t * k;
  const double base = aux_scale * E / (double(s.seq_tokens) * k);
  double sel[kRouterMaxTopK];
  if (s.weights != MoeWeights::probs) {  // w_j = p_j / S (softmax over the selected: the same form)
    double sum = 0, wdw = 0;
    for (int j = 0; j < k; ++j) sum += p[ex[j]], wdw += double(w[j]) * dw[j];
    for (int j = 0; j < k; ++j) sel[j] = (dw[j] - wdw) / sum;
  } else {
    for (int j = 0; j < k; ++j) sel[j] = dw[j];
  }
  auto dp = [&](int e) {
    double v = base * double(routed[e]);
    for (int j = 0; j < k; ++j)
      if (ex[j] == e) v += sel[j];
    return v;
  };
  double pdp = 0;
  for (int e = 0; e < E; ++e) pdp += p[e] * dp(e);
  const double dz = z_scale * 2.0 * a.lse[t];
  for (int e = 0; e < E; ++e) store(t * E + e, static_cast<float>(p[e] * (dp(e) - pdp) + dz * p[e]));
}

// The steps in one thread, in the order the kernels run them (the CPU emulation of CudaOps and
// tests/unit/test_moe_router_steps.cpp): rank_copy's kept copies counted as the kernel's integer
// atomics count them.
template <class Logit>
void select_serial(const MoeRouterShape& s, const Logit& logit, const MoeRouterArrays& a) {
  for (int64_t t = 0; t < s.rows; ++t) select_row(s, logit, t, a);
  for (int64_t q = 0; q < s.seqs(); ++q)
    for (int g = 0; g < kRouterPsumGroups; ++g)
      for (int e = 0; e < s.n_experts; ++e) seq_partial(s, q, g, e, a);
  for (int64_t q = 0; q < s.seqs(); ++q)
    for (int e = 0; e < s.n_experts; ++e) seq_sum(s, q, e, a);
}
inline void place_serial(const MoeRouterShape& s, const MoeRouterArrays& a) {
  const RouterScratch sc(s, a.scratch);
  for (int64_t c = 0; c < s.chunks(); ++c)
    for (int e = 0; e < s.n_experts; ++e) sc.chunk[c * s.n_experts + e] = chunk_count(s, c, e, a);
  for (int e = 0; e < s.n_experts; ++e) chunk_scan(s, e, sc), sc.counts[e] = 0;
  for (int64_t i = 0; i < s.copies(); ++i)
    if (rank_copy(s, i, a, sc)) ++sc.counts[a.expert[i]];
  offsets(s, a, sc);
  for (int64_t i = 0; i < s.copies(); ++i) place_copy(s, i, a, sc);
  for (int j = 0; j < kRouterReduceThreads; ++j) loss_partial(s, j, a);
  loss_total(s, a);
}
template <class Store>
void backward_serial(const MoeRouterShape& s, const float* dweight, double aux_scale, double z_scale,
                     const MoeRouterArrays& a, const Store& store) {
  for (int64_t t = 0; t < s.rows; ++t) backward_row(s, t, dweight, aux_scale, z_scale, a, store);
}

}  // namespace moe_router
}  // namespace mpitron
