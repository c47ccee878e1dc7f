#include "mpitron/distributed/fatal.hpp"

#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "mpitron/core/error.hpp"
#include "mpitron/distributed/launch.hpp"

namespace mpitron {
namespace {

bool mpi_running() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  return init && !fin;
}

std::string hostname() {
  char buf[256] = {0};
  gethostname(buf, sizeof(buf) - 1);
  return buf;
}

}  // namespace

void finalize_mpi_if_initialized() {
  if (mpi_running()) MPI_Finalize();
}

void exit_on_exception(const std::exception& e) {
  bool usage = dynamic_cast<const UsageError*>(&e) != nullptr;
  int rank = 0, world = 1;
  bool running = mpi_running();
  if (running) {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
  } else if (int r = launcher_rank_from_env(); r >= 0) {
    rank = r;  // failed before MPI started (e.g. unknown command): still only rank 0 speaks
    int fin = 0;
    MPI_Finalized(&fin);
    if (usage && !fin) {
      // Every rank hit the same usage error. Start MPI so that MPI_Finalize below lines the ranks
      // up: otherwise a fast rank's exit makes mpirun kill rank 0 before it has printed.
      int provided = 0;
      if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) == MPI_SUCCESS) {
        running = true;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
      }
    }
  } else {
    // Errors found before MPI starts (e.g. a bad job file): every rank sees them, so only the
    // launcher's rank 0 prints.
    for (const char* v : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"}) {
      if (const char* e = std::getenv(v)) {
        rank = std::atoi(e);
        break;
      }
    }
  }
  if (usage || dynamic_cast<const AgreedError*>(&e)) {
    if (rank == 0) std::fprintf(stderr, "mpitron: error: %s\n", e.what());
    std::fflush(stderr);
    if (running) MPI_Finalize();
    std::exit(usage ? kExitUsage : kExitError);
  }
  if (world > 1)
    std::fprintf(stderr, "mpitron: rank %d on %s: error: %s\n", rank, hostname().c_str(), e.what());
  else
    std::fprintf(stderr, "mpitron: error: %s\n", e.what());
  std::fflush(stderr);
  if (running && world > 1) MPI_Abort(MPI_COMM_WORLD, kExitError);
  if (running) MPI_Finalize();
  std::exit(kExitError);
}

}  // namespace mpitron
