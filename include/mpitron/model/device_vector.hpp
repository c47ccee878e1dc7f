// A resizable array in a device's memory, for the shared model code whose array sizes follow the
// data (the MoE MLP, moe_mlp.hpp: rows per expert change every step): host memory for the CPU
// device, GPU memory for the GPU one (the device's DeviceAllocator), counted in that device's
// tracker under one category (memory.hpp Buffer). Growing past the capacity reallocates WITHOUT
// keeping the contents: every user overwrites what it resizes. A copy starts empty and unbound
// (as HeldBytes), so containers of them can be sized by copying an empty one.
#pragma once
#include <cstddef>

#include "mpitron/core/error.hpp"
#include "mpitron/core/memory.hpp"

namespace mpitron {

template <class T>
class DeviceVector {
 public:
  DeviceVector() = default;
  DeviceVector(const DeviceVector&) {}
  DeviceVector& operator=(const DeviceVector&) { return *this; }
  // Where it allocates: host memory (alloc nullptr) or the device's, counted under m.
  void bind(Mem m, DeviceAllocator* alloc) {
    check(buf_.size() == 0, "DeviceVector::bind after an allocation");
    mem_ = m, alloc_ = alloc;
  }
  void reserve(size_t n) {
    if (n > buf_.size()) buf_ = Buffer<T>(mem_, n, alloc_);
  }
  void resize(size_t n) {
    reserve(n);
    n_ = n;
  }
  T* data() { return buf_.data(); }
  const T* data() const { return buf_.data(); }
  size_t size() const { return n_; }
  size_t capacity() const { return buf_.size(); }

 private:
  Buffer<T> buf_;
  size_t n_ = 0;
  Mem mem_ = Mem::workspace;
  DeviceAllocator* alloc_ = nullptr;
};

}  // namespace mpitron
