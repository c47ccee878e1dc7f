// The TP conjugate collectives (see tp_mappings.hpp for the table and a worked example).
#include "mpitron/model/tp_mappings.hpp"

#include <chrono>

#include "mpitron/core/error.hpp"

namespace mpitron {

namespace {
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

TpCommTimer::TpCommTimer(const TpContext& tp) : acc_(tp.active() ? tp.comm_seconds : nullptr) {
  if (acc_) t0_ = now_s();
}
TpCommTimer::~TpCommTimer() {
  if (acc_) *acc_ += now_s() - t0_;
}

void copy_to_tp_region_backward(Comm& tp, float* grad, size_t n) {
  if (tp.size() > 1) tp.all_reduce(grad, n, DType::f32, ReduceOp::sum);
}

void reduce_from_tp_region_forward(Comm& tp, float* x, size_t n) {
  if (tp.size() > 1) tp.all_reduce(x, n, DType::f32, ReduceOp::sum);
}

void gather_from_sequence_forward(Comm& tp, const float* local, float* full, size_t local_n) {
  tp.all_gather(local, full, local_n, DType::f32);
}

void gather_from_sequence_backward(Comm& tp, const float* dfull, float* dlocal, size_t local_n) {
  tp.reduce_scatter(dfull, dlocal, local_n, DType::f32, ReduceOp::sum);
}

void reduce_scatter_to_sequence_forward(Comm& tp, const float* full, float* local, size_t local_n) {
  tp.reduce_scatter(full, local, local_n, DType::f32, ReduceOp::sum);
}

void reduce_scatter_to_sequence_backward(Comm& tp, const float* dlocal, float* dfull, size_t local_n) {
  tp.all_gather(dlocal, dfull, local_n, DType::f32);
}

int64_t sequence_local_rows(const TpContext& tp, int64_t rows) {
  if (!tp.sp()) return rows;
  check(rows % tp.size() == 0, "sequence parallel: {} rows (micro_batch x seq_len) do not divide by tp {}", rows,
        tp.size());
  return rows / tp.size();
}

}  // namespace mpitron
