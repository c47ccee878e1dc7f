// AdamW over a contiguous range [begin, end) of the model's flat parameter buffer: the whole
// buffer without ZeRO, this rank's shard with it. Moments are fp32 (Mem::optim), on the device
// of `ops` (host on CPU, GPU memory on GPU: the same class drives both backends). Weight decay
// is decoupled and applies only to parameters the model marks `decay` (2-D weights).
#pragma once
#include <cstddef>
#include <vector>

#include "mpitron/core/memory.hpp"
#include "mpitron/model/model_chunk.hpp"
#include "mpitron/ops/flat_vector_ops.hpp"

namespace mpitron {

struct AdamWOptions {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
};

class AdamW {
 public:
  AdamW(const AdamWOptions& opt, FlatOps& ops, const std::vector<ParamInfo>& params, size_t begin, size_t end);

  // One update of params[begin, end) from grads[begin, end) times grad_scale (the clipping factor; 1:
  // none). params, grads and params_bf16 point at the FULL flat buffers; params_bf16 (nullptr: none)
  // receives the updated weights rounded to bf16 (the GPU model's working copy, same layout).
  void step(float* params, bf16* params_bf16, const float* grads, float grad_scale, double lr);

  int steps_taken() const { return step_; }
  void set_steps_taken(int s) { step_ = s; }
  size_t begin() const { return begin_; }
  size_t end() const { return end_; }
  float* exp_avg() { return m_.data(); }
  float* exp_avg_sq() { return v_.data(); }

 private:
  struct Segment {
    size_t offset, n;  // into the flat buffer
    bool decay;
  };
  AdamWOptions opt_;
  FlatOps& ops_;
  size_t begin_, end_;
  std::vector<Segment> segments_;
  Buffer<float> m_, v_;
  int step_ = 0;
};

}  // namespace mpitron
