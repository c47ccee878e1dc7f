// Comm: one communication group (TP, DP, PP, ... or world) behind one interface, with an MPI
// implementation (CPU backend) and an NCCL one (GPU backend). Model and parallel code only ever
// talk to a Comm handed to them by the ProcessGrid; they never call MPI or NCCL directly.
//
// Buffers are raw pointers to `count` elements of `dtype` (host memory for MpiComm, device
// memory for NcclComm). bf16 sums on the CPU accumulate in fp32 and round once.
#pragma once
#include <cstddef>
#include <memory>
#include <string>

#include "mpitron/core/dtype.hpp"
#include "mpitron/distributed/wait_registry.hpp"

namespace mpitron {

enum class ReduceOp { sum, avg, max };

// A non-blocking operation in flight. wait() blocks until it is complete (idempotent);
// test() reports completion without blocking (and drives progress on the MPI backend).
class CommRequest {
 public:
  virtual ~CommRequest() = default;
  virtual void wait() = 0;
  virtual bool test() = 0;
  // What a wait on it waits for (the hang watchdog's messages): wait_registry.hpp.
  virtual CommOpTag tag() const { return {}; }
};
using Request = std::unique_ptr<CommRequest>;

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;  // rank inside this group
  virtual int size() const = 0;
  virtual const std::string& name() const = 0;  // "tp", "dp", "pp", "world", ...
  virtual std::string backend() const = 0;      // "mpi" | "nccl"

  // GPU backends: `stream` (a cudaStream_t; nullptr: none) is the stream the model computes on.
  // Every operation called afterwards first waits, device-side, for the work already enqueued
  // there (NcclComm records an event on it and makes its own communication stream wait for
  // it), so a DDP bucket's all-reduce reads finished gradients while backward keeps going on
  // the compute stream, with no host synchronisation. Host-memory backends (MPI) ignore it.
  virtual void set_compute_stream(void* stream) { (void)stream; }

  // In place: buf[count] <- op over the group.
  virtual void all_reduce(void* buf, size_t count, DType t, ReduceOp op) = 0;
  virtual Request iall_reduce(void* buf, size_t count, DType t, ReduceOp op) = 0;

  // recv[size()*count] <- every rank's send[count], in rank order.
  virtual void all_gather(const void* send, void* recv, size_t count, DType t) = 0;
  virtual Request iall_gather(const void* send, void* recv, size_t count, DType t) = 0;
  // Uneven form: rank r contributes counts[r] elements; recv is their concatenation.
  virtual void all_gatherv(const void* send, void* recv, const size_t* counts, DType t) = 0;
  // Non-blocking form (ZeRO: a shard's slice of one bucket or layer). counts[] is copied.
  virtual Request iall_gatherv(const void* send, void* recv, const size_t* counts, DType t) = 0;
  // Personalised exchange: send_counts[r] elements of `send` (rank-ordered, contiguous) go to rank
  // r, recv_counts[r] from rank r land contiguous in `recv` (MoE token dispatch and combine).
  virtual void all_to_allv(const void* send, const size_t* send_counts, void* recv, const size_t* recv_counts,
                           DType t) = 0;

  // recv[count] <- op over the group of send[rank()*count, (rank()+1)*count).
  virtual void reduce_scatter(const void* send, void* recv, size_t count, DType t, ReduceOp op) = 0;
  virtual Request ireduce_scatter(const void* send, void* recv, size_t count, DType t, ReduceOp op) = 0;
  // Uneven form: rank r receives counts[r] elements; send holds sum(counts) elements.
  virtual void reduce_scatterv(const void* send, void* recv, const size_t* counts, DType t, ReduceOp op) = 0;
  // Non-blocking form; f32 only, send and recv must not overlap. counts[] is copied.
  virtual Request ireduce_scatterv(const void* send, void* recv, const size_t* counts, DType t, ReduceOp op) = 0;

  virtual void broadcast(void* buf, size_t count, DType t, int root) = 0;

  // Point-to-point inside the group (peer = group rank). Blocking forms.
  virtual void send(const void* buf, size_t count, DType t, int peer, int tag = 0) = 0;
  virtual void recv(void* buf, size_t count, DType t, int peer, int tag = 0) = 0;
  virtual Request isend(const void* buf, size_t count, DType t, int peer, int tag = 0) = 0;
  virtual Request irecv(void* buf, size_t count, DType t, int peer, int tag = 0) = 0;
  // Send to one peer and receive from another as one operation: cannot deadlock, whatever
  // order the ranks call it in (pass peer < 0 to skip that half).
  virtual void sendrecv(const void* sendbuf, size_t send_count, int dst, void* recvbuf, size_t recv_count,
                        int src, DType t, int tag = 0) = 0;
  // Non-blocking form (a ring's hop: context parallel). The default posts irecv and isend and
  // waits for both; NCCL issues the pair as one group (a separately issued ncclSend blocks the
  // stream until its peer's ncclRecv is enqueued, so every rank sending first would deadlock).
  virtual Request isendrecv(const void* sendbuf, size_t send_count, int dst, void* recvbuf, size_t recv_count,
                            int src, DType t, int tag = 0);

  virtual void barrier() = 0;

  // In place, fp64, on a few HOST values whatever the backend (loss sums, token counts, norms):
  // exact enough that scalar bookkeeping agrees across layouts.
  virtual void all_reduce_host_f64(double* v, size_t count, ReduceOp op) = 0;

  // Exact integer reductions on HOST arrays for train.reproducible (parallel/fixed_point_grads.hpp,
  // exact_sum.hpp). The MPI backend has them; others refuse (reproducible needs train.backend = cpu).
  virtual void all_reduce_host_i64(int64_t* v, size_t count, ReduceOp op);  // sum or max
  virtual void all_reduce_host_i8_max(int8_t* v, size_t count);
  // counts[r] elements to rank r, in rank order, summed; recv holds counts[rank()].
  virtual void reduce_scatterv_host_i64(const int64_t* send, int64_t* recv, const size_t* counts);

  // Convenience for scalars (loss, grad norm, step agreement). fp64 via all_reduce_host_f64.
  double all_reduce_scalar(double v, ReduceOp op);
};

}  // namespace mpitron
