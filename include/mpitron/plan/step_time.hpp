// Step time of a layout on a machine profile (plan/profile.hpp): the critical path of one
// optimizer step, built from the model's own operations.
//
// Per micro-batch, per pipeline rank and model chunk (the layers pipeline_stage_layers gives it):
//   GEMMs      each linear layer's (M, N, K) with M = micro-batch x seq / cp tokens and its TP
//              shard (qkv (H+2KV)hd/tp x d, proj d x Hhd/tp, fc (1|2)F/tp x d, fcp d x F/tp, the head
//              V/tp x d), forward and backward at the profile's rate for that shape and precision;
//   attention  4 T^2 hd FLOPs per head and sequence forward (/cp per rank), the rate at T = seq/cp;
//   elementwise the bytes norms, activations, residual adds, RoPE, embedding and loss read and
//              write, at the profile's elementwise rate (backward: twice the forward's bytes);
//   recompute  the layers' forward again inside backward;
//   TP         2 all-reduces per layer forward and 2 backward of M x d activations (SP: the same
//              bytes as all-gather + reduce-scatter pairs), +2 forward with recompute; the head's
//              vocab-parallel loss all-reduces; all on the critical path;
//   MoE        a MoE block's MLP in place of the dense one: the router GEMM, each local expert's
//              GEMM pair over its rows (the rank's M x top_k copies spread evenly over its E/ep
//              experts: balanced, dropless), the shared experts split over TP; its elementwise
//              bytes (softmax, gathering and combining the copies, SwiGLU); under SP its rows
//              all-gathered; with shared experts their all-reduce;
//   EP         per MoE block and micro-batch: the counts' all-gather and two all-to-alls of the
//              copies' rows (dispatch, combine) forward, two backward, the forward's again with
//              recompute; not overlapped (the trainer runs them between the GEMMs);
//   CP         the ring's k|v hops (forward cp-1, backward cp-1 plus cp dk|dv hops), overlapped
//              with the attention compute: only the excess counts.
// Every rank of a node computes at once: rates are scaled by the profile's per-rank factor for
// k = min(world, GPUs per node) ranks, or for as many as the node has cores when k is larger
// (more ranks than cores, a CPU node oversubscribed): then the step is also bounded by the
// node's throughput, the ranks' mean busy time over the profile's rate ratio at k (a rank that
// waits in a bubble or a collective leaves its core to the others).
// The pipeline: the schedule's own tables (gpipe, 1f1b, interleaved) replayed with these
// durations and the p2p time of an activation (simulate()); its makespan includes the bubble.
// Without pipeline: micro-batches back to back.
// DP / ZeRO, as DataParallel schedules it: gradient buckets (grad_bucket_floats) all-reduced
// (ZeRO 0) or reduce-scattered (1: during the last micro-batch's backward; 2, 3: during every
// micro-batch's backward), overlapped with that backward (only the excess, and at least the last
// bucket, is exposed; the overlapped part slows compute by the profile's overlap factor); ZeRO
// 1-3 all-gather the updated parameters after the step (exposed); ZeRO-3 also gathers each unit
// ahead of its forward and backward (overlapped with the previous unit's compute).
// Then the optimizer (AdamW over the rank's shard: 8 passes of 4 bytes per element at the
// elementwise rate) and the step's two scalar all-reduces (loss, gradient norm).
#pragma once
#include <string>
#include <vector>

#include "mpitron/plan/ledger.hpp"
#include "mpitron/plan/profile.hpp"

namespace mpitron {

// train.precision = "fp8" on a GPU: one of the block's linears, forward + backward of one
// micro-batch, in bf16 and in FP8 (the FP8 GEMMs and the operands' casts).
struct Fp8LinearCost {
  std::string name;
  double rows = 0, n = 0, k = 0;  // y [rows, n] = x [rows, k] w^T
  double bf16_s = 0, fp8_s = 0;
};

struct StepPrediction {
  double step_s = 0;
  // The parts on the critical path (their sum is step_s) ...
  double compute_s = 0;     // forward + backward (+ recompute) of the busiest pipeline rank, all micro-batches
  double tp_s = 0, cp_s = 0;  // exposed TP / CP communication inside those
  double ep_s = 0;          // MoE all-to-all (dispatch, combine) and counts inside those
  double bubble_s = 0;      // pipeline idle time on the busiest rank (and p2p waits)
  double shared_cores_s = 0;  // more ranks than cores: the node's throughput beyond the critical path
  double dp_s = 0;          // exposed DP / ZeRO communication (and compute slowed by what overlaps)
  double optimizer_s = 0, overhead_s = 0;
  // ... and what is behind them.
  double dp_total_s = 0;    // all DP / ZeRO communication time, hidden or not
  double ep_bytes = 0;      // MoE all-to-all bytes a rank sends to others per step (the busiest pipeline rank)
  double flops = 0;         // model FLOPs per step (6N + 12LTd per token, the trainer's MFU count)
  double tokens_per_s = 0;
  double gflops_per_rank = 0;
  double peak_gflops = 0;   // the profile's: datasheet peak, or the best GEMM measured
  int ranks_per_node = 1;
  int threads = 0;          // OpenMP threads per rank priced (the CPU; 0: a GPU profile's one rate)
  bool gemm_bf16 = false;
  std::vector<Fp8LinearCost> fp8_linears;  // train.precision = "fp8" on a GPU (else empty)
  std::string dominant() const;  // the largest part's name
};

StepPrediction predict_step(const PlanInput& in, const MachineProfile& prof);

// The breakdown as a few lines, for `plan --predict`.
std::string format_prediction(const PlanInput& in, const MachineProfile& prof, const StepPrediction& p);

// FLOPs of one optimizer step of the whole job (every rank together): gpt_flops_per_token x
// tokens, x 4/3 on the layers with full recompute not counted (MFU's convention).
double step_model_flops(const PlanInput& in);

}  // namespace mpitron
