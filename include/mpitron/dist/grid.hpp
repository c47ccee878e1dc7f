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

#include "mpitron/dist/comm.hpp"
#include "mpitron/dist/launch.hpp"

namespace mpitron {

struct GridShape {
  int tp = 1, cp = 1, dp = 0, pp = 1;  // dp = 0: inferred as world / (tp*cp*pp)
};

struct GridCoord {
  int tp = 0, cp = 0, dp = 0, pp = 0;
};

// Pure rank arithmetic (no MPI): usable by tests and by `mpitron plan`.
GridShape resolve_grid_shape(GridShape s, int world);  // UsageError if it does not divide
int grid_rank(const GridShape& s, const GridCoord& c);
GridCoord grid_coord(const GridShape& s, int rank);

class ProcessGrid {
 public:
  // backend: "cpu" -> MpiComm for every group; "nccl" -> NcclComm (GPU builds only).
  ProcessGrid(const LaunchInfo& launch, GridShape shape, const std::string& backend = "cpu");
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
  Comm& dp_cp() { return *dp_cp_; }      // gradient sync group when cp > 1
  Comm& model_parallel() { return *mp_; }  // tp x pp
  // First and last pipeline stage of this rank's pipeline (tied embeddings). On other
  // stages it is a group of one.
  Comm& embedding() { return *emb_; }

  // World ranks of each group this rank belongs to (for `mpitron env`).
  std::vector<int> members(const std::string& group) const;

 private:
  struct Groups;
  GridShape shape_;
  GridCoord coord_;
  int rank_ = 0, world_ = 1;
  std::unique_ptr<Comm> world_comm_, tp_, cp_, dp_, pp_, dp_cp_, mp_, emb_;
  std::unique_ptr<Groups> groups_;
};

}  // namespace mpitron
