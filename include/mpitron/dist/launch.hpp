// Who this process is: MPI start-up and node identity. Local rank and node come from
// MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) whatever the launcher; SLURM_*/OMPI_* variables
// are only cross-checked. MPITRON_FAKE_NODES=N (tests) pretends the ranks of one host are
// spread over N nodes in blocks.
#pragma once
#include <string>
#include <vector>

namespace mpitron {

struct LaunchInfo {
  int rank = 0, world = 1;
  int local_rank = 0, local_size = 1;
  int node = 0, num_nodes = 1;
  std::string host;
  int thread_level = 0;             // MPI_THREAD_* provided
  std::string thread_level_name;    // "MPI_THREAD_MULTIPLE" ...
  int device = -1;                  // CUDA device bound to this rank, -1 on CPU
  std::vector<std::string> warnings;  // launcher cross-check mismatches etc.
};

// Initializes MPI once (MPI_Init_thread: MULTIPLE if available, else FUNNELED) and returns the
// launch identity. Safe to call more than once (returns the same info).
const LaunchInfo& init_launch(int* argc = nullptr, char*** argv = nullptr);

}  // namespace mpitron
