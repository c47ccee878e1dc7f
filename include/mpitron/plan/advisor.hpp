// The strategy advisor (`mpitron plan --advise`) and the strategy comparison (`plan --explain`).
//
// Decision tree (the seed's): fits on one device -> DDP; model state does not fit -> ZeRO/FSDP;
// one layer too big -> TP inside a node (tp <= GPUs per node); too many layers -> PP across
// nodes; both -> 3D. Then a search over every layout (dp, tp, pp, zero, sp, recompute,
// micro-batch) whose heaviest rank fits, ranked by the step time of this model:
//
//   compute  = 6*N*tokens + 12*L*s*h*tokens FLOPs (x 4/3 with full recompute), over
//              gpus * peak * mfu, stretched by the pipeline bubble (pp-1)/(m + pp-1) (/v interleaved)
//   TP       = 4 all-reduces per layer and micro-batch (2 forward, 2 backward; +2 with recompute) of
//              b*s*h*e bytes, ring factor 2(t-1)/t, on NVLink when the TP group is inside a node
//   DP/ZeRO  = gradient all-reduce of the rank's parameters, 2(d-1)/d * N_rank * e (ZeRO-1/2:
//              reduce-scatter + all-gather, the same bytes; ZeRO-3: x1.5, parameters gathered
//              again for backward), on NVLink when the DP group is inside a node else InfiniBand
//   PP       = one activation and one gradient of b*s*h*e per micro-batch per stage boundary,
//              InfiniBand when stages sit on different nodes
//   EP       = MoE models: per MoE layer and micro-batch 4 all-to-alls (dispatch and combine,
//              forward and backward; +2 with recompute) of the rank's b*s/cp*top_k routed copies
//              of h*e bytes, (ep-1)/ep of them leaving the rank; ep is searched over the divisors
//              of dp x cp that divide the experts
// DP/ZeRO traffic overlaps the backward pass (2/3 of compute; only the excess counts); TP, PP and
// EP traffic is on the critical path. MoE compute counts the active parameters (top_k experts). Ties go to the simpler layout, then to less memory.
#pragma once
#include <string>
#include <vector>

#include "mpitron/plan/ledger.hpp"
#include "mpitron/plan/step_time.hpp"

namespace mpitron {

struct StepEstimate {
  double compute_s = 0, tp_s = 0, cp_s = 0, dp_s = 0, pp_s = 0, ep_s = 0, bubble = 0;
  double total_s() const { return compute_s + tp_s + cp_s + dp_s + pp_s + ep_s; }
  double tp_bytes = 0, cp_bytes = 0, dp_bytes = 0, pp_bytes = 0, ep_bytes = 0;  // per rank per step
};
StepEstimate estimate_step(const PlanInput& in, const Ledger& led);

struct Candidate {
  PlanInput in;
  Ledger ledger;
  StepEstimate est;
  StepPrediction pred;  // with a machine profile
  bool predicted = false;
  int64_t peak_bytes = 0;
  double step_s() const { return predicted ? pred.step_s : est.total_s(); }
};

struct Advice {
  std::vector<std::string> tree;     // the decision tree, one line per question
  std::vector<Candidate> ranked;     // layouts that fit, fastest first
  int considered = 0;
};

// Searches every layout of `in.cluster.gpus` GPUs for in.model at in.layout's global batch
// (micro_batch x microbatches x dp) and precision. UsageError when nothing fits. With a machine
// profile the layouts are ranked by the step-time model (plan/step_time.hpp) instead of the
// fixed one above, and every pipeline schedule (gpipe, 1f1b, interleaved v = 2) is tried.
Advice advise(const PlanInput& in, const MachineProfile* profile = nullptr);
std::string format_advice(const Advice& a, int top = 5);

// The chosen layout as a TOML job file (model preset, [parallel], [train]). With a profile (the
// --profile given to plan): train.profile and train.check_prediction = true, so the run prints
// its measured step time beside the prediction.
std::string layout_job_toml(const PlanInput& in, const std::string& profile = "");

// The five strategies side by side for this model and cluster (what is split, the collective,
// the group, bytes per step per rank for this model, where it belongs).
std::string explain_strategies(const PlanInput& in);

}  // namespace mpitron
