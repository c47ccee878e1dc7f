// NcclComm: Comm over an NCCL communicator (GPU backend). Bootstrap: rank 0 of the
// group's MPI communicator calls ncclGetUniqueId, MPI_Bcasts the id over that communicator, and
// every member calls ncclCommInitRank. Operations run on the Comm's own stream; blocking forms
// synchronize it, non-blocking forms record an event that wait()/test() look at. NCCL has no
// tags: point-to-point messages between two ranks match in issue order. A blocking send that
// meets a blocking send deadlocks, as in NCCL itself: use sendrecv (one NCCL group) for swaps.
//
// Ordering against the compute stream (set_compute_stream): before each operation the Comm
// records an event on the compute stream and its own stream waits for it (cudaStreamWaitEvent),
// so communication starts after the kernels that produce its input, without a host sync; the
// caller waits for the Request (event on the Comm's stream) before it reads the result.
//
// Watchdog: the communicator is non-blocking (ncclConfig_t.blocking = 0), so no NCCL call and no
// wait can hang the process. A call that returns ncclInProgress is polled with
// ncclCommGetAsyncError until it is enqueued; every wait (blocking forms, Request::wait/test)
// polls the stream or event together with ncclCommGetAsyncError. An asynchronous error, or an
// operation not done after comm.timeout_s, calls ncclCommAbort and throws an Error naming the
// group, the collective, the rank and the elapsed time; the top level then aborts the job.
#include "nccl_comm.hpp"
#include "../device.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <thread>
#include <vector>

#include "mpitron/core/error.hpp"
#include "mpitron/distributed/wait_registry.hpp"
#include "mpitron/distributed/mpi_comm.hpp"
#include "mpitron/distributed/watchdog.hpp"

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

class NcclComm;


// Completion of one non-blocking operation: an event on the Comm's stream, waited on under the
// Comm's watchdog. The Comm must outlive its requests.
class NcclRequest final : public CommRequest {
 public:
  NcclRequest(NcclComm& comm, cudaStream_t s, const char* op);
  ~NcclRequest() override;
  void wait() override;
  bool test() override;

 private:
  NcclComm& comm_;
  const char* op_;
  cudaEvent_t ev_ = nullptr;
  bool done_ = false;
};

class NcclComm final : public Comm {
 public:
  NcclComm(MPI_Comm comm, std::string name, int device, double timeout_s)
      : mpi_(comm), name_(std::move(name)), device_(device), timeout_s_(timeout_s) {
    MPI_Comm_rank(mpi_, &rank_);
    MPI_Comm_size(mpi_, &size_);
    info_ = std::make_unique<CommGroupInfo>(name_, world_ranks_of(mpi_));  // for the hang watchdog
    ncclUniqueId id{};
    if (rank_ == 0) nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    int rc = MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, mpi_);
    check(rc == MPI_SUCCESS, "MPI_Bcast of the NCCL unique id on group '{}' failed", name_);
    cuda_check(cudaSetDevice(device_), "cudaSetDevice");
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    nccl_check(ncclCommInitRankConfig(&nccl_, size_, id, rank_, &config), "ncclCommInitRankConfig");
    cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    cuda_check(cudaEventCreateWithFlags(&compute_done_, cudaEventDisableTiming), "cudaEventCreate");
  }
  ~NcclComm() override {
    // Bounded: a peer that died must not hang the exit; past the timeout the communicator is aborted.
    if (stream_ && nccl_) {
      auto t0 = std::chrono::steady_clock::now();
      while (cudaStreamQuery(stream_) == cudaErrorNotReady && seconds_since(t0) < timeout_s_)
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      if (cudaStreamQuery(stream_) == cudaErrorNotReady) {
        ncclCommAbort(nccl_);
        nccl_ = nullptr;
      }
    }
    if (nccl_) ncclCommDestroy(nccl_);
    if (stream_) cudaStreamDestroy(stream_);
    if (compute_done_) cudaEventDestroy(compute_done_);
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin && mpi_ != MPI_COMM_NULL && mpi_ != MPI_COMM_WORLD) MPI_Comm_free(&mpi_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  std::string backend() const override { return "nccl"; }
  void set_compute_stream(void* stream) override { compute_ = static_cast<cudaStream_t>(stream); }

  void all_reduce(void* buf, size_t count, DType t, ReduceOp op) override {
    nccl_check(ncclAllReduce(buf, buf, count, nccl_type(t), nccl_op(op), nccl_, ordered()), "ncclAllReduce");
    sync("ncclAllReduce");
  }
  Request iall_reduce(void* buf, size_t count, DType t, ReduceOp op) override {
    nccl_check(ncclAllReduce(buf, buf, count, nccl_type(t), nccl_op(op), nccl_, ordered()), "ncclAllReduce");
    return std::make_unique<NcclRequest>(*this, stream_, "ncclAllReduce");
  }
  void all_gather(const void* send, void* recv, size_t count, DType t) override {
    nccl_check(ncclAllGather(send, recv, count, nccl_type(t), nccl_, ordered()), "ncclAllGather");
    sync("ncclAllGather");
  }
  Request iall_gather(const void* send, void* recv, size_t count, DType t) override {
    nccl_check(ncclAllGather(send, recv, count, nccl_type(t), nccl_, ordered()), "ncclAllGather");
    return std::make_unique<NcclRequest>(*this, stream_, "ncclAllGather");
  }
  // Uneven all-gather = one broadcast per rank, fused in one NCCL group.
  void all_gatherv(const void* send, void* recv, const size_t* counts, DType t) override {
    enqueue_all_gatherv(send, recv, counts, t);
    sync("all_gatherv (ncclBroadcast group)");
  }
  Request iall_gatherv(const void* send, void* recv, const size_t* counts, DType t) override {
    enqueue_all_gatherv(send, recv, counts, t);
    return std::make_unique<NcclRequest>(*this, stream_, "all_gatherv (ncclBroadcast group)");
  }
  // Uneven all-gather = one broadcast per rank (rank r is the root of its slice), one NCCL group.
  void enqueue_all_gatherv(const void* send, void* recv, const size_t* counts, DType t) {
    char* out = static_cast<char*>(recv);
    nccl_check(ncclGroupStart(), "ncclGroupStart");
    size_t off = 0;
    for (int r = 0; r < size_; ++r) {
      const void* src = r == rank_ ? send : nullptr;
      if (counts[r] > 0)
        nccl_check(ncclBroadcast(src, out + off * dtype_size(t), counts[r], nccl_type(t), r, nccl_, ordered()),
                   "ncclBroadcast");
      off += counts[r];
    }
    nccl_check(ncclGroupEnd(), "ncclGroupEnd");
  }
  void reduce_scatter(const void* send, void* recv, size_t count, DType t, ReduceOp op) override {
    nccl_check(ncclReduceScatter(send, recv, count, nccl_type(t), nccl_op(op), nccl_, ordered()), "ncclReduceScatter");
    sync("ncclReduceScatter");
  }
  Request ireduce_scatter(const void* send, void* recv, size_t count, DType t, ReduceOp op) override {
    nccl_check(ncclReduceScatter(send, recv, count, nccl_type(t), nccl_op(op), nccl_, ordered()), "ncclReduceScatter");
    return std::make_unique<NcclRequest>(*this, stream_, "ncclReduceScatter");
  }
  void reduce_scatterv(const void* send, void* recv, const size_t* counts, DType t, ReduceOp op) override {
    enqueue_reduce_scatterv(send, recv, counts, t, op);
    sync("reduce_scatterv (ncclReduce group)");
  }
  Request ireduce_scatterv(const void* send, void* recv, const size_t* counts, DType t, ReduceOp op) override {
    enqueue_reduce_scatterv(send, recv, counts, t, op);
    return std::make_unique<NcclRequest>(*this, stream_, "reduce_scatterv (ncclReduce group)");
  }
  // Uneven reduce-scatter = one reduce per rank (rank r is the root of its slice), one NCCL group.
  void enqueue_reduce_scatterv(const void* send, void* recv, const size_t* counts, DType t, ReduceOp op) {
    const char* in = static_cast<const char*>(send);
    nccl_check(ncclGroupStart(), "ncclGroupStart");
    size_t off = 0;
    for (int r = 0; r < size_; ++r) {
      if (counts[r] > 0)
        nccl_check(ncclReduce(in + off * dtype_size(t), r == rank_ ? recv : nullptr, counts[r], nccl_type(t),
                              nccl_op(op), r, nccl_, ordered()),
                   "ncclReduce");
      off += counts[r];
    }
    nccl_check(ncclGroupEnd(), "ncclGroupEnd");
  }
  // One NCCL group of a send and a receive per peer (NCCL has no all-to-all-v).
  void all_to_allv(const void* send, const size_t* send_counts, void* recv, const size_t* recv_counts,
                   DType t) override {
    const char* in = static_cast<const char*>(send);
    char* out = static_cast<char*>(recv);
    cudaStream_t s = ordered();
    nccl_check(ncclGroupStart(), "ncclGroupStart");
    size_t so = 0, ro = 0;
    for (int r = 0; r < size_; ++r) {
      if (send_counts[r] > 0)
        nccl_check(ncclSend(in + so * dtype_size(t), send_counts[r], nccl_type(t), r, nccl_, s), "ncclSend");
      if (recv_counts[r] > 0)
        nccl_check(ncclRecv(out + ro * dtype_size(t), recv_counts[r], nccl_type(t), r, nccl_, s), "ncclRecv");
      so += send_counts[r], ro += recv_counts[r];
    }
    nccl_check(ncclGroupEnd(), "ncclGroupEnd");
    sync("all_to_allv (ncclSend + ncclRecv group)");
  }
  void broadcast(void* buf, size_t count, DType t, int root) override {
    nccl_check(ncclBroadcast(buf, buf, count, nccl_type(t), root, nccl_, ordered()), "ncclBroadcast");
    sync("ncclBroadcast");
  }
  void send(const void* buf, size_t count, DType t, int peer, int) override {
    nccl_check(ncclSend(buf, count, nccl_type(t), peer, nccl_, ordered()), "ncclSend");
    sync("ncclSend");
  }
  void recv(void* buf, size_t count, DType t, int peer, int) override {
    nccl_check(ncclRecv(buf, count, nccl_type(t), peer, nccl_, ordered()), "ncclRecv");
    sync("ncclRecv");
  }
  Request isend(const void* buf, size_t count, DType t, int peer, int) override {
    nccl_check(ncclSend(buf, count, nccl_type(t), peer, nccl_, ordered()), "ncclSend");
    return std::make_unique<NcclRequest>(*this, stream_, "ncclSend");
  }
  Request irecv(void* buf, size_t count, DType t, int peer, int) override {
    nccl_check(ncclRecv(buf, count, nccl_type(t), peer, nccl_, ordered()), "ncclRecv");
    return std::make_unique<NcclRequest>(*this, stream_, "ncclRecv");
  }
  void sendrecv(const void* sendbuf, size_t send_count, int dst, void* recvbuf, size_t recv_count, int src, DType t,
                int) override {
    nccl_check(ncclGroupStart(), "ncclGroupStart");
    if (dst >= 0) nccl_check(ncclSend(sendbuf, send_count, nccl_type(t), dst, nccl_, ordered()), "ncclSend");
    if (src >= 0) nccl_check(ncclRecv(recvbuf, recv_count, nccl_type(t), src, nccl_, ordered()), "ncclRecv");
    nccl_check(ncclGroupEnd(), "ncclGroupEnd");
    sync("sendrecv (ncclSend + ncclRecv group)");
  }
  Request isendrecv(const void* sendbuf, size_t send_count, int dst, void* recvbuf, size_t recv_count, int src,
                    DType t, int) override {
    cudaStream_t s = ordered();
    nccl_check(ncclGroupStart(), "ncclGroupStart");
    if (dst >= 0) nccl_check(ncclSend(sendbuf, send_count, nccl_type(t), dst, nccl_, s), "ncclSend");
    if (src >= 0) nccl_check(ncclRecv(recvbuf, recv_count, nccl_type(t), src, nccl_, s), "ncclRecv");
    nccl_check(ncclGroupEnd(), "ncclGroupEnd");
    return std::make_unique<NcclRequest>(*this, stream_, "ncclSend + ncclRecv group");
  }
  void all_reduce_host_f64(double* v, size_t count, ReduceOp op) override {
    void* d = nullptr;
    cuda_check(cudaMalloc(&d, count * sizeof(double) + 1), "cudaMalloc");
    cudaError_t e = cudaSuccess;
    try {
      // The upload goes on the communication stream itself: a plain cudaMemcpy from pageable
      // memory may return before its DMA lands, and it runs on the legacy default stream, which
      // the (non-blocking) communication stream does not wait for.
      cudaStream_t s = ordered();
      cuda_check(cudaMemcpyAsync(d, v, count * sizeof(double), cudaMemcpyHostToDevice, s), "cudaMemcpyAsync(H2D)");
      nccl_check(ncclAllReduce(d, d, count, ncclFloat64, nccl_op(op), nccl_, s), "ncclAllReduce (f64)");
      sync("ncclAllReduce (f64)");
      e = cudaMemcpy(v, d, count * sizeof(double), cudaMemcpyDeviceToHost);
    } catch (...) {
      cudaFree(d);
      throw;
    }
    cudaFree(d);
    cuda_check(e, "cudaMemcpy");
  }
  // train.reproducible's exact sums are in host memory: integer collectives over the group's MPI
  // communicator (exact in any order, so the transport does not change a bit).
  void all_reduce_host_i64(int64_t* v, size_t count, ReduceOp op) override {
    check(op != ReduceOp::avg, "all_reduce_host_i64 on group '{}': sum or max only", name_);
    host_collective("MPI_Allreduce (host i64)", [&] {
      return MPI_Allreduce(MPI_IN_PLACE, v, mpi_int(count, "all_reduce_host_i64"), MPI_INT64_T,
                           op == ReduceOp::max ? MPI_MAX : MPI_SUM, mpi_);
    });
  }
  void all_reduce_host_i8_max(int8_t* v, size_t count) override {
    host_collective("MPI_Allreduce (host i8 max)",
                    [&] { return MPI_Allreduce(MPI_IN_PLACE, v, mpi_int(count, "all_reduce_host_i8_max"), MPI_INT8_T,
                                               MPI_MAX, mpi_); });
  }
  void reduce_scatterv_host_i64(const int64_t* send, int64_t* recv, const size_t* counts) override {
    size_t total = 0;
    const std::vector<int> c = mpi_int_counts(counts, size_, "reduce_scatterv_host_i64", total);
    host_collective("MPI_Reduce_scatter (host i64)",
                    [&] { return MPI_Reduce_scatter(send, recv, c.data(), MPI_INT64_T, MPI_SUM, mpi_); });
  }
  // Registered with the hang watchdog, as the NCCL waits are (watch).
  template <class Call>
  void host_collective(const char* op, Call&& call) {
    CommOpTag tag;
    tag.group = info_.get();
    tag.op = op;
    CommWait registered(tag);
    check(call() == MPI_SUCCESS, "{} on group '{}' failed", op, name_);
  }

  void barrier() override {
    sync("barrier");
    int rc = MPI_Barrier(mpi_);
    check(rc == MPI_SUCCESS, "MPI_Barrier on group '{}' failed", name_);
  }

  // The watchdog: waits for `ev` (the whole stream when null) while watching the communicator.
  // The wait is registered with the process's hang watchdog (distributed/watchdog.hpp), which reports
  // it, asks the peers where they are and aborts the job after comm.timeout_s; this Comm's own
  // timeout then only backs it up (it fires first where no HangWatchdog runs, e.g. bench-comm).
  void watch(cudaEvent_t ev, const char* op) {
    CommOpTag tag;
    tag.group = info_.get();
    tag.op = op;
    CommWait registered(tag);
    const double limit = hang_watchdog_running() ? timeout_s_ + 60 : timeout_s_;
    auto t0 = std::chrono::steady_clock::now();
    for (int spin = 0;; ++spin) {
      cudaError_t e = ev ? cudaEventQuery(ev) : cudaStreamQuery(stream_);
      if (e == cudaSuccess) return;
      if (e != cudaErrorNotReady) cuda_check(e, ev ? "cudaEventQuery" : "cudaStreamQuery");
      poll_async(op);
      if (seconds_since(t0) > limit)
        abort_with(op, fmt::format("not complete after {:.0f} s (comm.timeout_s = {} s; a peer may have died or be stuck)",
                                   seconds_since(t0), timeout_s_));
      if (spin > 1000) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  // Throws (after aborting the communicator) when NCCL reports an asynchronous error.
  void poll_async(const char* op) {
    if (!nccl_) fail("NCCL {} on group '{}': the communicator was aborted earlier", op, name_);
    ncclResult_t r = ncclSuccess;
    ncclResult_t q = ncclCommGetAsyncError(nccl_, &r);
    if (q != ncclSuccess) abort_with(op, fmt::format("ncclCommGetAsyncError failed: {}", ncclGetErrorString(q)));
    if (r != ncclSuccess && r != ncclInProgress)
      abort_with(op, fmt::format("asynchronous error: {}", ncclGetErrorString(r)));
  }

 private:
  static double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  void sync(const char* op) { watch(nullptr, op); }
  // The stream NCCL operations go to, after it was made to wait for the compute stream's work.
  cudaStream_t ordered() {
    if (compute_) {
      cuda_check(cudaEventRecord(compute_done_, compute_), "cudaEventRecord(compute stream)");
      cuda_check(cudaStreamWaitEvent(stream_, compute_done_, 0), "cudaStreamWaitEvent(communication stream)");
    }
    return stream_;
  }
  [[noreturn]] void abort_with(const char* op, const std::string& why) {
    std::string last = nccl_ ? ncclGetLastError(nccl_) : "";
    if (nccl_) {
      ncclCommAbort(nccl_);
      nccl_ = nullptr;
    }
    fail("NCCL {} on group '{}' (rank {} of {}, device {}): {}{}{}; communicator aborted", op, name_, rank_, size_,
         device_, why, last.empty() ? "" : ": ", last);
  }
  // A call on a non-blocking communicator may return ncclInProgress: poll until it is enqueued
  // (bounded by the timeout), then treat any other result as the error it is.
  void nccl_check(ncclResult_t r, const char* what) {
    if (r == ncclInProgress && nccl_) {
      auto t0 = std::chrono::steady_clock::now();
      do {
        if (ncclCommGetAsyncError(nccl_, &r) != ncclSuccess) break;
        if (r == ncclInProgress && seconds_since(t0) > timeout_s_)
          abort_with(what, fmt::format("still in progress after comm.timeout_s = {} s", timeout_s_));
        if (r == ncclInProgress) std::this_thread::sleep_for(std::chrono::microseconds(20));
      } while (r == ncclInProgress);
    }
    if (r == ncclSuccess) return;
    const char* last = nccl_ ? ncclGetLastError(nccl_) : nullptr;
    std::string msg = fmt::format("{} on group '{}' (rank {} of {}, device {}) failed: {}{}{}", what, name_, rank_,
                                  size_, device_, ncclGetErrorString(r), last && *last ? ": " : "", last ? last : "");
    if (nccl_) {
      ncclCommAbort(nccl_);
      nccl_ = nullptr;
    }
    fail("{}; communicator aborted", msg);
  }

  MPI_Comm mpi_;
  std::string name_;
  std::unique_ptr<CommGroupInfo> info_;
  int device_ = 0;
  double timeout_s_ = 300;
  int rank_ = 0, size_ = 1;
  ncclComm_t nccl_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaStream_t compute_ = nullptr;  // set_compute_stream
  cudaEvent_t compute_done_ = nullptr;
};

NcclRequest::NcclRequest(NcclComm& comm, cudaStream_t s, const char* op) : comm_(comm), op_(op) {
  cuda_check(cudaEventCreateWithFlags(&ev_, cudaEventDisableTiming), "cudaEventCreate");
  cuda_check(cudaEventRecord(ev_, s), "cudaEventRecord");
}
NcclRequest::~NcclRequest() {
  if (!ev_) return;
  if (!done_) {
    try {
      comm_.watch(ev_, op_);
    } catch (...) {  // a destructor must not throw; the aborted communicator fails the next call
    }
  }
  cudaEventDestroy(ev_);
}
void NcclRequest::wait() {
  if (done_) return;
  comm_.watch(ev_, op_);
  done_ = true;
}
bool NcclRequest::test() {
  if (done_) return true;
  cudaError_t e = cudaEventQuery(ev_);
  if (e == cudaErrorNotReady) {
    comm_.poll_async(op_);
    return false;
  }
  cuda_check(e, "cudaEventQuery");
  done_ = true;
  return true;
}

}  // namespace

std::unique_ptr<Comm> make_nccl_comm(MPI_Comm comm, const std::string& name, int device, double timeout_s) {
  return std::make_unique<NcclComm>(comm, name, device, timeout_s);
}

}  // namespace mpitron::detail

// The entry point (distributed/device.hpp): make_comm's way here, through MPITRON_CUDA_ENTRY.
extern "C" std::unique_ptr<mpitron::Comm> mpitron_cuda_make_nccl_comm(MPI_Comm comm, const std::string& name,
                                                                      int device, double timeout_s) {
  return mpitron::detail::make_nccl_comm(comm, name, device, timeout_s);
}
