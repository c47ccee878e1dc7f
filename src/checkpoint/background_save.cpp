#include "mpitron/checkpoint/background_save.hpp"

#include <fmt/format.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstring>
#include <optional>
#include <thread>
#include <vector>

#include "mpitron/core/error.hpp"
#include "mpitron/core/memory.hpp"
#include "mpitron/core/trace.hpp"

namespace mpitron {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

constexpr CkptRange CheckpointShard::*kRanges[] = {&CheckpointShard::params, &CheckpointShard::exp_avg,
                                                   &CheckpointShard::exp_avg_sq};

// The ranges start() copies: what this rank writes (a replica's copy is never read by the writer),
// its slice where the copy is written by every rank holding it (CkptRange::saved).
bool copied(const CheckpointShard& s, CkptRange CheckpointShard::*k) {
  const CkptRange& r = s.*k;
  return r.data && r.owner && (k == &CheckpointShard::params || s.has_optimizer);
}
size_t copied_size(const CkptRange& r) {
  const CkptRange w = r.saved();
  return w.end - w.begin;
}

// memcpy of n floats that also says whether they are all finite (exponent bits not all ones),
// block by block while the block is in cache: the snapshot's NaN check reads the state once.
bool copy_finite(float* dst, const float* src, size_t n) {
  constexpr size_t kBlock = 4096;
  uint32_t bad = 0;
  for (size_t i = 0; i < n; i += kBlock) {
    const size_t m = std::min(kBlock, n - i);
    std::memcpy(dst + i, src + i, m * sizeof(float));
    for (size_t k = 0; k < m; ++k) bad |= (~std::bit_cast<uint32_t>(dst[i + k]) & 0x7f800000u) == 0;
  }
  return bad == 0;
}

}  // namespace

int64_t snapshot_bytes_of(std::span<const CheckpointShard> shards) {
  int64_t n = 0;
  for (const auto& s : shards)
    for (auto k : kRanges)
      if (copied(s, k)) n += static_cast<int64_t>(copied_size(s.*k) * sizeof(float));
  return n;
}

struct BackgroundSave::Job {
  CheckpointManager mgr;
  std::vector<Buffer<float>> bufs;  // the snapshot, one buffer per copied range (Mem::checkpoint)
  CheckpointMeta meta;
  std::vector<CheckpointShard> shards;   // over bufs
  std::thread thread;
  std::atomic<bool> done{false};
  std::string error, path;
  double snapshot_s = 0, write_s = 0;
  bool finite = true;  // the last snapshot's values

  Job(std::string dir, int keep, MPI_Comm comm) : mgr(std::move(dir), keep, comm) {}

  void run() {
    const auto t0 = Clock::now();
    trace::Span span(fmt::format("background write of step {}", meta.step), trace::checkpoint);
    try {
      CheckpointWriteOptions opt;
      opt.background = true;
      path = mgr.save(meta, shards, opt);
    } catch (const std::exception& e) {
      error = e.what();
    } catch (...) {
      error = "unknown error";
    }
    write_s = seconds_since(t0);
    done.store(true, std::memory_order_release);
  }
};

BackgroundSave::BackgroundSave(std::string dir, int keep, MPI_Comm comm) {
  int provided = 0;
  MPI_Query_thread(&provided);
  usage_check(provided >= MPI_THREAD_MULTIPLE,
              "checkpoint.async = true needs an MPI library with MPI_THREAD_MULTIPLE (the writer thread runs MPI-IO "
              "while training communicates); this one provides level {} only: set checkpoint.async = false",
              provided);
  MPI_Comm_dup(comm, &comm_);
  job_ = std::make_shared<Job>(std::move(dir), keep, comm_);
}

BackgroundSave::~BackgroundSave() {
  if (!job_->thread.joinable()) return;
  if (job_->done.load(std::memory_order_acquire)) {
    job_->thread.join();
    return;
  }
  // Unwinding an error with a write in flight: its peers may be gone, a join could wait forever.
  // The thread keeps the Job alive through its own reference until the process ends.
  job_->thread.detach();
}

double BackgroundSave::snapshot(const CheckpointMeta& meta, std::span<const CheckpointShard> shards) {
  check(!in_flight(), "BackgroundSave::snapshot with the save of step {} still in flight", in_flight_step());
  if (job_->thread.joinable()) job_->thread.join();
  const auto t0 = Clock::now();
  Job& j = *job_;
  trace::Span span(fmt::format("snapshot of step {}", meta.step), trace::checkpoint);
  j.meta = meta;
  j.shards.assign(shards.begin(), shards.end());
  j.finite = true;
  size_t b = 0;
  for (auto& s : j.shards)
    for (auto k : kRanges) {
      CkptRange& r = s.*k;
      if (!copied(s, k)) {
        if (r.data && (k == &CheckpointShard::params || s.has_optimizer))
          j.finite &= all_finite(r.data, r.end - r.begin);
        r.data = nullptr;  // never read by the writer: not this rank's to write
        continue;
      }
      if (b == j.bufs.size()) j.bufs.emplace_back();
      Buffer<float>& buf = j.bufs[b++];
      const CkptRange w = r.saved();  // the rest of the copy: other ranks' to write, checked here too
      if (buf.size() != w.end - w.begin) buf = Buffer<float>(Mem::checkpoint, w.end - w.begin);
      j.finite &= all_finite(r.data, w.begin - r.begin) && all_finite(w.data + buf.size(), r.end - w.end);
      j.finite &= copy_finite(buf.data(), w.data, buf.size());
      r = w;
      r.data = buf.data();
    }
  j.bufs.resize(b);
  j.snapshot_s = seconds_since(t0);
  return j.snapshot_s;
}

std::string BackgroundSave::snapshot_non_finite(std::span<const CheckpointShard> shards) const {
  // The copy saw a NaN/inf somewhere in the buffers; first_non_finite names it (alignment gaps
  // between tensors hold nothing and do not count).
  return job_->finite ? std::string() : first_non_finite(shards);
}

void BackgroundSave::launch() {
  Job& j = *job_;
  check(!j.thread.joinable(), "BackgroundSave::launch without a snapshot");
  j.error.clear();
  j.path.clear();
  j.done.store(false, std::memory_order_relaxed);
  std::shared_ptr<Job> keep = job_;  // the thread's own reference (see the destructor)
  j.thread = std::thread([keep] { keep->run(); });
  pthread_setname_np(j.thread.native_handle(), "mpitron-ckpt");  // named in top, gdb and /proc
}

bool BackgroundSave::in_flight() const {
  return job_->thread.joinable() && !job_->done.load(std::memory_order_acquire);
}

int64_t BackgroundSave::in_flight_step() const { return job_->meta.step; }

std::optional<BackgroundSave::Done> BackgroundSave::finish() {
  Job& j = *job_;
  j.thread.join();
  if (!j.error.empty())
    fail("the background checkpoint save of step {} failed: {}", j.meta.step, j.error);
  return Done{j.meta.step, j.path, j.snapshot_s, j.write_s};
}

std::optional<BackgroundSave::Done> BackgroundSave::poll() {
  if (!job_->thread.joinable() || !job_->done.load(std::memory_order_acquire)) return std::nullopt;
  return finish();
}

std::optional<BackgroundSave::Done> BackgroundSave::wait() {
  if (!job_->thread.joinable()) return std::nullopt;
  return finish();
}

int64_t BackgroundSave::snapshot_bytes() const {
  int64_t n = 0;
  for (const auto& b : job_->bufs) n += static_cast<int64_t>(b.bytes());
  return n;
}

void BackgroundSave::reserve(std::span<const CheckpointShard> shards) {
  check(!job_->thread.joinable(), "BackgroundSave::reserve after a save started");
  job_->bufs.clear();
  for (const auto& s : shards)
    for (auto k : kRanges)
      if (copied(s, k)) job_->bufs.emplace_back(Mem::checkpoint, copied_size(s.*k));
}

}  // namespace mpitron
