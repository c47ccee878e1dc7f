// The rules of a layout (parallel/layout_rules.hpp), in the order a run meets them.
#include "mpitron/parallel/layout_rules.hpp"

#include <algorithm>
#include <numeric>

#include "mpitron/core/error.hpp"
#include "mpitron/model/arch.hpp"
#include "mpitron/parallel/schedule.hpp"

namespace mpitron {
namespace {

// How the grid splits the model's heads, MLP and sequence (tp, sp, cp).
void check_model_split(const ModelConfig& m, const LayoutRequest& l) {
  const GridShape& g = l.grid;
  const int kv = kv_heads(m);
  usage_check(!l.parallel.sp || g.tp > 1, "parallel.sp needs parallel.tp > 1 (got tp {})", g.tp);
  usage_check(m.n_head % g.tp == 0, "model.n_head ({}) must be divisible by parallel.tp ({}): attention heads are "
              "split over the TP ranks", m.n_head, g.tp);
  usage_check(kv % g.tp == 0 && m.d_ff % g.tp == 0,
              "tensor parallel {} must divide the query heads ({}), the key/value heads ({}) and the MLP width ({}) "
              "of {}: whole heads are split over TP ranks",
              g.tp, m.n_head, kv, m.d_ff, m.name);
  usage_check(m.seq_len % (2 * g.cp) == 0,
              "parallel.cp = {}: model.seq_len ({}) must be divisible by 2 x cp = {} (each cp rank holds two chunks of "
              "every sequence, for causal load balance)",
              g.cp, m.seq_len, 2 * g.cp);
  usage_check(!l.parallel.sp || (m.seq_len / g.cp) % g.tp == 0,
              "parallel.sp: model.seq_len / parallel.cp ({}) must be divisible by parallel.tp ({})", m.seq_len / g.cp,
              g.tp);
}

// How expert parallel splits a mixture-of-experts model (ep | dp x cp is the grid's rule).
void check_experts(const ModelConfig& m, const LayoutRequest& l) {
  const GridShape& g = l.grid;
  usage_check(g.ep == 1 || m.moe.enabled(),
              "parallel.ep = {} splits a mixture-of-experts model's experts, but model '{}' is dense (set "
              "model.moe.n_experts, or leave parallel.ep at 1)",
              g.ep, m.name);
  usage_check(!m.moe.enabled() || m.moe.n_experts % g.ep == 0,
              "model.moe.n_experts = {} must be divisible by parallel.ep = {} (each ep rank runs n_experts / ep experts)",
              m.moe.n_experts, g.ep);
  usage_check(!l.gpu || g.ep == 1 || l.parallel.zero < 3,
              "parallel.ep = {} with parallel.zero = 3 runs on the CPU backend only so far (the GPU model's ZeRO-3 "
              "units do not hold the experts, laid out after the other parameters): use zero <= 2",
              g.ep);
}

// train.precision = "fp8" on the GPU: cuBLASLt's FP8 GEMMs take every dimension a multiple of 16,
// the rows of a micro-batch and each linear's width on a tensor-parallel rank (the four linears:
// qkv C -> (H + 2 KV) hd / tp, the attention output, fc and the MLP's second matrix).
void check_fp8_gemm_shapes(const ModelConfig& m, const LayoutRequest& l) {
  const int tp = l.grid.tp;
  const std::pair<const char*, int64_t> dims[] = {
      {"micro_batch x seq_len / cp (the rows of a micro-batch)", int64_t{l.micro_batch} * (m.seq_len / l.grid.cp)},
      {"model.d_model", m.d_model},
      {"(n_head + 2 kv heads) x head_dim / tp (the q|k|v width)", (m.n_head + 2 * kv_heads(m)) / tp * m.head_dim()},
      {"n_head x head_dim / tp (the attention output's width)", m.attention_width() / tp},
      {"model.d_ff / tp", m.d_ff / tp}};
  for (const auto& [what, v] : dims)
    usage_check(v % 16 == 0,
                "train.precision = \"fp8\" on the GPU: cuBLASLt's FP8 GEMMs need every dimension of the block's "
                "linears a multiple of 16, and {} is {}",
                what, v);
}

// How the global batch splits over dp ranks and micro-batches.
void check_batch(const LayoutRequest& l) {
  const int dp = l.grid.dp, global = layout_global_batch(l);
  usage_check(global % (l.micro_batch * dp) == 0,
              "train.global_batch ({}) must be a multiple of train.micro_batch ({}) x dp ({})", global, l.micro_batch,
              dp);
  const int accum = layout_accumulation(l);
  usage_check(l.parallel.microbatches == 0 || l.parallel.microbatches == accum,
              "parallel.microbatches ({}) disagrees with train.global_batch / (train.micro_batch x dp) = {}",
              l.parallel.microbatches, accum);
}

// How the pipeline splits the blocks into stages (and model chunks), and its schedule.
void check_pipeline(const ModelConfig& m, const LayoutRequest& l) {
  const ParallelSection& p = l.parallel;
  const int pp = l.grid.pp, v = p.virtual_stages, stages = pp * v;
  usage_check(m.n_layer >= stages, "model.n_layer ({}) must be >= parallel.pp ({}){}: every {} needs a block",
              m.n_layer, pp, v > 1 ? fmt::format(" x parallel.virtual_stages ({})", v) : "",
              v > 1 ? "model chunk" : "stage");
  if (!p.pp_layers.empty()) {
    usage_check(static_cast<int>(p.pp_layers.size()) == stages,
                "parallel.pp_layers has {} entries but the pipeline has {} stages", p.pp_layers.size(), stages);
    const int sum = std::accumulate(p.pp_layers.begin(), p.pp_layers.end(), 0);
    usage_check(sum == m.n_layer, "parallel.pp_layers sums to {} but the model has {} layers", sum, m.n_layer);
    for (int n : p.pp_layers)
      usage_check(n >= 1, "parallel.pp_layers: every stage needs at least one layer (got {})", n);
  }
  check_schedule(p.schedule, pp, layout_accumulation(l), v);
}

}  // namespace

LayoutRequest layout_request(const JobConfig& job, const GridShape& grid) {
  LayoutRequest l;
  l.grid = grid;
  l.parallel = job.parallel;
  l.micro_batch = job.train.micro_batch;
  l.global_batch = job.train.global_batch;
  l.gpu = job.train.backend == "nccl";
  l.fp8 = job.train.precision == "fp8";
  return l;
}

int layout_global_batch(const LayoutRequest& l) { return l.global_batch ? l.global_batch : l.micro_batch * l.grid.dp; }

int layout_accumulation(const LayoutRequest& l) {
  return std::max(1, layout_global_batch(l) / (l.micro_batch * l.grid.dp));
}

void check_layout(const ModelConfig& model, const LayoutRequest& layout) {
  const GridShape& g = layout.grid;
  resolve_grid_shape(g, g.tp * g.cp * g.dp * g.pp);  // sizes >= 1, ep | dp x cp
  check_model_split(model, layout);
  check_experts(model, layout);
  check_batch(layout);
  check_pipeline(model, layout);
  if (layout.gpu && layout.fp8) check_fp8_gemm_shapes(model, layout);
}

std::string layout_problem(const ModelConfig& model, const LayoutRequest& layout) {
  try {
    check_layout(model, layout);
    return "";
  } catch (const UsageError& e) {
    return e.what();
  }
}

}  // namespace mpitron
