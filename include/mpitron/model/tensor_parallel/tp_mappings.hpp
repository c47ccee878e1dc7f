// The tensor-parallel conjugate collectives, named once (Megatron-core's mappings.py) and used
// by every parallel layer. Each mapping is a pair: what the forward does and what the backward
// does to the gradient. They are the only place the model talks to the TP group's Comm.
//
//   mapping                             forward            backward
//   copy_to_tp_region        ("f")      identity           all-reduce
//   reduce_from_tp_region    ("g")      all-reduce         identity
//   gather_from_sequence     (SP)       all-gather         reduce-scatter
//   reduce_scatter_to_sequence (SP)     reduce-scatter     all-gather
//
// Worked example, tp = 2, a block's MLP (x: [rows, C] replicated, W1 split by rows = output
// features, W2 split by columns = input features):
//   y = f(x) -> h_r = gelu(y W1_r^T) -> z = g(h_r W2_r^T)      (z = sum_r h_r W2_r^T)
// Forward: one all-reduce (g). Backward: dz is replicated (g's backward is the identity); each
// rank computes its partial dx_r = dh_r W1_r and f's backward all-reduces them: one all-reduce.
// With sequence parallel, x lives as rows/tp rows per rank: f becomes gather_from_sequence
// (all-gather rows) and g becomes reduce_scatter_to_sequence (each rank keeps its rows of the
// sum): the same bytes on the wire, and the LayerNorm/residual work between blocks is split.
//
// "Sequence" here is the row dimension of the flattened micro-batch [B*T, C]: rank r holds rows
// [r*rows/tp, (r+1)*rows/tp). For B = 1 that is Megatron's split of the sequence; for B > 1 it
// is the same split of the flattened batch (LayerNorm, residual and dropout are row-wise, so any
// row partition is exact).
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>

#include "mpitron/core/dtype.hpp"
#include "mpitron/distributed/comm.hpp"

namespace mpitron {

// The TP group as the model sees it. comm == nullptr or a group of one: no tensor parallelism
// (every mapping is then the identity and makes no call).
struct TpContext {
  Comm* comm = nullptr;
  bool sequence_parallel = false;
  double* comm_seconds = nullptr;  // when set, TpCommTimer adds the time spent in TP collectives
  int size() const { return comm ? comm->size() : 1; }
  int rank() const { return comm ? comm->rank() : 0; }
  bool active() const { return size() > 1; }
  bool sp() const { return sequence_parallel && active(); }
};

// Adds the wall time of its scope to tp.comm_seconds (if set): the per-step TP communication
// time the trainer reports and bench/tp measures.
class TpCommTimer {
 public:
  explicit TpCommTimer(const TpContext& tp);
  ~TpCommTimer();
  TpCommTimer(const TpCommTimer&) = delete;
  TpCommTimer& operator=(const TpCommTimer&) = delete;

 private:
  double* acc_;
  double t0_ = 0;
  std::chrono::steady_clock::time_point b_{};  // the timeline's start (trace.hpp), when enabled
};

// Each mapping is typed by its buffers' element type, T = float (the CPU model, fp32 reductions)
// or bf16 (TransformerModelCuda's activations); the definitions are instantiated for both.

// f: identity forward; backward all-reduces the input gradient (in place, n elements).
template <class T>
inline void copy_to_tp_region_forward(Comm&, const T*, size_t) {}
template <class T>
void copy_to_tp_region_backward(Comm& tp, T* grad, size_t n);

// g: forward all-reduces the partial outputs (in place); backward is the identity.
template <class T>
void reduce_from_tp_region_forward(Comm& tp, T* x, size_t n);
template <class T>
inline void reduce_from_tp_region_backward(Comm&, const T*, size_t) {}

// SP all-gather: full[size*local_n] <- every rank's local[local_n] in rank order;
// backward: dlocal[local_n] <- this rank's rows of the sum of dfull over the group.
template <class T>
void gather_from_sequence_forward(Comm& tp, const T* local, T* full, size_t local_n);
template <class T>
void gather_from_sequence_backward(Comm& tp, const T* dfull, T* dlocal, size_t local_n);

// SP reduce-scatter: local[local_n] <- this rank's rows of the sum of full[size*local_n];
// backward: dfull[size*local_n] <- all-gather of dlocal.
template <class T>
void reduce_scatter_to_sequence_forward(Comm& tp, const T* full, T* local, size_t local_n);
template <class T>
void reduce_scatter_to_sequence_backward(Comm& tp, const T* dlocal, T* dfull, size_t local_n);

// SP: the gradient of a parameter every TP rank holds whole (LayerNorm weight and bias) computed
// from this rank's rows only, summed over the group in place (Megatron's all-reduce of the
// sequence-parallel gradients), so every rank has the full gradient. fp32 only.
void sum_sequence_parallel_grads(Comm& tp, float* grad, size_t n);

// Vocab-parallel cross-entropy (Megatron's): each rank holds a slice of the vocabulary's logits,
// and a row's softmax statistics are combined over the group in two reductions, in place: the
// rows' maxima (max), then [sum of exp(logit - global max) over the slice | the target's logit,
// 0 on the ranks that do not own it] (2*rows floats, sum). Both models' cross-entropy (the CPU
// TransformerModel's VocabParallelCrossEntropy, TransformerModelCuda's head) combine their slices
// through these. fp32.
void vocab_parallel_max(Comm& tp, float* row_max, size_t rows);
void vocab_parallel_sums(Comm& tp, float* sumexp_and_target, size_t rows);

// Rows of a [rows, ...] activation this rank holds under `tp` (rows/tp with SP, else rows).
// Throws when SP is on and rows do not divide by tp.
int64_t sequence_local_rows(const TpContext& tp, int64_t rows);

}  // namespace mpitron
