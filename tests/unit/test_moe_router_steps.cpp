// The GPU router's per-thread steps (ops/moe_router.hpp, run here in one thread as the CPU
// emulation runs them) against the host router (moe_routing.hpp), the reference: every integer
// output exactly (chosen experts with ties, ranks in chunks of 256 copies with a partial last
// chunk, capacity drops, a context-parallel prior, positions, source rows, counts), probabilities,
// weights and losses to fp32 rounding, and the router's backward. The kernels themselves are these
// loops' bodies (gpu_check's "moe router" family checks them on a GPU).
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <vector>

#include "mpitron/core/rng.hpp"
#include "mpitron/model/moe/moe_routing.hpp"
#include "mpitron/ops/moe_router.hpp"

using namespace mpitron;

namespace {

struct Case {
  int E, k;
  int64_t R, T;
  MoeRouter router;
  bool renorm;
  double capacity;
  bool prior;
};

double rel(double got, double want) { return std::fabs(got - want) / std::max(1e-30, std::fabs(want)); }

void run(const Case& cs) {
  const int E = cs.E, k = cs.k;
  const int64_t R = cs.R, T = cs.T, Rk = R * k, S = R / T;
  MoeConfig cfg;
  cfg.n_experts = E, cfg.top_k = k, cfg.router = cs.router, cfg.norm_topk_prob = cs.renorm;
  cfg.capacity_factor = cs.capacity, cfg.aux_loss_coef = 0.01, cfg.z_loss_coef = 0.001;
  std::vector<float> logits(static_cast<size_t>(R * E));
  for (size_t i = 0; i < logits.size(); ++i)  // 6 distinct values: ties in most rows
    logits[i] = 0.5f * static_cast<float>(static_cast<int>(uniform_at(5, static_cast<uint64_t>(E * 100 + k), i) * 6));
  MoeCapacityPrior prior;
  MoeCapacityHook hook;
  if (cs.prior) {  // non-decreasing over the chunks, as context parallel's chunks in token order give it
    prior.chunk_rows = T / 2, prior.total_rows = 2 * R;
    prior.before.assign(static_cast<size_t>(R / prior.chunk_rows * E), 0);
    for (int64_t c = 1; c < R / prior.chunk_rows; ++c)
      for (int e = 0; e < E; ++e) prior.before[c * E + e] = prior.before[(c - 1) * E + e] + 3 * ((c * 7 + e * 3) % 5);
    hook = [&](const MoeRouting&) { return prior; };
  }
  MoeRouting r;
  moe_route(cfg, logits.data(), R, T, r, hook);
  BOOST_REQUIRE_MESSAGE(cs.capacity == 0 || r.dropped > 0, "E " << E << ": the capacity case drops nothing");

  const MoeRouterShape s = moe_router_shape(cfg, R, T, T, cs.prior ? prior.total_rows : R, prior.chunk_rows);
  std::vector<float> probs(R * E), lse(R), weight(Rk);
  std::vector<int32_t> expert(Rk);
  std::vector<int64_t> pos(Rk), seq_routed(S * E), srow(Rk, -7), scratch(s.scratch_elems());
  std::vector<double> seq_psum(S * E), summary(E + 3), dscratch(s.dscratch_elems());
  MoeRouterArrays a;
  a.probs = probs.data(), a.lse = lse.data(), a.expert = expert.data(), a.weight = weight.data(), a.pos = pos.data();
  a.seq_routed = seq_routed.data(), a.seq_psum = seq_psum.data(), a.srow = srow.data();
  a.before = cs.prior ? prior.before.data() : nullptr, a.summary = summary.data(), a.scratch = scratch.data();
  a.dscratch = dscratch.data();
  moe_router::select_serial(s, [&](int64_t i) { return logits[i]; }, a);
  moe_router::place_serial(s, a);

  BOOST_TEST_CONTEXT("E " << E << " k " << k << " R " << R << " T " << T << " capacity " << cs.capacity) {
    BOOST_TEST(expert == r.expert, boost::test_tools::per_element());
    BOOST_TEST(pos == r.pos, boost::test_tools::per_element());
    BOOST_TEST(seq_routed == r.seq_routed, boost::test_tools::per_element());
    for (size_t i = 0; i < r.order.size(); ++i) BOOST_TEST(srow[i] == r.order[i] / k);
    for (int e = 0; e < E; ++e) BOOST_TEST(summary[e] == double(r.counts[e]));
    BOOST_TEST(summary[E] == double(r.dropped));
    BOOST_TEST(probs == r.probs, boost::test_tools::per_element());
    BOOST_TEST(lse == r.lse, boost::test_tools::per_element());
    BOOST_TEST(weight == r.weight, boost::test_tools::per_element());
    for (size_t i = 0; i < seq_psum.size(); ++i) BOOST_TEST(rel(seq_psum[i], r.seq_psum[i]) < 1e-12);
    BOOST_TEST(rel(summary[E + 1], r.aux) < 1e-12);
    BOOST_TEST(rel(summary[E + 2], r.z) < 1e-6);  // from the fp32 logsumexp (the host: fp64)

    std::vector<float> dw(Rk), dl(R * E), want(R * E);
    for (int64_t i = 0; i < Rk; ++i) dw[i] = r.pos[i] < 0 ? 0.f : static_cast<float>(normal_at(6, 1, i));
    const double ls = 1.0 / double(R);
    moe_router::backward_serial(s, dw.data(), cfg.aux_loss_coef * ls, cfg.z_loss_coef * ls, a,
                                [&](int64_t i, float v) { dl[i] = v; });
    moe_router_backward(cfg, r, dw.data(), ls, want.data());
    double err = 0, mag = 1e-30;
    for (size_t i = 0; i < want.size(); ++i) err = std::max(err, double(std::fabs(dl[i] - want[i]))), mag = std::max(mag, double(std::fabs(want[i])));
    BOOST_TEST(err / mag < 1e-6);
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(moe_router_steps)

BOOST_AUTO_TEST_CASE(device_steps_equal_the_host_router) {
  run({8, 2, 96, 32, MoeRouter::softmax_topk, false, 0.0, false});     // 192 copies: one partial chunk
  run({64, 8, 300, 100, MoeRouter::topk_softmax, false, 0.0, false});  // OLMoE's E and k: 10 chunks, the last partial
  run({16, 4, 256, 64, MoeRouter::topk_softmax, true, 0.5, true});     // Qwen's weights, drops, a cp prior
  run({4, 1, 130, 130, MoeRouter::softmax_topk, false, 1.0, false});   // top 1, one sequence, drops
  run({6, 6, 40, 8, MoeRouter::topk_softmax, true, 0.0, false});       // every expert chosen
}

BOOST_AUTO_TEST_SUITE_END()
