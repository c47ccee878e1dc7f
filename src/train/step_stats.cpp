#include "mpitron/train/step_stats.hpp"

#include <fmt/format.h>

namespace mpitron {

namespace {
std::string human_rate(double v) {
  if (v >= 1e6) return fmt::format("{:.2f}M", v / 1e6);
  if (v >= 1e3) return fmt::format("{:.1f}k", v / 1e3);
  return fmt::format("{:.0f}", v);
}
}  // namespace

std::string format_step_line(const StepStats& s) {
  std::string slowest;
  if (s.slowest_rank >= 0)
    slowest = fmt::format(" | slowest rank {} busy {:.1f} ms (+{:.0f}% vs median)", s.slowest_rank, s.slowest_busy_ms,
                          s.median_busy_ms > 0 ? 100.0 * (s.slowest_busy_ms / s.median_busy_ms - 1.0) : 0.0);
  // Loss masks: how many of the step's targets the loss counted.
  const std::string trained = s.trained_tokens >= 0 && s.trained_tokens < s.step_tokens
                                  ? fmt::format(" ({} of {} targets)", s.trained_tokens, s.step_tokens)
                                  : std::string();
  return fmt::format(
      "step {:>{}}/{} | loss {:.4f}{} | lr {:.2e} | gnorm {:.3f} | {:.1f} ms | {} tok/s | {:.1f} GFLOP/s/rank | "
      "MFU {:.1f}%{} | comm {:.1f} ms ({:.0f}% overlapped) | mem params {} grads {} optim {} act {} peak {}",
      s.step, std::to_string(s.total_steps).size(), s.total_steps, s.loss, trained, s.lr, s.grad_norm, s.step_ms,
      human_rate(s.tokens_per_s), s.gflops_per_rank, 100.0 * s.mfu,
      s.probe_frac > 0 ? fmt::format(" ({:.0f}% of GEMM probe)", 100.0 * s.probe_frac) : std::string(), s.comm_ms, 100.0 * s.overlap, format_bytes(s.mem.of(Mem::params)),
      format_bytes(s.mem.of(Mem::grads)), format_bytes(s.mem.of(Mem::optim)),
      format_bytes(s.mem.peak_of(Mem::activations)), format_bytes(s.mem.total_peak)) + slowest;
}

void write_step_metrics(MetricsSink& w, const StepStats& s) {
  MetricsSink::Record rec = {
      {"step", int64_t{s.step}},
      {"loss", s.loss},
      {"lr", s.lr},
      {"grad_norm", s.grad_norm},
      {"step_ms", s.step_ms},
      {"tokens_per_s", s.tokens_per_s},
      {"gflops_per_rank", s.gflops_per_rank},
      {"mfu", s.mfu},
      {"probe_frac", s.probe_frac},
      {"data_wait_ms", s.data_wait_ms},
      {"comm_ms", s.comm_ms},
      {"overlap", s.overlap},
      {"mem_params", int64_t{s.mem.of(Mem::params)}},
      {"mem_grads", int64_t{s.mem.of(Mem::grads)}},
      {"mem_optim", int64_t{s.mem.of(Mem::optim)}},
      {"mem_activations_peak", int64_t{s.mem.peak_of(Mem::activations)}},
      {"mem_total_peak", int64_t{s.mem.total_peak}}};
  if (s.trained_tokens >= 0) rec.push_back({"trained_tokens", s.trained_tokens});
  if (s.attention_fraction < 1) rec.push_back({"attention_fraction", s.attention_fraction});
  if (s.slowest_rank >= 0) {
    rec.push_back({"slowest_rank", int64_t{s.slowest_rank}});
    rec.push_back({"slowest_busy_ms", s.slowest_busy_ms});
    rec.push_back({"median_busy_ms", s.median_busy_ms});
  }
  w.write(rec);
}

}  // namespace mpitron
