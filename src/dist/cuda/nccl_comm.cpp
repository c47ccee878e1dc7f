// NcclComm: Comm over an NCCL communicator (GPU backend). Bootstrap (DESIGN.md): rank 0 of the
// group's MPI communicator calls ncclGetUniqueId, MPI_Bcasts the id over that communicator, and
// every member calls ncclCommInitRank. Operations run on the Comm's own stream; blocking forms
// synchronize it, non-blocking forms record an event that wait()/test() look at. NCCL has no
// tags: point-to-point messages between two ranks match in issue order. A blocking send that
// meets a blocking send deadlocks, as in NCCL itself: use sendrecv (one NCCL group) for swaps.
#include "nccl_comm.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include <vector>

#include "mpitron/core/error.hpp"

namespace mpitron::detail {
namespace {

ncclDataType_t nccl_type(DType t) { return t == DType::f32 ? ncclFloat32 : ncclBfloat16; }
ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::avg: return ncclAvg;
    case ReduceOp::max: return ncclMax;
  }
  return ncclSum;
}

void cuda_check(cudaError_t e, const char* what) {
  check(e == cudaSuccess, "{} failed: {}", what, cudaGetErrorString(e));
}

class NcclRequest final : public CommRequest {
 public:
  explicit NcclRequest(cudaStream_t s) {
    cuda_check(cudaEventCreateWithFlags(&ev_, cudaEventDisableTiming), "cudaEventCreate");
    cuda_check(cudaEventRecord(ev_, s), "cudaEventRecord");
  }
  ~NcclRequest() override {
    if (ev_) {
      cudaEventSynchronize(ev_);
      cudaEventDestroy(ev_);
    }
  }
  void wait() override { cuda_check(cudaEventSynchronize(ev_), "cudaEventSynchronize"); }
  bool test() override {
    cudaError_t e = cudaEventQuery(ev_);
    if (e == cudaErrorNotReady) return false;
    cuda_check(e, "cudaEventQuery");
    return true;
  }

 private:
  cudaEvent_t ev_ = nullptr;
};

class NcclComm final : public Comm {
 public:
  NcclComm(MPI_Comm comm, std::string name, int device) : mpi_(comm), name_(std::move(name)), device_(device) {
    MPI_Comm_rank(mpi_, &rank_);
    MPI_Comm_size(mpi_, &size_);
    ncclUniqueId id{};
    if (rank_ == 0) nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    int rc = MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, mpi_);
    check(rc == MPI_SUCCESS, "MPI_Bcast of the NCCL unique id on group '{}' failed", name_);
    cuda_check(cudaSetDevice(device_), "cudaSetDevice");
    nccl_check(ncclCommInitRank(&nccl_, size_, id, rank_), "ncclCommInitRank");
    cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  ~NcclComm() override {
    if (stream_) cudaStreamSynchronize(stream_);
    if (nccl_) ncclCommDestroy(nccl_);
    if (stream_) cudaStreamDestroy(stream_);
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin && mpi_ != MPI_COMM_NULL && mpi_ != MPI_COMM_WORLD) MPI_Comm_free(&mpi_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  std::string backend() const override { return "nccl"; }

  void all_reduce(void* buf, size_t count, DType t, ReduceOp op) override {
    nccl_check(ncclAllReduce(buf, buf, count, nccl_type(t), nccl_op(op), nccl_, stream_), "ncclAllReduce");
    sync();
  }
  Request iall_reduce(void* buf, size_t count, DType t, ReduceOp op) override {
    nccl_check(ncclAllReduce(buf, buf, count, nccl_type(t), nccl_op(op), nccl_, stream_), "ncclAllReduce");
    return std::make_unique<NcclRequest>(stream_);
  }
  void all_gather(const void* send, void* recv, size_t count, DType t) override {
    nccl_check(ncclAllGather(send, recv, count, nccl_type(t), nccl_, stream_), "ncclAllGather");
    sync();
  }
  Request iall_gather(const void* send, void* recv, size_t count, DType t) override {
    nccl_check(ncclAllGather(send, recv, count, nccl_type(t), nccl_, stream_), "ncclAllGather");
    return std::make_unique<NcclRequest>(stream_);
  }
  // Uneven all-gather = one broadcast per rank, fused in one NCCL group.
  void all_gatherv(const void* send, void* recv, const size_t* counts, DType t) override {
    enqueue_all_gatherv(send, recv, counts, t);
    sync();
  }
  Request iall_gatherv(const void* send, void* recv, const size_t* counts, DType t) override {
    enqueue_all_gatherv(send, recv, counts, t);
    return std::make_unique<NcclRequest>(stream_);
  }
  // Uneven all-gather = one broadcast per rank (rank r is the root of its slice), one NCCL group.
  void enqueue_all_gatherv(const void* send, void* recv, const size_t* counts, DType t) {
    char* out = static_cast<char*>(recv);
    nccl_check(ncclGroupStart(), "ncclGroupStart");
    size_t off = 0;
    for (int r = 0; r < size_; ++r) {
      const void* src = r == rank_ ? send : nullptr;
      if (counts[r] > 0)
        nccl_check(ncclBroadcast(src, out + off * dtype_size(t), counts[r], nccl_type(t), r, nccl_, stream_),
                   "ncclBroadcast");
      off += counts[r];
    }
    nccl_check(ncclGroupEnd(), "ncclGroupEnd");
  }
  void reduce_scatter(const void* send, void* recv, size_t count, DType t, ReduceOp op) override {
    nccl_check(ncclReduceScatter(send, recv, count, nccl_type(t), nccl_op(op), nccl_, stream_), "ncclReduceScatter");
    sync();
  }
  Request ireduce_scatter(const void* send, void* recv, size_t count, DType t, ReduceOp op) override {
    nccl_check(ncclReduceScatter(send, recv, count, nccl_type(t), nccl_op(op), nccl_, stream_), "ncclReduceScatter");
    return std::make_unique<NcclRequest>(stream_);
  }
  void reduce_scatterv(const void* send, void* recv, const size_t* counts, DType t, ReduceOp op) override {
    enqueue_reduce_scatterv(send, recv, counts, t, op);
    sync();
  }
  Request ireduce_scatterv(const void* send, void* recv, const size_t* counts, DType t, ReduceOp op) override {
    enqueue_reduce_scatterv(send, recv, counts, t, op);
    return std::make_unique<NcclRequest>(stream_);
  }
  // Uneven reduce-scatter = one reduce per rank (rank r is the root of its slice), one NCCL group.
  void enqueue_reduce_scatterv(const void* send, void* recv, const size_t* counts, DType t, ReduceOp op) {
    const char* in = static_cast<const char*>(send);
    nccl_check(ncclGroupStart(), "ncclGroupStart");
    size_t off = 0;
    for (int r = 0; r < size_; ++r) {
      if (counts[r] > 0)
        nccl_check(ncclReduce(in + off * dtype_size(t), r == rank_ ? recv : nullptr, counts[r], nccl_type(t),
                              nccl_op(op), r, nccl_, stream_),
                   "ncclReduce");
      off += counts[r];
    }
    nccl_check(ncclGroupEnd(), "ncclGroupEnd");
  }
  void broadcast(void* buf, size_t count, DType t, int root) override {
    nccl_check(ncclBroadcast(buf, buf, count, nccl_type(t), root, nccl_, stream_), "ncclBroadcast");
    sync();
  }
  void send(const void* buf, size_t count, DType t, int peer, int) override {
    nccl_check(ncclSend(buf, count, nccl_type(t), peer, nccl_, stream_), "ncclSend");
    sync();
  }
  void recv(void* buf, size_t count, DType t, int peer, int) override {
    nccl_check(ncclRecv(buf, count, nccl_type(t), peer, nccl_, stream_), "ncclRecv");
    sync();
  }
  Request isend(const void* buf, size_t count, DType t, int peer, int) override {
    nccl_check(ncclSend(buf, count, nccl_type(t), peer, nccl_, stream_), "ncclSend");
    return std::make_unique<NcclRequest>(stream_);
  }
  Request irecv(void* buf, size_t count, DType t, int peer, int) override {
    nccl_check(ncclRecv(buf, count, nccl_type(t), peer, nccl_, stream_), "ncclRecv");
    return std::make_unique<NcclRequest>(stream_);
  }
  void sendrecv(const void* sendbuf, size_t send_count, int dst, void* recvbuf, size_t recv_count, int src, DType t,
                int) override {
    nccl_check(ncclGroupStart(), "ncclGroupStart");
    if (dst >= 0) nccl_check(ncclSend(sendbuf, send_count, nccl_type(t), dst, nccl_, stream_), "ncclSend");
    if (src >= 0) nccl_check(ncclRecv(recvbuf, recv_count, nccl_type(t), src, nccl_, stream_), "ncclRecv");
    nccl_check(ncclGroupEnd(), "ncclGroupEnd");
    sync();
  }
  void all_reduce_host_f64(double* v, size_t count, ReduceOp op) override {
    void* d = nullptr;
    cuda_check(cudaMalloc(&d, count * sizeof(double) + 1), "cudaMalloc");
    cuda_check(cudaMemcpy(d, v, count * sizeof(double), cudaMemcpyHostToDevice), "cudaMemcpy");
    ncclResult_t r = ncclAllReduce(d, d, count, ncclFloat64, nccl_op(op), nccl_, stream_);
    cudaError_t e = cudaStreamSynchronize(stream_);
    if (e == cudaSuccess) e = cudaMemcpy(v, d, count * sizeof(double), cudaMemcpyDeviceToHost);
    cudaFree(d);
    nccl_check(r, "ncclAllReduce (f64)");
    cuda_check(e, "cudaMemcpy");
  }
  void barrier() override {
    sync();
    int rc = MPI_Barrier(mpi_);
    check(rc == MPI_SUCCESS, "MPI_Barrier on group '{}' failed", name_);
  }

 private:
  void sync() { cuda_check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }
  void nccl_check(ncclResult_t r, const char* what) {
    if (r == ncclSuccess || r == ncclInProgress) return;
    const char* last = nccl_ ? ncclGetLastError(nccl_) : nullptr;
    fail("{} on group '{}' (rank {} of {}, device {}) failed: {}{}{}", what, name_, rank_, size_, device_,
         ncclGetErrorString(r), last && *last ? ": " : "", last ? last : "");
  }

  MPI_Comm mpi_;
  std::string name_;
  int device_ = 0;
  int rank_ = 0, size_ = 1;
  ncclComm_t nccl_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

}  // namespace

std::unique_ptr<Comm> make_nccl_comm(MPI_Comm comm, const std::string& name, int device) {
  return std::make_unique<NcclComm>(comm, name, device);
}

}  // namespace mpitron::detail
