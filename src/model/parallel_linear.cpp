// Column- and row-parallel linear layers (parallel_layers.hpp): the f/g conjugate pair around
// the local GEMMs.
#include "mpitron/core/error.hpp"
#include "mpitron/model/parallel_layers.hpp"

namespace mpitron {

ColumnParallelLinear::ColumnParallelLinear(Ops& ops, TpContext tp, int64_t in_features, int64_t out_features)
    : ops_(ops), tp_(tp), k_(in_features), n_local_(out_features / tp.size()) {
  check(out_features % tp.size() == 0, "ColumnParallelLinear: {} output features do not divide by tp {}",
        out_features, tp.size());
}

const float* ColumnParallelLinear::forward(float* y, const float* x, float* x_full, const float* w, const float* b,
                                           int64_t rows) {
  const float* in = x;
  if (tp_.sp()) {  // f with SP: all-gather the input rows
    check(x_full != nullptr, "ColumnParallelLinear: sequence parallel needs a buffer for the gathered input");
    {
      TpCommTimer timer(tp_);
      gather_from_sequence_forward(*tp_.comm, x, x_full, static_cast<size_t>(sequence_local_rows(tp_, rows) * k_));
    }
    in = x_full;
  }
  ops_.matmul_forward(y, in, w, b, rows, k_, n_local_);
  return in;
}

void ColumnParallelLinear::backward(float* dx, float* dw, float* db, const float* dy, const float* x_full,
                                    const float* w, int64_t rows, float* scratch) {
  if (tp_.sp()) {  // partial dx of all rows, reduce-scattered back to this rank's rows
    check(scratch != nullptr, "ColumnParallelLinear: sequence parallel backward needs a [rows, K] scratch");
    ops_.matmul_backward(scratch, dw, db, dy, x_full, w, rows, k_, n_local_);
    {
      TpCommTimer timer(tp_);
      gather_from_sequence_backward(*tp_.comm, scratch, dx, static_cast<size_t>(sequence_local_rows(tp_, rows) * k_));
    }
    return;
  }
  ops_.matmul_backward(dx, dw, db, dy, x_full, w, rows, k_, n_local_);
  if (tp_.active()) {
    TpCommTimer timer(tp_);
    copy_to_tp_region_backward(*tp_.comm, dx, static_cast<size_t>(rows * k_));
  }
}

RowParallelLinear::RowParallelLinear(Ops& ops, TpContext tp, int64_t in_features, int64_t out_features)
    : ops_(ops), tp_(tp), k_local_(in_features / tp.size()), n_(out_features) {
  check(in_features % tp.size() == 0, "RowParallelLinear: {} input features do not divide by tp {}", in_features,
        tp.size());
}

void RowParallelLinear::forward(float* y, const float* x, const float* w, const float* b, int64_t rows,
                                float* scratch) {
  const float* bias = tp_.rank() == 0 ? b : nullptr;  // added once, before the sum
  if (tp_.sp()) {  // g with SP: reduce-scatter the partial sums to this rank's rows
    check(scratch != nullptr, "RowParallelLinear: sequence parallel needs a [rows, N] scratch");
    ops_.matmul_forward(scratch, x, w, bias, rows, k_local_, n_);
    {
      TpCommTimer timer(tp_);
      reduce_scatter_to_sequence_forward(*tp_.comm, scratch, y, static_cast<size_t>(sequence_local_rows(tp_, rows) * n_));
    }
    return;
  }
  ops_.matmul_forward(y, x, w, bias, rows, k_local_, n_);
  if (tp_.active()) {
    TpCommTimer timer(tp_);
    reduce_from_tp_region_forward(*tp_.comm, y, static_cast<size_t>(rows * n_));
  }
}

void RowParallelLinear::backward(float* dx, float* dw, float* db, const float* dy, float* dy_full, const float* x,
                                 const float* w, int64_t rows) {
  const float* g = dy;
  if (tp_.sp()) {  // g's backward with SP: all-gather dy's rows
    check(dy_full != nullptr, "RowParallelLinear: sequence parallel backward needs a [rows, N] buffer");
    {
      TpCommTimer timer(tp_);
      reduce_scatter_to_sequence_backward(*tp_.comm, dy, dy_full, static_cast<size_t>(sequence_local_rows(tp_, rows) * n_));
    }
    g = dy_full;
  }
  ops_.matmul_backward(dx, dw, db, g, x, w, rows, k_local_, n_);
}

}  // namespace mpitron
