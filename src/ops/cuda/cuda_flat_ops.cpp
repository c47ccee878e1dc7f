#include "mpitron/ops/cuda/cuda_flat_ops.hpp"

#include <cuda_runtime_api.h>

#include "mpitron/ops/cuda/check.hpp"

namespace mpitron {
namespace {

using cuda::cuda_check;

class StreamAllocator final : public DeviceAllocator {
 public:
  explicit StreamAllocator(cudaStream_t s) : stream_(s) {}
  void* alloc(Mem m, size_t bytes) override {
    if (bytes == 0) return nullptr;
    void* p = nullptr;
    cuda_check(cudaMallocAsync(&p, bytes, stream_), "cudaMallocAsync");
    cuda_check(cudaMemsetAsync(p, 0, bytes, stream_), "cudaMemsetAsync(new buffer)");
    MemTracker::cuda().on_alloc(m, static_cast<int64_t>(bytes));
    return p;
  }
  void free(Mem m, void* p, size_t bytes) override {
    if (!p) return;
    cudaFreeAsync(p, stream_);  // no throw: destructors call this
    MemTracker::cuda().on_free(m, static_cast<int64_t>(bytes));
  }

 private:
  cudaStream_t stream_;
};

class CudaFlatOps final : public FlatOps {
 public:
  explicit CudaFlatOps(CudaOps& ops) : ops_(ops), alloc_(ops.stream()) {
    cuda_check(cudaMalloc(reinterpret_cast<void**>(&norm_), sizeof(double)), "cudaMalloc(norm)");
  }
  ~CudaFlatOps() override {
    cudaStreamSynchronize(ops_.stream());
    cudaFree(norm_);
  }
  DeviceAllocator* allocator() override { return &alloc_; }
  void synchronize() override { ops_.synchronize(); }

  void scale_inplace(float* a, float s, size_t n) override { ops_.scale_inplace(a, s, n); }
  void axpy(float* y, float a, const float* x, size_t n) override { ops_.axpy(y, a, x, n); }
  void adamw(float* p, bf16* p_bf16, const float* g, float grad_scale, float* m, float* v, size_t n, float lr,
             float beta1, float beta2, float eps, float weight_decay, int step) override {
    ops_.adamw(p, p_bf16, g, grad_scale, m, v, n, lr, beta1, beta2, eps, weight_decay, step);
  }
  double sum_squares(const float* x, size_t n) override { return n ? ops_.sum_squares_host(x, n) : 0.0; }
  // Accumulated on the device in order (deterministic), one host wait.
  double sum_squares_ranges(const float* base, const std::vector<std::pair<size_t, size_t>>& ranges) override {
    bool first = true;
    for (const auto& [off, n] : ranges) {
      if (!n) continue;
      ops_.sum_squares(norm_, base + off, n, !first);
      first = false;
    }
    if (first) return 0.0;
    double h = 0;
    cuda_check(cudaMemcpyAsync(&h, norm_, sizeof h, cudaMemcpyDeviceToHost, ops_.stream()), "cudaMemcpyAsync(norm)");
    ops_.synchronize();
    return h;
  }

  void zero(float* p, size_t n) override {
    if (n) cuda_check(cudaMemsetAsync(p, 0, n * sizeof(float), ops_.stream()), "cudaMemsetAsync(zero)");
  }
  void copy(float* dst, const float* src, size_t n) override {
    if (n)
      cuda_check(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, ops_.stream()),
                 "cudaMemcpyAsync(device to device)");
  }
  void to_host(float* host, const float* src, size_t n) override {
    if (!n) return;
    cuda_check(cudaMemcpyAsync(host, src, n * sizeof(float), cudaMemcpyDeviceToHost, ops_.stream()),
               "cudaMemcpyAsync(to host)");
    ops_.synchronize();
  }
  void from_host(float* dst, const float* host, size_t n) override {
    if (!n) return;
    cuda_check(cudaMemcpyAsync(dst, host, n * sizeof(float), cudaMemcpyHostToDevice, ops_.stream()),
               "cudaMemcpyAsync(from host)");
    ops_.synchronize();  // the host buffer may be reused at once
  }

 private:
  CudaOps& ops_;
  StreamAllocator alloc_;
  double* norm_ = nullptr;
};

}  // namespace

std::unique_ptr<FlatOps> make_cuda_flat_ops(CudaOps& ops) { return std::make_unique<CudaFlatOps>(ops); }

std::unique_ptr<DeviceAllocator> make_stream_allocator(cudaStream_t s) { return std::make_unique<StreamAllocator>(s); }

}  // namespace mpitron
