// The HDF5 library mpitron links (Debian's parallel build) is not built thread-safe
// (H5_HAVE_THREADSAFE is off), and the DataLoader reads shards on a background thread.
// Every HDF5 call in the process -- shard reads, checkpoints, anything -- must therefore hold
// this one mutex while a DataLoader may be running. The data module always does.
#pragma once
#include <mutex>

namespace mpitron {

std::mutex& hdf5_mutex();

}  // namespace mpitron

namespace mpitron {

// A long run of HDF5 calls (a checkpoint write) may let other threads in between its steps:
// hdf5_yield_point releases `lock` and takes it again, when this thread asked for that with
// hdf5_yield_between_tensors(true) (the background checkpoint writer: the data loader's reads
// must not wait for a whole write). The caller holds no HDF5 call across it.
void hdf5_yield_between_tensors(bool on);
void hdf5_yield_point(std::unique_lock<std::mutex>& lock);

}  // namespace mpitron
