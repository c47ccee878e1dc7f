#include "mpitron/model/tp_grad_norm.hpp"

namespace mpitron {

double tp_local_grad_sum_squares(const std::vector<ParamInfo>& params, const float* grads, Ops& ops, int tp_rank) {
  double s = 0;
  for (const auto& p : params)
    if (p.split_dim >= 0 || tp_rank == 0) s += ops.sum_squares(grads + p.offset, p.numel);
  return s;
}

}  // namespace mpitron
