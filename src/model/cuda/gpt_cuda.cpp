// GptCuda (gpt_cuda.hpp): the CPU GPT's forward/backward (src/model/gpt.cpp, tp = pp = 1) on
// CudaOps, with llm.c's fusions:
//   - residual add + LayerNorm in one kernel: block l's ln_1 also writes block l-1's output
//     (res3 = res2 + mlp projection), the final LayerNorm writes the last block's output;
//   - c_fc's matmul + bias + GELU in one cuBLASLt call (GELU_AUX_BIAS keeps the GELU input for
//     the backward), and in the backward mlp.c_proj's dinp times gelu' (DGELU epilogue);
//   - attention keeps only its logsumexp stats [B, H, T], never the [T, T] probabilities;
//   - LM head in chunks of rows: logits (bf16) -> crossentropy_fused (losses, and dlogits in
//     place) -> dlnf and the wte gradient, during forward (as the CPU GPT does), unscaled;
//     backward() scales them by loss_scale, which is only known then.
// Gradients are fp32 and accumulate (+=) over micro-batches; the residual-stream gradient dres
// is bf16 (llm.c's dresidual), LayerNorm backward adds into it.
// LLaMA (cfg.arch): RMSNorm (the residual add unfused), RoPE on q and k after the fused q|k|v
// GEMM, grouped-query attention, SwiGLU after the fused gate|up GEMM, no biases, lm_head.
// This file: the activation layout, construction, forward and backward. The model's state
// (memory accounting, host transfers, pipeline stage tensors, gradient binding) is in
// gpt_cuda_state.cpp.
#include "mpitron/model/cuda/gpt_cuda.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "mpitron/ops/cuda/check.hpp"
#include "ring_blocks_cuda.hpp"
#include "mpitron/core/error.hpp"
#include "mpitron/core/memory.hpp"
#include "mpitron/model/param_tables.hpp"
#include "mpitron/model/tp_mappings.hpp"

namespace mpitron {

namespace {

using cuda::cuda_check;

}  // namespace

void* GptCuda::device_alloc(Mem m, size_t bytes, const char* what) {
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
  if (e != cudaSuccess) {
    cudaGetLastError();
    fail("GptCuda: cudaMalloc of {} for {} failed: {} (this model holds {} already)", format_bytes(int64_t(bytes)),
         what, cudaGetErrorString(e), format_bytes(device_bytes()));
  }
  allocs_.push_back({p, bytes, m});
  MemTracker::cuda().on_alloc(m, static_cast<int64_t>(bytes));
  cuda_check(cudaMemsetAsync(p, 0, bytes, ops_.stream()), "cudaMemsetAsync(GptCuda buffer)");
  return p;
}

GptCuda::GptCuda(const ModelConfig& cfg, const ModelShard& shard, CudaOps& ops, int max_micro_batch,
                 ModelOptions options, Comm* tp, Comm* cp)
    : cfg_(cfg), spec_(block_spec(cfg)), geo_(cfg, shard), ops_(ops), max_B_(max_micro_batch), shard_(shard), tp_(tp) {
  check(shard.tp_size == 1 || (tp && tp->size() == shard.tp_size && tp->rank() == shard.tp_rank),
        "GptCuda: tensor parallel shard {} of {} needs the TP communicator of that size", shard.tp_rank,
        shard.tp_size);
  cfg_.n_kv_head = kv_heads(cfg);  // multi-head attention where the architecture has no GQA
  if (tp_) tp_->set_compute_stream(ops.stream());
  check((shard.cp_size == 1) == (cp == nullptr) && (!cp || (cp->size() == shard.cp_size && cp->rank() == shard.cp_rank)),
        "GptCuda: the shard says cp rank {} of {}, the CP group does not match", shard.cp_rank, shard.cp_size);
  if (cp) cp->set_compute_stream(ops.stream());
  layer_begin_ = shard.layer_begin;
  n_local_ = local_layers(cfg, shard);
  check(layer_begin_ >= 0 && n_local_ >= 0 && layer_begin_ + n_local_ <= cfg.n_layer,
        "GptCuda: layers [{}, {}) outside the model's {}", layer_begin_, layer_begin_ + n_local_, cfg.n_layer);
  check(max_micro_batch > 0 && options.slots >= 1, "GptCuda: max_micro_batch and slots must be > 0");
  check(cfg.d_model % 8 == 0, "GptCuda: d_model {} must be a multiple of 8 (16-byte bf16 rows)", cfg.d_model);
  const int T = shard.tp_size;
  check(cfg.vocab_size > int64_t{T - 1} * geo_.vp, "GptCuda: vocabulary {} too small for tp {} (the last rank's {} padded "
        "rows would hold no real token)", cfg.vocab_size, T, geo_.vp);
  chunk_rows_ = gpu_logits_chunk_rows(cfg, max_micro_batch, options.logits_chunk_rows, shard.cp_size);
  recompute_ = options.recompute;
  params_ = model_param_table(cfg_, shard);
  n_flat_ = flat_param_floats(params_);

  // Each role's flat offset (kNone where the architecture or this stage lacks it). A pipeline
  // stage holds its blocks; the token embedding on the first stage (and on the last for a tied
  // LM head), learned positions on the first, the final norm and an untied lm_head on the last.
  auto at = [&](const char* name) {
    if (!name) return kNone;
    for (const auto& p : params_)
      if (p.name == name) return p.offset;
    return kNone;
  };
  off_.wte = at(spec_.name(ModelTensor::tok_emb));
  off_.wpe = at(spec_.name(ModelTensor::pos_emb));
  off_.lnf_w = at(spec_.name(ModelTensor::lnf_w));
  off_.lnf_b = at(spec_.name(ModelTensor::lnf_b));
  off_.head = cfg.tied_embeddings ? off_.wte : at(spec_.name(ModelTensor::lm_head));
  check(off_.wte != kNone || !shard.has_embedding, "GptCuda: no token embedding in the parameter table");
  static constexpr size_t LayerOffsets::*kRole[kBlockTensors] = {
      &LayerOffsets::ln1_w, &LayerOffsets::ln1_b, &LayerOffsets::qkv_w, &LayerOffsets::qkv_b, &LayerOffsets::k_w,
      &LayerOffsets::v_w,   &LayerOffsets::proj_w, &LayerOffsets::proj_b, &LayerOffsets::ln2_w, &LayerOffsets::ln2_b,
      &LayerOffsets::fc_w,  &LayerOffsets::fc_b,  &LayerOffsets::up_w,  &LayerOffsets::fcp_w, &LayerOffsets::fcp_b};
  for (int l = layer_begin_; l < layer_begin_ + n_local_; ++l) {
    const std::string h = spec_.layer_prefix + std::to_string(l) + ".";
    LayerOffsets o;
    for (int r = 0; r < kBlockTensors; ++r) {
      const char* name = spec_.block[r];
      o.*kRole[r] = name ? at((h + name).c_str()) : kNone;
      check(!name || o.*kRole[r] != kNone, "GptCuda: parameter {}{} missing from the table", h, name);
    }
    // Separate q, k, v (gate, up) tensors run as one GEMM each: the table keeps them adjacent
    // (ZeRO-3 unit copies and gradient buckets keep them so too).
    const size_t C = cfg.d_model, hd = cfg.head_dim();
    check((o.k_w == kNone || (o.k_w == o.qkv_w + geo_.h_local * hd * C && o.v_w == o.k_w + geo_.kv_local * hd * C)) &&
              (o.up_w == kNone || o.up_w == o.fc_w + geo_.f_local * C),
          "GptCuda: block {}'s q/k/v or gate/up weights are not adjacent", l);
    off_.layers.push_back(o);
  }
  try {
    master_ = static_cast<float*>(device_alloc(Mem::params, n_flat_ * sizeof(float), "fp32 master parameters"));
    params_bf16_ = static_cast<bf16*>(device_alloc(Mem::params, n_flat_ * sizeof(bf16), "bf16 parameters"));
    grads_ = static_cast<float*>(device_alloc(Mem::grads, n_flat_ * sizeof(float), "gradients"));
    for (const auto& p : params_) {
      grad_at_.push_back(grads_ + p.offset);
      w_at_.push_back(params_bf16_ + p.offset);
    }
    master_at_.assign(params_.size(), nullptr);
    units_.resize(2 + n_local_);
    for (size_t i = 0; i < params_.size(); ++i) {  // a unit's range runs to the next parameter (padding included)
      check(i == 0 || params_[i].offset > params_[i - 1].offset, "GptCuda: parameter table not in flat order");
      UnitCopy& u = unit_copy(param_unit(params_[i], shard_));
      if (u.params.empty()) u.begin = params_[i].offset;
      check(u.params.empty() || u.end == params_[i].offset, "GptCuda: unit of {} is not contiguous", params_[i].name);
      u.end = i + 1 < params_.size() ? params_[i + 1].offset : n_flat_;
      u.params.push_back(i);
    }
    const GpuActLayout lay = gpu_act_layout(cfg, shard, max_micro_batch, options.slots, recompute_, chunk_rows_);
    size_t act_bytes = plan_gpu_activations(cfg, lay, nullptr, slots_);
    char* act = static_cast<char*>(device_alloc(Mem::activations, act_bytes, "activations"));
    plan_gpu_activations(cfg, lay, act, slots_);
    a_ = slots_.front();
    if (shard.cp_size > 1) {  // every cp rank's positions (the ring's masks), this rank's for wpe and RoPE
      cuda_check(cudaMemcpyAsync(a_.ring.positions, geo_.all_positions.data(), geo_.all_positions.size() * sizeof(int32_t),
                                 cudaMemcpyHostToDevice, ops_.stream()),
                 "cudaMemcpyAsync(cp positions)");
      if (n_local_ > 0) {
        ring_blocks_ = std::make_unique<CudaRingBlocks>(ops_, a_.ring, shard.cp_rank, seq_local(),
                                                        static_cast<int>(geo_.h_local), static_cast<int>(geo_.kv_local),
                                                        cfg.head_dim());
        ring_ = std::make_unique<RingAttention>(*cp, *ring_blocks_, seq_local(), 2 * geo_.kv_local * cfg.head_dim());
      }
    }
    slot_B_.assign(slots_.size(), 0);
    slot_pending_.assign(slots_.size(), false);
    const size_t bt = static_cast<size_t>(max_micro_batch) * seq_local();
    cuda_check(cudaMallocHost(reinterpret_cast<void**>(&host_tokens_), 2 * bt * sizeof(int32_t)),
               "cudaMallocHost(token staging)");
    cuda_check(cudaMallocHost(reinterpret_cast<void**>(&host_losses_), bt * sizeof(float)),
               "cudaMallocHost(losses)");
    cuda_check(cudaEventCreateWithFlags(&tokens_sent_, cudaEventDisableTiming), "cudaEventCreate");
    cuda_check(cudaEventCreateWithFlags(&losses_ready_, cudaEventDisableTiming), "cudaEventCreate");
    ops_.synchronize();  // the zero fills and the positions' upload are done
  } catch (...) {
    release();  // a throwing constructor runs no destructor
    throw;
  }
}

GptCuda::~GptCuda() { release(); }

void GptCuda::release() {
  for (UnitCopy& u : units_) free_unit_copy(u);  // ZeRO-3 working copies still held (an exception mid-step)
  cudaStreamSynchronize(ops_.stream());
  for (const DeviceAlloc& d : allocs_) {
    cudaFree(d.p);
    MemTracker::cuda().on_free(d.mem, static_cast<int64_t>(d.bytes));
  }
  allocs_.clear();
  if (host_tokens_) cudaFreeHost(host_tokens_);
  if (host_losses_) cudaFreeHost(host_losses_);
  if (tokens_sent_) cudaEventDestroy(tokens_sent_);
  if (losses_ready_) cudaEventDestroy(losses_ready_);
  host_tokens_ = nullptr, host_losses_ = nullptr, tokens_sent_ = nullptr, losses_ready_ = nullptr;
}

const bf16* GptCuda::block_output() const {
  if (recompute_ || n_local_ == 0) return a_.block_in.back();
  return a_.layers.back().res3;
}

// Block l. Its input is the embedding output, or block l-1's output: without recompute that
// output is written by this block's first kernel (res3[l-1] = res2[l-1] + proj_out, fused with
// ln_1), and the block leaves its MLP projection in proj_out for the next block's (or the final)
// LayerNorm to add; with recompute the input is block_in[l], the output written to
// block_in[l + 1] and the activations go to the one shared set. CPU: GPT::layer_forward.
// Tensor parallel (Megatron): c_attn and c_fc column-parallel (this rank's heads / MLP columns),
// c_proj and mlp.c_proj row-parallel, their partial outputs summed over the TP group; under
// sequence parallel the residual stream and LayerNorms hold this rank's rows only (Rl), the
// LayerNorm outputs are all-gathered before the column-parallel GEMMs and the row-parallel
// outputs reduce-scattered back to rows.
void GptCuda::layer_forward(int l, int B) {
  const int T = seq_local(), C = cfg_.d_model, Hl = geo_.h_local, hd = cfg_.head_dim();
  const int64_t BT = int64_t{B} * T, Rl = local_rows(BT), Cl = geo_.c_local, Fl = geo_.f_local;
  const bool bias_here = shard_.tp_rank == 0;  // row-parallel biases: added once, before the TP sum
  const LayerOffsets& p = off_.layers[l];
  const LayerAct& a = a_.layers[recompute_ ? 0 : l];
  bf16* partial = geo_.sp ? a_.full : a_.proj_out;  // row-parallel output before the TP reduction
  const bf16* res_in;
  if (recompute_ || l == 0) {
    res_in = recompute_ ? a_.block_in[l] : a_.encoded;
    norm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, res_in, p.ln1_w, p.ln1_b, Rl);
  } else {
    const LayerAct& prev = a_.layers[l - 1];
    res_in = prev.res3;
    residual_norm_forward(prev.res3, a.ln1, a.ln1_mean, a.ln1_rstd, prev.res2, a_.proj_out, p.ln1_w, p.ln1_b, Rl);
  }
  const int KVl = static_cast<int>(geo_.kv_local);
  ops_.matmul_forward(a.qkv, gather_rows(a.ln1, BT), W(p.qkv_w), W(p.qkv_b), BT, C, geo_.qkv_local);
  if (spec_.rope()) geo_.rope(ops_, a.qkv, B, /*inverse=*/false);  // this rank's q and kv heads, global positions
  if (ring_) ring_->forward(a.atty, a.att_stats, a.qkv, B);  // context parallel: k|v around the cp ring
  else ops_.attention_forward(a.atty, a.att_stats, a.qkv, B, T, Hl, hd, KVl);
  ops_.matmul_forward(partial, a.atty, W(p.proj_w), bias_here ? W(p.proj_b) : nullptr, BT, Cl, C);
  reduce_rows(partial, a_.proj_out, BT);
  residual_norm_forward(a.res2, a.ln2, a.ln2_mean, a.ln2_rstd, res_in, a_.proj_out, p.ln2_w, p.ln2_b, Rl);
  if (spec_.mlp == MlpKind::swiglu) {  // fch = [gate | up], fch_gelu = silu(gate) * up
    ops_.matmul_forward(a.fch, gather_rows(a.ln2, BT), W(p.fc_w), nullptr, BT, C, 2 * Fl);
    ops_.swiglu_forward(a.fch_gelu, a.fch, BT, Fl);
  } else {
    ops_.matmul_forward(a.fch_gelu, gather_rows(a.ln2, BT), W(p.fc_w), W(p.fc_b), BT, C, Fl, a.fch);  // fch = pre-GELU
  }
  ops_.matmul_forward(partial, a.fch_gelu, W(p.fcp_w), bias_here ? W(p.fcp_b) : nullptr, BT, Fl, C);
  reduce_rows(partial, a_.proj_out, BT);
  if (recompute_) ops_.residual_forward(a_.block_in[l + 1], a.res2, a_.proj_out, static_cast<size_t>(Rl * C));
}

// The TP mappings (tp_mappings.hpp) on bf16 activations. gather_rows: the column-parallel input
// under SP (f's forward; without SP the identity). reduce_rows: the row-parallel output (g's
// forward) and, the same collective, the column-parallel input gradient (f's backward):
// reduce-scatter to this rank's rows under SP, all-reduce without.
const bf16* GptCuda::gather_rows(const bf16* local, int64_t BT, bf16* out) {
  if (!geo_.sp) return local;
  if (!out) out = a_.gath;
  gather_from_sequence_forward(*tp_, local, out, static_cast<size_t>(local_rows(BT) * cfg_.d_model));
  return out;
}

void GptCuda::reduce_rows(bf16* partial, bf16* local, int64_t BT) {
  const int64_t C = cfg_.d_model;
  if (geo_.sp) reduce_scatter_to_sequence_forward(*tp_, partial, local, static_cast<size_t>(local_rows(BT) * C));
  else if (shard_.tp_size > 1) reduce_from_tp_region_forward(*tp_, partial, static_cast<size_t>(BT * C));  // partial is local itself
}

// LayerNorm backward; under SP this rank's rows give only part of the weight and bias gradients:
// they are summed over the TP group before they join the gradients (Megatron's rule).
void GptCuda::ln_backward(bf16* dinp, size_t w, size_t b, const bf16* dout, const bf16* inp, const float* mean,
                          const float* rstd, int64_t rows) {
  const int64_t C = cfg_.d_model, nw = spec_.norm_params() * C;  // weight (+ bias) gradient floats
  auto run = [&](float* gw, float* gb) {
    if (spec_.norm == NormKind::rmsnorm) ops_.rmsnorm_backward(dinp, gw, dout, inp, W(w), rstd, rows, C);
    else ops_.layernorm_backward(dinp, gw, gb, dout, inp, W(w), mean, rstd, rows, C);
  };
  if (!geo_.sp) {
    run(G(w), G(b));
    return;
  }
  cuda_check(cudaMemsetAsync(a_.ln_grad, 0, static_cast<size_t>(nw) * sizeof(float), ops_.stream()),
             "cudaMemsetAsync(ln_grad)");
  run(a_.ln_grad, a_.ln_grad + C);
  sum_sequence_parallel_grads(*tp_, a_.ln_grad, static_cast<size_t>(nw));
  ops_.add_inplace(G(w), a_.ln_grad, static_cast<size_t>(C));
  if (spec_.biases) ops_.add_inplace(G(b), a_.ln_grad + C, static_cast<size_t>(C));
}

void GptCuda::norm_forward(bf16* out, float* mean, float* rstd, const bf16* inp, size_t w, size_t b, int64_t rows) {
  if (spec_.norm == NormKind::rmsnorm) ops_.rmsnorm_forward(out, rstd, inp, W(w), rows, cfg_.d_model, cfg_.norm_eps);
  else ops_.layernorm_forward(out, mean, rstd, inp, W(w), W(b), rows, cfg_.d_model);
}

void GptCuda::residual_norm_forward(bf16* residual, bf16* out, float* mean, float* rstd, const bf16* a, const bf16* b,
                                    size_t w, size_t bias, int64_t rows) {
  if (spec_.norm == NormKind::layernorm) {  // one fused kernel
    ops_.residual_layernorm_forward(residual, out, mean, rstd, a, b, W(w), W(bias), rows, cfg_.d_model);
    return;
  }
  ops_.residual_forward(residual, a, b, static_cast<size_t>(rows * cfg_.d_model));
  ops_.rmsnorm_forward(out, rstd, residual, W(w), rows, cfg_.d_model, cfg_.norm_eps);
}

// Final LayerNorm (with the last block's residual add), then the LM head and loss in chunks of
// rows; with gradients, each chunk's logits become dlogits (scale 1) in place and give dlnf and
// the micro-batch's wte gradient at once. The losses go to the host as soon as the last chunk's
// are written. CPU: the head part of GPT::forward.
void GptCuda::head_forward(int B) {
  const int64_t BT = int64_t{B} * seq_local(), C = cfg_.d_model, V = cfg_.vocab_size;
  // Vocab-parallel under TP: this rank's logits columns are global [geo_.vocab_begin, + geo_.vp), the
  // real ones (< V) counted by Vr; the softmax statistics are combined over the TP group.
  const int64_t Vr = std::clamp<int64_t>(V - geo_.vocab_begin, 0, geo_.vp);
  const bool vp = shard_.tp_size > 1;
  const int64_t Rl = local_rows(BT);
  cudaStream_t s = ops_.stream();
  if (n_local_ > 0 && !recompute_) {
    const LayerAct& last = a_.layers.back();
    residual_norm_forward(last.res3, a_.lnf, a_.lnf_mean, a_.lnf_rstd, last.res2, a_.proj_out, off_.lnf_w,
                          off_.lnf_b, Rl);
  } else {
    norm_forward(a_.lnf, a_.lnf_mean, a_.lnf_rstd, block_output(), off_.lnf_w, off_.lnf_b, Rl);
  }
  // Under SP the head reads every row: lnf all-gathered; dlnf's partial sums [BT, C] go to `full`
  // and are reduce-scattered to this rank's rows at the end.
  const bf16* lnf_all = gather_rows(a_.lnf, BT);
  bf16* dlnf_all = geo_.sp ? a_.full : a_.dlnf;
  const bool grad = grad_enabled_;
  if (grad)
    cuda_check(cudaMemsetAsync(a_.dwte_head, 0, static_cast<size_t>(geo_.vp * C) * sizeof(float), s),
               "cudaMemsetAsync(dwte_head)");
  for (int64_t r0 = 0; r0 < BT; r0 += chunk_rows_) {
    const int64_t rows = std::min(chunk_rows_, BT - r0);
    const bf16* lnf = lnf_all + r0 * C;
    ops_.matmul_forward(a_.logits, lnf, W(off_.head), nullptr, rows, C, geo_.vp);
    if (vp) {  // Megatron's vocab-parallel cross-entropy
      float *lmax = a_.ce, *gmax = a_.ce + rows, *sum_tgt = a_.ce + 2 * rows;  // sum_tgt: [sumexp | target logit]
      ops_.crossentropy_partial(lmax, sum_tgt, sum_tgt + rows, a_.logits, a_.targets + r0, rows, geo_.vp, Vr, geo_.vocab_begin);
      cuda_check(cudaMemcpyAsync(gmax, lmax, static_cast<size_t>(rows) * sizeof(float), cudaMemcpyDeviceToDevice, s),
                 "cudaMemcpyAsync(max)");
      vocab_parallel_max(*tp_, gmax, static_cast<size_t>(rows));
      ops_.crossentropy_rescale(sum_tgt, lmax, gmax, rows);
      vocab_parallel_sums(*tp_, sum_tgt, static_cast<size_t>(rows));
      ops_.crossentropy_combine(a_.losses + r0, a_.lse + r0, gmax, sum_tgt, sum_tgt + rows, a_.targets + r0, rows);
      if (grad)
        ops_.crossentropy_backward_shard(a_.logits, a_.lse + r0, a_.targets + r0, rows, geo_.vp, Vr, 1.f, geo_.vocab_begin);
    } else if (grad) {
      ops_.crossentropy_fused(a_.losses + r0, a_.lse + r0, a_.logits, a_.targets + r0, rows, geo_.vp, V, 1.f);
    } else {
      ops_.crossentropy_forward(a_.losses + r0, a_.lse + r0, a_.logits, a_.targets + r0, rows, geo_.vp, V);
    }
    if (r0 + rows == BT) {
      cuda_check(cudaMemcpyAsync(host_losses_, a_.losses, static_cast<size_t>(BT) * sizeof(float),
                                 cudaMemcpyDeviceToHost, s),
                 "cudaMemcpyAsync(losses)");
      cuda_check(cudaEventRecord(losses_ready_, s), "cudaEventRecord(losses)");
    }
    if (grad)
      ops_.matmul_backward(dlnf_all + r0 * C, a_.dwte_head, nullptr, a_.logits, lnf, W(off_.head), rows, C, geo_.vp);
  }
  if (grad) reduce_rows(dlnf_all, a_.dlnf, BT);  // each rank's vocab slice's part
}

double GptCuda::forward(const int32_t* inputs, const int32_t* targets, int B, int64_t* n_targets, int slot) {
  check(B > 0 && B <= max_B_, "GptCuda::forward: micro-batch {} outside [1, {}]", B, max_B_);
  check(slot >= 0 && slot < static_cast<int>(slots_.size()), "GptCuda::forward: slot {} outside [0, {})", slot,
        slots_.size());
  check(inputs != nullptr && targets != nullptr, "GptCuda::forward needs input and target tokens");
  const int T = seq_local(), C = cfg_.d_model;  // this rank's positions of each sequence
  const int64_t BT = int64_t{B} * T, max_bt = int64_t{max_B_} * T;
  cudaStream_t s = ops_.stream();
  a_ = slots_[slot];
  slot_B_[slot] = 0;  // a forward that throws leaves nothing for backward
  slot_pending_[slot] = false;
  // The previous forward's uploads must have left the staging buffer before it is refilled.
  cuda_check(cudaEventSynchronize(tokens_sent_), "cudaEventSynchronize(tokens)");
  int64_t count = 0;
  for (int64_t i = 0; i < BT; ++i) {  // this rank's rows (all of them without cp) into the staging buffer
    const int64_t at = geo_.full_index(i);
    check(inputs[at] >= 0 && inputs[at] < cfg_.vocab_size, "GptCuda::forward: input token {} at {} outside [0, {})",
          inputs[at], at, cfg_.vocab_size);
    check(targets[at] < cfg_.vocab_size, "GptCuda::forward: target {} at {} >= vocab size {}", targets[at], at,
          cfg_.vocab_size);
    count += targets[at] >= 0;
    host_tokens_[i] = inputs[at], host_tokens_[max_bt + i] = targets[at];
  }
  cuda_check(cudaMemcpyAsync(a_.tokens, host_tokens_, static_cast<size_t>(BT) * sizeof(int32_t),
                             cudaMemcpyHostToDevice, s),
             "cudaMemcpyAsync(tokens)");
  cuda_check(cudaMemcpyAsync(a_.targets, host_tokens_ + max_bt, static_cast<size_t>(BT) * sizeof(int32_t),
                             cudaMemcpyHostToDevice, s),
             "cudaMemcpyAsync(targets)");
  cuda_check(cudaEventRecord(tokens_sent_, s), "cudaEventRecord(tokens)");

  // Vocab-parallel embedding: tokens outside this rank's rows give 0, the TP sum adds the owner's
  // row; wpe (replicated) is added by one rank. A later pipeline stage starts from its stage
  // input (set_stage_input), already in encoded.
  pre_event(UnitEvent::pre_forward, kEmbeddingUnit);
  if (shard_.has_embedding) {
    bf16* emb = geo_.sp ? a_.full : a_.encoded;  // SP: every row's partial sum, then this rank's rows
    ops_.embedding_forward(emb, a_.tokens, W(off_.wte), shard_.tp_rank == 0 ? W(off_.wpe) : nullptr, B, T, C,
                           geo_.vocab_begin, geo_.vocab_begin + geo_.vp, cp_positions());
    reduce_rows(emb, a_.encoded, BT);
  }
  for (int l = 0; l < n_local_; ++l) {
    pre_event(UnitEvent::pre_forward, l);
    layer_forward(l, B);
    emit(UnitEvent::post_forward, l);
  }
  double loss = 0.0;
  if (n_targets) *n_targets = 0;
  if (shard_.has_head) {
    pre_event(UnitEvent::pre_forward, kHeadUnit);
    head_forward(B);
    emit(UnitEvent::post_forward, kHeadUnit);
    // The only host wait of the step: the losses (the head's last dW GEMM may still be running).
    cuda_check(cudaEventSynchronize(losses_ready_), "cudaEventSynchronize(losses)");
    for (int64_t i = 0; i < BT; ++i) loss += host_losses_[i];
    if (n_targets) *n_targets = count;
  } else if (!recompute_ && n_local_ > 0) {  // the stage output: the last block's residual add, unfused
    const LayerAct& last = a_.layers.back();
    ops_.residual_forward(last.res3, last.res2, a_.proj_out, static_cast<size_t>(local_rows(BT) * C));
  }
  emit(UnitEvent::post_forward, kEmbeddingUnit);
  slot_B_[slot] = B;
  slot_pending_[slot] = grad_enabled_;
  return loss;
}

// CPU: the block part of GPT::backward. On entry dres = d loss / d(block l's output); on exit
// d loss / d(block l's input). dC and d4C are scratch (d4C holds d qkv too). Under TP the
// column-parallel layers' input gradients are partial sums over the group; under SP the
// row-parallel layers read the all-gathered dres and the LayerNorm inputs are gathered again.
void GptCuda::layer_backward(int l, int B) {
  const int T = seq_local(), C = cfg_.d_model, Hl = geo_.h_local, hd = cfg_.head_dim();
  const int64_t BT = int64_t{B} * T, Rl = local_rows(BT), Cl = geo_.c_local, Fl = geo_.f_local;
  const LayerOffsets& p = off_.layers[l];
  if (recompute_) layer_forward(l, B);  // the block's activations again, into the shared set
  const LayerAct& a = a_.layers[recompute_ ? 0 : l];
  const bf16* res_in = recompute_ ? a_.block_in[l] : l > 0 ? a_.layers[l - 1].res3 : a_.encoded;
  bf16 *dres = a_.dres, *dC = a_.dC, *d4C = a_.d4C;
  bf16* dC_partial = geo_.sp ? a_.full : dC;
  // MLP: c_proj backward with dinp * gelu'(fch) fused (= d fch), then c_fc, then ln_2 (adds into dres).
  // LLaMA: down_proj's dinp (the SwiGLU output's gradient), SwiGLU's backward into d [gate | up].
  if (spec_.mlp == MlpKind::swiglu) {
    ops_.matmul_backward(a_.dmlp, G(p.fcp_w), nullptr, gather_rows(dres, BT, a_.dres_full), a.fch_gelu, W(p.fcp_w),
                         BT, Fl, C);
    ops_.swiglu_backward(d4C, a.fch, a_.dmlp, BT, Fl);
  } else {
    ops_.matmul_backward(d4C, G(p.fcp_w), G(p.fcp_b), gather_rows(dres, BT, a_.dres_full), a.fch_gelu, W(p.fcp_w), BT,
                         Fl, C, false, a.fch);
  }
  ops_.matmul_backward(dC_partial, G(p.fc_w), G(p.fc_b), d4C, gather_rows(a.ln2, BT), W(p.fc_w), BT, C,
                       spec_.fc_factor() * Fl);
  reduce_rows(dC_partial, dC, BT);
  ln_backward(dres, p.ln2_w, p.ln2_b, dC, a.res2, a.ln2_mean, a.ln2_rstd, Rl);
  // Attention: c_proj, attention (d qkv into d4C), c_attn, ln_1 (adds into dres).
  ops_.matmul_backward(dC, G(p.proj_w), G(p.proj_b), gather_rows(dres, BT, a_.dres_full), a.atty, W(p.proj_w), BT, Cl,
                       C);
  const int KVl = static_cast<int>(geo_.kv_local);
  if (ring_) ring_->backward(d4C, dC, a.qkv, a.atty, a.att_stats, B);
  else ops_.attention_backward(d4C, dC, a.qkv, a.atty, a.att_stats, B, T, Hl, hd, KVl);
  if (spec_.rope()) geo_.rope_backward(ops_, d4C, B);
  ops_.matmul_backward(dC_partial, G(p.qkv_w), G(p.qkv_b), d4C, gather_rows(a.ln1, BT), W(p.qkv_w), BT, C,
                       geo_.qkv_local);
  reduce_rows(dC_partial, dC, BT);
  // The key bias's gradient is exactly zero (q.b_k shifts a whole softmax row); computed, it is
  // rounding noise Adam would amplify. Kept exactly zero, as the CPU GPT does. Layout [q | k | v],
  // C/tp each.
  if (p.qkv_b != kNone)
    cuda_check(cudaMemsetAsync(G(p.qkv_b) + Cl, 0, static_cast<size_t>(Cl) * sizeof(float), ops_.stream()),
               "cudaMemsetAsync(key bias gradient)");
  ln_backward(dres, p.ln1_w, p.ln1_b, dC, res_in, a.ln1_mean, a.ln1_rstd, Rl);
}

void GptCuda::backward(float loss_scale, int slot) {
  check(slot >= 0 && slot < static_cast<int>(slots_.size()) && slot_B_[slot] > 0 && slot_pending_[slot],
        "GptCuda::backward needs its own forward in slot {}, with gradients enabled (one backward per forward)", slot);
  a_ = slots_[slot];
  const int B = slot_B_[slot], T = seq_local(), C = cfg_.d_model;
  const int64_t BT = int64_t{B} * T, Rl = local_rows(BT);
  cudaStream_t s = ops_.stream();
  if (shard_.has_head) {
    pre_event(UnitEvent::pre_backward, kHeadUnit);  // before the wte gradient is written (ZeRO-2 binds it here)
    // The head's gradients were computed unscaled during forward.
    ops_.scale_bf16_inplace(a_.dlnf, loss_scale, static_cast<size_t>(Rl * C));
    ops_.axpy(G(off_.head), loss_scale, a_.dwte_head, static_cast<size_t>(geo_.vp * C));
    cuda_check(cudaMemsetAsync(a_.dres, 0, static_cast<size_t>(Rl * C) * sizeof(bf16), s), "cudaMemsetAsync(dres)");
    ln_backward(a_.dres, off_.lnf_w, off_.lnf_b, a_.dlnf, block_output(), a_.lnf_mean, a_.lnf_rstd, Rl);
    emit(UnitEvent::post_backward, kHeadUnit);
  }  // else dres holds the next stage's gradient (set_stage_output_grad)
  for (int l = n_local_ - 1; l >= 0; --l) {
    pre_event(UnitEvent::pre_backward, l);
    layer_backward(l, B);
    emit(UnitEvent::post_backward, l);
  }
  pre_event(UnitEvent::pre_backward, kEmbeddingUnit);
  if (shard_.has_embedding)
    ops_.embedding_backward(G(off_.wte), G(off_.wpe), gather_rows(a_.dres, BT, a_.dres_full), a_.tokens, B, T, C,
                            geo_.vocab_begin, geo_.vocab_begin + geo_.vp, cp_positions());
  // else dres holds this stage's input gradient (get_stage_input_grad)
  slot_pending_[slot] = false;
  emit(UnitEvent::post_backward, kEmbeddingUnit);  // the last event of a backward (data parallel counts them)
}

}  // namespace mpitron
