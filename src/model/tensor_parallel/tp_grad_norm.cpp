#include "mpitron/model/tensor_parallel/tp_grad_norm.hpp"

#include <algorithm>

namespace mpitron {

std::vector<std::pair<size_t, size_t>> tp_local_grad_ranges(const std::vector<ParamInfo>& params, size_t begin,
                                                            size_t end, int tp_rank) {
  std::vector<std::pair<size_t, size_t>> ranges;
  if (tp_rank == 0) {
    if (end > begin) ranges.emplace_back(0, end - begin);
    return ranges;
  }
  for (const auto& p : params) {
    if (p.split_dim < 0) continue;  // replicated: counted by TP rank 0
    size_t b = std::max(begin, p.offset), e = std::min(end, p.offset + p.numel);
    if (b < e) ranges.emplace_back(b - begin, e - b);
  }
  return ranges;
}

double tp_local_grad_sum_squares(const std::vector<ParamInfo>& params, const float* g, size_t begin, size_t end,
                                 FlatOps& ops, int tp_rank) {
  if (tp_rank == 0) return end > begin ? ops.sum_squares(g, end - begin) : 0.0;  // padding gradients are 0
  // All ranges at once: one host wait on the GPU.
  const std::vector<std::pair<size_t, size_t>> ranges = tp_local_grad_ranges(params, begin, end, tp_rank);
  return ranges.empty() ? 0.0 : ops.sum_squares_ranges(g, ranges);
}

}  // namespace mpitron
