// Grid rank arithmetic and group membership against an independent computation: every rank's
// coordinates come from nested loops in Megatron order (pp outermost, tp innermost), and each
// group is "the ranks that agree with me on every axis outside the group".
#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "mpitron/core/error.hpp"
#include "mpitron/distributed/grid.hpp"

using namespace mpitron;

namespace {

struct Ref {
  std::vector<GridCoord> coord;  // by rank, from counting through nested loops
};

Ref reference(const GridShape& s) {
  Ref r;
  for (int pp = 0; pp < s.pp; ++pp)
    for (int dp = 0; dp < s.dp; ++dp)
      for (int cp = 0; cp < s.cp; ++cp)
        for (int tp = 0; tp < s.tp; ++tp) r.coord.push_back({tp, cp, dp, pp});
  return r;
}

// Which axes a group spans (the others must match).
bool in_group(Group g, const GridShape& s, const GridCoord& me, const GridCoord& o) {
  bool tp = me.tp == o.tp, cp = me.cp == o.cp, dp = me.dp == o.dp, pp = me.pp == o.pp;
  switch (g) {
    case Group::world: return true;
    case Group::tp: return cp && dp && pp;
    case Group::cp: return tp && dp && pp;
    case Group::dp: return tp && cp && pp;
    case Group::pp: return tp && cp && dp;
    case Group::dp_cp: return tp && pp;
    case Group::model_parallel: return cp && dp;
    case Group::embedding: {
      bool me_end = me.pp == 0 || me.pp == s.pp - 1;
      bool o_end = o.pp == 0 || o.pp == s.pp - 1;
      if (!me_end) return tp && cp && dp && pp;  // alone
      return tp && cp && dp && o_end;
    }
    case Group::ep:  // runs of ep data x context ranks, cp fastest
      return tp && pp && (me.dp * s.cp + me.cp) / s.ep == (o.dp * s.cp + o.cp) / s.ep;
    case Group::expert_dp: return tp && pp && (me.dp * s.cp + me.cp) % s.ep == (o.dp * s.cp + o.cp) % s.ep;
  }
  return false;
}

std::vector<GridShape> shapes() {
  std::vector<GridShape> out;
  for (int tp : {1, 2, 3, 4, 8})
    for (int cp : {1, 2, 3})
      for (int dp : {1, 2, 3, 5})
        for (int pp : {1, 2, 3, 4}) {
          out.push_back({tp, cp, dp, pp});
          for (int ep = 2; ep <= dp * cp; ++ep)  // expert parallel: every divisor of dp x cp
            if (dp * cp % ep == 0) out.push_back({tp, cp, dp, pp, ep});
        }
  return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(grid_math)

BOOST_AUTO_TEST_CASE(coords_match_nested_loops) {
  for (const GridShape& s : shapes()) {
    Ref ref = reference(s);
    int world = s.tp * s.cp * s.dp * s.pp;
    BOOST_REQUIRE_EQUAL(static_cast<int>(ref.coord.size()), world);
    for (int r = 0; r < world; ++r) {
      GridCoord c = grid_coord(s, r);
      const GridCoord& e = ref.coord[r];
      BOOST_TEST_CONTEXT("shape tp" << s.tp << " cp" << s.cp << " dp" << s.dp << " pp" << s.pp << " rank " << r) {
        BOOST_TEST(c.tp == e.tp);
        BOOST_TEST(c.cp == e.cp);
        BOOST_TEST(c.dp == e.dp);
        BOOST_TEST(c.pp == e.pp);
        BOOST_TEST(grid_rank(s, e) == r);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(groups_match_brute_force) {
  for (const GridShape& s : shapes()) {
    Ref ref = reference(s);
    int world = static_cast<int>(ref.coord.size());
    for (Group g : kAllGroups) {
      std::set<std::vector<int>> distinct;
      int covered = 0;
      for (int r = 0; r < world; ++r) {
        std::vector<int> want;
        for (int o = 0; o < world; ++o)
          if (in_group(g, s, ref.coord[r], ref.coord[o])) want.push_back(o);
        auto got = group_members(s, r, g);
        BOOST_TEST_CONTEXT("shape tp" << s.tp << " cp" << s.cp << " dp" << s.dp << " pp" << s.pp << " group "
                                      << group_name(g) << " rank " << r) {
          BOOST_TEST(got == want, boost::test_tools::per_element());
        }
        if (distinct.insert(got).second) covered += static_cast<int>(got.size());
      }
      // The groups of one kind partition the world (each rank in exactly one of them).
      BOOST_TEST(covered == world);
    }
  }
}

BOOST_AUTO_TEST_CASE(group_rank_is_the_axis_coordinate) {
  GridShape s{2, 3, 2, 2};
  for (int r = 0; r < 24; ++r) {
    GridCoord c = grid_coord(s, r);
    auto pos = [&](Group g) {
      auto m = group_members(s, r, g);
      return static_cast<int>(std::find(m.begin(), m.end(), r) - m.begin());
    };
    BOOST_TEST(pos(Group::tp) == c.tp);
    BOOST_TEST(pos(Group::cp) == c.cp);
    BOOST_TEST(pos(Group::dp) == c.dp);
    BOOST_TEST(pos(Group::pp) == c.pp);
    BOOST_TEST(pos(Group::dp_cp) == c.cp + s.cp * c.dp);
    BOOST_TEST(pos(Group::model_parallel) == c.tp + s.tp * c.pp);
  }
}

// The grid's rank order: world 8 = tp2 x dp2 x pp2: TP [0,1][2,3][4,5][6,7], DP [0,2][1,3][4,6][5,7],
// PP [0,4][1,5][2,6][3,7].
BOOST_AUTO_TEST_CASE(design_world8_example) {
  GridShape s = resolve_grid_shape({2, 1, 0, 2}, 8);
  BOOST_TEST(s.dp == 2);
  std::map<Group, std::set<std::vector<int>>> got;
  for (int r = 0; r < 8; ++r)
    for (Group g : {Group::tp, Group::dp, Group::pp, Group::embedding, Group::model_parallel})
      got[g].insert(group_members(s, r, g));
  using V = std::set<std::vector<int>>;
  BOOST_TEST((got[Group::tp] == V{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  BOOST_TEST((got[Group::dp] == V{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  BOOST_TEST((got[Group::pp] == V{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  BOOST_TEST((got[Group::embedding] == V{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  BOOST_TEST((got[Group::model_parallel] == V{{0, 1, 4, 5}, {2, 3, 6, 7}}));
}

BOOST_AUTO_TEST_CASE(embedding_group_of_a_deep_pipeline) {
  GridShape s{1, 1, 1, 4};  // stages 0..3: ends {0,3}, middles alone
  BOOST_TEST((group_members(s, 0, Group::embedding) == std::vector<int>{0, 3}));
  BOOST_TEST((group_members(s, 3, Group::embedding) == std::vector<int>{0, 3}));
  BOOST_TEST((group_members(s, 1, Group::embedding) == std::vector<int>{1}));
  BOOST_TEST((group_members(s, 2, Group::embedding) == std::vector<int>{2}));
}

BOOST_AUTO_TEST_CASE(resolve_infers_and_rejects) {
  BOOST_TEST(resolve_grid_shape({2, 1, 0, 2}, 8).dp == 2);
  BOOST_TEST(resolve_grid_shape({1, 1, 0, 1}, 1).dp == 1);
  BOOST_TEST(resolve_grid_shape({2, 2, 0, 1}, 12).dp == 3);
  BOOST_CHECK_THROW(resolve_grid_shape({3, 1, 0, 1}, 4), UsageError);   // does not divide
  BOOST_CHECK_THROW(resolve_grid_shape({2, 1, 3, 1}, 4), UsageError);   // explicit dp, wrong product
  BOOST_CHECK_THROW(resolve_grid_shape({0, 1, 0, 1}, 4), UsageError);   // bad size
  BOOST_CHECK_THROW(resolve_grid_shape({1, 1, -1, 1}, 4), UsageError);
  try {
    resolve_grid_shape({3, 1, 0, 1}, 4);
  } catch (const UsageError& e) {
    std::string m = e.what();
    BOOST_TEST(m.find("tp=3") != std::string::npos);
    BOOST_TEST(m.find("world size 4") != std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(group_names_round_trip) {
  for (Group g : kAllGroups) BOOST_TEST((parse_group(group_name(g)) == g));
  BOOST_CHECK_THROW(parse_group("xp"), UsageError);
}

BOOST_AUTO_TEST_SUITE_END()
