// ProcessGrid on real communicators: for every layout the world size allows, each group's Comm
// has the size, the rank and (checked by an all-gather of world ranks through it) the members
// that the pure rank arithmetic says. Plus the MPITRON_FAKE_NODES node split and the warning
// for a TP group that spans nodes.
// np: 1 2 4 8
#include <mpi.h>

#include <boost/test/unit_test.hpp>
#include <cstdlib>
#include <vector>

#include "mpitron/core/error.hpp"
#include "mpitron/distributed/grid.hpp"
#include "mpitron/distributed/launch.hpp"

using namespace mpitron;

namespace {

std::vector<GridShape> layouts(int world) {
  std::vector<GridShape> out;
  for (int tp = 1; tp <= world; tp *= 2)
    for (int cp = 1; cp <= world; cp *= 2)
      for (int pp = 1; pp <= world; pp *= 2)
        if (world % (tp * cp * pp) == 0) out.push_back({tp, cp, 0, pp});
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(launch_identity_single_host) {
  const LaunchInfo& l = init_launch();
  int rank = 0, world = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  BOOST_TEST(l.rank == rank);
  BOOST_TEST(l.world == world);
  BOOST_TEST(l.num_nodes == 1);
  BOOST_TEST(l.node == 0);
  BOOST_TEST(l.local_size == world);
  BOOST_TEST(l.local_rank == rank);
  BOOST_TEST(l.thread_level >= MPI_THREAD_FUNNELED);
  BOOST_TEST(&init_launch() == &l);  // initialised once
}

BOOST_AUTO_TEST_CASE(groups_match_rank_arithmetic) {
  const LaunchInfo& l = init_launch();
  for (const GridShape& want : layouts(l.world)) {
    ProcessGrid grid(l, want, "cpu");
    const GridShape& s = grid.shape();
    BOOST_TEST_CONTEXT("tp" << s.tp << " cp" << s.cp << " dp" << s.dp << " pp" << s.pp) {
      BOOST_TEST(s.tp * s.cp * s.dp * s.pp == l.world);
      BOOST_TEST(grid_rank(s, grid.coord()) == l.rank);
      BOOST_TEST(grid.is_first_stage() == (grid.coord().pp == 0));
      for (Group g : kAllGroups) {
        Comm& c = grid.group(g);
        auto m = grid.members(g);
        BOOST_TEST_CONTEXT("group " << group_name(g)) {
          BOOST_TEST(c.name() == group_name(g));
          BOOST_TEST(c.backend() == "mpi");
          BOOST_REQUIRE_EQUAL(c.size(), static_cast<int>(m.size()));
          BOOST_TEST(m[c.rank()] == l.rank);
          float me = static_cast<float>(l.rank);
          std::vector<float> all(c.size(), -1.0f);
          c.all_gather(&me, all.data(), 1, DType::f32);
          for (int i = 0; i < c.size(); ++i) BOOST_TEST(static_cast<int>(all[i]) == m[i]);
        }
      }
      BOOST_TEST(grid.warnings().empty());  // one host: no group spans nodes
    }
  }
}

BOOST_AUTO_TEST_CASE(bad_layout_is_a_usage_error_on_every_rank) {
  const LaunchInfo& l = init_launch();
  BOOST_CHECK_THROW(ProcessGrid(l, GridShape{l.world + 1, 1, 0, 1}, "cpu"), UsageError);
  BOOST_CHECK_THROW(ProcessGrid(l, GridShape{1, 1, l.world + 1, 1}, "cpu"), UsageError);
  BOOST_CHECK_THROW(ProcessGrid(l, GridShape{1, 1, 0, 1}, "gloo"), UsageError);
#if !MPITRON_CUDA
  BOOST_CHECK_THROW(ProcessGrid(l, GridShape{1, 1, 0, 1}, "nccl"), UsageError);
#else
  if (l.device < 0) BOOST_CHECK_THROW(ProcessGrid(l, GridShape{1, 1, 0, 1}, "nccl"), UsageError);
#endif
}

BOOST_AUTO_TEST_CASE(fake_nodes_split_in_blocks) {
  const LaunchInfo& real = init_launch();
  const int world = real.world;
  for (int n : {2, 4}) {
    setenv("MPITRON_FAKE_NODES", std::to_string(n).c_str(), 1);
    if (n > world) {
      BOOST_CHECK_THROW(probe_launch(), UsageError);
      continue;
    }
    LaunchInfo l = probe_launch();
    BOOST_TEST_CONTEXT("MPITRON_FAKE_NODES=" << n) {
      // Block split of the host's ranks: node k holds ranks [k*world/n, (k+1)*world/n).
      int node = static_cast<int>(static_cast<long>(l.rank) * n / world);
      int first = (node * world + n - 1) / n;
      int next = ((node + 1) * world + n - 1) / n;
      BOOST_TEST(l.fake_nodes == n);
      BOOST_TEST(l.num_nodes == n);
      BOOST_TEST(l.node == node);
      BOOST_TEST(l.local_rank == l.rank - first);
      BOOST_TEST(l.local_size == next - first);

      // TP inside a node: no warning. TP over the whole world: spans nodes, warning names the ranks.
      ProcessGrid inside(l, GridShape{world / n, 1, 0, 1}, "cpu");
      BOOST_TEST(inside.warnings().empty());
      ProcessGrid across(l, GridShape{world, 1, 0, 1}, "cpu");
      BOOST_REQUIRE(across.warnings().size() == 1u);
      std::string w = across.warnings()[0];
      BOOST_TEST(w.find("TP group [0,1") != std::string::npos, w);
      BOOST_TEST(w.find("spans nodes") != std::string::npos, w);
    }
  }
  unsetenv("MPITRON_FAKE_NODES");
  BOOST_TEST(probe_launch().num_nodes == 1);
}
