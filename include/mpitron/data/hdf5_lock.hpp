// The HDF5 library mpitron links (Debian's parallel build) is not built thread-safe
// (H5_HAVE_THREADSAFE is off), and the DataLoader reads shards on a background thread.
// Every HDF5 call in the process -- shard reads, checkpoints, anything -- must therefore hold
// this one mutex while a DataLoader may be running. The data module always does.
#pragma once
#include <mutex>

namespace mpitron {

std::mutex& hdf5_mutex();

}  // namespace mpitron
