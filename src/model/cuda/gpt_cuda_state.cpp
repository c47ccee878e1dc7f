// GptCuda's state (gpt_cuda.hpp): device memory accounting, parameters, gradients and AdamW
// moments to and from the host (checkpoints), pipeline stage tensors through host staging, the
// gradient norm and the AdamW step. The compute is in gpt_cuda.cpp.
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <vector>

#include "../../ops/cuda/check.hpp"
#include "mpitron/core/error.hpp"
#include "mpitron/core/memory.hpp"
#include "mpitron/model/cuda/gpt_cuda.hpp"

namespace mpitron {

using cuda::cuda_check;

int64_t GptCuda::device_bytes() const {
  int64_t n = 0;
  for (const DeviceAlloc& d : allocs_) n += static_cast<int64_t>(d.bytes);
  return n;
}

int64_t GptCuda::device_bytes(Mem m) const {
  int64_t n = 0;
  for (const DeviceAlloc& d : allocs_)
    if (d.mem == m) n += static_cast<int64_t>(d.bytes);
  return n;
}

std::string GptCuda::memory_summary() const {
  std::string s;
  for (Mem m : {Mem::params, Mem::grads, Mem::optim, Mem::activations})
    s += fmt::format("{} {}, ", mem_name(m), format_bytes(device_bytes(m)));
  return s + fmt::format("total {}", format_bytes(device_bytes()));
}

void GptCuda::load_params(const float* host, size_t n) {
  check(n == n_flat_, "GptCuda::load_params: {} floats given, the flat layout has {}", n, n_flat_);
  cuda_check(cudaMemcpyAsync(master_, host, n * sizeof(float), cudaMemcpyHostToDevice, ops_.stream()),
             "cudaMemcpyAsync(load_params)");
  refresh_bf16_params();
  ops_.synchronize();  // the host buffer may be reused at once
}

void GptCuda::init_weights(uint64_t seed) {
  std::vector<float> host(n_flat_, 0.f);  // the padding between parameters stays 0, as in GPT
  init_gpt_params(cfg_, params_, host.data(), seed, shard_.tp_rank);
  load_params(host.data(), host.size());
}

void GptCuda::copy_params_to_host(float* host, size_t n) {
  check(n == n_flat_, "GptCuda::copy_params_to_host: room for {} floats, the flat layout has {}", n, n_flat_);
  cuda_check(cudaMemcpyAsync(host, master_, n * sizeof(float), cudaMemcpyDeviceToHost, ops_.stream()),
             "cudaMemcpyAsync(copy_params_to_host)");
  ops_.synchronize();
}

void GptCuda::copy_grads_to_host(float* host, size_t n) {
  check(n == n_flat_, "GptCuda::copy_grads_to_host: room for {} floats, the flat layout has {}", n, n_flat_);
  cuda_check(cudaMemcpyAsync(host, grads_, n * sizeof(float), cudaMemcpyDeviceToHost, ops_.stream()),
             "cudaMemcpyAsync(copy_grads_to_host)");
  ops_.synchronize();
}

void GptCuda::zero_grad() {
  cuda_check(cudaMemsetAsync(grads_, 0, n_flat_ * sizeof(float), ops_.stream()), "cudaMemsetAsync(zero_grad)");
}

void GptCuda::zero_optimizer_state() {
  cuda_check(cudaMemsetAsync(m_, 0, optim_.size() * sizeof(float), ops_.stream()), "cudaMemsetAsync(exp_avg)");
  cuda_check(cudaMemsetAsync(v_, 0, optim_.size() * sizeof(float), ops_.stream()), "cudaMemsetAsync(exp_avg_sq)");
}

void GptCuda::copy_optimizer_state_to_host(float* m, float* v, size_t n) {
  check(n == optim_.size(), "GptCuda::copy_optimizer_state_to_host: room for {} floats, the optimizer range has {}",
        n, optim_.size());
  cuda_check(cudaMemcpyAsync(m, m_, n * sizeof(float), cudaMemcpyDeviceToHost, ops_.stream()),
             "cudaMemcpyAsync(exp_avg to host)");
  cuda_check(cudaMemcpyAsync(v, v_, n * sizeof(float), cudaMemcpyDeviceToHost, ops_.stream()),
             "cudaMemcpyAsync(exp_avg_sq to host)");
  ops_.synchronize();
}

void GptCuda::load_optimizer_state(const float* m, const float* v, size_t n) {
  check(n == optim_.size(), "GptCuda::load_optimizer_state: {} floats given, the optimizer range has {}", n,
        optim_.size());
  cuda_check(cudaMemcpyAsync(m_, m, n * sizeof(float), cudaMemcpyHostToDevice, ops_.stream()),
             "cudaMemcpyAsync(exp_avg to device)");
  cuda_check(cudaMemcpyAsync(v_, v, n * sizeof(float), cudaMemcpyHostToDevice, ops_.stream()),
             "cudaMemcpyAsync(exp_avg_sq to device)");
  ops_.synchronize();
}

void GptCuda::refresh_bf16_params() { ops_.to_bf16(params_bf16_, master_, n_flat_); }

// Pipeline stage tensors, fp32 on the host, bf16 [rows, C] here (rows: this rank's under SP).
void GptCuda::upload_bf16(bf16* dst, const float* host, size_t n) {
  check(a_.stage_f32 && n <= static_cast<size_t>(local_rows(int64_t{max_B_} * cfg_.seq_len) * cfg_.d_model),
        "GptCuda: stage tensor of {} floats does not fit this stage", n);
  cuda_check(cudaMemcpyAsync(a_.stage_f32, host, n * sizeof(float), cudaMemcpyHostToDevice, ops_.stream()),
             "cudaMemcpyAsync(stage tensor to device)");
  ops_.to_bf16(dst, a_.stage_f32, n);
  ops_.synchronize();  // the host buffer is the executor's again
}

void GptCuda::download_bf16(float* host, const bf16* src, size_t n) {
  check(a_.stage_f32 != nullptr, "GptCuda: this model is not a pipeline stage");
  ops_.to_f32(a_.stage_f32, src, n);
  cuda_check(cudaMemcpyAsync(host, a_.stage_f32, n * sizeof(float), cudaMemcpyDeviceToHost, ops_.stream()),
             "cudaMemcpyAsync(stage tensor to host)");
  ops_.synchronize();
}

void GptCuda::set_stage_input(int slot, const float* host, size_t n) { upload_bf16(slots_.at(slot).encoded, host, n); }

void GptCuda::get_stage_output(int slot, float* host, size_t n) {
  const Acts& a = slots_.at(slot);
  download_bf16(host, recompute_ || n_local_ == 0 ? a.block_in.back() : a.layers.back().res3, n);
}

void GptCuda::set_stage_output_grad(const float* host, size_t n) { upload_bf16(a_.dres, host, n); }

void GptCuda::get_stage_input_grad(float* host, size_t n) { download_bf16(host, a_.dres, n); }

size_t GptCuda::stage_floats(int B) const {
  return static_cast<size_t>(local_rows(int64_t{B} * cfg_.seq_len) * cfg_.d_model);
}

double GptCuda::grad_sum_squares(bool replicated_too, bool skip_tied_copy) {
  const bool tied_copy = skip_tied_copy && shard_.has_head && !shard_.has_embedding;
  if (replicated_too && !tied_copy) return ops_.sum_squares_host(grads_, n_flat_);
  // Only the TP-sharded parameters (the replicated ones are counted by TP rank 0): the CPU rule
  // of tp_grad_norm.hpp, accumulated on the device, one host wait. The last pipeline stage's wte
  // copy is counted by the first stage.
  bool first = true;
  for (const auto& p : params_) {
    if ((p.split_dim < 0 && !replicated_too) || (tied_copy && p.name == "wte.weight")) continue;
    ops_.sum_squares(norm_, grads_ + p.offset, p.numel, !first);
    first = false;
  }
  if (first) return 0.0;
  double v = 0;
  cuda_check(cudaMemcpyAsync(&v, norm_, sizeof(double), cudaMemcpyDeviceToHost, ops_.stream()), "cudaMemcpyAsync(norm)");
  ops_.synchronize();
  return v;
}

void GptCuda::scale_grads(float s) { ops_.scale_inplace(grads_, s, n_flat_); }

void GptCuda::adamw_step(float lr, const CudaAdamWOptions& opt, int step) {
  check(step >= 1, "GptCuda::adamw_step: step must be >= 1 (got {})", step);
  for (const Segment& g : segments_)
    ops_.adamw(master_ + g.offset, params_bf16_ + g.offset, grads_ + g.offset, m_ + (g.offset - optim_.begin),
               v_ + (g.offset - optim_.begin), g.n, lr,
               static_cast<float>(opt.beta1), static_cast<float>(opt.beta2), static_cast<float>(opt.eps),
               g.decay ? static_cast<float>(opt.weight_decay) : 0.f, step);
}

}  // namespace mpitron
