// MpiComm: the CPU backend's Comm over one MPI communicator (host buffers). bf16 reductions go
// through fp32: the bf16 buffer is widened, reduced in fp32 by MPI, and rounded once (the rule
// everywhere: bf16 sums accumulate in fp32). avg = sum / size. Blocking bf16 calls reuse one scratch buffer,
// so one Comm must not run two blocking bf16 reductions from two threads at once.
//
// make_comm() is the factory the ProcessGrid uses: backend "cpu"/"mpi" -> MpiComm, "nccl" ->
// NcclComm (GPU builds only).
#pragma once
#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "mpitron/core/memory.hpp"
#include "mpitron/distributed/comm.hpp"
#include "mpitron/distributed/wait_registry.hpp"
#include "mpitron/distributed/launch.hpp"

namespace mpitron {

class MpiComm final : public Comm {
 public:
  // Takes ownership of `comm` (freed on destruction unless it is MPI_COMM_WORLD/SELF).
  MpiComm(MPI_Comm comm, std::string name);
  ~MpiComm() override;
  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  std::string backend() const override { return "mpi"; }
  MPI_Comm mpi_comm() const { return comm_; }

  void all_reduce(void* buf, size_t count, DType t, ReduceOp op) override;
  Request iall_reduce(void* buf, size_t count, DType t, ReduceOp op) override;
  void all_gather(const void* send, void* recv, size_t count, DType t) override;
  Request iall_gather(const void* send, void* recv, size_t count, DType t) override;
  void all_gatherv(const void* send, void* recv, const size_t* counts, DType t) override;
  Request iall_gatherv(const void* send, void* recv, const size_t* counts, DType t) override;
  void reduce_scatter(const void* send, void* recv, size_t count, DType t, ReduceOp op) override;
  Request ireduce_scatter(const void* send, void* recv, size_t count, DType t, ReduceOp op) override;
  void reduce_scatterv(const void* send, void* recv, const size_t* counts, DType t, ReduceOp op) override;
  Request ireduce_scatterv(const void* send, void* recv, const size_t* counts, DType t, ReduceOp op) override;
  void broadcast(void* buf, size_t count, DType t, int root) override;
  void all_to_allv(const void* send, const size_t* send_counts, void* recv, const size_t* recv_counts,
                   DType t) override;
  void send(const void* buf, size_t count, DType t, int peer, int tag = 0) override;
  void recv(void* buf, size_t count, DType t, int peer, int tag = 0) override;
  Request isend(const void* buf, size_t count, DType t, int peer, int tag = 0) override;
  Request irecv(void* buf, size_t count, DType t, int peer, int tag = 0) override;
  void sendrecv(const void* sendbuf, size_t send_count, int dst, void* recvbuf, size_t recv_count, int src,
                DType t, int tag = 0) override;
  void barrier() override;
  void all_reduce_host_f64(double* v, size_t count, ReduceOp op) override;
  void all_reduce_host_i64(int64_t* v, size_t count, ReduceOp op) override;
  void all_reduce_host_i8_max(int8_t* v, size_t count) override;
  void reduce_scatterv_host_i64(const int64_t* send, int64_t* recv, const size_t* counts) override;

 private:
  float* scratch(size_t n);  // grow-only fp32 scratch for blocking bf16 reductions
  void check_peer(int peer, const char* what) const;
  // The hang watchdog's view of an operation (wait_registry.hpp): a collective takes the group's
  // next collective number; a point-to-point operation names its peer's world rank.
  CommOpTag coll(const char* op, size_t count, DType t);
  CommOpTag p2p(const char* op, int peer, size_t count, DType t) const;
  MPI_Comm comm_;
  std::string name_;
  int rank_ = 0, size_ = 1;
  std::vector<int> world_ranks_;
  std::unique_ptr<CommGroupInfo> info_;
  Buffer<float> scratch_;
};

// The world ranks of `comm`'s members, in its rank order.
std::vector<int> world_ranks_of(MPI_Comm comm);

// "cpu" | "mpi" -> "mpi"; "nccl" -> "nccl"; anything else: UsageError listing the allowed ones.
std::string normalize_backend(const std::string& backend);
// Why `backend` cannot run in this build/process ("" when it can): a CPU-only build, or no GPU.
std::string backend_unavailable_reason(const std::string& backend, const LaunchInfo& launch);

// One Comm over `comm` (ownership passes to it). For "nccl", rank 0 of `comm` creates the NCCL
// unique id, MPI_Bcasts it over `comm`, and every rank calls ncclCommInitRank on launch.device.
// NCCL only: a collective not complete after timeout_s aborts the communicator with an error
// naming the group and the collective (the watchdog in distributed/cuda/nccl_comm.cpp).
std::unique_ptr<Comm> make_comm(const std::string& backend, MPI_Comm comm, const std::string& name,
                                const LaunchInfo& launch, double timeout_s = 300);

// MPI's counts are int: n as one (Error naming `what` beyond INT_MAX), and per-rank counts (a
// reduce-scatter's) as ints with their total. NcclComm's host collectives use them too.
int mpi_int(size_t n, const char* what);
std::vector<int> mpi_int_counts(const size_t* counts, int n, const char* what, size_t& total);

// Communication buffers where the backend wants them: host memory (counted under Mem::comm) for
// MPI, device memory for NCCL. Zero-filled.
class CommBuffer {
 public:
  CommBuffer(const std::string& backend, size_t bytes);
  ~CommBuffer();
  CommBuffer(const CommBuffer&) = delete;
  CommBuffer& operator=(const CommBuffer&) = delete;
  void* data() { return p_; }
  size_t bytes() const { return bytes_; }
  void upload(const void* host, size_t bytes);   // host -> buffer
  void download(void* host, size_t bytes) const;  // buffer -> host

 private:
  bool device_ = false;
  size_t bytes_ = 0;
  void* p_ = nullptr;
};

}  // namespace mpitron
