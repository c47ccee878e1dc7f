#include "mpitron/train/train_step.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "mpitron/core/error.hpp"
#include "mpitron/core/trace.hpp"
#include "mpitron/distributed/step_activity.hpp"
#include "mpitron/distributed/fault_inject.hpp"

namespace mpitron {

StepOutcome train_step(TrainBackend& backend, ProcessGrid& grid, const std::vector<Batch>& batches, double n_tokens,
                       double lr, double grad_clip, bool reproducible) {
  const GridShape& gs = grid.shape();
  StageModel& model = backend.stage();
  StepOutcome out;
  out.trained_tokens = n_tokens;
  set_activity_phase("forward/backward");
  fault_point("forward");
  model.begin_step(static_cast<int>(batches.size()));
  // Backward launches each gradient bucket's reduction as its last unit finishes.
  // A global batch whose targets are all loss-masked trains on nothing: loss 0, zero gradients.
  const double norm = std::max(n_tokens, 1.0);
  out.schedule = backend.pipeline().run(batches, static_cast<float>(1.0 / norm));
  set_activity_phase("grad sync");
  fault_point("grad_sync");
  {
    trace::Span sp("finish backward (gradients reduced)");
    model.finish_backward();
  }
  set_activity_phase("loss and grad norm");
  // The last stage holds the loss; each cp rank a share of every sequence's tokens.
  double loss = out.schedule.loss_sum, grad_sq = 0;
  if (reproducible) {  // exact sums: the same bits however the micro-batches were spread
    ExactSum l = out.schedule.loss_exact;
    if (gs.dp * gs.cp > 1) l.all_reduce(grid.dp_cp());
    if (gs.pp > 1) l.all_reduce(grid.pp());
    loss = l.value();
    ExactSum g = model.grad_sum_squares_exact(backend.tp_rank());
    if (gs.pp > 1) g.all_reduce(grid.pp());
    if (gs.tp > 1) g.all_reduce(grid.tp());
    grad_sq = g.value();
  } else {
    if (gs.dp * gs.cp > 1) loss = grid.dp_cp().all_reduce_scalar(loss, ReduceOp::sum);
    if (gs.pp > 1) loss = grid.pp().all_reduce_scalar(loss, ReduceOp::sum);
    // Every gradient element once: TP-sharded ones by every TP rank, replicated ones by TP rank 0.
    grad_sq = model.grad_sum_squares(backend.tp_rank());
    if (gs.pp > 1) grad_sq = grid.pp().all_reduce_scalar(grad_sq, ReduceOp::sum);
    if (gs.tp > 1) grad_sq = grid.tp().all_reduce_scalar(grad_sq, ReduceOp::sum);
  }
  out.loss = loss / norm;
  out.grad_norm = std::sqrt(grad_sq);
  if (!std::isfinite(out.loss) || !std::isfinite(out.grad_norm)) return out;
  if (grad_clip > 0 && out.grad_norm > grad_clip)  // torch.nn.utils.clip_grad_norm_'s rule
    model.scale_grads(static_cast<float>(grad_clip / (out.grad_norm + 1e-6)));
  set_activity_phase("optimizer");
  fault_point("optimizer");
  {
    trace::Span sp("optimizer step");
    backend.optimizer_step(lr);
  }
  out.updated = true;
  return out;
}


bool skip_non_finite_step(const JobConfig& cfg, TrainCheckpointer& ckpt, TrainResult& result, int step, double loss,
                          double grad_norm, bool rank0) {
  // x86 makes a NaN with the sign bit set ("-nan") out of an invalid operation and passes a NaN
  // operand on as it is: the message says "nan" either way.
  if (std::isnan(loss)) loss = std::numeric_limits<double>::quiet_NaN();
  if (std::isnan(grad_norm)) grad_norm = std::numeric_limits<double>::quiet_NaN();
  if (cfg.train.nan_policy == "skip") {
    ++result.skipped_steps;
    const int run = ++result.consecutive_skips;
    if (run >= cfg.train.nan_skip_limit)
      agreed_fail("step {}: {} consecutive steps with a non-finite loss or grad norm (this one: loss {}, grad norm {}); "
           "stopping at train.nan_skip_limit = {} (train.nan_policy = \"skip\"): the run is not recovering ({})",
           step, run, loss, grad_norm, cfg.train.nan_skip_limit, ckpt.last_saved_note());
    if (rank0)
      std::printf("step %d: non-finite loss %g or grad norm %g: step skipped (%d in a row; the run stops at "
                  "train.nan_skip_limit = %d)\n",
                  step, loss, grad_norm, run, cfg.train.nan_skip_limit);
    return true;
  }
  std::string why;
  const std::string saved = ckpt.save_last_good(step, result.last_loss, &why);
  if (saved.empty())
    agreed_fail("step {}: non-finite loss ({}) or grad norm ({}); stopping (train.nan_policy = \"stop\"). The state "
         "before this step is not saved either: {}; {}",
         step, loss, grad_norm, why, ckpt.last_saved_note());
  agreed_fail("step {}: non-finite loss ({}) or grad norm ({}); stopping (train.nan_policy = \"stop\"); the state before "
       "it is saved: {}",
       step, loss, grad_norm, ckpt.last_saved_note());
}

}  // namespace mpitron
