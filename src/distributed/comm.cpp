// The backend-independent part of the dist Comm layer: backend names, the factory, scalar
// reductions and communication buffers.
#include <mpi.h>

#include <cstring>

#include "device.hpp"
#include "mpitron/core/cuda_plugin.hpp"
#include "mpitron/core/error.hpp"
#include "mpitron/distributed/comm.hpp"
#include "mpitron/distributed/mpi_comm.hpp"

namespace mpitron {

std::string normalize_backend(const std::string& backend) {
  if (backend == "cpu" || backend == "mpi") return "mpi";
  if (backend == "nccl") return "nccl";
  usage_fail("unknown communication backend '{}' (allowed: cpu, mpi, nccl)", backend);
}

std::string backend_unavailable_reason(const std::string& backend, const LaunchInfo& launch) {
  if (normalize_backend(backend) == "mpi") return "";
#if MPITRON_CUDA
  if (launch.device >= 0) return "";
  return fmt::format("backend 'nccl' needs a GPU, but this process has {}; use train.backend=cpu",
                     launch.device_note.empty() ? std::string("no CUDA device bound") : launch.device_note);
#else
  (void)launch;
  return "backend 'nccl' needs a CUDA build of mpitron (this binary was built with CUDA=0); use train.backend=cpu";
#endif
}

std::unique_ptr<Comm> make_comm(const std::string& backend, MPI_Comm comm, const std::string& name,
                                const LaunchInfo& launch, double timeout_s) {
  std::string b = normalize_backend(backend);
  if (b == "mpi") return std::make_unique<MpiComm>(comm, name);
  std::string why = backend_unavailable_reason(b, launch);
  if (!why.empty()) {
    MPI_Comm_free(&comm);
    usage_fail("{}", why);
  }
#if MPITRON_CUDA
  return MPITRON_CUDA_ENTRY(mpitron_cuda_make_nccl_comm)(comm, name, launch.device, timeout_s);
#else
  (void)timeout_s;
  fail("unreachable: nccl backend in a CPU-only build");
#endif
}

namespace {

// Both halves of an exchange as one request.
class PairRequest final : public CommRequest {
 public:
  PairRequest(Request a, Request b) : a_(std::move(a)), b_(std::move(b)) {}
  void wait() override {
    if (a_) a_->wait();
    if (b_) b_->wait();
  }
  bool test() override {
    const bool a = !a_ || a_->test();  // both tested: each drives its own progress
    const bool b = !b_ || b_->test();
    return a && b;
  }
  CommOpTag tag() const override { return a_ ? a_->tag() : b_ ? b_->tag() : CommOpTag{}; }

 private:
  Request a_, b_;
};

}  // namespace

Request Comm::isendrecv(const void* sendbuf, size_t send_count, int dst, void* recvbuf, size_t recv_count, int src,
                        DType t, int tag) {
  Request r = src >= 0 ? irecv(recvbuf, recv_count, t, src, tag) : nullptr;
  Request s = dst >= 0 ? isend(sendbuf, send_count, t, dst, tag) : nullptr;
  return std::make_unique<PairRequest>(std::move(r), std::move(s));
}

namespace {
[[noreturn]] void no_exact_integer_reductions(const Comm& c) {
  usage_fail("group '{}' on backend '{}' has no exact integer reductions: train.reproducible needs train.backend = "
             "cpu",
             c.name(), c.backend());
}
}  // namespace

void Comm::all_reduce_host_i64(int64_t*, size_t, ReduceOp) { no_exact_integer_reductions(*this); }
void Comm::all_reduce_host_i8_max(int8_t*, size_t) { no_exact_integer_reductions(*this); }
void Comm::reduce_scatterv_host_i64(const int64_t*, int64_t*, const size_t*) { no_exact_integer_reductions(*this); }

double Comm::all_reduce_scalar(double v, ReduceOp op) {
  all_reduce_host_f64(&v, 1, op);
  return v;
}

CommBuffer::CommBuffer(const std::string& backend, size_t bytes)
    : device_(normalize_backend(backend) == "nccl"), bytes_(bytes) {
#if MPITRON_CUDA
  if (device_) {
    p_ = MPITRON_CUDA_ENTRY(mpitron_cuda_alloc)(bytes);
    return;
  }
#else
  usage_check(!device_, "backend 'nccl' needs a CUDA build of mpitron (this binary was built with CUDA=0)");
#endif
  p_ = host_alloc(Mem::comm, bytes);
}

CommBuffer::~CommBuffer() {
#if MPITRON_CUDA
  if (device_) {
    MPITRON_CUDA_ENTRY(mpitron_cuda_free)(p_);
    return;
  }
#endif
  host_free(Mem::comm, p_, bytes_);
}

void CommBuffer::upload(const void* host, size_t bytes) {
  check(bytes <= bytes_, "CommBuffer::upload: {} bytes into a buffer of {}", bytes, bytes_);
#if MPITRON_CUDA
  if (device_) return MPITRON_CUDA_ENTRY(mpitron_cuda_copy)(p_, host, bytes);
#endif
  std::memcpy(p_, host, bytes);
}

void CommBuffer::download(void* host, size_t bytes) const {
  check(bytes <= bytes_, "CommBuffer::download: {} bytes from a buffer of {}", bytes, bytes_);
#if MPITRON_CUDA
  if (device_) return MPITRON_CUDA_ENTRY(mpitron_cuda_copy)(host, p_, bytes);
#endif
  std::memcpy(host, p_, bytes);
}

}  // namespace mpitron
