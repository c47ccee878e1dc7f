// Tracked allocator: every large allocation names a category, and the tracker keeps live and
// peak bytes per category (and in total). The trainer logs these and the memory ledger
// (mpitron plan) predicts them, so both must count the same things: sizes come from one
// function per object (see STYLE.md, "memory is planned, not discovered").
#pragma once
#include <array>
#include <cstddef>
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace mpitron {

// checkpoint: the host snapshot of checkpoint.async (background_save.hpp).
enum class Mem : uint8_t { params, grads, optim, activations, comm, workspace, data, checkpoint, count_ };
constexpr size_t kMemCategories = static_cast<size_t>(Mem::count_);
std::string_view mem_name(Mem m);

enum class Device : uint8_t { host, cuda };

struct MemStats {
  std::array<int64_t, kMemCategories> live{};
  std::array<int64_t, kMemCategories> peak{};
  int64_t total_live = 0;
  int64_t total_peak = 0;
  int64_t of(Mem m) const { return live[static_cast<size_t>(m)]; }
  int64_t peak_of(Mem m) const { return peak[static_cast<size_t>(m)]; }
};

// One tracker per device kind in this process. Thread-safe.
class MemTracker {
 public:
  void on_alloc(Mem m, int64_t bytes);
  void on_free(Mem m, int64_t bytes);
  MemStats stats() const;
  // Restart peak counting from the current live bytes (e.g. to measure one step).
  void reset_peaks();

  static MemTracker& host();
  static MemTracker& cuda();

 private:
  std::array<std::atomic<int64_t>, kMemCategories> live_{};
  std::array<std::atomic<int64_t>, kMemCategories> peak_{};
  std::atomic<int64_t> total_live_{0};
  std::atomic<int64_t> total_peak_{0};
};

// What a new host buffer holds: zeros, or whatever the allocator had (for memory a collective
// writes whole before anything reads it: a ZeRO-3 unit's gathered weights, a reduce-scatter's
// output; zero-filling those costs a full write of the bytes per micro-batch for nothing).
enum class Fill { zeros, none };

// Host allocation, 64-byte aligned (AVX-512 loads), zero-filled unless `fill` says not, counted
// under `m`.
void* host_alloc(Mem m, size_t bytes, Fill fill = Fill::zeros);
void host_free(Mem m, void* p, size_t bytes);

// Memory of another device (a GPU), for the backend-neutral code of src/parallel (gradient
// buckets, ZeRO shards, AdamW moments): zero-filled like host_alloc, counted under `m` in the
// device's tracker. The GPU's allocator is stream-ordered on the compute stream
// (ops/cuda/cuda_flat_ops.cpp), so a buffer freed after the kernels that read it were enqueued
// is reused only after they ran.
class DeviceAllocator {
 public:
  virtual ~DeviceAllocator() = default;
  virtual void* alloc(Mem m, size_t bytes) = 0;
  virtual void free(Mem m, void* p, size_t bytes) = 0;
};

// Owning, movable, typed buffer counted under one category: host memory, or the device memory of
// `dev` when given.
template <class T>
class Buffer {
 public:
  Buffer() = default;
  Buffer(Mem m, size_t n) : mem_(m), n_(n), p_(static_cast<T*>(host_alloc(m, n * sizeof(T)))) {}
  // `fill` applies to host memory; a device's allocator zero-fills (its memset is cheap there).
  Buffer(Mem m, size_t n, DeviceAllocator* dev, Fill fill = Fill::zeros)
      : mem_(m), n_(n), dev_(dev),
        p_(static_cast<T*>(dev ? dev->alloc(m, n * sizeof(T)) : host_alloc(m, n * sizeof(T), fill))) {}
  ~Buffer() { reset(); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept { swap(o); }
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      reset();
      swap(o);
    }
    return *this;
  }
  void reset() {
    if (p_ && dev_) dev_->free(mem_, p_, n_ * sizeof(T));
    else if (p_) host_free(mem_, p_, n_ * sizeof(T));
    p_ = nullptr;
    n_ = 0;
  }
  T* data() { return p_; }
  const T* data() const { return p_; }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T); }
  Mem category() const { return mem_; }
  T& operator[](size_t i) { return p_[i]; }
  const T& operator[](size_t i) const { return p_[i]; }
  T* begin() { return p_; }
  T* end() { return p_ + n_; }
  const T* begin() const { return p_; }
  const T* end() const { return p_ + n_; }

 private:
  void swap(Buffer& o) noexcept {
    std::swap(mem_, o.mem_);
    std::swap(n_, o.n_);
    std::swap(dev_, o.dev_);
    std::swap(p_, o.p_);
  }
  Mem mem_ = Mem::workspace;
  size_t n_ = 0;
  DeviceAllocator* dev_ = nullptr;
  T* p_ = nullptr;
};

// Bytes an object holds in standard containers (whose sizes follow the data, e.g. a MoE block's
// routing state), counted under `m` in the host tracker: the owner sets the total after each
// change; released with the object. A copy starts at zero (it holds its own containers' bytes,
// set by its owner).
class HeldBytes {
 public:
  explicit HeldBytes(Mem m = Mem::activations) : mem_(m) {}
  HeldBytes(const HeldBytes& o) : mem_(o.mem_) {}
  HeldBytes& operator=(const HeldBytes&) { return *this; }
  ~HeldBytes() { set(0); }
  void set(int64_t bytes) {
    if (bytes > held_) MemTracker::host().on_alloc(mem_, bytes - held_);
    if (bytes < held_) MemTracker::host().on_free(mem_, held_ - bytes);
    held_ = bytes;
  }
  int64_t bytes() const { return held_; }

 private:
  Mem mem_;
  int64_t held_ = 0;
};

// "1.23 GiB" style.
std::string format_bytes(int64_t bytes);

}  // namespace mpitron
