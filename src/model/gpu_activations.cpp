// The GPU model's activation layout (model/gpu_activations.hpp), CUDA-free: TransformerModelCuda
// allocates with it, the planner sizes with it.
#include "mpitron/model/gpu_activations.hpp"

#include <algorithm>

#include "mpitron/model/arch.hpp"
#include "mpitron/model/fp8_recipe.hpp"
#include "mpitron/ops/attention_segments.hpp"

namespace mpitron {

namespace {

constexpr size_t kAlign = 256;  // every activation tensor starts on a 256-byte boundary
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

}  // namespace

GpuActLayout gpu_act_layout(const ModelConfig& cfg, const ModelShard& shard, int B, int slots, bool recompute,
                            int64_t chunk_rows, bool fp8) {
  GpuActLayout lay;
  lay.cp = shard.cp_size;
  lay.tp = shard.tp_size, lay.sp = shard.sequence_parallel && shard.tp_size > 1, lay.B = B;
  lay.n_layers = local_layers(cfg, shard), lay.head = shard.has_head;
  lay.recompute = recompute, lay.chunk_rows = chunk_rows, lay.slots = std::max(1, slots);
  lay.stage_io = !(shard.has_embedding && shard.has_head);
  lay.fp8 = fp8;
  return lay;
}

int64_t gpu_logits_chunk_rows(const ModelConfig& cfg, int max_micro_batch, int64_t option, int cp) {
  const int64_t bt = int64_t{max_micro_batch} * (cfg.seq_len / std::max(1, cp));
  if (option > 0) return std::min(option, bt);
  constexpr int64_t kBudget = int64_t{1} << 29;  // bf16 elements: 1 GiB
  return logits_chunk_rows(bt, cfg.padded_vocab(), kBudget);
}

size_t plan_gpu_activations(const ModelConfig& cfg, const GpuActLayout& lay, char* base, std::vector<GpuActs>& slots) {
  size_t used = 0;
  auto take = [&](size_t bytes) -> void* {
    void* p = base ? base + used : nullptr;
    used += align_up(bytes);
    return p;
  };
  auto bf = [&](int64_t n) { return static_cast<bf16*>(take(static_cast<size_t>(n) * sizeof(bf16))); };
  auto f32 = [&](int64_t n) { return static_cast<float*>(take(static_cast<size_t>(n) * sizeof(float))); };
  auto i32 = [&](int64_t n) { return static_cast<int32_t*>(take(static_cast<size_t>(n) * sizeof(int32_t))); };
  // Tensor parallel: this rank's heads (C/tp of qkv and the attention output), MLP columns (F/tp)
  // and vocabulary rows (Vp/tp); the residual stream and LayerNorms stay whole (SP: this rank's R
  // rows of it).
  // By the block's parts (arch.hpp): RMSNorm keeps no mean (0 bytes), q|k|v is (H + 2 KV) hd / tp
  // wide, a SwiGLU fc holds [gate | up] (2F/tp) and fch_gelu its output (F/tp); dmlp is the
  // gradient at that output.
  const int tp = lay.tp;
  const BlockSpec& spec = block_spec(cfg);
  // Context parallel: this rank's seq_len / cp positions of every sequence.
  const int64_t Tl = cfg.seq_len / lay.cp;
  const int64_t BT = int64_t{lay.B} * Tl, C = cfg.d_model, Cl = cfg.attention_width() / tp, F = cfg.d_ff / tp,
                Vp = cfg.padded_vocab(tp) / tp, R = lay.sp ? BT / tp : BT;
  const int64_t Q = (cfg.n_head + 2 * kv_heads(cfg)) / tp * cfg.head_dim();
  const int64_t Fc = spec.fc_factor() * F, Rm = spec.norm_has_mean() ? R : 0;
  const int64_t stats = int64_t{lay.B} * (cfg.n_head / tp) * Tl;
  const int64_t qk_heads = cfg.qk_norm ? (cfg.n_head + kv_heads(cfg)) / tp : 0;  // Qwen3's q/k norm
  slots.assign(static_cast<size_t>(lay.slots), GpuActs{});
  // Per micro-batch in flight (pipeline parallel keeps several): what its backward reads.
  for (GpuActs& a : slots) {
    a.encoded = bf(R * C);  // the embedding output, or the stage input from the previous stage
    // Recompute: one block's activations, shared by every block and refilled in backward, plus
    // each block's output (block_in[l + 1], the next block's input); block_in[0] = encoded.
    a.block_in.assign(1, a.encoded);
    if (lay.recompute)
      for (int l = 0; l < lay.n_layers; ++l) a.block_in.push_back(bf(R * C));
    a.layers.resize(lay.recompute ? std::min(1, lay.n_layers) : static_cast<size_t>(lay.n_layers));
    for (GpuLayerActs& l : a.layers) {
      l.ln1 = bf(R * C), l.ln1_mean = f32(Rm), l.ln1_rstd = f32(R);
      l.qkv = bf(BT * Q), l.atty = bf(BT * Cl), l.att = f32(stats);
      l.res2 = bf(R * C), l.ln2 = bf(R * C), l.ln2_mean = f32(Rm), l.ln2_rstd = f32(R);
      l.fch = bf(BT * Fc), l.fch_gelu = bf(BT * F), l.res3 = bf(R * C);
      if (qk_heads > 0) l.qk_in = bf(BT * qk_heads * cfg.head_dim()), l.qk_rstd = f32(BT * qk_heads);
    }
    if (lay.head) {
      a.lnf = bf(R * C), a.lnf_mean = f32(Rm), a.lnf_rstd = f32(R), a.losses = f32(BT), a.lse = f32(BT);
      a.dlnf = bf(R * C), a.dwte_head = f32(Vp * C);
    }
    a.tokens = i32(BT), a.targets = i32(BT), a.doc_pos = i32(BT), a.doc_start = i32(BT);
    a.segments = i32(kSegmentTableRows * BT * lay.cp);  // cp: one table per source rank
  }
  // Shared by the micro-batches: scratch of one forward or backward at a time.
  GpuActs& s = slots.front();
  if (lay.head) s.logits = bf(lay.chunk_rows * Vp);
  // proj_out and dC hold [BT, ...] column-parallel gradients too (dC: [BT, C/tp] of c_proj).
  s.proj_out = bf(BT * C), s.dres = bf(R * C), s.dC = bf(BT * std::max(C, Cl)), s.d4C = bf(BT * std::max(Fc, Q));
  if (spec.mlp == MlpKind::swiglu) s.dmlp = bf(BT * F);
  if (qk_heads > 0) s.qk_tmp = bf(2 * BT * qk_heads * cfg.head_dim());
  if (tp > 1 && lay.head) s.ce = f32(4 * lay.chunk_rows);  // vocab-parallel CE: max, global max, sum exp, target logit
  if (lay.sp) {  // all-gathered LayerNorm outputs, partial sums before a reduce-scatter, the gathered dres
    s.gath = bf(BT * C), s.full = bf(BT * C), s.dres_full = bf(BT * C), s.ln_grad = f32(2 * C);
  }
  if (lay.stage_io) s.stage_f32 = f32(R * C);  // pipeline: a stage tensor in fp32 on its way to or from the host
  if (lay.cp > 1) {  // the ring's blocks in flight and accumulators (model/context_parallel/cuda/ring_blocks_cuda.hpp)
    GpuRingBufs& r = s.ring;
    r.positions = i32(cfg.seq_len);
    if (lay.n_layers > 0) {
      const int64_t blk = BT * 2 * (kv_heads(cfg) / tp) * cfg.head_dim();
      r.kv[0] = bf(blk), r.kv[1] = bf(blk), r.dkv[0] = f32(blk), r.dkv[1] = f32(blk);
      r.acc = f32(BT * Cl), r.m = f32(stats), r.l = f32(stats), r.dsum = f32(stats);
      r.step = bf(BT * Q), r.dkv_step = bf(blk);  // cuDNN's blocks: a block's output or dq | its dk|dv
    }
  }
  if (lay.fp8 && lay.n_layers > 0) {  // the four linears (K x N): qkv C x Q, proj Cl x C, fc C x Fc, fcp F x C
    const int64_t K = std::max({C, Cl, F}), N = std::max({Q, C, Fc}), W = std::max({C * Q, Cl * C, C * Fc, F * C});
    GpuFp8Bufs& f = s.fp8;
    f.act = static_cast<uint8_t*>(take(static_cast<size_t>(BT * K)));
    f.weight = static_cast<uint8_t*>(take(static_cast<size_t>(W)));
    f.grad = static_cast<uint8_t*>(take(static_cast<size_t>(BT * N)));
    f.grad_t = static_cast<uint8_t*>(take(static_cast<size_t>(BT * N)));
    f.scalars = f32(2 * kFp8Operands);
    f.stats = static_cast<Fp8DeviceStats*>(take(kFp8Operands * sizeof(Fp8DeviceStats)));
  }
  for (GpuActs& a : slots) {
    a.ring = s.ring, a.fp8 = s.fp8;
    a.logits = s.logits, a.proj_out = s.proj_out, a.dres = s.dres, a.dC = s.dC, a.d4C = s.d4C, a.ce = s.ce;
    a.dmlp = s.dmlp, a.qk_tmp = s.qk_tmp;
    a.gath = s.gath, a.full = s.full, a.dres_full = s.dres_full, a.ln_grad = s.ln_grad, a.stage_f32 = s.stage_f32;
  }
  return used;
}

int64_t gpu_activation_bytes(const ModelConfig& cfg, const GpuActLayout& lay) {
  std::vector<GpuActs> slots;
  return static_cast<int64_t>(plan_gpu_activations(cfg, lay, nullptr, slots));
}

}  // namespace mpitron
