// TransformerModelCuda: the model of transformer_model.hpp (GPT-2 or LLaMA, cfg.arch) on one GPU,
// through CudaOps (bf16 compute, fp32 master weights, fp32 gradients and Adam moments; llm.c's
// precision plan, see cuda_ops.hpp). GPU builds only (MPITRON_CUDA=1).
//
// Same architecture, same parameter table and flat layout as the CPU TransformerModel with the same
// ModelShard (model_param_table: parameters on 16-float boundaries, LLaMA's q|k|v and gate|up
// adjacent for one GEMM each), so a flat fp32 vector from TransformerModel::param_data() loads 1:1
// (load_params) and comes back the same way (copy_params_to_host). A shard may be a tensor-parallel slice (with sequence parallel) and a
// pipeline stage (its blocks, with or without the embedding and the head), as on the CPU.
//
// Device memory, planned once at construction (llm.c's layout, see transformer_model_cuda.cpp):
//   params   fp32 master flat buffer + its bf16 copy (what the kernels read)       Mem::params
//   grads    fp32 flat buffer, ACCUMULATED over micro-batches until zero_grad()   Mem::grads
//            (released under ZeRO-2: DataParallel binds each parameter's gradient into its
//            bucket, bind_grad)
//   activations for micro-batch max_micro_batch x seq_len, per slot: bf16 tensors, fp32 LayerNorm
//            stats, attention logsumexp stats, losses, the micro-batch's unscaled wte gradient
//            from the head; shared: one chunk of bf16 logits, backward scratch      Mem::activations
//            (the layout: model/gpu_activations.hpp, which the planner sizes with)
// Every call is enqueued on ops.stream(); the host waits only where it needs a value: forward
// (the loss), copy_*_to_host (and load_params, which is not in the step).
//
// Mixture of experts (cfg.moe): MoE blocks run the shared MoeMlp<CudaDevice> (moe_mlp.hpp; the
// router on the host, the rows on the GPU, one GEMM per expert), its saved state per slot and
// block on a stream-ordered allocator (Mem::activations, moe_gpu_activation_bytes), in every
// layout of the CPU TransformerModel but expert parallel with ZeRO-3 (its experts are in no ZeRO-3
// unit here).
//
// A ModelChunk (model_chunk.hpp): data parallel, ZeRO 1-2, the gradient norm and AdamW are the
// backend-neutral DataParallel and AdamW of src/parallel over CudaFlatOps (the AdamW moments live
// there); after they write the master weights, params_changed() rewrites the bf16 copy.
// A training step (loss_scale = 1 / targets counted in the batch):
//   zero_grad(); for each micro-batch { forward(...); backward(loss_scale); }; then clipping and
//   AdamW on param_data() / grad_data(), params_changed().
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mpitron/distributed/comm.hpp"
#include "mpitron/model/arch.hpp"
#include "mpitron/model/config.hpp"
#include "mpitron/model/context_parallel/ring_attention.hpp"
#include "mpitron/model/cuda/cuda_device.hpp"
#include "mpitron/model/gpu_activations.hpp"
#include "mpitron/model/lm_head.hpp"
#include "mpitron/model/model_chunk.hpp"
#include "mpitron/model/param_tables.hpp"
#include "mpitron/model/shard_geometry.hpp"
#include "mpitron/model/transformer_block.hpp"
#include "mpitron/ops/cuda/cuda_ops.hpp"

namespace mpitron {

class CudaRingBlocks;  // model/context_parallel/cuda/ring_blocks_cuda.hpp

class TransformerModelCuda final : public ModelChunk {
 public:
  // max_micro_batch bounds forward()'s B. `ops` must outlive the model (its stream carries all
  // the model's work, the destructor included). Tensor parallel (shard.tp_size > 1, Megatron's
  // split as the CPU TransformerModel: column-parallel c_attn / c_fc, row-parallel c_proj /
  // mlp.c_proj, vocab-parallel embedding and cross-entropy), with sequence parallel when
  // shard.sequence_parallel: `tp` is the TP group's Comm (NCCL; its operations are ordered after
  // ops.stream()). Pipeline stage: shard.layer_begin/layer_end, has_embedding, has_head; stage
  // tensors through set_stage_input / get_stage_output (options.slots micro-batches in flight).
  // Context parallel (shard.cp_size > 1, `cp` its group's Comm, ordered after ops.stream()): as
  // the CPU TransformerModel, each rank holds seq_len / cp positions of every sequence (two
  // load-balanced chunks), attention runs over the ring (ring_attention.hpp, CudaRingBlocks), wpe
  // and RoPE use global positions; forward() still takes the full [B, seq_len] token arrays.
  // Expert parallel (shard.ep_size > 1, `ep` its group's Comm, ordered after ops.stream()): this
  // rank's experts only, the token copies exchanged by all-to-all (moe_mlp.hpp).
  // The arguments of the CPU TransformerModel's constructor, in its order (ModelOptions:
  // model_chunk.hpp).
  TransformerModelCuda(const ModelConfig& cfg, const ModelShard& shard, CudaOps& ops, int max_micro_batch,
                       ModelOptions options = {}, Comm* tp = nullptr, Comm* cp = nullptr, Comm* ep = nullptr);
  ~TransformerModelCuda();
  TransformerModelCuda(const TransformerModelCuda&) = delete;
  TransformerModelCuda& operator=(const TransformerModelCuda&) = delete;

  // ModelChunk (model_chunk.hpp). param_data() is the fp32 master copy.
  const ModelConfig& config() const override { return cfg_; }
  const ModelShard& shard() const override { return shard_; }
  const std::vector<ParamInfo>& params() const override { return params_; }
  size_t num_params() const override { return n_flat_; }  // = TransformerModel::num_params()
  float* param_data() override { return master_; }
  float* grad_data() override { return grads_; }  // nullptr after release_grad_buffer()
  void zero_grad() override;
  void params_changed() override;  // the bf16 copy from the master weights
  bf16* param_bf16_data() override { return sharded_params_ ? nullptr : params_bf16_; }
  void set_grad_enabled(bool on) override { grad_enabled_ = on; }
  bool grad_enabled() const override { return grad_enabled_; }
  void set_unit_hook(UnitHook h) override { hook_ = std::move(h); }
  void bind_grad(size_t i, float* data) override;
  void release_grad_buffer() override;
  // ZeRO-3: release_param_buffer frees the fp32 master and the bf16 copy; DataParallel then binds
  // each unit's gathered fp32 weights before the unit's pre_forward / pre_backward event, and the
  // model converts the unit to a bf16 working copy right after that event (when the gather is
  // complete), freed once the unit's parameters are unbound again.
  void bind_param(size_t i, float* data) override;
  void release_param_buffer() override;
  double cp_wait_seconds() const override { return ring_ ? ring_->comm_wait_seconds() : -1.0; }
  // MoE blocks' routing statistics since the last take (global layer -> stats; empty when dense),
  // and the seconds in their expert-parallel token exchanges (< 0: none).
  std::vector<std::pair<int, MoeStats>> take_moe_stats() override {
    return moe_ ? moe_->take_stats() : std::vector<std::pair<int, MoeStats>>{};
  }
  Fp8Stats take_fp8_stats() override { return fp8_ ? dev_.take_fp8_stats(*fp8_) : Fp8Stats{}; }
  double ep_seconds() const override { return moe_ ? moe_->mlp().ep_seconds() : -1.0; }
  int max_micro_batch() const { return max_B_; }
  int64_t logits_chunk_rows() const { return chunk_rows_; }

  // Host fp32 flat parameters [num_params()] -> the fp32 master copy and its bf16 copy.
  void load_params(const float* host, size_t n);
  // GPT-2 initialisation, the same values as TransformerModel::init_weights(seed)
  // (init_model_params on the host, then load_params).
  void init_weights(uint64_t seed);
  void copy_params_to_host(float* host, size_t n);  // the fp32 master copy; syncs
  void copy_grads_to_host(float* host, size_t n);   // syncs

  // ModelChunk's forward and backward. targets are required (no generation path yet); every input
  // must be in [0, vocab_size). forward waits for the losses (with grad_sum_squares, the step's
  // only host waits). With gradients enabled (the default) the LM head's backward runs here too,
  // unscaled, as in the CPU TransformerModel; backward() applies loss_scale.
  double forward(const int32_t* inputs, const int32_t* targets, int B, int64_t* n_targets = nullptr,
                 int slot = 0, const int32_t* positions = nullptr) override;
  void backward(float loss_scale, int slot = 0) override;
  // Pipeline stage tensors (ModelChunk), staged through host memory (sync).
  size_t stage_floats(int B) const override;
  void set_stage_input(int slot, const float* host, size_t n) override;
  void get_stage_output(int slot, float* host, size_t n) override;
  void set_stage_output_grad(const float* host, size_t n) override;
  void get_stage_input_grad(float* host, size_t n) override;
  // Unit events (model_chunk.hpp) come when a unit's kernels are ENQUEUED (not finished): data
  // parallel launches a gradient bucket at post_backward on a communicator ordered after
  // ops.stream() by event (Comm::set_compute_stream), so the reduction overlaps the rest of
  // backward.

  // Device bytes this model allocated, per category and in all (also counted by
  // MemTracker::cuda()); "params 1.2 GiB, grads ..., total ..." for logs.
  int64_t device_bytes() const;
  int64_t device_bytes(Mem m) const;
  std::string memory_summary() const;

 private:
  struct DeviceAlloc {  // one cudaMalloc counted under one category
    void* p = nullptr;
    size_t bytes = 0;
    Mem mem = Mem::workspace;
  };
  // Flat offsets (elements) of one block's parameters; kNone for a tensor the architecture lacks
  // (LLaMA's biases), which W() and G() map to nullptr. LLaMA: ln1/ln2 are the RMSNorms, qkv_w is
  // q_proj (k, v right behind it), fc_w gate_proj (up behind it), proj_w o_proj, fcp_w down_proj.
  static constexpr size_t kNone = SIZE_MAX;
  struct LayerOffsets {  // BlockTensor's roles
    size_t ln1_w, ln1_b, qkv_w, qkv_b, k_w, v_w, k_b, v_b, q_norm, k_norm, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b,
        up_w, fcp_w, fcp_b;
  };
  // A MoE block's (moe_mlp.hpp): the router, each expert's w1 (w3 right behind it) and w2, the
  // shared experts' gate (up behind it) and down (kNone without shared experts).
  struct MoeOffsets {
    size_t router = kNone, sh_fc = kNone, sh_fcp = kNone;
    std::vector<size_t> w1, w2;
  };
  struct Offsets {
    size_t wte = kNone, wpe = kNone, lnf_w = kNone, lnf_b = kNone, head = kNone;  // head: lm_head or the tied wte
    std::vector<LayerOffsets> layers;
    std::vector<MoeOffsets> moe;  // per local layer (router kNone: a dense block)
  };
  using LayerAct = GpuLayerActs;  // the activation layout: model/gpu_activations.hpp
  using Acts = GpuActs;
  void upload_bf16(bf16* dst, const float* host, size_t n);
  void download_bf16(float* host, const bf16* src, size_t n);
  // Sequence parallel: this rank's rows of the residual stream.
  int64_t local_rows(int64_t BT) const { return geo_.local_rows(BT); }
  int seq_local() const { return geo_.Tl; }  // positions of each sequence this rank holds (seq_len / cp)
  // wpe's rows for this rank's positions (device), nullptr without cp (positions 0..T-1).
  const int32_t* cp_positions() const {
    return shard_.cp_size > 1 ? a_.ring.positions + int64_t{shard_.cp_rank} * seq_local() : nullptr;
  }
  // Slot `slot`'s document masking (a_ is that slot's): the host positions and the device starts,
  // or none; and wpe's rows: each row's position in its document (device [B, T]) or cp_positions().
  DocumentRows slot_docs(int slot) const {
    const std::vector<int32_t>& p = slot_doc_pos_[static_cast<size_t>(slot)];
    const DeviceSegments* seg = slot_segments_[static_cast<size_t>(slot)].data();
    return p.empty() ? DocumentRows{} : DocumentRows{p.data(), a_.doc_start, !ring_ && seg->table ? seg : nullptr};
  }
  // cuDNN attention (model.attention = "cudnn"): at cp 1 with document masking the documents of
  // this micro-batch (the staged starts) as attention segments; under cp the ring's blocks, one
  // table per source rank (with or without documents). Tables uploaded to the slot's a_.segments.
  void stage_segments(int slot, int B, bool documents);
  // The slot's segments to the blocks that use them: the ring's (cp), or DocumentRows' (cp 1).
  void use_segments(int slot);
  const int32_t* wpe_positions(int slot) const {
    return slot_doc_pos_[static_cast<size_t>(slot)].empty() ? cp_positions() : a_.doc_pos;
  }
  // Block l's weights and gradients, the shared scratch of the current slot (a_), as the shared
  // block code (transformer_block.hpp) takes them.
  BlockTensors<const bf16> block_weights(int l) const;
  BlockTensors<float> block_grads(int l) const;
  BlockScratch<bf16> scratch() const;
  void* device_alloc(Mem m, size_t bytes, const char* what);
  void device_free(void* p);  // one allocation of device_alloc, after the stream has drained
  void release();  // frees every device / pinned allocation (destructor, failed constructor)
  const bf16* W(size_t offset) const;  // the bf16 weight of flat element `offset` (ZeRO-3: of a gathered unit)
  size_t param_at(size_t offset) const;  // the index of the parameter holding flat element `offset`
  // ZeRO-3: one unit's bf16 working copy, made from its bound fp32 weights after the unit's
  // pre_forward / pre_backward event; freed when its parameters are unbound.
  struct UnitCopy {
    size_t begin = 0, end = 0;  // flat range (to the next unit's first parameter)
    std::vector<size_t> params;
    bf16* bf = nullptr;
    bool stale = false;  // rebound since the last conversion
  };
  UnitCopy& unit_copy(int unit) { return units_[unit == kEmbeddingUnit ? 0 : unit == kHeadUnit ? 1 : 2 + unit]; }
  void pre_event(UnitEvent e, int unit);  // emit, then (ZeRO-3) the unit's bf16 copy
  void free_unit_copy(UnitCopy& u);       // stream-ordered (after the kernels that read it)
  float* G(size_t offset) const;  // the gradient of flat element `offset` (bind_grad may move it)
  const bf16* block_output() const;  // the final LayerNorm's input
  // Construction, in this order (transformer_model_cuda.cpp): the checks and the layers, the
  // parameters' flat offsets, then the device and pinned buffers. `cfg` is the constructor's (cfg_
  // has kv_heads).
  void init_layers(const ModelConfig& cfg, const ModelShard& shard, ModelOptions options, int max_micro_batch, Comm* cp,
                   Comm* ep);
  size_t param_offset(const char* name) const;  // in the parameter table; kNone if absent (or name is nullptr)
  void locate_params(const ModelConfig& cfg, const ModelShard& shard);  // fills off_
  LayerOffsets layer_offsets(const ModelConfig& cfg, int l) const;
  MoeOffsets moe_offsets(const ModelConfig& cfg, const ModelShard& shard, int l) const;
  void alloc_params(const ModelShard& shard);
  void alloc_activations(const ModelConfig& cfg, const ModelShard& shard, ModelOptions options, int max_micro_batch,
                         Comm* cp);
  void alloc_host_staging(int max_micro_batch);
  void setup_moe(const ModelShard& shard, ModelOptions options, int max_micro_batch, Comm* ep, Comm* cp);
  LayerAct layer_acts(int l);  // block l's activations in the current slot (a MoE block's routing state too)
  void layer_forward(int l, int B);
  void layer_backward(int l, int B);
  void head_forward(int B);

  void emit(UnitEvent e, int unit) {
    if (hook_) hook_(e, unit);
  }

  ModelConfig cfg_;
  const BlockSpec& spec_;
  ShardGeometry geo_;  // per-rank widths, positions, RoPE
  CudaOps& ops_;
  CudaDevice dev_;
  UnitHook hook_;
  int max_B_;
  ModelShard shard_;
  Comm* tp_ = nullptr;
  int64_t chunk_rows_ = 0;
  bool recompute_ = false;
  int layer_begin_ = 0, n_local_ = 0;       // this stage's blocks
  std::vector<Acts> slots_;                 // a_ is the slot the current forward/backward uses
  std::vector<int> slot_B_;
  std::vector<bool> slot_pending_;
  std::vector<std::vector<int32_t>> slot_doc_pos_;  // document masking: each slot's positions (host; empty: none)
  std::vector<std::vector<DeviceSegments>> slot_segments_;  // and its cuDNN segments, per cp rank (table nullptr: none)
  CudaRingBlocks* cuda_ring_ = nullptr;  // ring_blocks_, typed
  std::vector<ParamInfo> params_;
  size_t n_flat_ = 0;
  Offsets off_;
  std::vector<DeviceAlloc> allocs_;
  float *master_ = nullptr, *grads_ = nullptr;
  std::vector<float*> grad_at_;  // parameter i's gradient (grads_ + offset, or where bind_grad put it)
  bf16* params_bf16_ = nullptr;
  std::vector<const bf16*> w_at_;  // parameter i's bf16 weights (params_bf16_ + offset, or a unit copy)
  std::vector<float*> master_at_;  // ZeRO-3: parameter i's gathered fp32 weights (bind_param)
  std::vector<UnitCopy> units_;    // [0] embedding, [1] head, [2 + l] block l
  bool sharded_params_ = false;    // release_param_buffer() was called (ZeRO-3)
  Acts a_;  // the current slot's activations (a copy of slots_[s]'s pointers)
  int32_t* host_tokens_ = nullptr;  // pinned staging [(4 + 4 cp) * max BT]: inputs, targets, document positions,
                                    // starts, the segment tables (kSegmentTableRows x max BT per cp rank)
  float* host_losses_ = nullptr;    // pinned [max BT]
  cudaEvent_t tokens_sent_ = nullptr, losses_ready_ = nullptr;
  bool grad_enabled_ = true;
  std::unique_ptr<RingBlocks> ring_blocks_;  // context parallel: the GPU blocks, the ring
  std::unique_ptr<RingAttention> ring_;
  // MoE (moe_mlp.hpp): its arrays' allocator (stream-ordered; declared before what allocates
  // from it), the MoE blocks (the MLP, saved state, statistics), the expert pointers handed to
  // the block per call.
  std::unique_ptr<DeviceAllocator> moe_alloc_;
  std::unique_ptr<MoeBlocks<CudaDevice>> moe_;
  int slot_ = 0;  // the slot of the current forward / backward
  mutable std::vector<const bf16*> moe_w13_, moe_w2_;
  mutable std::vector<float*> moe_g13_, moe_g2_;
  // The layers, shared with the CPU model: the blocks, the embedding, the head and loss.
  std::unique_ptr<TransformerBlock<CudaDevice>> block_;
  std::unique_ptr<Fp8Recipe> fp8_;  // train.precision = "fp8": the blocks' linear layers' casts
  std::unique_ptr<VocabParallelEmbedding<CudaDevice>> emb_;
  std::unique_ptr<LmHead<CudaDevice>> head_;
};

}  // namespace mpitron
