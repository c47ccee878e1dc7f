// TransformerModelCuda (transformer_model_cuda.hpp): the CPU TransformerModel's forward/backward
// (src/model/transformer_model.cpp) on CudaOps, for the model chunk of any rank of a layout: tensor
// parallel (with sequence parallel), pipeline stages (interleaved too), context parallel's ring,
// expert parallel (not with ZeRO-3: its experts are in no ZeRO-3 unit), under data parallel and
// ZeRO 1-3 (src/parallel), with llm.c's fusions:
//   - residual add + LayerNorm in one kernel: block l's ln_1 also writes block l-1's output
//     (res3 = res2 + mlp projection), the final LayerNorm writes the last block's output;
//   - c_fc's matmul + bias + GELU in one cuBLASLt call (GELU_AUX_BIAS keeps the GELU input for
//     the backward), and in the backward mlp.c_proj's dinp times gelu' (DGELU epilogue);
//   - attention keeps only its logsumexp stats [B, H, T], never the [T, T] probabilities;
//   - LM head in chunks of rows: logits (bf16) -> crossentropy_fused (losses, and dlogits in
//     place) -> dlnf and the wte gradient, during forward (as the CPU TransformerModel does),
//     unscaled; backward() scales them by loss_scale, which is only known then.
// Gradients are fp32 and accumulate (+=) over micro-batches; the residual-stream gradient dres
// is bf16 (llm.c's dresidual), LayerNorm backward adds into it.
// LLaMA (cfg.arch): RMSNorm (the residual add unfused), RoPE on q and k after the fused q|k|v
// GEMM, grouped-query attention, SwiGLU after the fused gate|up GEMM, no biases, lm_head.
// This file: the activation layout, construction, forward and backward. The model's state
// (memory accounting, host transfers, pipeline stage tensors, gradient binding) is in
// transformer_model_cuda_state.cpp.
#include "mpitron/model/cuda/transformer_model_cuda.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "mpitron/core/error.hpp"
#include "mpitron/core/memory.hpp"
#include "mpitron/model/context_parallel/cuda/ring_blocks_cuda.hpp"
#include "mpitron/model/param_tables.hpp"
#include "mpitron/model/tensor_parallel/tp_mappings.hpp"
#include "mpitron/ops/cuda/check.hpp"
#include "mpitron/ops/cuda/cuda_flat_ops.hpp"

namespace mpitron {

namespace {

using cuda::cuda_check;

}  // namespace

void* TransformerModelCuda::device_alloc(Mem m, size_t bytes, const char* what) {
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
  if (e != cudaSuccess) {
    cudaGetLastError();
    fail("TransformerModelCuda: cudaMalloc of {} for {} failed: {} (this model holds {} already)",
         format_bytes(int64_t(bytes)), what, cudaGetErrorString(e), format_bytes(device_bytes()));
  }
  allocs_.push_back({p, bytes, m});
  MemTracker::cuda().on_alloc(m, static_cast<int64_t>(bytes));
  cuda_check(cudaMemsetAsync(p, 0, bytes, ops_.stream()), "cudaMemsetAsync(TransformerModelCuda buffer)");
  return p;
}

TransformerModelCuda::TransformerModelCuda(const ModelConfig& cfg, const ModelShard& shard, CudaOps& ops,
                                           int max_micro_batch, ModelOptions options, Comm* tp, Comm* cp, Comm* ep)
    : cfg_(cfg), spec_(block_spec(cfg)), geo_(cfg, shard), ops_(ops), dev_{ops}, max_B_(max_micro_batch), shard_(shard),
      tp_(tp) {
  init_layers(cfg, shard, options, max_micro_batch, cp, ep);
  locate_params(cfg, shard);
  try {
    alloc_params(shard);
    alloc_activations(cfg, shard, options, max_micro_batch, cp);
    if (cfg.moe.enabled()) setup_moe(shard, options, max_micro_batch, ep, cp);
    alloc_host_staging(max_micro_batch);
    ops_.synchronize();  // the zero fills and the positions' upload are done
  } catch (...) {
    release();  // a throwing constructor runs no destructor
    throw;
  }
}

// The shard checked against the communicators (each ordered after ops' stream) and the model's
// sizes; the layers shared with the CPU model; the parameter table.
void TransformerModelCuda::init_layers(const ModelConfig& cfg, const ModelShard& shard, ModelOptions options,
                                       int max_micro_batch, Comm* cp, Comm* ep) {
  check((ep ? ep->size() : 1) == shard.ep_size && (ep ? ep->rank() : 0) == shard.ep_rank,
        "TransformerModelCuda: the shard says ep rank {} of {}, the EP group rank {} of {}", shard.ep_rank,
        shard.ep_size, ep ? ep->rank() : 0, ep ? ep->size() : 1);
  check(shard.tp_size == 1 || (tp_ && tp_->size() == shard.tp_size && tp_->rank() == shard.tp_rank),
        "TransformerModelCuda: tensor parallel shard {} of {} needs the TP communicator of that size", shard.tp_rank,
        shard.tp_size);
  cfg_.n_kv_head = kv_heads(cfg);  // multi-head attention where the architecture has no GQA
  if (tp_) tp_->set_compute_stream(ops_.stream());
  const TpContext tpc{tp_, geo_.sp, nullptr};
  block_ = std::make_unique<TransformerBlock<CudaDevice>>(dev_, cfg_, geo_, tpc);
  if (options.fp8) {  // an operand split over tp or cp is scaled by the whole tensor's amax
    fp8_ = std::make_unique<Fp8Recipe>(tp_, cp);
    block_->set_fp8(fp8_.get());
  }
  emb_ = std::make_unique<VocabParallelEmbedding<CudaDevice>>(dev_, tpc, cfg.padded_vocab(shard.tp_size), cfg.d_model);
  check((shard.cp_size == 1) == (cp == nullptr) && (!cp || (cp->size() == shard.cp_size && cp->rank() == shard.cp_rank)),
        "TransformerModelCuda: the shard says cp rank {} of {}, the CP group does not match", shard.cp_rank,
        shard.cp_size);
  if (cp) cp->set_compute_stream(ops_.stream());
  layer_begin_ = shard.layer_begin;
  n_local_ = local_layers(cfg, shard);
  check(layer_begin_ >= 0 && n_local_ >= 0 && layer_begin_ + n_local_ <= cfg.n_layer,
        "TransformerModelCuda: layers [{}, {}) outside the model's {}", layer_begin_, layer_begin_ + n_local_,
        cfg.n_layer);
  check(max_micro_batch > 0 && options.slots >= 1, "TransformerModelCuda: max_micro_batch and slots must be > 0");
  check(cfg.d_model % 8 == 0, "TransformerModelCuda: d_model {} must be a multiple of 8 (16-byte bf16 rows)",
        cfg.d_model);
  const int T = shard.tp_size;
  check(cfg.vocab_size > int64_t{T - 1} * geo_.vp,
        "TransformerModelCuda: vocabulary {} too small for tp {} (the last rank's {} padded "
        "rows would hold no real token)",
        cfg.vocab_size, T, geo_.vp);
  chunk_rows_ = gpu_logits_chunk_rows(cfg, max_micro_batch, options.logits_chunk_rows, shard.cp_size);
  head_ = std::make_unique<LmHead<CudaDevice>>(dev_, cfg_, geo_, tpc, chunk_rows_);
  recompute_ = options.recompute;
  params_ = model_param_table(cfg_, shard);
  n_flat_ = flat_param_floats(params_);
}

size_t TransformerModelCuda::param_offset(const char* name) const {
  if (!name) return kNone;
  for (const auto& p : params_)
    if (p.name == name) return p.offset;
  return kNone;
}

// Each role's flat offset (kNone where the architecture or this stage lacks it). A pipeline
// stage holds its blocks; the token embedding on the first stage (and on the last for a tied
// LM head), learned positions on the first, the final norm and an untied lm_head on the last.
void TransformerModelCuda::locate_params(const ModelConfig& cfg, const ModelShard& shard) {
  off_.wte = param_offset(spec_.name(ModelTensor::tok_emb));
  off_.wpe = param_offset(spec_.name(ModelTensor::pos_emb));
  off_.lnf_w = param_offset(spec_.name(ModelTensor::lnf_w));
  off_.lnf_b = param_offset(spec_.name(ModelTensor::lnf_b));
  off_.head = cfg.tied_embeddings ? off_.wte : param_offset(spec_.name(ModelTensor::lm_head));
  check(off_.wte != kNone || !shard.has_embedding, "TransformerModelCuda: no token embedding in the parameter table");
  for (int l = layer_begin_; l < layer_begin_ + n_local_; ++l) {
    off_.layers.push_back(layer_offsets(cfg, l));
    off_.moe.push_back(cfg.moe.is_moe_layer(l) ? moe_offsets(cfg, shard, l) : MoeOffsets{});
  }
}

TransformerModelCuda::LayerOffsets TransformerModelCuda::layer_offsets(const ModelConfig& cfg, int l) const {
  static constexpr size_t LayerOffsets::*kRole[kBlockTensors] = {
      &LayerOffsets::ln1_w,  &LayerOffsets::ln1_b,  &LayerOffsets::qkv_w,  &LayerOffsets::qkv_b, &LayerOffsets::k_w,
      &LayerOffsets::v_w,    &LayerOffsets::k_b,    &LayerOffsets::v_b,    &LayerOffsets::q_norm, &LayerOffsets::k_norm,
      &LayerOffsets::proj_w, &LayerOffsets::proj_b, &LayerOffsets::ln2_w,  &LayerOffsets::ln2_b, &LayerOffsets::fc_w,
      &LayerOffsets::fc_b,   &LayerOffsets::up_w,   &LayerOffsets::fcp_w,  &LayerOffsets::fcp_b};
  const std::string h = spec_.layer_prefix + std::to_string(l) + ".";
  LayerOffsets o;
  const bool moe = cfg.moe.is_moe_layer(l);
  for (int r = 0; r < kBlockTensors; ++r) {
    const auto role = static_cast<BlockTensor>(r);
    const char* name = moe && r >= static_cast<int>(BlockTensor::fc_w) ? nullptr : block_tensor_name(cfg, role);  // a MoE block has no dense MLP
    o.*kRole[r] = name ? param_offset((h + name).c_str()) : kNone;
    check(!name || o.*kRole[r] != kNone, "TransformerModelCuda: parameter {}{} missing from the table", h, name);
  }
  // Separate q, k, v (gate, up) tensors run as one GEMM each: the table keeps them adjacent
  // (ZeRO-3 unit copies and gradient buckets keep them so too).
  const size_t C = cfg.d_model, hd = cfg.head_dim();
  check((o.k_w == kNone || (o.k_w == o.qkv_w + geo_.h_local * hd * C && o.v_w == o.k_w + geo_.kv_local * hd * C)) &&
            (o.k_b == kNone || (o.k_b == o.qkv_b + geo_.h_local * hd && o.v_b == o.k_b + geo_.kv_local * hd)) &&
            (o.up_w == kNone || o.up_w == o.fc_w + geo_.f_local * C),
        "TransformerModelCuda: block {}'s q/k/v or gate/up weights are not adjacent", l);
  return o;
}

// MoE block l's router, this rank's experts (kNone for another ep rank's) and shared experts.
TransformerModelCuda::MoeOffsets TransformerModelCuda::moe_offsets(const ModelConfig& cfg, const ModelShard& shard,
                                                                   int l) const {
  MoeOffsets mo;
  const std::string m = spec_.layer_prefix + std::to_string(l) + "." + "block_sparse_moe.";
  auto need = [&](const std::string& name) {
    const size_t at_ = param_offset(name.c_str());
    check(at_ != kNone, "TransformerModelCuda: parameter {} missing from the table", name);
    return at_;
  };
  mo.router = need(m + "gate.weight");
  const int el = cfg.moe.n_experts / shard.ep_size, e0 = shard.ep_rank * el;  // this rank's experts
  for (int e = 0; e < cfg.moe.n_experts; ++e) {
    if (e < e0 || e >= e0 + el) {  // another ep rank's
      mo.w1.push_back(kNone), mo.w2.push_back(kNone);
      continue;
    }
    const std::string x = m + "experts." + std::to_string(e) + ".";
    mo.w1.push_back(need(x + "w1.weight"));
    mo.w2.push_back(need(x + "w2.weight"));
    check(need(x + "w3.weight") == mo.w1.back() + size_t(cfg.moe.d_ff) * cfg.d_model,
          "TransformerModelCuda: expert {} of block {}: w1 and w3 are not adjacent", e, l);
  }
  if (cfg.moe.n_shared > 0) mo.sh_fc = need(m + "shared_experts.gate_proj.weight"),
                            mo.sh_fcp = need(m + "shared_experts.down_proj.weight");
  return mo;
}

// The fp32 master, its bf16 copy and the gradients; each parameter's pointers; the ZeRO-3 units.
void TransformerModelCuda::alloc_params(const ModelShard& shard) {
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
    check(i == 0 || params_[i].offset > params_[i - 1].offset,
          "TransformerModelCuda: parameter table not in flat order");
    if (params_[i].expert && shard.ep_size > 1) continue;  // after the chunk's other parameters: in no unit (no ZeRO-3)
    UnitCopy& u = unit_copy(param_unit(params_[i], shard_));
    if (u.params.empty()) u.begin = params_[i].offset;
    check(u.params.empty() || u.end == params_[i].offset, "TransformerModelCuda: unit of {} is not contiguous",
          params_[i].name);
    u.end = i + 1 < params_.size() ? params_[i + 1].offset : n_flat_;
    u.params.push_back(i);
  }
}

// The activation slots (one allocation, gpu_activations.hpp's layout) and, under context
// parallel, the positions and the ring.
void TransformerModelCuda::alloc_activations(const ModelConfig& cfg, const ModelShard& shard, ModelOptions options,
                                             int max_micro_batch, Comm* cp) {
  const GpuActLayout lay =
      gpu_act_layout(cfg, shard, max_micro_batch, options.slots, recompute_, chunk_rows_, options.fp8);
  size_t act_bytes = plan_gpu_activations(cfg, lay, nullptr, slots_);
  char* act = static_cast<char*>(device_alloc(Mem::activations, act_bytes, "activations"));
  plan_gpu_activations(cfg, lay, act, slots_);
  a_ = slots_.front();
  dev_.fp8 = a_.fp8;
  block_->set_norm_grad_scratch(a_.ln_grad);  // shared by the slots
  if (shard.cp_size > 1) {  // every cp rank's positions (the ring's masks), this rank's for wpe and RoPE
    cuda_check(cudaMemcpyAsync(a_.ring.positions, geo_.all_positions.data(), geo_.all_positions.size() * sizeof(int32_t),
                               cudaMemcpyHostToDevice, ops_.stream()),
               "cudaMemcpyAsync(cp positions)");
    if (n_local_ > 0) {
      auto blocks = std::make_unique<CudaRingBlocks>(ops_, a_.ring, shard.cp_rank, seq_local(),
                                                     static_cast<int>(geo_.h_local), static_cast<int>(geo_.kv_local),
                                                     cfg.head_dim());
      cuda_ring_ = blocks.get();
      ring_blocks_ = std::move(blocks);
      ring_ = std::make_unique<RingAttention>(*cp, *ring_blocks_, seq_local(), 2 * geo_.kv_local * cfg.head_dim());
      block_->set_ring(ring_.get());
    }
  }
}

// The slots' bookkeeping, the pinned token and loss staging and their events.
void TransformerModelCuda::alloc_host_staging(int max_micro_batch) {
  slot_B_.assign(slots_.size(), 0);
  slot_pending_.assign(slots_.size(), false);
  slot_doc_pos_.assign(slots_.size(), {});
  slot_segments_.assign(slots_.size(), std::vector<DeviceSegments>(static_cast<size_t>(shard_.cp_size)));
  const size_t bt = static_cast<size_t>(max_micro_batch) * seq_local();
  cuda_check(cudaMallocHost(reinterpret_cast<void**>(&host_tokens_),
                            (4 + kSegmentTableRows * static_cast<size_t>(shard_.cp_size)) * bt * sizeof(int32_t)),
             "cudaMallocHost(token staging)");
  cuda_check(cudaMallocHost(reinterpret_cast<void**>(&host_losses_), bt * sizeof(float)),
             "cudaMallocHost(losses)");
  cuda_check(cudaEventCreateWithFlags(&tokens_sent_, cudaEventDisableTiming), "cudaEventCreate");
  cuda_check(cudaEventCreateWithFlags(&losses_ready_, cudaEventDisableTiming), "cudaEventCreate");
}

TransformerModelCuda::~TransformerModelCuda() { release(); }

// The MoE blocks on this GPU (moe_mlp.hpp MoeBlocks): their arrays from a stream-ordered allocator.
void TransformerModelCuda::setup_moe(const ModelShard& shard, ModelOptions options, int max_micro_batch, Comm* ep,
                                     Comm* cp) {
  moe_alloc_ = make_stream_allocator(ops_.stream());
  dev_.alloc = moe_alloc_.get();
  if (ep && ep->size() > 1) ep->set_compute_stream(ops_.stream());  // the exchanges read what the GEMMs wrote
  // Under sequence parallel the block hands the MoE all BT rows (gathered): its shared experts
  // then run as plain tensor parallel, not sequence parallel (as in the CPU TransformerModel).
  moe_ = std::make_unique<MoeBlocks<CudaDevice>>(dev_, cfg_, TpContext{tp_, false, nullptr}, ep, cp, shard.layer_begin,
                                                 n_local_, options.slots, options.recompute,
                                                 int64_t{max_micro_batch} * seq_local());
  block_->set_moe(&moe_->mlp());
}

TransformerModelCuda::LayerAct TransformerModelCuda::layer_acts(int l) {
  LayerAct a = a_.layers[recompute_ ? 0 : l];
  if (off_.moe[l].router != kNone) a.moe = moe_->acts(slot_, l);
  return a;
}

void TransformerModelCuda::release() {
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

const bf16* TransformerModelCuda::block_output() const {
  if (recompute_ || n_local_ == 0) return a_.block_in.back();
  return a_.layers.back().res3;
}

// Block l (transformer_block.hpp). Its input is the embedding output, or block l-1's output:
// without recompute that output is written by this block's first kernel (res3[l-1] = res2[l-1] +
// proj_out, fused with ln_1), and the block leaves its MLP projection in proj_out for the next
// block's (or the final) LayerNorm to add; with recompute the input is block_in[l], the output
// written to block_in[l + 1] and the activations go to the one shared set.
void TransformerModelCuda::layer_forward(int l, int B) {
  const bool lazy = !recompute_ && l > 0;
  const bf16* res_in = recompute_ ? a_.block_in[l] : l == 0 ? a_.encoded : a_.layers[l - 1].res3;
  block_->forward(block_weights(l), layer_acts(l), scratch(), res_in,
                  lazy ? &a_.layers[l - 1] : nullptr, recompute_ ? a_.block_in[l + 1] : nullptr, B);
}

// A MoE block's expert pointers live in moe_w13_ ... until the next call (the block reads them
// during its forward or backward).
BlockTensors<const bf16> TransformerModelCuda::block_weights(int l) const {
  const LayerOffsets& p = off_.layers[l];
  const MoeOffsets& m = off_.moe[l];
  MoeTensors<const bf16> moe;
  if (m.router != kNone) {
    moe_w13_.clear(), moe_w2_.clear();
    for (size_t e = 0; e < m.w1.size(); ++e) moe_w13_.push_back(W(m.w1[e])), moe_w2_.push_back(W(m.w2[e]));
    moe = {W(m.router), moe_w13_.data(), moe_w2_.data(), W(m.sh_fc), W(m.sh_fcp)};
  }
  return {W(p.ln1_w), W(p.ln1_b), W(p.qkv_w), W(p.qkv_b), W(p.proj_w), W(p.proj_b),
          W(p.ln2_w), W(p.ln2_b), W(p.fc_w),  W(p.fc_b),  W(p.fcp_w), W(p.fcp_b), moe, W(p.q_norm), W(p.k_norm)};
}

BlockTensors<float> TransformerModelCuda::block_grads(int l) const {
  const LayerOffsets& p = off_.layers[l];
  const MoeOffsets& m = off_.moe[l];
  MoeTensors<float> moe;
  if (m.router != kNone) {
    moe_g13_.clear(), moe_g2_.clear();
    for (size_t e = 0; e < m.w1.size(); ++e) moe_g13_.push_back(G(m.w1[e])), moe_g2_.push_back(G(m.w2[e]));
    moe = {G(m.router), moe_g13_.data(), moe_g2_.data(), G(m.sh_fc), G(m.sh_fcp)};
  }
  return {G(p.ln1_w), G(p.ln1_b), G(p.qkv_w), G(p.qkv_b), G(p.proj_w), G(p.proj_b),
          G(p.ln2_w), G(p.ln2_b), G(p.fc_w),  G(p.fc_b),  G(p.fcp_w), G(p.fcp_b), moe, G(p.q_norm), G(p.k_norm)};
}

// d4C holds d [gate | up] (or d fc) and, later in the same backward, d qkv.
BlockScratch<bf16> TransformerModelCuda::scratch() const {
  return {.proj_out = a_.proj_out, .dres = a_.dres, .dC = a_.dC, .dqkv = a_.d4C, .d4C = a_.d4C, .dmlp = a_.dmlp,
          .gath = a_.gath, .full = a_.full, .dres_full = a_.dres_full, .qk_tmp = a_.qk_tmp};
}

// Final LayerNorm (with the last block's residual add), then the LM head and loss in chunks of
// rows; with gradients, each chunk's logits become dlogits (scale 1) in place and give dlnf and
// the micro-batch's wte gradient at once. The losses go to the host as soon as the last chunk's
// are written. CPU: the head part of TransformerModel::forward.
void TransformerModelCuda::head_forward(int B) {
  const int64_t BT = int64_t{B} * seq_local(), Rl = local_rows(BT);
  if (n_local_ > 0 && !recompute_) {
    const LayerAct& last = a_.layers.back();
    block_->residual_norm_forward(last.res3, a_.lnf, a_.lnf_mean, a_.lnf_rstd, last.res2, a_.proj_out, W(off_.lnf_w),
                                  W(off_.lnf_b), Rl);
  } else {
    block_->norm_forward(a_.lnf, a_.lnf_mean, a_.lnf_rstd, block_output(), W(off_.lnf_w), W(off_.lnf_b), Rl);
  }
  // The LM head and loss (lm_head.hpp); the losses start for the host as soon as the last
  // chunk's are written.
  head_->forward(W(off_.head), a_.lnf, a_.dlnf, a_.dwte_head, a_.losses, a_.lse, a_.targets, BT, grad_enabled_,
                 {.logits = a_.logits, .gath = a_.gath, .full = a_.full, .ce = a_.ce}, [&] {
                   cuda_check(cudaMemcpyAsync(host_losses_, a_.losses, static_cast<size_t>(BT) * sizeof(float),
                                              cudaMemcpyDeviceToHost, ops_.stream()),
                              "cudaMemcpyAsync(losses)");
                   cuda_check(cudaEventRecord(losses_ready_, ops_.stream()), "cudaEventRecord(losses)");
                 });
}

// The attention segments of this micro-batch (cuDNN only: the naive path masks the scores): at
// cp 1 the documents (their first positions, staged at host_tokens_ + 3 max BT by forward); under
// cp every source rank's k|v block against this rank's queries, by position (and document). The
// tables go up with the tokens (tokens_sent_ guards the staging).
void TransformerModelCuda::stage_segments(int slot, int B, bool documents) {
  std::vector<DeviceSegments>& segs = slot_segments_[static_cast<size_t>(slot)];
  for (DeviceSegments& seg : segs) seg = DeviceSegments{};
  const int cp = shard_.cp_size;
  if ((!documents && cp == 1) || ops_.attention_kind() != "cudnn" || geo_.h_local == 0) return;
  const int T = seq_local();
  const int64_t max_bt = int64_t{max_B_} * T;
  std::vector<int32_t> pos(static_cast<size_t>(T));
  for (int t = 0; t < T; ++t) pos[static_cast<size_t>(t)] = t;
  auto positions = [&](int rank) { return cp == 1 ? pos.data() : geo_.all_positions.data() + int64_t{rank} * T; };
  for (int src = 0; src < cp; ++src) {
    const AttentionSegments as = attention_segments(positions(shard_.cp_rank), T, positions(src), T, B,
                                                    documents ? host_tokens_ + 3 * max_bt : nullptr);
    DeviceSegments& seg = segs[static_cast<size_t>(src)];
    const int64_t at = int64_t{src} * kSegmentTableRows * max_bt;
    seg.shape = segment_buckets(as);
    seg.count = as.count(), seg.causal = as.causal, seg.B = B, seg.Tq = T, seg.Tk = T, seg.table = a_.segments + at;
    int32_t* staged = host_tokens_ + 4 * max_bt + at;
    segment_table(as, seg.shape.n, staged);
    cuda_check(cudaMemcpyAsync(a_.segments + at, staged,
                               static_cast<size_t>(kSegmentTableRows) * seg.shape.n * sizeof(int32_t),
                               cudaMemcpyHostToDevice, ops_.stream()),
               "cudaMemcpyAsync(attention segments)");
  }
}

void TransformerModelCuda::use_segments(int slot) {
  block_->set_documents(slot_docs(slot));
  if (cuda_ring_) {
    const DeviceSegments* segs = slot_segments_[static_cast<size_t>(slot)].data();
    cuda_ring_->set_segments(segs->table ? segs : nullptr);
  }
}

double TransformerModelCuda::forward(const int32_t* inputs, const int32_t* targets, int B, int64_t* n_targets, int slot,
                                     const int32_t* positions) {
  check(B > 0 && B <= max_B_, "TransformerModelCuda::forward: micro-batch {} outside [1, {}]", B, max_B_);
  check(slot >= 0 && slot < static_cast<int>(slots_.size()), "TransformerModelCuda::forward: slot {} outside [0, {})",
        slot, slots_.size());
  check(inputs != nullptr && targets != nullptr, "TransformerModelCuda::forward needs input and target tokens");
  const int T = seq_local(), C = cfg_.d_model;  // this rank's positions of each sequence
  const int64_t BT = int64_t{B} * T, max_bt = int64_t{max_B_} * T;
  cudaStream_t s = ops_.stream();
  a_ = slots_[slot];
  slot_ = slot;
  if (fp8_) fp8_->set_counting(grad_enabled_);  // an evaluation's casts are not the step's
  slot_B_[slot] = 0;  // a forward that throws leaves nothing for backward
  slot_pending_[slot] = false;
  // The previous forward's uploads must have left the staging buffer before it is refilled.
  cuda_check(cudaEventSynchronize(tokens_sent_), "cudaEventSynchronize(tokens)");
  int64_t count = 0;
  for (int64_t i = 0; i < BT; ++i) {  // this rank's rows (all of them without cp) into the staging buffer
    const int64_t at = geo_.full_index(i);
    check(inputs[at] >= 0 && inputs[at] < cfg_.vocab_size,
          "TransformerModelCuda::forward: input token {} at {} outside [0, {})", inputs[at], at, cfg_.vocab_size);
    check(targets[at] < cfg_.vocab_size, "TransformerModelCuda::forward: target {} at {} >= vocab size {}", targets[at],
          at, cfg_.vocab_size);
    count += targets[at] >= 0;
    host_tokens_[i] = inputs[at], host_tokens_[max_bt + i] = targets[at];
  }
  // Document masking: each row's position in its document (kept on the host for RoPE) and its
  // document's first index, staged for the device.
  std::vector<int32_t>& doc_pos = slot_doc_pos_[slot];
  doc_pos.clear();
  if (positions) {
    geo_.document_rows(positions, BT, host_tokens_ + 2 * max_bt, host_tokens_ + 3 * max_bt,
                       "TransformerModelCuda::forward");
    doc_pos.assign(host_tokens_ + 2 * max_bt, host_tokens_ + 2 * max_bt + BT);
    cuda_check(cudaMemcpyAsync(a_.doc_pos, host_tokens_ + 2 * max_bt, static_cast<size_t>(BT) * sizeof(int32_t),
                               cudaMemcpyHostToDevice, s),
               "cudaMemcpyAsync(document positions)");
    cuda_check(cudaMemcpyAsync(a_.doc_start, host_tokens_ + 3 * max_bt, static_cast<size_t>(BT) * sizeof(int32_t),
                               cudaMemcpyHostToDevice, s),
               "cudaMemcpyAsync(document starts)");
  }
  stage_segments(slot, B, positions != nullptr);
  use_segments(slot);
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
    emb_->forward(a_.encoded, a_.tokens, W(off_.wte), W(off_.wpe), B, T, a_.full, wpe_positions(slot),
                  !slot_doc_pos_[slot].empty());
  }
  for (int l = 0; l < n_local_; ++l) {
    pre_event(UnitEvent::pre_forward, l);
    layer_forward(l, B);
    if (off_.moe[l].router != kNone && grad_enabled_) moe_->record(l, layer_acts(l).moe->route);
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

// Block l's backward (transformer_block.hpp): dres in, dres out.
void TransformerModelCuda::layer_backward(int l, int B) {
  const bf16* res_in = recompute_ ? a_.block_in[l] : l > 0 ? a_.layers[l - 1].res3 : a_.encoded;
  block_->backward(block_weights(l), block_grads(l), layer_acts(l), scratch(), res_in, B, recompute_);
}

void TransformerModelCuda::backward(float loss_scale, int slot) {
  check(slot >= 0 && slot < static_cast<int>(slots_.size()) && slot_B_[slot] > 0 && slot_pending_[slot],
        "TransformerModelCuda::backward needs its own forward in slot {}, with gradients enabled "
        "(one backward per forward)", slot);
  a_ = slots_[slot];
  slot_ = slot;
  if (moe_) moe_->mlp().set_loss_scale(loss_scale);
  const int B = slot_B_[slot], T = seq_local(), C = cfg_.d_model;
  const int64_t BT = int64_t{B} * T, Rl = local_rows(BT);
  cudaStream_t s = ops_.stream();
  use_segments(slot);
  if (shard_.has_head) {
    pre_event(UnitEvent::pre_backward, kHeadUnit);  // before the wte gradient is written (ZeRO-2 binds it here)
    // The head's gradients were computed unscaled during forward.
    ops_.scale_bf16_inplace(a_.dlnf, loss_scale, static_cast<size_t>(Rl * C));
    ops_.axpy(G(off_.head), loss_scale, a_.dwte_head, static_cast<size_t>(geo_.vp * C));
    cuda_check(cudaMemsetAsync(a_.dres, 0, static_cast<size_t>(Rl * C) * sizeof(bf16), s), "cudaMemsetAsync(dres)");
    block_->norm_backward(a_.dres, G(off_.lnf_w), G(off_.lnf_b), a_.dlnf, block_output(), W(off_.lnf_w), a_.lnf_mean,
                          a_.lnf_rstd, Rl);
    emit(UnitEvent::post_backward, kHeadUnit);
  }  // else dres holds the next stage's gradient (set_stage_output_grad)
  for (int l = n_local_ - 1; l >= 0; --l) {
    pre_event(UnitEvent::pre_backward, l);
    layer_backward(l, B);
    emit(UnitEvent::post_backward, l);
  }
  pre_event(UnitEvent::pre_backward, kEmbeddingUnit);
  if (shard_.has_embedding)
    emb_->backward(G(off_.wte), G(off_.wpe), a_.dres, a_.dres_full, a_.tokens, B, T, wpe_positions(slot),
                   !slot_doc_pos_[slot].empty());
  // else dres holds this stage's input gradient (get_stage_input_grad)
  slot_pending_[slot] = false;
  emit(UnitEvent::post_backward, kEmbeddingUnit);  // the last event of a backward (data parallel counts them)
}

}  // namespace mpitron
