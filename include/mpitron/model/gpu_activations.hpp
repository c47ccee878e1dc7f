// The GPU model's activation layout (TransformerModelCuda, model/cuda/transformer_model_cuda.hpp):
// which buffers one micro-batch in flight keeps for backward and which scratch the slots share.
// CUDA-free, so the planner (plan/ledger.cpp) sizes the GPU activations with the function the GPU
// model allocates them with; the buffers are device memory (bf16 tensors, fp32 statistics).
//
// Per block and slot: ln1, qkv, the fused attention's output and its log-sum-exp statistics
// [B, H/tp, T] (no [B, H, T, T] attention matrix: cuDNN's fused attention never forms one, and
// the naive path's scores live in CudaOps' scratch), res2, ln2, fc (GELU input) and its GELU,
// res3, plus the LayerNorms' mean and rstd. LLaMA (cfg.arch): RMSNorm's rstd only, a (H + 2 KV) hd
// wide q|k|v (after RoPE), fc = [gate | up] and the SwiGLU output in fch_gelu; with Qwen3's q/k
// norm its input and rstd (qk_in, qk_rstd).
// Every buffer starts on a 256-byte boundary.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "mpitron/core/dtype.hpp"
#include "mpitron/model/block_tensors.hpp"
#include "mpitron/model/config.hpp"
#include "mpitron/model/param_tables.hpp"
#include "mpitron/ops/fp8_scaling.hpp"

namespace mpitron {

// What backward needs of one block (block_tensors.hpp); att: the attention's log-sum-exp stats.
using GpuLayerActs = BlockActs<bf16>;

// Context parallel (cp > 1): the ring attention's buffers
// (model/context_parallel/cuda/ring_blocks_cuda.hpp), shared by the slots, and every cp rank's
// global positions (for the ring's masks, wpe and RoPE).
struct GpuRingBufs {
  bf16* kv[2] = {nullptr, nullptr};    // k|v blocks in flight [B, Tl, 2 KV/tp hd]
  float* dkv[2] = {nullptr, nullptr};  // dk|dv blocks in flight, the same shape, fp32
  float* acc = nullptr;                // forward's unnormalised output / backward's dq [B*Tl, H/tp hd]
  float *m = nullptr, *l = nullptr, *dsum = nullptr;  // [B, H/tp, Tl] each
  bf16* step = nullptr;      // cuDNN blocks: one block's output [B*Tl, H/tp hd] or dq [B*Tl, qkv row]
  bf16* dkv_step = nullptr;  // and its dk|dv [B, Tl, 2 KV/tp hd]
  int32_t* positions = nullptr;        // [cp, Tl]: rank r's global positions at r * Tl
};

// train.precision = "fp8" (CudaDevice's FP8 linears, model/fp8_recipe.hpp): one GEMM's FP8
// operands at a time, sized for the block's largest linear, shared by the slots. act: the input's
// codes [BT, K] (in the backward its transposed copy [K, BT]); weight: the weight's [N, K] (its
// transposed copy [K, N]); grad and grad_t: the output gradient's [BT, N] and [N, BT]. scalars:
// the amaxes [0, 3) and 1 / scales [3, 6) by Fp8Operand; stats: the casts' statistics [3].
struct GpuFp8Bufs {
  uint8_t *act = nullptr, *weight = nullptr, *grad = nullptr, *grad_t = nullptr;
  float* scalars = nullptr;
  Fp8DeviceStats* stats = nullptr;
};

struct GpuActs {
  bf16* encoded = nullptr;  // embedding output = block 0's input [BT, C]
  std::vector<GpuLayerActs> layers;
  bf16 *lnf = nullptr, *dlnf = nullptr, *logits = nullptr;  // logits: one chunk [chunk_rows, Vp]
  float *lnf_mean = nullptr, *lnf_rstd = nullptr, *losses = nullptr, *lse = nullptr;
  float* dwte_head = nullptr;  // [Vp, C] this micro-batch's wte gradient from the head, unscaled
  bf16* proj_out = nullptr;    // [BT, C] attention / MLP projection output, before its residual add
  bf16 *dres = nullptr, *dC = nullptr, *d4C = nullptr;  // backward scratch: [BT,C] x2, [BT,F] (also dqkv)
  bf16* dmlp = nullptr;  // LLaMA: [BT, F/tp] the gradient at the SwiGLU output (d4C then holds d gate|up)
  bf16* qk_tmp = nullptr;  // Qwen3's q/k norm: scratch 2 [BT, (H + KV)/tp hd]
  int32_t *tokens = nullptr, *targets = nullptr;        // [BT] each
  int32_t *doc_pos = nullptr, *doc_start = nullptr;     // [BT] each: document masking (DocumentRows)
  int32_t* segments = nullptr;  // [cp][kSegmentTableRows, BT]: cuDNN attention segments (documents; cp's blocks)
  float* ce = nullptr;  // tp > 1: vocab-parallel CE scratch [4, chunk_rows]
  std::vector<bf16*> block_in;  // [0] = encoded; with recompute also every block's output
  bf16 *gath = nullptr, *full = nullptr, *dres_full = nullptr;  // SP scratch, [BT, C] each
  float* ln_grad = nullptr;                                     // SP: one LayerNorm's dweight | dbias
  float* stage_f32 = nullptr;  // pipeline: [rows, C] fp32 staging of a stage tensor
  GpuRingBufs ring;            // context parallel (positions whenever cp > 1; the rest with blocks here)
  GpuFp8Bufs fp8;              // train.precision = "fp8"
};

struct GpuActLayout {
  int tp = 1, cp = 1;
  bool sp = false;
  int B = 1, n_layers = 0;
  bool head = true, recompute = false, stage_io = false;
  int64_t chunk_rows = 1;
  int slots = 1;
  bool fp8 = false;  // train.precision = "fp8": GpuFp8Bufs
};

// The layout of one model chunk (shard) with micro-batch B, `slots` micro-batches in flight and
// `chunk_rows` rows per LM-head chunk (gpu_logits_chunk_rows); fp8: train.precision = "fp8".
GpuActLayout gpu_act_layout(const ModelConfig& cfg, const ModelShard& shard, int B, int slots, bool recompute,
                            int64_t chunk_rows, bool fp8 = false);

// Rows of logits per LM-head chunk on the GPU: `option` when > 0 (at most B*T), else
// logits_chunk_rows with a budget of 2^29 bf16 elements (1 GiB; a GPU-sized budget: fewer chunks
// mean fewer passes over the [Vp, C] wte gradient). T = seq_len / cp: a rank's rows.
int64_t gpu_logits_chunk_rows(const ModelConfig& cfg, int max_micro_batch, int64_t option = 0, int cp = 1);

// Lays the activations of every slot out from `base` (nullptr: only sizes them); the scratch
// buffers are shared by the slots. Returns the bytes used: what TransformerModelCuda allocates
// under Mem::activations.
size_t plan_gpu_activations(const ModelConfig& cfg, const GpuActLayout& lay, char* base, std::vector<GpuActs>& slots);

// plan_gpu_activations' bytes for one chunk (nothing laid out): the planner's GPU activations.
int64_t gpu_activation_bytes(const ModelConfig& cfg, const GpuActLayout& lay);

}  // namespace mpitron
