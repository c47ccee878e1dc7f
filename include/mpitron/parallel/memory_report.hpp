// Per-rank tracked memory, gathered so rank 0 can print every rank's line (ZeRO's point is that
// ranks hold different amounts: uneven shards, the rank owning the tied embedding, ...).
#pragma once
#include <string>
#include <vector>

#include "mpitron/core/memory.hpp"
#include "mpitron/distributed/comm.hpp"

namespace mpitron {

struct RankMemory {
  int rank = 0;
  MemStats mem;
};

// Collective over `comm`: every rank contributes tracker.stats() (the backend's: host or device
// memory) and gets all ranks'.
std::vector<RankMemory> gather_rank_memory(Comm& comm, const MemTracker& tracker);
// "rank 1: params 1.2 MiB grads ... (peak ...)": live bytes per category and the total peak.
std::string format_rank_memory(const RankMemory& m, bool with_peaks);

}  // namespace mpitron
