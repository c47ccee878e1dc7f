// The flat-vector operations the backend-neutral training code needs (src/parallel: gradient
// buckets and ZeRO in DataParallel, AdamW, the gradient norm), on memory of one device: the CPU's
// Ops (host memory) and the GPU's CudaFlatOps (device memory, every call enqueued on the compute
// stream) both provide them, so DataParallel, ZeRO 1-3 and AdamW are written once.
//
// Pointers are of the device whose allocator() made them (nullptr: host memory). Values that
// come back to the host (sum_squares) make the GPU wait; nothing else does unless it says so.
#pragma once
#include <cstddef>
#include <cstring>
#include <utility>
#include <vector>

#include "mpitron/core/dtype.hpp"
#include "mpitron/core/memory.hpp"

namespace mpitron {

class FlatOps {
 public:
  virtual ~FlatOps() = default;
  // Where Buffer(m, n, allocator()) lives: nullptr = host memory (counted by MemTracker::host()).
  virtual DeviceAllocator* allocator() { return nullptr; }

  virtual void scale_inplace(float* a, float s, size_t n) = 0;         // a *= s
  virtual void axpy(float* y, float a, const float* x, size_t n) = 0;  // y += a * x
  // torch.optim.AdamW: p -= lr*wd*p; m,v moments; bias correction with `step` (1-based). The
  // gradients are used times grad_scale (gradient-norm clipping folded in, where a pass of its own
  // would read and write them once more; 1: as they are). p_bf16 (nullptr: none) receives the new
  // weights rounded to bf16, the GPU model's working copy; the CPU's Ops have none.
  virtual void adamw(float* p, bf16* p_bf16, const float* g, float grad_scale, float* m, float* v, size_t n, float lr,
                     float beta1, float beta2, float eps, float weight_decay, int step) = 0;
  virtual double sum_squares(const float* x, size_t n) = 0;  // for global grad-norm clipping
  // Sum over the ranges [offset, offset + n) of base, in this order, fp64: one host wait on GPU.
  virtual double sum_squares_ranges(const float* base, const std::vector<std::pair<size_t, size_t>>& ranges) {
    double s = 0;
    for (const auto& [off, n] : ranges) s += sum_squares(base + off, n);
    return s;
  }

  virtual void synchronize() {}  // every call made so far has completed (GPU: its stream)
  virtual void zero(float* p, size_t n) {
    if (n) std::memset(p, 0, n * sizeof(float));
  }
  // Copies within this device's memory, and between it and host memory (these two wait).
  virtual void copy(float* dst, const float* src, size_t n) {
    if (n) std::memcpy(dst, src, n * sizeof(float));
  }
  virtual void to_host(float* host, const float* src, size_t n) { copy(host, src, n); }
  virtual void from_host(float* dst, const float* host, size_t n) { copy(dst, host, n); }
};

}  // namespace mpitron
