// Every parameter at its full logical shape (as if tp = pp = dp = 1), gathered to world rank 0
// and written there as an HDF5 file with one float32 dataset per parameter name. Used by the
// golden-rule tests to compare parallel layouts with the single-rank run (job key
// train.dump_params). Collective over the world.
//
// Contributors are the ranks with dp = cp = 0 (one copy of each model shard); rank 0 knows each
// contributor's parameter table from model_shard_for(), so only the values travel.
#pragma once
#include <string>
#include <vector>

#include "mpitron/dist/grid.hpp"
#include "mpitron/model/gpt.hpp"

namespace mpitron {

// `local_params` is this rank's flat parameter buffer laid out as gpt_param_table(cfg, shard)
// says (under ZeRO-3 the caller gathers it first).
void dump_full_params(const std::string& path, const ModelConfig& cfg, const std::vector<int>& pp_layers,
                      ProcessGrid& grid, const float* local_params, size_t n_local);

}  // namespace mpitron
