// ProcessGrid: MPI_COMM_WORLD split into the parallel groups, Megatron order tp-cp-dp-pp:
//   rank = tp + TP*(cp + CP*(dp + DP*pp))
// Worked example, world 8 = tp2 x dp2 x pp2 (cp1):
//   TP groups [0,1] [2,3] [4,5] [6,7]   DP groups [0,2] [1,3] [4,6] [5,7]
//   PP groups [0,4] [1,5] [2,6] [3,7]   embedding groups (first+last stage) = PP groups here
// All groups are created eagerly in the constructor, in the same order on every rank; they
// are handed explicitly to whoever needs them (no globals).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "mpitron/distributed/comm.hpp"
#include "mpitron/distributed/launch.hpp"

namespace mpitron {

struct GridShape {
  int tp = 1, cp = 1, dp = 0, pp = 1;  // dp = 0: inferred as world / (tp*cp*pp)
  int ep = 1;  // expert parallel: runs of ep consecutive dp ranks (divides dp)
};

struct GridCoord {
  int tp = 0, cp = 0, dp = 0, pp = 0;
};

// A rank's place f = dp * cp + cp_rank among the data x context ranks of its (tp, pp): the order
// of the dp_cp group and of expert parallel's groups (ep rank f % ep, expert_dp rank f / ep).
inline int data_context_rank(const GridCoord& c, int cp) { return c.dp * cp + c.cp; }

// Pure rank arithmetic (no MPI): usable by tests and by `mpitron plan`.
GridShape resolve_grid_shape(GridShape s, int world);  // UsageError if it does not divide
int grid_rank(const GridShape& s, const GridCoord& c);
GridCoord grid_coord(const GridShape& s, int rank);

// The groups every rank belongs to, in the order they are created.
//   tp, cp, dp, pp: ranks differing only in that coordinate
//   dp_cp: differing in dp and cp; model_parallel: differing in tp and pp
//   embedding: first and last stage of this rank's pipeline (a group of one on middle stages)
//   ep: dp ranks dp / ep * ep .. + ep - 1 (they exchange tokens for their experts)
//   expert_dp: the dp ranks with this rank's dp % ep (the same experts' work)
enum class Group { world, tp, cp, dp, pp, dp_cp, model_parallel, embedding, ep, expert_dp };
constexpr Group kAllGroups[] = {Group::world, Group::tp,    Group::cp,             Group::dp,
                                Group::pp,    Group::dp_cp, Group::model_parallel, Group::embedding,
                                Group::ep,    Group::expert_dp};
const char* group_name(Group g);
Group parse_group(const std::string& name);  // UsageError listing the names
// World ranks of `rank`'s group g, ascending (= their rank order inside the group). Pure.
std::vector<int> group_members(const GridShape& s, int rank, Group g);

class ProcessGrid {
 public:
  // backend: "cpu" -> MpiComm for every group; "nccl" -> NcclComm (GPU builds only).
  // comm_timeout_s (job key comm.timeout_s): the NCCL watchdog aborts a collective after it.
  ProcessGrid(const LaunchInfo& launch, GridShape shape, const std::string& backend = "cpu",
              double comm_timeout_s = 300);
  ~ProcessGrid();

  const GridShape& shape() const { return shape_; }
  const GridCoord& coord() const { return coord_; }
  int rank() const { return rank_; }
  int world_size() const { return world_; }
  bool is_first_stage() const { return coord_.pp == 0; }
  bool is_last_stage() const { return coord_.pp == shape_.pp - 1; }

  Comm& world() { return *world_comm_; }
  Comm& tp() { return *tp_; }
  Comm& cp() { return *cp_; }
  Comm& dp() { return *dp_; }
  Comm& pp() { return *pp_; }
  // The pipeline group over host memory: pp() itself on CPU runs; with NCCL, an MPI communicator
  // over the same ranks (the pipeline executor stages activations through host buffers).
  Comm& pp_host() { return pp_host_ ? *pp_host_ : *pp_; }
  Comm& dp_cp() { return *dp_cp_; }      // gradient sync group when cp > 1
  Comm& model_parallel() { return *mp_; }  // tp x pp
  // First and last pipeline stage of this rank's pipeline (tied embeddings). On other
  // stages it is a group of one.
  Comm& embedding() { return *emb_; }
  Comm& ep() { return *ep_; }            // expert parallel (a group of one when parallel.ep = 1)
  Comm& expert_dp() { return *edp_; }

  Comm& group(Group g);

  // World ranks of each group this rank belongs to (for `mpitron env`).
  std::vector<int> members(const std::string& group) const;
  std::vector<int> members(Group g) const { return group_members(shape_, rank_, g); }

  const LaunchInfo& launch() const { return launch_; }
  const std::string& backend() const { return backend_; }
  // Layout warnings (a TP group spanning nodes, naming its ranks); rank 0 also prints them.
  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  struct Groups;
  LaunchInfo launch_;
  std::string backend_;
  double comm_timeout_s_ = 300;
  std::vector<std::string> warnings_;
  GridShape shape_;
  GridCoord coord_;
  int rank_ = 0, world_ = 1;
  std::unique_ptr<Comm> world_comm_, tp_, cp_, dp_, pp_, dp_cp_, mp_, emb_, ep_, edp_, pp_host_;
  std::unique_ptr<Groups> groups_;
};

}  // namespace mpitron
