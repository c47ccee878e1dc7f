// The GPU's FlatOps (ops/flat_vector_ops.hpp): the flat-vector operations of the backend-neutral training
// code (DataParallel, ZeRO, AdamW, the gradient norm) on device memory, every call enqueued on
// the CudaOps stream (the compute stream). Its allocator is stream-ordered on that stream
// (cudaMallocAsync / cudaFreeAsync), zero-fills, and counts under MemTracker::cuda(): a bucket
// freed right after the kernel that reads it was enqueued is reused only after that kernel ran.
// AdamW here updates the fp32 master weights only; the model refreshes its bf16 copy when told
// (ModelChunk::params_changed). GPU builds only.
#pragma once
#include <memory>

#include "mpitron/ops/cuda/cuda_ops.hpp"
#include "mpitron/ops/flat_vector_ops.hpp"

namespace mpitron {

// `ops` must outlive the result.
std::unique_ptr<FlatOps> make_cuda_flat_ops(CudaOps& ops);
// FlatOps' allocator on its own: stream-ordered on `s`, zero-filling, counted in MemTracker::cuda().
std::unique_ptr<DeviceAllocator> make_stream_allocator(cudaStream_t s);

}  // namespace mpitron
