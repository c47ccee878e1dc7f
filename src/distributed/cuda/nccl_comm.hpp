// NcclComm factory (GPU builds). The class itself lives in nccl_comm.cpp.
#pragma once
#include <mpi.h>

#include <memory>
#include <string>

#include "mpitron/distributed/comm.hpp"

namespace mpitron::detail {

// Rank 0 of `comm` calls ncclGetUniqueId, the id is MPI_Bcast over `comm`, and every rank calls
// ncclCommInitRank on `device` (already bound by init_launch). Takes ownership of `comm`, which
// stays alive for barriers. Buffers passed to the returned Comm are device memory.
// The communicator is non-blocking; a watchdog polls ncclCommGetAsyncError while waiting and
// calls ncclCommAbort when an operation is not complete after timeout_s (or NCCL reports an
// asynchronous error), then throws an Error naming the group and the collective.
std::unique_ptr<Comm> make_nccl_comm(MPI_Comm comm, const std::string& name, int device, double timeout_s = 300);

}  // namespace mpitron::detail
