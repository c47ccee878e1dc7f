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
  int num_devices = 0;              // CUDA devices visible to this rank (GPU builds)
  std::string device_note;          // why there is no device ("" when bound or CPU-only build)
  int fake_nodes = 0;               // MPITRON_FAKE_NODES in effect (0: real nodes)
  std::vector<std::string> warnings;  // launcher cross-check mismatches etc.
};

// Initializes MPI once (MPI_Init_thread: MULTIPLE if available, else FUNNELED) and returns the
// launch identity. Safe to call more than once (returns the same info).
// Rank 0 prints (stderr, one line each) the device note and the warnings of every rank.
const LaunchInfo& init_launch(int* argc = nullptr, char*** argv = nullptr);

// The identity computation behind init_launch, redone on every call (reads MPITRON_FAKE_NODES
// now; binds no device). Collective over MPI_COMM_WORLD; MPI must be initialized. For tests.
LaunchInfo probe_launch();

// Collective over MPI_COMM_WORLD: rank 0 gets every rank's string in rank order, the others an
// empty vector. For reports such as `mpitron env`.
std::vector<std::string> gather_strings(const std::string& s);

// This process's rank as the launcher's environment tells it (OMPI_COMM_WORLD_RANK, PMI_RANK,
// PMIX_RANK, SLURM_PROCID), or -1. Lets errors raised before MPI starts print once, from rank 0.
int launcher_rank_from_env();

// The CPUs online on this node (at least 1): what its ranks share.
int node_cpus();

// "MPI_THREAD_MULTIPLE" for MPI_THREAD_MULTIPLE, ...
const char* thread_level_name(int level);

}  // namespace mpitron
