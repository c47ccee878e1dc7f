// ProcessGrid: rank arithmetic (pure) and the eager creation of every group communicator.
//
// Worked example, world 8 = tp2 x dp2 x pp2: rank 5 = tp 1 + 2*(cp 0 + 1*(dp 0 + 2*pp 1)), so
// its TP group is {4,5}, DP group {5,7}, PP group {1,5}, model-parallel (tp x pp) {0,1,4,5}.
#include "mpitron/distributed/grid.hpp"

#include <mpi.h>

#include <algorithm>
#include <cstdio>

#include <fmt/ranges.h>

#include "mpitron/core/error.hpp"
#include "mpitron/distributed/mpi_comm.hpp"

namespace mpitron {

struct ProcessGrid::Groups {};

GridShape resolve_grid_shape(GridShape s, int world) {
  usage_check(s.tp >= 1 && s.cp >= 1 && s.pp >= 1 && s.dp >= 0,
              "parallel layout tp={} cp={} pp={} dp={}: sizes must be >= 1 (dp may be 0 = inferred)", s.tp, s.cp,
              s.pp, s.dp);
  long mp = static_cast<long>(s.tp) * s.cp * s.pp;
  if (s.dp == 0) {
    usage_check(world % mp == 0,
                "parallel layout tp={} x cp={} x pp={} = {} ranks does not divide the world size {} "
                "(launch a multiple of {} ranks, or change parallel.tp/cp/pp)",
                s.tp, s.cp, s.pp, mp, world, mp);
    s.dp = static_cast<int>(world / mp);
  } else {
    usage_check(mp * s.dp == world,
                "parallel layout dp={} x tp={} x cp={} x pp={} = {} ranks, but the job has {} ranks "
                "(set parallel.dp=0 to infer dp, or launch {} ranks)",
                s.dp, s.tp, s.cp, s.pp, mp * s.dp, world, mp * s.dp);
  }
  usage_check(s.ep >= 1 && (s.dp * s.cp) % s.ep == 0,
              "parallel.ep = {} must divide the data x context parallel ranks dp x cp = {} x {} (the experts are split "
              "over ep of those ranks)",
              s.ep, s.dp, s.cp);
  return s;
}

int grid_rank(const GridShape& s, const GridCoord& c) { return c.tp + s.tp * (c.cp + s.cp * (c.dp + s.dp * c.pp)); }

GridCoord grid_coord(const GridShape& s, int rank) {
  GridCoord c;
  c.tp = rank % s.tp;
  rank /= s.tp;
  c.cp = rank % s.cp;
  rank /= s.cp;
  c.dp = rank % s.dp;
  c.pp = rank / s.dp;
  return c;
}

const char* group_name(Group g) {
  switch (g) {
    case Group::world: return "world";
    case Group::tp: return "tp";
    case Group::cp: return "cp";
    case Group::dp: return "dp";
    case Group::pp: return "pp";
    case Group::dp_cp: return "dp_cp";
    case Group::model_parallel: return "model_parallel";
    case Group::embedding: return "embedding";
    case Group::ep: return "ep";
    case Group::expert_dp: return "expert_dp";
  }
  return "?";
}

Group parse_group(const std::string& name) {
  std::string names;
  for (Group g : kAllGroups) {
    if (name == group_name(g)) return g;
    names += (names.empty() ? "" : ", ") + std::string(group_name(g));
  }
  usage_fail("unknown group '{}' (allowed: {})", name, names);
}

std::vector<int> group_members(const GridShape& s, int rank, Group g) {
  const GridCoord me = grid_coord(s, rank);
  std::vector<int> out;
  auto add = [&](GridCoord c) { out.push_back(grid_rank(s, c)); };
  switch (g) {
    case Group::world:
      for (int r = 0; r < s.tp * s.cp * s.dp * s.pp; ++r) out.push_back(r);
      break;
    case Group::tp:
      for (int i = 0; i < s.tp; ++i) add({i, me.cp, me.dp, me.pp});
      break;
    case Group::cp:
      for (int i = 0; i < s.cp; ++i) add({me.tp, i, me.dp, me.pp});
      break;
    case Group::dp:
      for (int i = 0; i < s.dp; ++i) add({me.tp, me.cp, i, me.pp});
      break;
    case Group::pp:
      for (int i = 0; i < s.pp; ++i) add({me.tp, me.cp, me.dp, i});
      break;
    case Group::dp_cp:
      for (int d = 0; d < s.dp; ++d)
        for (int c = 0; c < s.cp; ++c) add({me.tp, c, d, me.pp});
      break;
    case Group::model_parallel:
      for (int p = 0; p < s.pp; ++p)
        for (int t = 0; t < s.tp; ++t) add({t, me.cp, me.dp, p});
      break;
    // Expert parallel: runs of ep consecutive data x context ranks, numbered f = dp * cp + cp_rank
    // (cp fastest: ep over a cp group first); expert_dp: the ranks with the same f % ep.
    case Group::ep: {
      const int f0 = data_context_rank(me, s.cp) / s.ep * s.ep;
      for (int f = f0; f < f0 + s.ep; ++f) add({me.tp, f % s.cp, f / s.cp, me.pp});
      break;
    }
    case Group::expert_dp:
      for (int f = data_context_rank(me, s.cp) % s.ep; f < s.dp * s.cp; f += s.ep) add({me.tp, f % s.cp, f / s.cp, me.pp});
      break;
    case Group::embedding:
      if (me.pp == 0 || me.pp == s.pp - 1) {
        add({me.tp, me.cp, me.dp, 0});
        if (s.pp > 1) add({me.tp, me.cp, me.dp, s.pp - 1});
      } else {
        out.push_back(rank);  // middle stages hold no embedding: a group of one
      }
      break;
  }
  std::sort(out.begin(), out.end());
  return out;
}

ProcessGrid::ProcessGrid(const LaunchInfo& launch, GridShape shape, const std::string& backend,
                         double comm_timeout_s)
    : launch_(launch), backend_(normalize_backend(backend)), comm_timeout_s_(comm_timeout_s) {
  rank_ = launch.rank;
  world_ = launch.world;
  shape_ = resolve_grid_shape(shape, world_);
  coord_ = grid_coord(shape_, rank_);

  // Every rank must agree that the backend can run before any rank starts NCCL.
  std::string why = backend_unavailable_reason(backend_, launch);
  int ok = why.empty() ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!ok) usage_fail("{}", why.empty() ? std::string("backend 'nccl' is not usable on every rank (see rank 0)") : why);

  // Eager, same order on every rank. Color = the group's lowest world rank (unique per group),
  // key = world rank, so the rank inside each group is its position in group_members().
  auto make = [&](Group g, const std::string& backend) -> std::unique_ptr<Comm> {
    MPI_Comm c = MPI_COMM_NULL;
    if (g == Group::world) {
      MPI_Comm_dup(MPI_COMM_WORLD, &c);
    } else {
      int color = group_members(shape_, rank_, g).front();
      int rc = MPI_Comm_split(MPI_COMM_WORLD, color, rank_, &c);
      check(rc == MPI_SUCCESS, "MPI_Comm_split for group '{}' failed", group_name(g));
    }
    return make_comm(backend, c, group_name(g), launch_, comm_timeout_s_);
  };
  world_comm_ = make(Group::world, backend_);
  tp_ = make(Group::tp, backend_);
  cp_ = make(Group::cp, backend_);
  dp_ = make(Group::dp, backend_);
  pp_ = make(Group::pp, backend_);
  dp_cp_ = make(Group::dp_cp, backend_);
  mp_ = make(Group::model_parallel, backend_);
  emb_ = make(Group::embedding, backend_);
  ep_ = make(Group::ep, backend_);
  edp_ = make(Group::expert_dp, backend_);
  if (backend_ != "mpi") pp_host_ = make(Group::pp, "mpi");

  // TP traffic is the heaviest and latency-bound: a TP group should sit inside one node.
  std::vector<int> nodes(world_);
  MPI_Allgather(&launch.node, 1, MPI_INT, nodes.data(), 1, MPI_INT, MPI_COMM_WORLD);
  for (int r = 0; r < world_; r += shape_.tp) {  // TP groups are runs of tp consecutive ranks
    auto m = group_members(shape_, r, Group::tp);
    bool spans = std::any_of(m.begin(), m.end(), [&](int x) { return nodes[x] != nodes[m.front()]; });
    if (!spans) continue;
    std::vector<int> where;
    for (int x : m) where.push_back(nodes[x]);
    warnings_.push_back(fmt::format(
        "TP group [{}] spans nodes [{}]: tensor-parallel traffic will cross the network "
        "(use parallel.tp <= ranks per node = {})",
        fmt::join(m, ","), fmt::join(where, ","), launch.local_size));
  }
  if (rank_ == 0 && !warnings_.empty()) {
    for (const auto& w : warnings_) std::fprintf(stderr, "mpitron: warning: %s\n", w.c_str());
    std::fflush(stderr);
  }
}

ProcessGrid::~ProcessGrid() = default;

Comm& ProcessGrid::group(Group g) {
  switch (g) {
    case Group::world: return *world_comm_;
    case Group::tp: return *tp_;
    case Group::cp: return *cp_;
    case Group::dp: return *dp_;
    case Group::pp: return *pp_;
    case Group::dp_cp: return *dp_cp_;
    case Group::model_parallel: return *mp_;
    case Group::embedding: return *emb_;
    case Group::ep: return *ep_;
    case Group::expert_dp: return *edp_;
  }
  return *world_comm_;
}

std::vector<int> ProcessGrid::members(const std::string& group) const { return members(parse_group(group)); }

}  // namespace mpitron
