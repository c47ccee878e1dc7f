// The memory ledger: bytes per rank, per category of the tracked allocator (core/memory.hpp),
// for a model, a parallel layout and a precision. No MPI: `mpitron plan` and the trainer's
// `train.check_ledger` both call it.
//
// Exact by construction for mpitron's models: parameter, gradient and optimizer bytes come
// from gpt_param_table (the table the model allocates its flat buffers from) and the activation
// bytes from what the model allocates under Mem::activations: gpt_activation_bytes for the CPU
// TransformerModel in fp32 (checked there), gpu_activation_bytes (model/gpu_activations.hpp) for
// TransformerModelCuda in bf16. LLaMA the same way: its parameter table and the same activation
// functions (the model is one class).
//
// Worked example (the seed's): 7B parameters in bf16 mixed precision with Adam keep
//   2 B (bf16 weights) + 2 B (bf16 gradients) + 4 B (fp32 master) + 8 B (fp32 Adam m, v)
//   = 16 B per parameter = 112 GB of static state before any activation,
// and its activations at seq 2048, micro-batch 1 (Korthikanti et al. 2022, 16-bit, no TP):
//   s*b*h*(34 + 5*a*s/h) = 2048*4096*(34 + 5*32*2048/4096) B = 0.956 GB per layer, 30.6 GB for 32.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "mpitron/distributed/grid.hpp"
#include "mpitron/model/config.hpp"
#include "mpitron/parallel/layout_rules.hpp"
#include "mpitron/model/param_tables.hpp"

namespace mpitron {

struct JobConfig;

// fp32: what the CPU trainer runs (fp32 weights, gradients, Adam m and v: 4+4+8 B/param).
// bf16: mixed precision on GPUs as the ZeRO paper counts it (bf16 weights and gradients, fp32
//       master + m + v: 2+2+12), what Megatron-style trainers with bf16 gradients allocate.
// bf16_fp32_grads: what mpitron's GPU trainer allocates (TransformerModelCuda: bf16 weight copy
//       2 + fp32 master 4, both under params and never sharded below ZeRO-3, where only the fp32
//       master shard stays; fp32 gradients 4, sharded under ZeRO-2; AdamW m + v 8 over the ZeRO
//       shard: 18 B/param without ZeRO). The trainer's check_ledger uses it for
//       train.backend = "nccl".
enum class Precision : uint8_t { fp32, bf16, bf16_fp32_grads };
Precision parse_precision(const std::string& s);  // UsageError listing fp32, bf16, bf16-fp32grads
const char* precision_name(Precision p);
// Static bytes per parameter without ZeRO: 16 for fp32 and bf16 (the seed's number), 18 for
// bf16_fp32_grads.
int static_bytes_per_param(Precision p);

struct PlanLayout {
  int dp = 1, tp = 1, pp = 1, cp = 1;
  int ep = 1;    // expert parallel (MoE): ep of the dp x cp ranks
  int zero = 0;  // 0..3
  bool sp = false;
  bool recompute = false;  // train.recompute = "full"
  int micro_batch = 1;
  int microbatches = 1;  // per optimizer step and pipeline (gradient accumulation steps)
  std::string schedule = "1f1b";  // gpipe | 1f1b | interleaved
  int virtual_stages = 1;
  std::vector<int> pp_layers;  // empty: balanced
  double bucket_mb = 0;  // 0: automatic (grad_bucket_floats)
  int world() const { return dp * tp * pp * cp; }
};

struct ClusterSpec {
  int gpus = 1;
  int gpus_per_node = 8;
  double gpu_mem_gb = 80;      // GB = 1e9 bytes
  double nvlink_gbs = 900;     // GB/s per GPU inside a node
  double ib_gbps = 400;        // Gbit/s per GPU across nodes
  double peak_tflops = 989;    // dense bf16 per GPU (H100 SXM)
  double mfu = 0.5;            // fraction of peak the kernels reach
  double headroom = 0.1;       // advisor: fraction of GPU memory left free (CUDA context, fragmentation)
};

struct PlanInput {
  ModelConfig model;
  PlanLayout layout;
  ClusterSpec cluster;
  Precision precision = Precision::bf16;
  // fp32 on the CPU with train.precision = bf16 (bf16 GEMMs): the model's weights also have a
  // bf16 copy, rounded once per step (Ops::register_weights): + 2 B/param under params, none
  // under ZeRO-3 (the gathered units are rounded per GEMM).
  bool cpu_bf16_gemms = false;
  // train.precision = "fp8" (docs/fp8.md): the blocks' linear layers cast their operands.
  // step_time.cpp prices the casts (and on a GPU the FP8 GEMMs). The copies: on the CPU
  // workspace (measured), on the GPU activations (GpuFp8Bufs, counted).
  bool fp8_linears = false;
  // train.threads on the CPU: OpenMP threads per rank (0: cores per node / ranks per node, the
  // trainer's rule). step_time.cpp prices the GEMMs, attention and elementwise kernels at them.
  int cpu_threads = 0;
  bool async_checkpoint = false;  // checkpoint.async: RankLedger::ckpt_snapshot
  // The job's train.global_batch (0: none set): what --advise keeps while it searches layouts,
  // whose micro-batch x dp need not split it the way the job's own layout does.
  int job_global_batch = 0;
  int global_batch() const { return layout.micro_batch * layout.microbatches * layout.dp; }
};

// One rank's prediction. Bytes are what the tracked allocator would count under each category.
struct RankLedger {
  int rank = 0;
  GridCoord coord;
  ModelShard shard;
  int64_t local_params = 0;  // parameter elements this rank's model holds (flat layout, with padding)
  int64_t local_expert_params = 0;  // of which routed experts under expert parallel (synchronised over expert_dp)
  int64_t params = 0, grads = 0, optim_master = 0, optim_moments = 0;
  int64_t optim() const { return optim_master + optim_moments; }
  // Activations: the peak of the activations category during a step.
  int64_t activations = 0;
  int64_t act_per_layer = 0;       // one layer, one micro-batch, as kept for backward
  int64_t act_other = 0;           // embedding output, head, logits chunk, backward scratch, tokens
  int act_in_flight = 1;           // micro-batches whose activations the schedule keeps at once
  double korthikanti_per_layer = 0;  // published estimate, bytes, same layer and micro-batch
  int64_t comm = 0, workspace = 0;
  // checkpoint.async: the host snapshot (the parameters and AdamW moments this rank writes, fp32),
  // under Mem::checkpoint in the host tracker. Host memory: not in total() (a GPU's memory).
  int64_t ckpt_snapshot = 0;
  bool comm_predicted = true, workspace_predicted = true;
  int64_t total() const { return params + grads + optim() + activations + comm + workspace; }
  int n_layers = 0;    // transformer layers on this rank (all its chunks)
  std::string layers;  // "E 0-19", "10-19,50-59 H" (interleaved chunks); E/H: embedding/head here
  std::string source;  // which functions / formulas produced the numbers
};

struct Ledger {
  PlanInput in;
  int64_t total_params = 0;  // logical parameters of the model (no padding, no duplicates)
  std::vector<RankLedger> stages;  // one representative rank per pipeline stage (tp 0, dp 0)
  int heaviest = 0;                // index into stages
};

// The layout as the layout rules see it (parallel/layout_rules.hpp); gpu unless the precision is
// the CPU trainer's fp32.
LayoutRequest plan_layout_request(const PlanInput& in);
// UsageError with train's own message for a layout `train` would refuse (check_layout), or for a
// world that is not the GPUs given.
void validate_plan(const PlanInput& in);
// The ledger of one world rank.
RankLedger rank_ledger(const PlanInput& in, int rank);
// The whole table: validates, then one rank per stage (the heaviest dp rank under ZeRO).
Ledger compute_ledger(const PlanInput& in);

// Korthikanti et al. 2022 (Reducing Activation Recomputation in Large Transformer Models), bytes
// per layer in 16-bit: s*b*h*(34 + 5*a*s/h) without TP; s*b*h*(10 + 24/t + 5*a*s/(h*t)) with TP
// t; s*b*h*(34 + 5*a*s/h)/t with TP + SP; 2*s*b*h (/t with SP) with full recompute.
double korthikanti_layer_bytes(int64_t s, int64_t b, int64_t h, int64_t a, int tp, bool sp, bool recompute);

// Micro-batches whose activations model chunk `chunk` of stage `stage` keeps at once: the
// schedule's max_in_flight (parallel/schedule.hpp), as the trainer allocates them. gpipe: m;
// 1f1b: min(pp - stage, m), so stage 0 keeps pp; plain accumulation (pp 1, 1f1b): 1.
int act_slots_in_flight(const PlanLayout& l, int stage, int chunk = 0);

// The layout and precision of a job (what `train` would run): mpitron's CPU trainer is fp32.
PlanInput plan_input_from_job(const JobConfig& job, const ModelConfig& model, int world);

// "12.3 GB" (1e9) style for the planner's tables.
std::string fmt_gb(double bytes);
// exact_bytes: every cell in bytes (what train.check_ledger compares) instead of GB/MB.
std::string format_ledger(const Ledger& l, bool exact_bytes = false);

}  // namespace mpitron
