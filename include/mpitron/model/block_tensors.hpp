// One transformer block's tensors as the shared block code (transformer_block.hpp) sees them,
// typed by the device's element type: A = the activations' (float on the CPU, bf16 on the GPU),
// W = what the kernels read of the weights (the same), gradients always fp32. Each model lays
// them out its own way (transformer_model.cpp, gpu_activations.cpp) and hands the block these
// views.
#pragma once

namespace mpitron {

// A block's weights (W = const float / const bf16) or gradients (W = float). nullptr where the
// architecture has no such tensor (LLaMA's biases). qkv_w is the fused [q | k | v] projection
// (qkv_b its fused bias: GPT-2's, or Qwen2's q_proj.bias with k_proj.bias, v_proj.bias behind it)
// (LLaMA's q_proj with k_proj, v_proj right behind it), fc_w GPT-2's c_fc or LLaMA's
// [gate | up], proj_w the attention output projection, fcp_w the MLP's.
// A MoE block's MLP tensors (moe_mlp.hpp; router nullptr: a dense block). w13[e] is expert e's
// [w1 | w3] (2 Fe x C, one GEMM), w2[e] its [C, Fe]; sh_fc the shared experts' local
// [gate | up], sh_fcp their down projection (nullptr without shared experts).
template <class W>
struct MoeTensors {
  W* router = nullptr;
  W* const* w13 = nullptr;
  W* const* w2 = nullptr;
  W *sh_fc = nullptr, *sh_fcp = nullptr;
};

template <class W>
struct BlockTensors {
  W *ln1_w = nullptr, *ln1_b = nullptr, *qkv_w = nullptr, *qkv_b = nullptr, *proj_w = nullptr, *proj_b = nullptr,
    *ln2_w = nullptr, *ln2_b = nullptr, *fc_w = nullptr, *fc_b = nullptr, *fcp_w = nullptr, *fcp_b = nullptr;
  MoeTensors<W> moe;
  W *q_norm = nullptr, *k_norm = nullptr;  // Qwen3's per-head q and k RMSNorm weights [hd] (nullptr: none)
};

template <class A>
struct MoeActs;  // moe_mlp.hpp

// What backward needs of one block's forward. att: the attention's saved state, fp32: the
// probabilities [B, H, T, T] (CPU Ops) or the log-sum-exp statistics [B, H, T] (the GPU's fused
// attention, and the context-parallel ring on either device). fch: the MLP's GEMM output (GELU's
// input, or [gate | up]); fch_gelu: its activation. res3: the block's output, written by the next
// block (fused with its first norm) or the head, or at once with recompute.
template <class A>
struct BlockActs {
  A *ln1 = nullptr, *qkv = nullptr, *atty = nullptr, *res2 = nullptr, *ln2 = nullptr, *fch = nullptr,
    *fch_gelu = nullptr, *res3 = nullptr;
  float *ln1_mean = nullptr, *ln1_rstd = nullptr, *att = nullptr, *ln2_mean = nullptr, *ln2_rstd = nullptr;
  A* qk_in = nullptr;         // q/k norm (Qwen3): its input [BT h_local | BT kv_local rows, hd]
  float* qk_rstd = nullptr;   // and their rstd
  MoeActs<A>* moe = nullptr;  // a MoE block's routing and expert activations
};

// Scratch every block shares (Rl = this rank's rows, BT all rows of the micro-batch):
//   proj_out  [Rl, C]    a projection's output before its residual add (the MLP's stays there
//                        for the next block's first norm: the block's output is added lazily)
//   dres      [Rl, C]    the residual stream's gradient, in and out of backward
//   dC        [BT, C]    an input gradient of the block's linears
//   dqkv      [BT, (H + 2 KV) hd / tp]    d4C [BT, fc width]    dmlp [BT, F/tp] (SwiGLU only)
//   gath, full, dres_full [BT, C]: sequence parallel's gathered input, full-row partial sums and
//                        gathered dres (full and dres_full are never live at once: one buffer may
//                        serve both)
template <class A>
struct BlockScratch {
  A *proj_out = nullptr, *dres = nullptr, *dC = nullptr, *dqkv = nullptr, *d4C = nullptr, *dmlp = nullptr;
  A *gath = nullptr, *full = nullptr, *dres_full = nullptr;
  A* qk_tmp = nullptr;  // q/k norm (Qwen3): 2 BT (h_local + kv_local) hd
};

}  // namespace mpitron
