// What the pipeline executor (pipeline.hpp) needs of one model chunk, whatever computes it: the
// CPU GPT (GptStage below) or the GPU model (train/cuda/gpu_backend.cpp, through host staging).
// Stage tensors travel as fp32 [rows, d_model] host arrays of stage_floats(B) elements (rows =
// B * seq_len, this rank's share of them under sequence parallel).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "mpitron/data/loader.hpp"
#include "mpitron/model/gpt.hpp"

namespace mpitron {

class PipelineStage {
 public:
  virtual ~PipelineStage() = default;
  virtual const ModelShard& shard() const = 0;
  virtual size_t stage_floats(int B) const = 0;
  // Micro-batch b in activation slot `slot`: the loss sum (on the stage with the head; 0
  // elsewhere) and its target count.
  virtual double forward(const Batch& b, int64_t* n_targets, int slot) = 0;
  virtual void backward(float loss_scale, int slot) = 0;
  // n = stage_floats(B) of the micro-batch.
  virtual void put_input(int slot, const float* x, size_t n) = 0;  // before forward(slot), not on the first stage
  virtual void get_output(int slot, float* x, size_t n) = 0;       // after forward(slot), not on the last stage
  virtual void put_output_grad(const float* g, size_t n) = 0;      // before backward, not on the last stage
  virtual void get_input_grad(float* g, size_t n) = 0;             // after backward, not on the first stage
  virtual void set_grad_enabled(bool on) = 0;
};

// The CPU GPT as a pipeline stage (its stage buffers are fp32 host memory already).
class GptStage final : public PipelineStage {
 public:
  explicit GptStage(GPT& m) : m_(m) {}
  const ModelShard& shard() const override { return m_.shard(); }
  size_t stage_floats(int B) const override {
    return static_cast<size_t>(m_.local_rows(B)) * static_cast<size_t>(m_.config().d_model);
  }
  double forward(const Batch& b, int64_t* n, int slot) override {
    return m_.forward(b.inputs.data(), b.targets.data(), b.batch, n, slot);
  }
  void backward(float loss_scale, int slot) override { m_.backward(loss_scale, slot); }
  void put_input(int slot, const float* x, size_t n) override { std::copy(x, x + n, m_.stage_input(slot)); }
  void get_output(int slot, float* x, size_t n) override { std::copy(m_.stage_output(slot), m_.stage_output(slot) + n, x); }
  void put_output_grad(const float* g, size_t n) override { std::copy(g, g + n, m_.stage_output_grad()); }
  void get_input_grad(float* g, size_t n) override { std::copy(m_.stage_input_grad(), m_.stage_input_grad() + n, g); }
  void set_grad_enabled(bool on) override { m_.set_grad_enabled(on); }

 private:
  GPT& m_;
};

}  // namespace mpitron
