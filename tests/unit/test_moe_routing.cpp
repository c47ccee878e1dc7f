// The MoE router's top-k (moe_routing.hpp): the k largest logits, best first, ties to the lower
// expert index, so every layout routes alike. Against a full sort by (logit descending, index
// ascending) on rows drawn from a few values (many ties), at several E and k.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <numeric>
#include <vector>

#include "mpitron/core/rng.hpp"
#include "mpitron/model/moe/moe_routing.hpp"

using namespace mpitron;

BOOST_AUTO_TEST_SUITE(moe_routing)

BOOST_AUTO_TEST_CASE(topk_ties_to_the_lower_index) {
  for (auto [E, k] : {std::pair{4, 2}, std::pair{8, 2}, std::pair{8, 8}, std::pair{64, 8}, std::pair{5, 1}}) {
    MoeConfig cfg;
    cfg.n_experts = E, cfg.top_k = k;
    const int64_t R = 200;
    std::vector<float> logits(static_cast<size_t>(R * E));
    for (size_t i = 0; i < logits.size(); ++i)  // 4 distinct values: ties in most rows
      logits[i] = static_cast<float>(static_cast<int>(uniform_at(3, static_cast<uint64_t>(E), i) * 4) - 1);
    MoeRouting r;
    moe_route(cfg, logits.data(), R, R, r);
    for (int64_t t = 0; t < R; ++t) {
      const float* l = logits.data() + t * E;
      std::vector<int> want(static_cast<size_t>(E));
      std::iota(want.begin(), want.end(), 0);
      std::stable_sort(want.begin(), want.end(), [&](int a, int b) { return l[a] > l[b]; });
      for (int j = 0; j < k; ++j)
        BOOST_REQUIRE_MESSAGE(r.expert[t * k + j] == want[j], "E " << E << " k " << k << " row " << t << " choice " << j
                                                                   << ": expert " << r.expert[t * k + j] << ", want "
                                                                   << want[j]);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
