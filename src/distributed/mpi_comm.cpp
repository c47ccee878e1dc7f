// MpiComm: Comm over an MPI communicator (CPU backend). See mpi_comm.hpp for the bf16 rule.
#include "mpitron/distributed/mpi_comm.hpp"

#include <climits>
#include <cstring>
#include <functional>
#include <vector>

#include "mpitron/core/error.hpp"

namespace mpitron {
namespace {

MPI_Datatype mpi_type(DType t) { return t == DType::f32 ? MPI_FLOAT : MPI_UINT16_T; }
MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::max ? MPI_MAX : MPI_SUM; }

void widen(const void* src, float* dst, size_t n) {
  const bf16* s = static_cast<const bf16*>(src);
#pragma omp parallel for simd if (n > (1u << 18))
  for (size_t i = 0; i < n; ++i) dst[i] = to_f32(s[i]);
}

void narrow(const float* src, void* dst, size_t n) {
  bf16* d = static_cast<bf16*>(dst);
#pragma omp parallel for simd if (n > (1u << 18))
  for (size_t i = 0; i < n; ++i) d[i] = to_bf16(src[i]);
}

void scale(float* p, size_t n, float s) {
#pragma omp parallel for simd if (n > (1u << 18))
  for (size_t i = 0; i < n; ++i) p[i] *= s;
}

bool overlaps(const void* a, size_t abytes, const void* b, size_t bbytes) {
  auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return pa < pb + bbytes && pb < pa + abytes;
}

struct MpiError {
  const MpiComm& c;
  void operator()(int rc, const char* call, size_t count = 0, DType t = DType::f32) const {
    if (rc == MPI_SUCCESS) return;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    fail("{} on group '{}' (rank {} of {}, {} x {}) failed: {}", call, c.name(), c.rank(), c.size(), count,
         dtype_name(t), std::string(msg, len));
  }
};

// A non-blocking MPI operation plus what must happen once it completes (divide for avg, round the
// fp32 scratch back to bf16). Owns the scratch the operation works on.
class MpiRequest final : public CommRequest {
 public:
  MpiRequest(std::string what, const CommOpTag& tag) : tag_(tag), what_(std::move(what)) {}
  ~MpiRequest() override {
    if (!done_ && req_ != MPI_REQUEST_NULL) {  // never free busy memory
      CommWait w(tag_);
      MPI_Wait(&req_, MPI_STATUS_IGNORE);
    }
  }
  void wait() override {
    if (done_) return;
    CommWait w(tag_);
    int rc = MPI_Wait(&req_, MPI_STATUS_IGNORE);
    check_rc(rc);
    complete();
  }
  bool test() override {
    if (done_) return true;
    int flag = 0;
    check_rc(MPI_Test(&req_, &flag, MPI_STATUS_IGNORE));
    if (flag) complete();
    return done_;
  }
  CommOpTag tag() const override { return tag_; }
  MPI_Request req_ = MPI_REQUEST_NULL;
  CommOpTag tag_;
  std::function<void()> finish_;
  Buffer<float> scratch_;
  std::vector<int> counts_, displs_;  // v-collectives: must stay valid until completion

 private:
  void check_rc(int rc) {
    if (rc == MPI_SUCCESS) return;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    fail("{} failed: {}", what_, std::string(msg, len));
  }
  void complete() {
    done_ = true;
    if (finish_) finish_();
  }
  std::string what_;
  bool done_ = false;
};

}  // namespace

int mpi_int(size_t n, const char* what) {
  check(n <= static_cast<size_t>(INT_MAX), "{}: count {} exceeds the MPI int limit ({})", what, n, INT_MAX);
  return static_cast<int>(n);
}

std::vector<int> mpi_int_counts(const size_t* counts, int n, const char* what, size_t& total) {
  std::vector<int> c(n);
  total = 0;
  for (int r = 0; r < n; ++r) {
    c[r] = mpi_int(counts[r], what);
    total += counts[r];
  }
  return c;
}

MpiComm::MpiComm(MPI_Comm comm, std::string name) : comm_(comm), name_(std::move(name)) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  // The members' world ranks, for the watchdog's messages (a hang names ranks users know).
  world_ranks_ = world_ranks_of(comm_);
  info_ = std::make_unique<CommGroupInfo>(name_, world_ranks_);
}

std::vector<int> world_ranks_of(MPI_Comm comm) {
  int n = 0;
  MPI_Comm_size(comm, &n);
  MPI_Group mine, world;
  MPI_Comm_group(comm, &mine);
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  std::vector<int> local(n), global(n);
  for (int i = 0; i < n; ++i) local[i] = i;
  MPI_Group_translate_ranks(mine, n, local.data(), world, global.data());
  MPI_Group_free(&mine);
  MPI_Group_free(&world);
  return global;
}

CommOpTag MpiComm::coll(const char* op, size_t count, DType t) {
  return CommOpTag{info_.get(), op, info_->next_collective(), -1, count, t};
}

CommOpTag MpiComm::p2p(const char* op, int peer, size_t count, DType t) const {
  return CommOpTag{info_.get(), op, 0, peer >= 0 && peer < size_ ? world_ranks_[peer] : -1, count, t};
}

MpiComm::~MpiComm() {
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin && comm_ != MPI_COMM_WORLD && comm_ != MPI_COMM_SELF && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

float* MpiComm::scratch(size_t n) {
  if (scratch_.size() < n) scratch_ = Buffer<float>(Mem::comm, n);
  return scratch_.data();
}

void MpiComm::check_peer(int peer, const char* what) const {
  check(peer >= 0 && peer < size_, "{} on group '{}': peer {} is not a rank of this group of {}", what, name_, peer,
        size_);
}

void MpiComm::all_reduce(void* buf, size_t count, DType t, ReduceOp op) {
  MpiError err{*this};
  int n = mpi_int(count, "all_reduce");
  float* f = t == DType::f32 ? static_cast<float*>(buf) : scratch(count);
  if (t == DType::bf16) widen(buf, f, count);
  CommWait w(coll("MPI_Allreduce", count, t));
  err(MPI_Allreduce(MPI_IN_PLACE, f, n, MPI_FLOAT, mpi_op(op), comm_), "MPI_Allreduce", count, t);
  if (op == ReduceOp::avg) scale(f, count, 1.0f / size_);
  if (t == DType::bf16) narrow(f, buf, count);
}

Request MpiComm::iall_reduce(void* buf, size_t count, DType t, ReduceOp op) {
  MpiError err{*this};
  int n = mpi_int(count, "iall_reduce");
  auto r = std::make_unique<MpiRequest>(fmt::format("MPI_Iallreduce on group '{}'", name_),
                                        coll("MPI_Iallreduce (wait)", count, t));
  float* f = static_cast<float*>(buf);
  if (t == DType::bf16) {
    r->scratch_ = Buffer<float>(Mem::comm, count);
    f = r->scratch_.data();
    widen(buf, f, count);
  }
  err(MPI_Iallreduce(MPI_IN_PLACE, f, n, MPI_FLOAT, mpi_op(op), comm_, &r->req_), "MPI_Iallreduce", count, t);
  float s = op == ReduceOp::avg ? 1.0f / size_ : 1.0f;
  bool to_bf = t == DType::bf16;
  if (s != 1.0f || to_bf)
    r->finish_ = [f, buf, count, s, to_bf] {
      if (s != 1.0f) scale(f, count, s);
      if (to_bf) narrow(f, buf, count);
    };
  return r;
}

void MpiComm::all_gather(const void* send, void* recv, size_t count, DType t) {
  MpiError err{*this};
  int n = mpi_int(count, "all_gather");
  mpi_int(count * size_, "all_gather");
  const char* mine = static_cast<const char*>(recv) + rank_ * count * dtype_size(t);
  const void* s = send == mine ? MPI_IN_PLACE : send;
  CommWait w(coll("MPI_Allgather", count, t));
  err(MPI_Allgather(s, n, mpi_type(t), recv, n, mpi_type(t), comm_), "MPI_Allgather", count, t);
}

Request MpiComm::iall_gather(const void* send, void* recv, size_t count, DType t) {
  MpiError err{*this};
  int n = mpi_int(count, "iall_gather");
  mpi_int(count * size_, "iall_gather");
  auto r = std::make_unique<MpiRequest>(fmt::format("MPI_Iallgather on group '{}'", name_),
                                        coll("MPI_Iallgather (wait)", count, t));
  const char* mine = static_cast<const char*>(recv) + rank_ * count * dtype_size(t);
  const void* s = send == mine ? MPI_IN_PLACE : send;
  err(MPI_Iallgather(s, n, mpi_type(t), recv, n, mpi_type(t), comm_, &r->req_), "MPI_Iallgather", count, t);
  return r;
}

void MpiComm::all_gatherv(const void* send, void* recv, const size_t* counts, DType t) {
  MpiError err{*this};
  std::vector<int> c(size_), d(size_);
  size_t off = 0;
  for (int r = 0; r < size_; ++r) {
    c[r] = mpi_int(counts[r], "all_gatherv");
    d[r] = mpi_int(off, "all_gatherv");
    off += counts[r];
  }
  const char* mine = static_cast<const char*>(recv) + d[rank_] * dtype_size(t);
  const void* s = send == mine ? MPI_IN_PLACE : send;
  CommWait w(coll("MPI_Allgatherv", counts[rank_], t));
  err(MPI_Allgatherv(s, c[rank_], mpi_type(t), recv, c.data(), d.data(), mpi_type(t), comm_), "MPI_Allgatherv",
      counts[rank_], t);
}

Request MpiComm::iall_gatherv(const void* send, void* recv, const size_t* counts, DType t) {
  auto r = std::make_unique<MpiRequest>(fmt::format("MPI_Iallgatherv on group '{}'", name_),
                                        coll("MPI_Iallgatherv (wait)", counts[rank_], t));
  r->counts_.resize(size_);
  r->displs_.resize(size_);
  size_t off = 0;
  for (int i = 0; i < size_; ++i) {
    r->counts_[i] = mpi_int(counts[i], "iall_gatherv");
    r->displs_[i] = mpi_int(off, "iall_gatherv");
    off += counts[i];
  }
  const char* mine = static_cast<const char*>(recv) + r->displs_[rank_] * dtype_size(t);
  const void* s = send == mine ? MPI_IN_PLACE : send;
  MpiError{*this}(MPI_Iallgatherv(s, r->counts_[rank_], mpi_type(t), recv, r->counts_.data(), r->displs_.data(),
                                  mpi_type(t), comm_, &r->req_),
                  "MPI_Iallgatherv", counts[rank_], t);
  return r;
}

void MpiComm::reduce_scatter(const void* send, void* recv, size_t count, DType t, ReduceOp op) {
  MpiError err{*this};
  int n = mpi_int(count, "reduce_scatter");
  size_t total = count * size_;
  mpi_int(total, "reduce_scatter");
  CommWait w(coll("MPI_Reduce_scatter_block", count, t));
  if (t == DType::f32 && !overlaps(send, total * 4, recv, count * 4)) {
    err(MPI_Reduce_scatter_block(send, recv, n, MPI_FLOAT, mpi_op(op), comm_), "MPI_Reduce_scatter_block", count, t);
    if (op == ReduceOp::avg) scale(static_cast<float*>(recv), count, 1.0f / size_);
    return;
  }
  // bf16 (widened) or recv inside send: reduce in place in the fp32 scratch, result at its start.
  float* f = scratch(total);
  if (t == DType::bf16)
    widen(send, f, total);
  else
    std::memcpy(f, send, total * 4);
  err(MPI_Reduce_scatter_block(MPI_IN_PLACE, f, n, MPI_FLOAT, mpi_op(op), comm_), "MPI_Reduce_scatter_block", count,
      t);
  if (op == ReduceOp::avg) scale(f, count, 1.0f / size_);
  if (t == DType::bf16)
    narrow(f, recv, count);
  else
    std::memcpy(recv, f, count * 4);
}

Request MpiComm::ireduce_scatter(const void* send, void* recv, size_t count, DType t, ReduceOp op) {
  MpiError err{*this};
  int n = mpi_int(count, "ireduce_scatter");
  size_t total = count * size_;
  mpi_int(total, "ireduce_scatter");
  auto r = std::make_unique<MpiRequest>(fmt::format("MPI_Ireduce_scatter_block on group '{}'", name_),
                                        coll("MPI_Ireduce_scatter_block (wait)", count, t));
  float s = op == ReduceOp::avg ? 1.0f / size_ : 1.0f;
  if (t == DType::f32 && !overlaps(send, total * 4, recv, count * 4)) {
    err(MPI_Ireduce_scatter_block(send, recv, n, MPI_FLOAT, mpi_op(op), comm_, &r->req_),
        "MPI_Ireduce_scatter_block", count, t);
    if (s != 1.0f) r->finish_ = [recv, count, s] { scale(static_cast<float*>(recv), count, s); };
    return r;
  }
  r->scratch_ = Buffer<float>(Mem::comm, total);
  float* f = r->scratch_.data();
  if (t == DType::bf16)
    widen(send, f, total);
  else
    std::memcpy(f, send, total * 4);
  err(MPI_Ireduce_scatter_block(MPI_IN_PLACE, f, n, MPI_FLOAT, mpi_op(op), comm_, &r->req_),
      "MPI_Ireduce_scatter_block", count, t);
  bool to_bf = t == DType::bf16;
  r->finish_ = [f, recv, count, s, to_bf] {
    if (s != 1.0f) scale(f, count, s);
    if (to_bf)
      narrow(f, recv, count);
    else
      std::memcpy(recv, f, count * 4);
  };
  return r;
}

void MpiComm::reduce_scatterv(const void* send, void* recv, const size_t* counts, DType t, ReduceOp op) {
  MpiError err{*this};
  size_t total = 0;
  const std::vector<int> c = mpi_int_counts(counts, size_, "reduce_scatterv", total);
  mpi_int(total, "reduce_scatterv");
  size_t mine = counts[rank_];
  float* f = scratch(total);
  if (t == DType::bf16)
    widen(send, f, total);
  else
    std::memcpy(f, send, total * 4);
  CommWait w(coll("MPI_Reduce_scatter", mine, t));
  err(MPI_Reduce_scatter(MPI_IN_PLACE, f, c.data(), MPI_FLOAT, mpi_op(op), comm_), "MPI_Reduce_scatter", mine, t);
  if (op == ReduceOp::avg) scale(f, mine, 1.0f / size_);
  if (t == DType::bf16)
    narrow(f, recv, mine);
  else
    std::memcpy(recv, f, mine * 4);
}

Request MpiComm::ireduce_scatterv(const void* send, void* recv, const size_t* counts, DType t, ReduceOp op) {
  check(t == DType::f32, "ireduce_scatterv on group '{}': only f32 is supported", name_);
  auto r = std::make_unique<MpiRequest>(fmt::format("MPI_Ireduce_scatter on group '{}'", name_),
                                        coll("MPI_Ireduce_scatter (wait)", counts[rank_], t));
  size_t total = 0;
  r->counts_ = mpi_int_counts(counts, size_, "ireduce_scatterv", total);
  size_t mine = counts[rank_];
  check(!overlaps(send, total * 4, recv, mine * 4), "ireduce_scatterv on group '{}': send and recv overlap", name_);
  MpiError{*this}(MPI_Ireduce_scatter(send, recv, r->counts_.data(), MPI_FLOAT, mpi_op(op), comm_, &r->req_),
                  "MPI_Ireduce_scatter", mine, t);
  if (op == ReduceOp::avg) {
    float s = 1.0f / size_;
    r->finish_ = [recv, mine, s] { scale(static_cast<float*>(recv), mine, s); };
  }
  return r;
}

void MpiComm::all_to_allv(const void* send, const size_t* send_counts, void* recv, const size_t* recv_counts,
                          DType t) {
  std::vector<int> sc(size_), sd(size_), rc(size_), rd(size_);
  size_t so = 0, ro = 0;
  for (int r = 0; r < size_; ++r) {
    sc[r] = mpi_int(send_counts[r], "all_to_allv"), sd[r] = mpi_int(so, "all_to_allv");
    rc[r] = mpi_int(recv_counts[r], "all_to_allv"), rd[r] = mpi_int(ro, "all_to_allv");
    so += send_counts[r], ro += recv_counts[r];
  }
  CommWait w(coll("MPI_Alltoallv", so, t));
  MpiError{*this}(MPI_Alltoallv(send, sc.data(), sd.data(), mpi_type(t), recv, rc.data(), rd.data(), mpi_type(t), comm_),
                  "MPI_Alltoallv", so, t);
}

void MpiComm::broadcast(void* buf, size_t count, DType t, int root) {
  check_peer(root, "broadcast");
  CommWait w(coll("MPI_Bcast", count, t));
  MpiError{*this}(MPI_Bcast(buf, mpi_int(count, "broadcast"), mpi_type(t), root, comm_), "MPI_Bcast", count, t);
}

void MpiComm::send(const void* buf, size_t count, DType t, int peer, int tag) {
  check_peer(peer, "send");
  CommWait w(p2p("MPI_Send", peer, count, t));
  MpiError{*this}(MPI_Send(buf, mpi_int(count, "send"), mpi_type(t), peer, tag, comm_), "MPI_Send", count, t);
}

void MpiComm::recv(void* buf, size_t count, DType t, int peer, int tag) {
  check_peer(peer, "recv");
  CommWait w(p2p("MPI_Recv", peer, count, t));
  MpiError{*this}(MPI_Recv(buf, mpi_int(count, "recv"), mpi_type(t), peer, tag, comm_, MPI_STATUS_IGNORE), "MPI_Recv",
                  count, t);
}

Request MpiComm::isend(const void* buf, size_t count, DType t, int peer, int tag) {
  check_peer(peer, "isend");
  auto r = std::make_unique<MpiRequest>(fmt::format("MPI_Isend on group '{}'", name_),
                                        p2p("MPI_Isend (wait)", peer, count, t));
  MpiError{*this}(MPI_Isend(buf, mpi_int(count, "isend"), mpi_type(t), peer, tag, comm_, &r->req_), "MPI_Isend",
                  count, t);
  return r;
}

Request MpiComm::irecv(void* buf, size_t count, DType t, int peer, int tag) {
  check_peer(peer, "irecv");
  auto r = std::make_unique<MpiRequest>(fmt::format("MPI_Irecv on group '{}'", name_),
                                        p2p("MPI_Irecv (wait)", peer, count, t));
  MpiError{*this}(MPI_Irecv(buf, mpi_int(count, "irecv"), mpi_type(t), peer, tag, comm_, &r->req_), "MPI_Irecv",
                  count, t);
  return r;
}

void MpiComm::sendrecv(const void* sendbuf, size_t send_count, int dst, void* recvbuf, size_t recv_count, int src,
                       DType t, int tag) {
  if (dst >= 0) check_peer(dst, "sendrecv");
  if (src >= 0) check_peer(src, "sendrecv");
  // MPI_Sendrecv progresses both halves together, so rings and pairwise swaps cannot deadlock.
  CommWait w(p2p("MPI_Sendrecv", src >= 0 ? src : dst, recv_count, t));
  MpiError{*this}(MPI_Sendrecv(sendbuf, mpi_int(send_count, "sendrecv"), mpi_type(t), dst < 0 ? MPI_PROC_NULL : dst,
                               tag, recvbuf, mpi_int(recv_count, "sendrecv"), mpi_type(t),
                               src < 0 ? MPI_PROC_NULL : src, tag, comm_, MPI_STATUS_IGNORE),
                  "MPI_Sendrecv", send_count, t);
}

void MpiComm::all_reduce_host_f64(double* v, size_t count, ReduceOp op) {
  CommWait w(coll("MPI_Allreduce (host f64)", count, DType::f32));
  MpiError{*this}(MPI_Allreduce(MPI_IN_PLACE, v, mpi_int(count, "all_reduce_host_f64"), MPI_DOUBLE, mpi_op(op), comm_),
                  "MPI_Allreduce (f64)", count);
  if (op == ReduceOp::avg)
    for (size_t i = 0; i < count; ++i) v[i] /= size_;
}

// The byte counts of the communication log are given in f32 units (4 bytes).
void MpiComm::all_reduce_host_i64(int64_t* v, size_t count, ReduceOp op) {
  check(op != ReduceOp::avg, "all_reduce_host_i64 on group '{}': sum or max only", name_);
  CommWait w(coll("MPI_Allreduce (host i64)", 2 * count, DType::f32));
  MpiError{*this}(MPI_Allreduce(MPI_IN_PLACE, v, mpi_int(count, "all_reduce_host_i64"), MPI_INT64_T, mpi_op(op), comm_),
                  "MPI_Allreduce (i64)", count);
}

void MpiComm::all_reduce_host_i8_max(int8_t* v, size_t count) {
  CommWait w(coll("MPI_Allreduce (host i8 max)", (count + 3) / 4, DType::f32));
  MpiError{*this}(MPI_Allreduce(MPI_IN_PLACE, v, mpi_int(count, "all_reduce_host_i8_max"), MPI_INT8_T, MPI_MAX, comm_),
                  "MPI_Allreduce (i8 max)", count);
}

void MpiComm::reduce_scatterv_host_i64(const int64_t* send, int64_t* recv, const size_t* counts) {
  size_t total = 0;
  const std::vector<int> c = mpi_int_counts(counts, size_, "reduce_scatterv_host_i64", total);
  mpi_int(total, "reduce_scatterv_host_i64");
  check(!overlaps(send, total * 8, recv, counts[rank_] * 8), "reduce_scatterv_host_i64 on group '{}': send and recv overlap",
        name_);
  CommWait w(coll("MPI_Reduce_scatter (host i64)", 2 * counts[rank_], DType::f32));
  MpiError{*this}(MPI_Reduce_scatter(send, recv, c.data(), MPI_INT64_T, MPI_SUM, comm_), "MPI_Reduce_scatter (i64)",
                  counts[rank_]);
}

void MpiComm::barrier() {
  CommWait w(coll("MPI_Barrier", 0, DType::f32));
  MpiError{*this}(MPI_Barrier(comm_), "MPI_Barrier");
}

}  // namespace mpitron
