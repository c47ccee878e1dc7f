// The TP conjugate collectives (see tp_mappings.hpp for the table and a worked example).
#include "mpitron/model/tensor_parallel/tp_mappings.hpp"

#include <chrono>

#include "mpitron/core/error.hpp"
#include "mpitron/core/trace.hpp"

namespace mpitron {

namespace {
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

TpCommTimer::TpCommTimer(const TpContext& tp) : acc_(tp.active() ? tp.comm_seconds : nullptr) {
  if (acc_) t0_ = now_s();
  if (acc_ && trace::enabled()) b_ = trace::Clock::now();
}
TpCommTimer::~TpCommTimer() {
  if (acc_) *acc_ += now_s() - t0_;
  if (acc_ && trace::enabled() && b_ != trace::Clock::time_point{}) trace::event("tp collective", trace::tp, b_, trace::Clock::now());
}

template <class T>
void copy_to_tp_region_backward(Comm& tp, T* grad, size_t n) {
  if (tp.size() > 1) tp.all_reduce(grad, n, dtype_of<T>(), ReduceOp::sum);
}

template <class T>
void reduce_from_tp_region_forward(Comm& tp, T* x, size_t n) {
  if (tp.size() > 1) tp.all_reduce(x, n, dtype_of<T>(), ReduceOp::sum);
}

template <class T>
void gather_from_sequence_forward(Comm& tp, const T* local, T* full, size_t local_n) {
  tp.all_gather(local, full, local_n, dtype_of<T>());
}

template <class T>
void gather_from_sequence_backward(Comm& tp, const T* dfull, T* dlocal, size_t local_n) {
  tp.reduce_scatter(dfull, dlocal, local_n, dtype_of<T>(), ReduceOp::sum);
}

template <class T>
void reduce_scatter_to_sequence_forward(Comm& tp, const T* full, T* local, size_t local_n) {
  tp.reduce_scatter(full, local, local_n, dtype_of<T>(), ReduceOp::sum);
}

template <class T>
void reduce_scatter_to_sequence_backward(Comm& tp, const T* dlocal, T* dfull, size_t local_n) {
  tp.all_gather(dlocal, dfull, local_n, dtype_of<T>());
}

void sum_sequence_parallel_grads(Comm& tp, float* grad, size_t n) {
  if (tp.size() > 1) tp.all_reduce(grad, n, DType::f32, ReduceOp::sum);
}

void vocab_parallel_max(Comm& tp, float* row_max, size_t rows) {
  if (tp.size() > 1) tp.all_reduce(row_max, rows, DType::f32, ReduceOp::max);
}

void vocab_parallel_sums(Comm& tp, float* sumexp_and_target, size_t rows) {
  if (tp.size() > 1) tp.all_reduce(sumexp_and_target, 2 * rows, DType::f32, ReduceOp::sum);
}

#define MPITRON_TP_MAPPINGS(T)                                                               \
  template void copy_to_tp_region_backward<T>(Comm&, T*, size_t);                             \
  template void reduce_from_tp_region_forward<T>(Comm&, T*, size_t);                          \
  template void gather_from_sequence_forward<T>(Comm&, const T*, T*, size_t);                 \
  template void gather_from_sequence_backward<T>(Comm&, const T*, T*, size_t);                \
  template void reduce_scatter_to_sequence_forward<T>(Comm&, const T*, T*, size_t);           \
  template void reduce_scatter_to_sequence_backward<T>(Comm&, const T*, T*, size_t);
MPITRON_TP_MAPPINGS(float)
MPITRON_TP_MAPPINGS(bf16)
#undef MPITRON_TP_MAPPINGS

int64_t sequence_local_rows(const TpContext& tp, int64_t rows) {
  if (!tp.sp()) return rows;
  check(rows % tp.size() == 0, "sequence parallel: {} rows (micro_batch x seq_len) do not divide by tp {}", rows,
        tp.size());
  return rows / tp.size();
}

}  // namespace mpitron
