// Launch identity. Local rank and node come from MPI_Comm_split_type(MPI_COMM_TYPE_SHARED): the
// ranks that share memory are one node, whatever launched them (mpirun, srun, a Slurm node
// emulated with several daemons). Node index = order of the node's lowest world rank, so node 0
// holds rank 0. Launcher variables (OMPI_*, SLURM_*) are only compared and reported.
#include "mpitron/distributed/launch.hpp"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "device.hpp"
#include "mpitron/core/cuda_plugin.hpp"
#include "mpitron/core/error.hpp"

namespace mpitron {
namespace {

void mpi_check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  fail("{} failed: {}", what, std::string(msg, len));
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  return (end && *end == '\0') ? static_cast<int>(x) : fallback;
}

std::string host_name() {
  char buf[256] = {0};
  gethostname(buf, sizeof(buf) - 1);
  return buf;
}

int read_fake_nodes() {
  const char* v = std::getenv("MPITRON_FAKE_NODES");
  if (!v || !*v) return 0;
  char* end = nullptr;
  long n = std::strtol(v, &end, 10);
  usage_check(end && *end == '\0' && n >= 1, "MPITRON_FAKE_NODES='{}' is not a positive integer", v);
  return static_cast<int>(n);
}

// Ranks of this node as the launcher tells them before MPI_Init (Open MPI's mpirun, MPICH's
// hydra, Slurm's srun: "4(x2)" starts with this step's tasks per node); 0 when none says.
int launcher_local_size() {
  for (const char* v : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}) {
    int n = env_int(v, 0);
    if (n > 0) return n;
  }
  if (const char* v = std::getenv("SLURM_STEP_TASKS_PER_NODE")) return std::max(0, std::atoi(v));
  return 0;
}

// More ranks on a node than it has CPUs: a rank that waits in MPI spins on a core another rank
// needs to compute, and every hop, receive and gather of a step waits on a descheduled peer (a
// LLaMA 4 x 256 over pp 2 x cp 2 with ZeRO-3, 4 ranks on 2 cores: 540-620 ms a step spinning,
// 300-430 yielding). Open MPI yields only when its own slot count says oversubscribed, which a
// hostfile or --host with more slots than cores hides; so ask it to, unless the user said
// otherwise (their OMPI_MCA_mpi_yield_when_idle stands).
void yield_when_oversubscribed() {
  const int local = launcher_local_size();
  if (local > node_cpus()) setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
}

}  // namespace

int node_cpus() { return static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN))); }

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
    default: return "MPI_THREAD_?";
  }
}

int launcher_rank_from_env() {
  for (const char* v : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    int r = env_int(v, -1);
    if (r >= 0) return r;
  }
  return -1;
}

LaunchInfo probe_launch() {
  LaunchInfo info;
  MPI_Comm_rank(MPI_COMM_WORLD, &info.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &info.world);
  info.host = host_name();
  int provided = 0;
  MPI_Query_thread(&provided);
  info.thread_level = provided;
  info.thread_level_name = thread_level_name(provided);

  // Ranks sharing memory = one node.
  MPI_Comm shm = MPI_COMM_NULL, node = MPI_COMM_NULL;
  mpi_check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, info.rank, MPI_INFO_NULL, &shm),
            "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)");
  int shm_rank = 0, shm_size = 1;
  MPI_Comm_rank(shm, &shm_rank);
  MPI_Comm_size(shm, &shm_size);

  // Test-only: cut each host's ranks into N contiguous blocks and call each block a node.
  info.fake_nodes = read_fake_nodes();
  if (info.fake_nodes > 0) {
    usage_check(info.fake_nodes <= shm_size,
                "MPITRON_FAKE_NODES={} but only {} ranks share this host; it can split them into at most {} nodes",
                info.fake_nodes, shm_size, shm_size);
    int block = static_cast<int>(static_cast<long>(shm_rank) * info.fake_nodes / shm_size);
    mpi_check(MPI_Comm_split(shm, block, shm_rank, &node), "MPI_Comm_split (fake nodes)");
    MPI_Comm_free(&shm);
  } else {
    node = shm;
  }
  MPI_Comm_rank(node, &info.local_rank);
  MPI_Comm_size(node, &info.local_size);

  int leader = info.rank;
  MPI_Allreduce(MPI_IN_PLACE, &leader, 1, MPI_INT, MPI_MIN, node);
  MPI_Comm_free(&node);
  std::vector<int> leaders(info.world);
  MPI_Allgather(&leader, 1, MPI_INT, leaders.data(), 1, MPI_INT, MPI_COMM_WORLD);
  std::sort(leaders.begin(), leaders.end());
  leaders.erase(std::unique(leaders.begin(), leaders.end()), leaders.end());
  info.num_nodes = static_cast<int>(leaders.size());
  info.node = static_cast<int>(std::lower_bound(leaders.begin(), leaders.end(), leader) - leaders.begin());

  // Cross-checks against what the launcher says (reported, never used).
  auto cross = [&](const char* var, int ours, const char* what) {
    int v = env_int(var, -1);
    if (v >= 0 && v != ours)
      info.warnings.push_back(fmt::format("{}={} but MPI says {} {} (using MPI's)", var, v, what, ours));
  };
  cross("OMPI_COMM_WORLD_RANK", info.rank, "rank");
  cross("SLURM_PROCID", info.rank, "rank");
  if (info.fake_nodes == 0) {
    cross("OMPI_COMM_WORLD_LOCAL_RANK", info.local_rank, "local rank");
    cross("SLURM_LOCALID", info.local_rank, "local rank");
    cross("SLURM_NODEID", info.node, "node index");
  }

#if MPITRON_CUDA
  // Without a GPU driver the CUDA backend's library is not even loaded (core/cuda_plugin.hpp).
  std::string why;
  if (!cuda_backend_may_run(&why)) {
    info.device_note = fmt::format("no usable GPU ({})", why);
    return info;
  }
  detail::DeviceProbe dev = MPITRON_CUDA_ENTRY(mpitron_cuda_probe_devices)();
  info.num_devices = dev.count;
  if (dev.count > 0) {
    // CUDA_VISIBLE_DEVICES is applied by the runtime: device i here is the i-th visible one.
    info.device = info.local_rank % dev.count;
    if (info.local_size > dev.count && info.local_rank == 0)
      info.warnings.push_back(fmt::format("{} ranks on node {} share {} visible CUDA device(s)", info.local_size,
                                          info.node, dev.count));
  } else {
    info.device_note = fmt::format("no usable GPU ({})", dev.error);
  }
#endif
  return info;
}

std::vector<std::string> gather_strings(const std::string& s) {
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  int len = static_cast<int>(s.size());
  std::vector<int> lens(rank == 0 ? world : 0), displs(rank == 0 ? world : 0);
  MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  std::string all;
  if (rank == 0) {
    int total = 0;
    for (int r = 0; r < world; ++r) {
      displs[r] = total;
      total += lens[r];
    }
    all.resize(total);
  }
  MPI_Gatherv(s.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, 0, MPI_COMM_WORLD);
  std::vector<std::string> out;
  if (rank == 0)
    for (int r = 0; r < world; ++r) out.push_back(all.substr(displs[r], lens[r]));
  return out;
}

const LaunchInfo& init_launch(int* argc, char*** argv) {
  static LaunchInfo info;
  static bool done = false;
  if (done) return info;
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    yield_when_oversubscribed();
    int provided = 0;
    // MULTIPLE lets a loader or overlap thread talk to MPI; FUNNELED is what we need at least.
    mpi_check(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
  }
  // Errors come back as codes and become exceptions with context (then one message + abort).
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  info = probe_launch();
  if (info.thread_level < MPI_THREAD_FUNNELED)
    info.warnings.push_back(fmt::format("MPI provides only {}; mpitron expects at least MPI_THREAD_FUNNELED",
                                        info.thread_level_name));
#if MPITRON_CUDA
  if (info.device >= 0) MPITRON_CUDA_ENTRY(mpitron_cuda_bind_device)(info.device);
#endif
  // One report from rank 0: its device note, and every rank's warnings.
  std::string mine;
  for (const auto& w : info.warnings) mine += fmt::format("mpitron: warning: rank {}: {}\n", info.rank, w);
  auto all = gather_strings(mine);
  if (info.rank == 0) {
    if (!info.device_note.empty()) std::fprintf(stderr, "mpitron: built with CUDA but %s; using the CPU backend\n", info.device_note.c_str());
    for (const auto& s : all) std::fputs(s.c_str(), stderr);
    std::fflush(stderr);
  }
  done = true;
  return info;
}

}  // namespace mpitron
