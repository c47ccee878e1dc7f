// Asynchronous checkpoint saves (checkpoint.async = true): the save step copies this rank's shards
// (parameters or their ZeRO shard, AdamW moments: only the ranges this rank writes) into a host
// snapshot and returns; a writer thread then runs the same CheckpointManager::save the
// synchronous path runs -- same file, same resharding, same checksums, temp name + rename, and
// `latest` moved by rank 0 only after the barrier that follows every rank's part -- on its own
// duplicate of the communicator, so its collectives never match the trainer's.
//
// At most one save is in flight: the caller waits for it before the next save, a preemption
// save, the last step's save and the nan_policy = "stop" save. A writer that failed (disk full,
// file size limit) is reported by poll() / wait() on that rank as an Error with the writer's
// message; the trainer calls poll() at every step boundary, so the job stops at the next one.
// The HDF5 library is not thread-safe: the writer holds hdf5_mutex() per tensor (the data
// loader's prefetch thread reads shards between them), and it moves the data with independent
// MPI-IO transfers (CheckpointWriteOptions::background says why).
#pragma once
#include <mpi.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "mpitron/checkpoint/checkpoint.hpp"

namespace mpitron {

class BackgroundSave {
 public:
  struct Done {
    int64_t step = 0;
    std::string path;
    double snapshot_s = 0, write_s = 0;  // the copy (blocking the step) and the background write
  };

  // Collective over comm (MPI_Comm_dup). UsageError unless MPI provides MPI_THREAD_MULTIPLE.
  BackgroundSave(std::string dir, int keep, MPI_Comm comm);
  // A write still running (the trainer is unwinding an error): the thread is detached, the
  // process ends with the job; the partial file is hidden (.step_N.h5.tmp) and `latest` untouched.
  ~BackgroundSave();
  BackgroundSave(const BackgroundSave&) = delete;
  BackgroundSave& operator=(const BackgroundSave&) = delete;

  // Copies what this rank writes of `shards` into the snapshot, checking on the way that every
  // value is finite (one pass over the state; the ranges it does not copy are checked too, as a
  // synchronous save checks them). No save may be in flight (wait() first). Returns the seconds
  // the copy took.
  double snapshot(const CheckpointMeta& meta, std::span<const CheckpointShard> shards);
  // first_non_finite(shards) (the same shards, still unchanged) when the snapshot saw a NaN/inf,
  // else "" without a second pass.
  std::string snapshot_non_finite(std::span<const CheckpointShard> shards) const;
  // Starts writing the snapshot (after the ranks agreed it is finite).
  void launch();
  bool in_flight() const;
  int64_t in_flight_step() const;
  // Non-blocking: the save that finished since the last call, if any. Error (with the writer's
  // message) when it failed.
  std::optional<Done> poll();
  // Blocks until the save in flight (if any) is done; as poll() otherwise.
  std::optional<Done> wait();
  // Allocates the snapshot for shards of this layout now (host memory, Mem::checkpoint), so a job
  // that cannot hold it fails at start-up, not at its first save; start() reuses it.
  void reserve(std::span<const CheckpointShard> shards);
  // Bytes of the snapshot buffers.
  int64_t snapshot_bytes() const;

 private:
  struct Job;
  std::optional<Done> finish();
  std::shared_ptr<Job> job_;
  MPI_Comm comm_ = MPI_COMM_NULL;
};

// Bytes a snapshot of `shards` takes: the ranges this rank writes (owner flags), as start() copies.
int64_t snapshot_bytes_of(std::span<const CheckpointShard> shards);

}  // namespace mpitron
