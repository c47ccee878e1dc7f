// The memory ledger (plan/ledger.hpp).
//
// The numbers come from the functions the model allocates with:
//   parameters / gradients: the flat buffer of model_param_table (each tensor rounded up to 16
//   floats), GPT-2 or LLaMA.
//   activations: fp32 (the CPU trainer, either architecture) gpt_activation_bytes (the planned
//   buffer of gpt_activation_floats, the token ids and the last-position logits: what the model's
//   constructor allocates, which it checks); bf16 (the GPU trainer) gpu_activation_bytes
//   (what TransformerModelCuda allocates: plan_gpu_activations, with fused attention's statistics
//   and no [B, H, T, T] matrix); both with the schedule's slots and the recompute option.
#include "mpitron/plan/ledger.hpp"

#include "mpitron/checkpoint/checkpoint.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "mpitron/config/job_config.hpp"
#include "mpitron/core/error.hpp"
#include "mpitron/model/gpu_activations.hpp"
#include "mpitron/model/moe/moe_routing.hpp"
#include "mpitron/model/param_tables.hpp"
#include "mpitron/parallel/grad_buckets.hpp"
#include "mpitron/parallel/partition.hpp"
#include "mpitron/parallel/schedule.hpp"

namespace mpitron {

Precision parse_precision(const std::string& s) {
  if (s == "fp32" || s == "f32") return Precision::fp32;
  if (s == "bf16") return Precision::bf16;
  if (s == "bf16-fp32grads") return Precision::bf16_fp32_grads;
  usage_fail("unknown precision '{}' (allowed: fp32, bf16, bf16-fp32grads)", s);
}

const char* precision_name(Precision p) {
  return p == Precision::fp32 ? "fp32" : p == Precision::bf16 ? "bf16" : "bf16-fp32grads";
}

int static_bytes_per_param(Precision p) {
  // fp32: weights 4 + gradients 4 + Adam m 4 + v 4. bf16: weights 2 + gradients 2 + fp32 master 4 + m 4 + v 4.
  // bf16_fp32_grads: weights 2 + fp32 master 4 + fp32 gradients 4 + m 4 + v 4.
  return p == Precision::fp32 ? 4 + 4 + 8 : p == Precision::bf16 ? 2 + 2 + 12 : 2 + 4 + 4 + 8;
}

std::string fmt_gb(double bytes) {
  if (std::abs(bytes) >= 1e9) return fmt::format("{:.2f} GB", bytes / 1e9);
  if (std::abs(bytes) >= 1e6) return fmt::format("{:.1f} MB", bytes / 1e6);
  if (std::abs(bytes) >= 1e3) return fmt::format("{:.1f} kB", bytes / 1e3);
  return fmt::format("{:.0f} B", bytes);
}

double korthikanti_layer_bytes(int64_t s, int64_t b, int64_t h, int64_t a, int tp, bool sp, bool recompute) {
  const double sbh = static_cast<double>(s) * b * h, t = tp;
  if (recompute) return 2 * sbh / (sp ? t : 1.0);
  const double attn = 5.0 * a * s / h;
  if (tp == 1) return sbh * (34 + attn);
  if (sp) return sbh * (34 + attn) / t;
  return sbh * (10 + 24 / t + attn / t);
}

int act_slots_in_flight(const PlanLayout& l, int stage, int chunk) {
  // The trainer sizes a chunk's activation slots from the same schedule (parallel/pipeline.cpp:
  // schedule.max_in_flight), so the ledger asks it too. The last schedule is kept: the advisor
  // asks for every stage of one layout in a row.
  struct Cache {
    std::string kind;
    int pp = 0, m = 0, v = 0;
    PipelineSchedule s;
  };
  thread_local Cache c;
  if (c.kind != l.schedule || c.pp != l.pp || c.m != l.microbatches || c.v != l.virtual_stages) {
    c.s = make_schedule(l.schedule, l.pp, l.microbatches, l.virtual_stages);
    c.kind = l.schedule, c.pp = l.pp, c.m = l.microbatches, c.v = l.virtual_stages;
  }
  return c.s.max_in_flight(stage, chunk);
}

namespace {

GridShape shape_of(const PlanLayout& l) { return GridShape{l.tp, l.cp, l.dp, l.pp, l.ep}; }


struct Chunk {
  ModelShard shard;
  int slots = 1;
};

// The model chunks a rank holds: one (its stage) or v (interleaved: virtual stage c*pp + r).
std::vector<Chunk> rank_chunks(const PlanInput& in, const GridCoord& co) {
  const PlanLayout& l = in.layout;
  std::vector<Chunk> out;
  const auto shards = model_chunks_for(in.model, shape_of(l), co, l.pp_layers, std::max(1, l.virtual_stages));
  for (size_t c = 0; c < shards.size(); ++c) {
    ModelShard s = shards[c];
    s.sequence_parallel = l.sp && l.tp > 1;  // as the trainer sets it
    out.push_back({s, act_slots_in_flight(l, co.pp, static_cast<int>(c))});
  }
  return out;
}

// This dp rank's ZeRO shard of a flat buffer of n elements: the trainer's own rule
// (parallel/grad_buckets.hpp zero_shard: 16-float aligned, the last shards shorter).
int64_t zero_shard_elems(int64_t n, int dp, int r) {
  return static_cast<int64_t>(zero_shard(static_cast<size_t>(n), dp, r).size());
}

}  // namespace

LayoutRequest plan_layout_request(const PlanInput& in) {
  const PlanLayout& l = in.layout;
  LayoutRequest r;
  r.grid = GridShape{l.tp, l.cp, l.dp, l.pp, l.ep};
  r.parallel.sp = l.sp;
  r.parallel.zero = l.zero;
  r.parallel.schedule = l.schedule;
  r.parallel.virtual_stages = l.virtual_stages;
  r.parallel.pp_layers = l.pp_layers;
  r.micro_batch = l.micro_batch;
  r.global_batch = l.micro_batch * l.dp * l.microbatches;  // the plan's batch splits by construction
  r.gpu = in.precision != Precision::fp32;
  return r;
}

void validate_plan(const PlanInput& in) {
  const PlanLayout& l = in.layout;
  usage_check(l.micro_batch >= 1 && l.microbatches >= 1, "micro-batch ({}) and micro-batches ({}) must be >= 1",
              l.micro_batch, l.microbatches);
  check_layout(in.model, plan_layout_request(in));  // what `train` asks of the same layout
  const int world = l.world();
  usage_check(world <= in.cluster.gpus,
              "layout needs {} GPUs (dp {} x tp {} x pp {} x cp {}) but only {} were given (--gpus)", world, l.dp, l.tp,
              l.pp, l.cp, in.cluster.gpus);
  usage_check(world == in.cluster.gpus, "layout uses {} GPUs (dp {} x tp {} x pp {} x cp {}) but {} were given (--gpus)",
              world, l.dp, l.tp, l.pp, l.cp, in.cluster.gpus);
}

namespace {

// The rank's shard (its first chunk's, with the head if any chunk has it) and its layers' names.
void describe_chunks(RankLedger& r, const std::vector<Chunk>& chunks) {
  r.shard = chunks.front().shard;
  for (const auto& c : chunks) {
    r.layers += fmt::format("{}{}-{}", r.layers.empty() ? "" : ",", c.shard.layer_begin, c.shard.layer_end - 1);
    r.shard.has_head |= c.shard.has_head;
  }
  if (r.shard.has_embedding) r.layers = "E " + r.layers;
  if (r.shard.has_head) r.layers += " H";
}

// Parameters: one flat buffer per chunk; under expert parallel its dense range and this rank's
// routed experts (the end of the buffer) are two sets (data_parallel.hpp ParamSet).
void count_params(RankLedger& r, const PlanInput& in, const std::vector<Chunk>& chunks) {
  int64_t n = 0, n_exp = 0;
  for (const auto& c : chunks) {
    const std::vector<ParamInfo> t = model_param_table(in.model, c.shard);
    const size_t nf = flat_param_floats(t);
    n += static_cast<int64_t>(nf);
    if (in.layout.ep > 1) n_exp += static_cast<int64_t>(param_set_range(t, nf, ParamSet::experts).size());
  }
  r.local_params = n;
  r.local_expert_params = n_exp;
}

// Parameters, gradients and optimizer state of r.local_params elements under ZeRO, and the
// async checkpoint's host snapshot.
void add_model_state(RankLedger& r, const PlanInput& in) {
  const PlanLayout& l = in.layout;
  const bool fp32 = in.precision == Precision::fp32;
  const int e = fp32 ? 4 : 2;
  const int64_t n = r.local_params, n_exp = r.local_expert_params;
  // ZeRO shards over DP x CP (the trainer's gradient group; its rank order: dp major, cp minor),
  // the experts' over expert_dp (the data x context ranks f with the same f % ep; rank f / ep).
  const int f = data_context_rank(r.coord, l.cp);
  const int64_t n_dense = n - n_exp, shard_dense = zero_shard_elems(n_dense, l.dp * l.cp, f),
                shard_exp = n_exp ? zero_shard_elems(n_exp, l.dp * l.cp / l.ep, f / l.ep) : 0;
  const int64_t shard_n = shard_dense + shard_exp;
  const int64_t n_p = l.zero >= 3 ? shard_n : n, n_g = l.zero >= 2 ? shard_n : n, n_o = l.zero >= 1 ? shard_n : n;
  if (in.precision == Precision::bf16_fp32_grads) {
    // TransformerModelCuda + DataParallel: the master sits with the bf16 copy (ZeRO-3: only the
    // fp32 shard between steps; a unit's bf16 copy lives while it is gathered)
    r.params = n_p * (l.zero >= 3 ? 4 : 2 + 4);
    r.grads = n_g * 4;
  } else {
    r.params = n_p * e + (fp32 && in.cpu_bf16_gemms && l.zero < 3 ? 2 * n : 0);
    r.grads = n_g * e;
    r.optim_master = fp32 ? 0 : 4 * n_o;
  }
  r.optim_moments = 8 * n_o;
  if (in.async_checkpoint) {  // the ranges a save writes from this rank (checkpoint_shard_of's owner flags)
    // The dense parameters' copy (without ZeRO-3) and moments' (without ZeRO): rank f's slice of
    // the dp x cp ranks' (CkptRange::saved); the experts': all of it on their first ranks, f < ep.
    const int F = l.dp * l.cp;
    const CkptRange mine = CkptRange{nullptr, 0, static_cast<size_t>(n_dense), true, f, F}.saved();
    const int64_t slice = static_cast<int64_t>(mine.end - mine.begin);
    const int64_t dense = (l.zero >= 3 ? shard_dense : slice) + 2 * (l.zero >= 1 ? shard_dense : slice);
    const bool first = f < l.ep;
    const int64_t exp = (l.zero >= 3 || first ? (l.zero >= 3 ? shard_exp : n_exp) : 0) +
                        2 * (l.zero >= 1 || first ? (l.zero >= 1 ? shard_exp : n_exp) : 0);
    r.ckpt_snapshot = 4 * (dense + exp);
  }
}

// The CPU trainer's activations (fp32): r.activations over the chunks, r.act_per_layer from
// shards of one and two layers.
void add_cpu_activations(RankLedger& r, const PlanInput& in, const std::vector<Chunk>& chunks, const ModelShard& one,
                         const ModelShard& two) {
  const ModelConfig& m = in.model;
  const PlanLayout& l = in.layout;
  const int e = 4, mb = l.micro_batch;
  // What the CPU model's constructor allocates (gpt_activation_bytes, checked there), GPT-2 or LLaMA.
  for (const auto& c : chunks) {
    r.activations += gpt_activation_bytes(m, c.shard, mb, {c.slots, l.recompute});
    // MoE blocks' routing and expert state (moe_activation_bytes: what MoeMlp::reserve holds),
    // per block and slot, or one shared under recompute.
    int moe_blocks = 0;
    for (int b = c.shard.layer_begin; b < c.shard.layer_end; ++b) moe_blocks += m.moe.is_moe_layer(b);
    const int64_t kept = l.recompute ? (moe_blocks > 0) : int64_t{moe_blocks} * c.slots;
    const int64_t Tl = m.seq_len / l.cp;
    if (kept > 0) r.activations += kept * moe_activation_bytes(m, int64_t{mb} * Tl, Tl, l.ep, l.tp);
  }
  if (m.n_layer >= 2)
    r.act_per_layer = (gpt_activation_floats(m, two, mb, {1, l.recompute}) -
                       gpt_activation_floats(m, one, mb, {1, l.recompute})) * e;
  if (m.moe.enabled() && !l.recompute) {  // a MoE block's state, averaged over the blocks
    int moe_blocks = 0;
    for (int b = 0; b < m.n_layer; ++b) moe_blocks += m.moe.is_moe_layer(b);
    const int64_t Tl = m.seq_len / l.cp;
    r.act_per_layer += moe_activation_bytes(m, int64_t{mb} * Tl, Tl, l.ep, l.tp) * moe_blocks / m.n_layer;
  }
  r.source = "model_param_table + gpt_activation_bytes (the model's allocation functions)";
}

// The GPU trainer's activations (bf16), as add_cpu_activations.
void add_gpu_activations(RankLedger& r, const PlanInput& in, const std::vector<Chunk>& chunks, const ModelShard& one,
                         const ModelShard& two) {
  const ModelConfig& m = in.model;
  const PlanLayout& l = in.layout;
  const int mb = l.micro_batch;
  // What TransformerModelCuda allocates (plan_gpu_activations: bf16 tensors, fp32 statistics, the
  // fused attention's log-sum-exp and no [B, H, T, T] matrix), GPT-2 or LLaMA.
  const int64_t rows = gpu_logits_chunk_rows(m, mb, 0, l.cp);
  auto bytes = [&](const ModelShard& sh, int slots) {
    return gpu_activation_bytes(m, gpu_act_layout(m, sh, mb, slots, l.recompute, rows, in.fp8_linears));
  };
  // MoE blocks: their device arrays (moe_gpu_activation_bytes: what MoeMlp::reserve holds on a GPU),
  // per block and slot, or one shared under recompute.
  auto moe_bytes = [&](const ModelShard& sh, int slots) -> int64_t {
    int moe_blocks = 0;
    for (int b = sh.layer_begin; b < sh.layer_end; ++b) moe_blocks += m.moe.is_moe_layer(b);
    const int64_t kept = l.recompute ? (moe_blocks > 0) : int64_t{moe_blocks} * slots;
    return kept * moe_gpu_activation_bytes(m, int64_t{mb} * (m.seq_len / l.cp), m.seq_len / l.cp, l.ep, l.tp);
  };
  for (const auto& c : chunks) r.activations += bytes(c.shard, c.slots) + moe_bytes(c.shard, c.slots);
  if (m.n_layer >= 2) r.act_per_layer = bytes(two, 1) - bytes(one, 1);
  if (m.moe.enabled() && !l.recompute) {  // a MoE block's state, averaged over the blocks
    ModelShard all = one;
    all.layer_end = m.n_layer;
    r.act_per_layer += moe_bytes(all, 1) / m.n_layer;
  }
  r.source = "model_param_table + plan_gpu_activations (the GPU model's allocation functions)";
}

void add_activations(RankLedger& r, const PlanInput& in, const std::vector<Chunk>& chunks) {
  const ModelConfig& m = in.model;
  const PlanLayout& l = in.layout;
  int layers = 0;
  for (const auto& c : chunks) layers += c.shard.layer_end - c.shard.layer_begin;
  r.n_layers = layers;
  int64_t layer_slots = 0;  // sum over chunks of layers x micro-batches in flight
  for (const auto& c : chunks) layer_slots += int64_t{c.shard.layer_end - c.shard.layer_begin} * c.slots;
  r.act_in_flight = chunks.front().slots;
  ModelShard one = r.shard, two = r.shard;  // one and two layers, no embedding or head
  one.layer_begin = two.layer_begin = 0;
  one.layer_end = 1, two.layer_end = 2;
  one.has_embedding = two.has_embedding = one.has_head = two.has_head = false;
  if (in.precision == Precision::fp32) add_cpu_activations(r, in, chunks, one, two);
  else add_gpu_activations(r, in, chunks, one, two);
  r.act_other = r.activations - layer_slots * r.act_per_layer;
  const int64_t B = l.micro_batch, s = m.seq_len / l.cp;
  r.korthikanti_per_layer = korthikanti_layer_bytes(s, B, m.d_model, m.n_head, l.tp, l.sp, l.recompute);
}

// Communication buffers and workspace.
void add_comm_and_workspace(RankLedger& r, const PlanInput& in) {
  const ModelConfig& m = in.model;
  const PlanLayout& l = in.layout;
  if (in.precision == Precision::fp32) {
    // The CPU trainer all-reduces gradients in place (no staging) without pipeline parallelism;
    // pipeline staging buffers and kernel scratch are measured, not predicted.
    r.comm = 0;
    r.comm_predicted = l.pp == 1;
    r.workspace = 0;
    r.workspace_predicted = false;
  } else {
    // GPU plan: two DDP buckets in flight (dp > 1, ZeRO < 3); ZeRO-3 gathers the next unit while
    // the current one runs (2 layers of bf16 weights); pipeline send + receive of one micro-batch
    // in each direction; a fixed allowance for cuBLASLt / cuDNN workspaces.
    const int e = 2, layers = r.n_layers;
    const int64_t n = r.local_params, B = l.micro_batch, s = m.seq_len / l.cp;
    const int64_t bucket = static_cast<int64_t>(grad_bucket_floats(l.bucket_mb, static_cast<size_t>(n)) * 4);  // fp32 gradients
    if (l.dp > 1 && l.zero < 3) r.comm += 2 * bucket;
    if (l.zero >= 3 && layers > 0) r.comm += 2 * (n / std::max(1, layers)) * e;
    if (l.pp > 1) r.comm += 4 * B * s * m.d_model / (l.sp ? l.tp : 1) * e;
    r.workspace = int64_t{512} << 20;
  }
}

}  // namespace

RankLedger rank_ledger(const PlanInput& in, int rank) {
  RankLedger r;
  r.rank = rank;
  r.coord = grid_coord(shape_of(in.layout), rank);
  const auto chunks = rank_chunks(in, r.coord);
  describe_chunks(r, chunks);
  count_params(r, in, chunks);
  add_model_state(r, in);
  add_activations(r, in, chunks);
  add_comm_and_workspace(r, in);
  return r;
}

Ledger compute_ledger(const PlanInput& in) {
  validate_plan(in);
  Ledger led;
  led.in = in;
  {
    // Logical parameters: the whole model on one rank (no tied-head duplicate there).
    ModelShard all;  // the whole model on one rank
    all.layer_end = in.model.n_layer;
    for (const auto& p : model_param_table(in.model, all)) led.total_params += static_cast<int64_t>(p.numel);
  }
  const GridShape shape = shape_of(in.layout);
  for (int st = 0; st < in.layout.pp; ++st) {
    // Under ZeRO dp rank 0's shard is the largest (the last ones are shorter).
    GridCoord c{0, 0, 0, st};
    led.stages.push_back(rank_ledger(in, grid_rank(shape, c)));
  }
  for (size_t i = 1; i < led.stages.size(); ++i)
    if (led.stages[i].total() > led.stages[led.heaviest].total()) led.heaviest = static_cast<int>(i);
  return led;
}

PlanInput plan_input_from_job(const JobConfig& job, const ModelConfig& model, int world) {
  PlanInput in;
  in.model = model;
  in.precision = job.train.backend == "nccl" ? Precision::bf16_fp32_grads : Precision::fp32;
  // auto (and fp8 on a CPU without bf16 GEMMs): the trainer knows.
  in.cpu_bf16_gemms = job.train.backend == "cpu" && (job.train.precision == "bf16" || job.train.precision == "fp8");
  in.fp8_linears = job.train.precision == "fp8";
  in.cpu_threads = job.train.backend == "cpu" ? job.train.threads : 0;
  PlanLayout& l = in.layout;
  l.tp = job.parallel.tp;
  l.pp = job.parallel.pp;
  l.cp = job.parallel.cp;
  l.dp = job.parallel.dp > 0 ? job.parallel.dp : std::max(1, world / std::max(1, l.tp * l.pp * l.cp));
  l.ep = job.parallel.ep;
  l.zero = job.parallel.zero;
  l.sp = job.parallel.sp;
  l.recompute = job.train.recompute == "full";
  l.micro_batch = job.train.micro_batch;
  const int global = job.train.global_batch ? job.train.global_batch : l.micro_batch * l.dp;
  l.microbatches = job.parallel.microbatches ? job.parallel.microbatches : std::max(1, global / (l.micro_batch * l.dp));
  l.schedule = job.parallel.schedule;
  l.virtual_stages = job.parallel.virtual_stages;
  l.pp_layers = job.parallel.pp_layers;
  l.bucket_mb = job.parallel.bucket_mb;
  in.async_checkpoint = job.checkpoint.async;
  in.job_global_batch = job.train.global_batch;
  in.cluster.gpus = world > 0 ? world : l.world();
  return in;
}

std::string format_ledger(const Ledger& led, bool exact_bytes) {
  auto fmt_gb = [exact_bytes](double b) { return exact_bytes ? fmt::format("{:.0f}", b) : mpitron::fmt_gb(b); };
  const PlanInput& in = led.in;
  const ModelConfig& m = in.model;
  const PlanLayout& l = in.layout;
  const bool fp32 = in.precision == Precision::fp32;
  std::string o;
  auto count = [](double n) { return n >= 1e9 ? fmt::format("{:.3f}B", n / 1e9) : fmt::format("{:.3f}M", n / 1e6); };
  const std::string moe =
      m.moe.enabled()
          ? fmt::format(" ({} active per token: top {} of {} experts of d_ff {}{}, every {} block(s))",
                        count(double(led.total_params - moe_inactive_params(m))), m.moe.top_k, m.moe.n_experts,
                        m.moe.d_ff, m.moe.n_shared ? fmt::format(" + {} shared", m.moe.n_shared) : "",
                        m.moe.layer_freq)
          : "";
  o += fmt::format("model {}: {} layers, d_model {}, {} heads ({} kv), d_ff {}, vocab {} (padded {}), {} head, {} parameters{}\n",
                   m.name, m.n_layer, m.d_model, m.n_head, m.n_kv_head, m.d_ff, m.vocab_size, m.padded_vocab(l.tp),
                   m.tied_embeddings ? "tied" : "untied", count(double(led.total_params)), moe);
  o += fmt::format(
      "layout {} GPUs = dp {} x tp {} x pp {} x cp {} | zero {} | sp {} | recompute {} | micro-batch {} x {} "
      "micro-batches ({}) | seq {} | {}\n",
      l.world(), l.dp, l.tp, l.pp, l.cp, l.zero, l.sp ? "on" : "off", l.recompute ? "full" : "none", l.micro_batch,
      l.microbatches, l.pp > 1 ? l.schedule : "accumulation", m.seq_len,
      fp32 && in.cpu_bf16_gemms           ? "fp32 + bf16 GEMM copy of the weights (2+4+4+8 = 18 B/param)"
      : fp32                              ? "fp32 (weights, grads, Adam m+v: 16 B/param)"
      : in.precision == Precision::bf16 ? "bf16 mixed precision (2+2 + fp32 master 4 + m,v 8 = 16 B/param)"
                                        : "bf16 + fp32 master and grads (mpitron's GPU trainer: 2+4 + 4 + m,v 8 = 18 B/param)");
  o += fmt::format("cluster {} GPUs, {} per node, {:.0f} GB each\n\n", in.cluster.gpus, in.cluster.gpus_per_node,
                   in.cluster.gpu_mem_gb);
  o += fmt::format("{:<6} {:<16} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}\n", "stage", "layers",
                   "params", "grads", "master", "adam m,v", "activ.", "comm", "workspace", "total", "headroom");
  const double mem = in.cluster.gpu_mem_gb * 1e9;
  for (size_t i = 0; i < led.stages.size(); ++i) {
    const RankLedger& r = led.stages[i];
    o += fmt::format("{:<6} {:<16} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}{}\n", i, r.layers,
                     fmt_gb(r.params), fmt_gb(r.grads), fmt_gb(r.optim_master), fmt_gb(r.optim_moments),
                     fmt_gb(r.activations), r.comm_predicted ? fmt_gb(r.comm) : "measured",
                     r.workspace_predicted ? fmt_gb(r.workspace) : "measured", fmt_gb(r.total()),
                     fmt_gb(mem - r.total()), static_cast<int>(i) == led.heaviest ? "  <- heaviest" : "");
  }
  const RankLedger& h = led.stages[led.heaviest];
  o += fmt::format("\nheaviest rank: {} (stage {}; every tp/dp rank of the stage holds the same, up to the alignment of a "
                   "ZeRO shard){}\n",
                   h.rank, led.heaviest, mem - h.total() < 0 ? " -- DOES NOT FIT" : "");
  o += fmt::format(
      "activations of stage {}: {} per layer per micro-batch (mpitron) vs {} (Korthikanti et al. 2022, 16-bit{}{}); "
      "{} layers x {} micro-batch(es) in flight ({}) + {} embedding/head/logits/backward scratch\n",
      led.heaviest, fmt_gb(h.act_per_layer), fmt_gb(h.korthikanti_per_layer), l.sp ? ", /tp with sp" : "",
      l.recompute ? ", full recompute 2sbh" : "", h.n_layers, h.act_in_flight,
      l.pp > 1 ? l.schedule + " keeps up to pp - stage on a stage" : "one at a time", fmt_gb(h.act_other));
  if (in.async_checkpoint) {
    int64_t most = 0;
    for (const auto& r : led.stages) most = std::max(most, r.ckpt_snapshot);
    o += fmt::format("checkpoint.async: a host snapshot of up to {} per rank (the parameters and AdamW moments it "
                     "writes, fp32; host memory, not in the totals above)\n",
                     fmt_gb(static_cast<double>(most)));
  }
  o += fmt::format("source: {}\n", h.source);
  return o;
}

}  // namespace mpitron
