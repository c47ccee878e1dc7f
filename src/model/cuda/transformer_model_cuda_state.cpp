// TransformerModelCuda's state (transformer_model_cuda.hpp): device memory accounting, parameters
// and gradients to and from the host, the bf16 copy, gradient binding (ZeRO-2), pipeline stage
// tensors through host staging. The compute is in transformer_model_cuda.cpp.
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "mpitron/ops/cuda/check.hpp"
#include "mpitron/core/error.hpp"
#include "mpitron/core/memory.hpp"
#include "mpitron/model/cuda/transformer_model_cuda.hpp"

namespace mpitron {

using cuda::cuda_check;

int64_t TransformerModelCuda::device_bytes() const {
  int64_t n = 0;
  for (const DeviceAlloc& d : allocs_) n += static_cast<int64_t>(d.bytes);
  return n;
}

int64_t TransformerModelCuda::device_bytes(Mem m) const {
  int64_t n = 0;
  for (const DeviceAlloc& d : allocs_)
    if (d.mem == m) n += static_cast<int64_t>(d.bytes);
  return n;
}

std::string TransformerModelCuda::memory_summary() const {
  std::string s;
  for (Mem m : {Mem::params, Mem::grads, Mem::activations})
    s += fmt::format("{} {}, ", mem_name(m), format_bytes(device_bytes(m)));
  return s + fmt::format("total {}", format_bytes(device_bytes()));
}

void TransformerModelCuda::load_params(const float* host, size_t n) {
  check(master_ != nullptr, "TransformerModelCuda::load_params: the master weights were released (ZeRO-3)");
  check(n == n_flat_, "TransformerModelCuda::load_params: {} floats given, the flat layout has {}", n, n_flat_);
  cuda_check(cudaMemcpyAsync(master_, host, n * sizeof(float), cudaMemcpyHostToDevice, ops_.stream()),
             "cudaMemcpyAsync(load_params)");
  params_changed();
  ops_.synchronize();  // the host buffer may be reused at once
}

void TransformerModelCuda::init_weights(uint64_t seed) {
  std::vector<float> host(n_flat_, 0.f);  // the padding between parameters stays 0, as in TransformerModel
  init_model_params(cfg_, params_, host.data(), seed, shard_.tp_rank);
  load_params(host.data(), host.size());
}

void TransformerModelCuda::copy_params_to_host(float* host, size_t n) {
  check(master_ != nullptr, "TransformerModelCuda::copy_params_to_host: the master weights were released (ZeRO-3)");
  check(n == n_flat_, "TransformerModelCuda::copy_params_to_host: room for {} floats, the flat layout has {}", n,
        n_flat_);
  cuda_check(cudaMemcpyAsync(host, master_, n * sizeof(float), cudaMemcpyDeviceToHost, ops_.stream()),
             "cudaMemcpyAsync(copy_params_to_host)");
  ops_.synchronize();
}

void TransformerModelCuda::copy_grads_to_host(float* host, size_t n) {
  check(grads_ != nullptr, "TransformerModelCuda::copy_grads_to_host: the gradient buffer was released (ZeRO-2)");
  check(n == n_flat_, "TransformerModelCuda::copy_grads_to_host: room for {} floats, the flat layout has {}", n,
        n_flat_);
  cuda_check(cudaMemcpyAsync(host, grads_, n * sizeof(float), cudaMemcpyDeviceToHost, ops_.stream()),
             "cudaMemcpyAsync(copy_grads_to_host)");
  ops_.synchronize();
}

void TransformerModelCuda::zero_grad() {
  if (grads_)
    cuda_check(cudaMemsetAsync(grads_, 0, n_flat_ * sizeof(float), ops_.stream()), "cudaMemsetAsync(zero_grad)");
}

void TransformerModelCuda::params_changed() {
  if (!sharded_params_) ops_.to_bf16(params_bf16_, master_, n_flat_);  // ZeRO-3: converted per unit when gathered
}

size_t TransformerModelCuda::param_at(size_t offset) const {
  // The last parameter starting at or before `offset`.
  auto it = std::upper_bound(params_.begin(), params_.end(), offset,
                             [](size_t o, const ParamInfo& p) { return o < p.offset; });
  check(it != params_.begin(), "TransformerModelCuda: flat offset {} before the first parameter", offset);
  return static_cast<size_t>(it - params_.begin()) - 1;
}

float* TransformerModelCuda::G(size_t offset) const {
  if (offset == kNone) return nullptr;
  const size_t i = param_at(offset);
  check(grad_at_[i] != nullptr,
        "TransformerModelCuda: the gradient of {} is not bound (ZeRO-2 binds it before backward)", params_[i].name);
  return grad_at_[i] + (offset - params_[i].offset);
}

const bf16* TransformerModelCuda::W(size_t offset) const {
  if (offset == kNone) return nullptr;
  const size_t i = param_at(offset);
  check(w_at_[i] != nullptr,
        "TransformerModelCuda: the weights of {} are not gathered (ZeRO-3 gathers a unit before it runs)",
        params_[i].name);
  return w_at_[i] + (offset - params_[i].offset);
}

void TransformerModelCuda::bind_grad(size_t i, float* data) {
  check(i < params_.size(), "TransformerModelCuda::bind_grad: parameter index {} out of range", i);
  grad_at_[i] = data;
}

void TransformerModelCuda::device_free(void* p) {
  auto it = std::find_if(allocs_.begin(), allocs_.end(), [p](const DeviceAlloc& d) { return d.p == p; });
  if (it == allocs_.end()) return;
  cuda_check(cudaStreamSynchronize(ops_.stream()), "cudaStreamSynchronize(device_free)");
  cudaFree(it->p);
  MemTracker::cuda().on_free(it->mem, static_cast<int64_t>(it->bytes));
  allocs_.erase(it);
}

void TransformerModelCuda::free_unit_copy(UnitCopy& u) {
  if (!u.bf) return;
  cudaFreeAsync(u.bf, ops_.stream());
  MemTracker::cuda().on_free(Mem::params, static_cast<int64_t>((u.end - u.begin) * sizeof(bf16)));
  u.bf = nullptr;
}

void TransformerModelCuda::release_grad_buffer() {
  device_free(grads_);
  grads_ = nullptr;
  std::fill(grad_at_.begin(), grad_at_.end(), nullptr);
}

// ZeRO-3 (transformer_model_cuda.hpp): the master weights and their bf16 copy go; units come and
// go.
void TransformerModelCuda::release_param_buffer() {
  device_free(master_);
  device_free(params_bf16_);
  master_ = nullptr, params_bf16_ = nullptr;
  std::fill(w_at_.begin(), w_at_.end(), nullptr);
  sharded_params_ = true;
}

void TransformerModelCuda::bind_param(size_t i, float* data) {
  check(sharded_params_, "TransformerModelCuda::bind_param: only under ZeRO-3 (after release_param_buffer)");
  check(i < params_.size(), "TransformerModelCuda::bind_param: parameter index {} out of range", i);
  master_at_[i] = data;
  UnitCopy& u = unit_copy(param_unit(params_[i], shard_));
  if (data) {
    u.stale = true;  // converted after the unit's pre event, when the gather is complete
    return;
  }
  w_at_[i] = nullptr;
  for (size_t j : u.params)
    if (master_at_[j]) return;
  free_unit_copy(u);  // the whole unit is unbound: its working copy goes
  u.stale = false;
}

void TransformerModelCuda::pre_event(UnitEvent e, int unit) {
  emit(e, unit);  // ZeRO-3: DataParallel has the unit gathered when this returns
  if (!sharded_params_) return;
  UnitCopy& u = unit_copy(unit);
  if (!u.stale || u.params.empty()) return;
  const float* master = master_at_[u.params.front()];
  check(master != nullptr, "TransformerModelCuda: unit {} was not gathered before it runs", unit);
  const size_t n = u.end - u.begin;
  if (!u.bf) {
    void* p = nullptr;
    cuda_check(cudaMallocAsync(&p, n * sizeof(bf16), ops_.stream()), "cudaMallocAsync(ZeRO-3 unit)");
    MemTracker::cuda().on_alloc(Mem::params, static_cast<int64_t>(n * sizeof(bf16)));
    u.bf = static_cast<bf16*>(p);
  }
  ops_.to_bf16(u.bf, master, n);  // the unit's fp32 buffer is contiguous, as its bf16 copy
  for (size_t j : u.params) w_at_[j] = master_at_[j] ? u.bf + (params_[j].offset - u.begin) : nullptr;
  u.stale = false;
}

// Pipeline stage tensors, fp32 on the host, bf16 [rows, C] here (rows: this rank's under SP).
void TransformerModelCuda::upload_bf16(bf16* dst, const float* host, size_t n) {
  check(a_.stage_f32 && n <= static_cast<size_t>(local_rows(int64_t{max_B_} * seq_local()) * cfg_.d_model),
        "TransformerModelCuda: stage tensor of {} floats does not fit this stage", n);
  cuda_check(cudaMemcpyAsync(a_.stage_f32, host, n * sizeof(float), cudaMemcpyHostToDevice, ops_.stream()),
             "cudaMemcpyAsync(stage tensor to device)");
  ops_.to_bf16(dst, a_.stage_f32, n);
  ops_.synchronize();  // the host buffer is the executor's again
}

void TransformerModelCuda::download_bf16(float* host, const bf16* src, size_t n) {
  check(a_.stage_f32 != nullptr, "TransformerModelCuda: this model is not a pipeline stage");
  ops_.to_f32(a_.stage_f32, src, n);
  cuda_check(cudaMemcpyAsync(host, a_.stage_f32, n * sizeof(float), cudaMemcpyDeviceToHost, ops_.stream()),
             "cudaMemcpyAsync(stage tensor to host)");
  ops_.synchronize();
}

void TransformerModelCuda::set_stage_input(int slot, const float* host, size_t n) {
  upload_bf16(slots_.at(slot).encoded, host, n);
}

void TransformerModelCuda::get_stage_output(int slot, float* host, size_t n) {
  const Acts& a = slots_.at(slot);
  download_bf16(host, recompute_ || n_local_ == 0 ? a.block_in.back() : a.layers.back().res3, n);
}

void TransformerModelCuda::set_stage_output_grad(const float* host, size_t n) { upload_bf16(a_.dres, host, n); }

void TransformerModelCuda::get_stage_input_grad(float* host, size_t n) { download_bf16(host, a_.dres, n); }

size_t TransformerModelCuda::stage_floats(int B) const {
  return static_cast<size_t>(local_rows(int64_t{B} * seq_local()) * cfg_.d_model);
}

}  // namespace mpitron
