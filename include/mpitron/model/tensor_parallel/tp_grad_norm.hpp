// The global gradient norm under tensor parallelism counts every logical parameter once:
// TP-sharded tensors (split_dim >= 0) are summed over the TP group (each rank holds a different
// piece), replicated ones (LayerNorms, row-parallel biases, wpe: identical on every TP rank) are
// counted by TP rank 0 only. Sum this rank's contribution over the TP group (after any DP or
// pipeline reduction) and take the square root.
//
// Example, tp = 2, a block's ln_1.weight (replicated, |g|^2 = 1) and c_fc.weight (sharded,
// |g_0|^2 = 2, |g_1|^2 = 3): rank 0 contributes 1 + 2, rank 1 contributes 3; the sum 6 equals
// the single-rank run's 1 + 5.
#pragma once
#include <cstddef>
#include <utility>
#include <vector>

#include "mpitron/model/model_chunk.hpp"
#include "mpitron/ops/flat_vector_ops.hpp"

namespace mpitron {

// This rank's share of the squared gradient norm over the flat range [begin, end) of the layout
// `params` describes (a ZeRO shard, or everything); g points at flat element `begin`.
double tp_local_grad_sum_squares(const std::vector<ParamInfo>& params, const float* g, size_t begin, size_t end,
                                 FlatOps& ops, int tp_rank);

// The (offset from begin, length) runs of [begin, end) that this TP rank counts: all of it on TP
// rank 0, the TP-sharded parameters' elements elsewhere. What both sums above and the exact one of
// train.reproducible (DataParallel::grad_sum_squares_exact) go over.
std::vector<std::pair<size_t, size_t>> tp_local_grad_ranges(const std::vector<ParamInfo>& params, size_t begin,
                                                            size_t end, int tp_rank);

}  // namespace mpitron
