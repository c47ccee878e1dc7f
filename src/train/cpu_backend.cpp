// The CPU backend of the training loop (train_backend.hpp): this rank's CPU TransformerModel chunks
// on the CPU Ops (host memory); the step protocol is TrainBackend's (StageModel: DataParallel with
// ZeRO 0-3, AdamW; the pipeline executor), the same code as the GPU backend's.
#include <fmt/format.h>
#include <omp.h>

#include "mpitron/model/transformer_model.hpp"
#include "mpitron/ops/ops.hpp"
#include "mpitron/parallel/partition.hpp"
#include "mpitron/train/peak_probe.hpp"
#include "mpitron/train/train_backend.hpp"

namespace mpitron {
namespace {

class CpuBackend final : public TrainBackend {
 public:
  explicit CpuBackend(const TrainSetup& s)
      : cfg_(s.cfg), grid_(s.grid), chunks_note_(chunks_note(s)), batch_note_(batch_note(s)), ops_(make_cpu_ops()) {
    const GridShape& gs = grid_.shape();
    choose_precision();
    // The schedule decides how many micro-batches' activations each model chunk keeps
    // (pipeline.hpp); interleaved 1F1B gives this rank parallel.virtual_stages chunks (partition.hpp).
    std::vector<ModelShard> shards =
        model_chunks_for(s.mc, gs, grid_.coord(), s.cfg.parallel.pp_layers, s.schedule.virtual_stages);
    // Every chunk initialised from the seed (the single-rank values in any layout).
    std::vector<std::unique_ptr<ModelChunk>> chunks;
    Comm* tp = gs.tp > 1 ? &grid_.tp() : nullptr;
    Comm* cp = gs.cp > 1 ? &grid_.cp() : nullptr;  // context parallel: ring attention over it
    Comm* ep = gs.ep > 1 ? &grid_.ep() : nullptr;  // expert parallel: MoE token exchange over it
    for (size_t c = 0; c < shards.size(); ++c) {
      shards[c].sequence_parallel = s.cfg.parallel.sp;
      ModelOptions opts{s.schedule.max_in_flight(grid_.coord().pp, static_cast<int>(c)),
                        s.cfg.train.recompute == "full"};
      opts.fp8 = s.cfg.train.precision == "fp8";
      auto g = std::make_unique<TransformerModel>(s.mc, shards[c], *ops_, s.bp.micro, opts, tp, cp, ep);
      g->init_weights(s.cfg.train.seed);
      chunks.push_back(std::move(g));
    }
    // Gradient buckets over DP, ZeRO sharding, and the (sharded) AdamW, per chunk: data_parallel.hpp.
    build(s, std::move(chunks), *ops_, grid_.pp(), dp_options(s.cfg));
  }
  ~CpuBackend() override { release_stage(); }

  std::string layout_line(const PeakFlops& peak) const override {
    const GridShape& gs = grid_.shape();
    return fmt::format("layout world {} = dp {}{} x tp {} x pp {}{} | {} | {} threads/rank | {} | peak {:.1f} GFLOP/s/rank ({})",
                       grid_.world().size(), gs.dp,
                       (gs.cp > 1 ? fmt::format(" x cp {}", gs.cp) : "") +
                           (gs.ep > 1 ? fmt::format(" (ep {} x expert-dp {})", gs.ep, gs.dp / gs.ep) : ""),
                       gs.tp, gs.pp,
                       chunks_note_, batch_note_, omp_get_max_threads(), precision_note_, peak.peak / 1e9, peak.how);
  }
  // The hardware peak of this rank's cores, or the GEMM probe where it runs faster (turbo above
  // the clock the estimate knows): MFU never reads above 100% (peak_probe.hpp).
  PeakFlops peak_flops() override {
    const CpuPeak hw = cpu_hardware_peak(omp_get_max_threads(), ops_->gemm_bf16());
    PeakFlops p;
    p.probe = probe_ > 0 ? probe_ : measure_peak_flops(*ops_);  // in the GEMM precision the model uses
    p.peak = std::max(hw.flops, p.probe);
    p.how = hw.flops > 0 ? fmt::format("{} cores x {:.2f} GHz x {} FLOP/cycle, {}", hw.cores, hw.ghz, hw.flop_per_cycle, hw.isa)
                         : std::string("clock unknown");
    if (p.probe > hw.flops) p.how += "; the GEMM probe runs faster (turbo), so it is the peak";
    else p.how += fmt::format("; GEMM probe {:.1f}", p.probe / 1e9);
    return p;
  }
  MemTracker& memory() override { return MemTracker::host(); }
  bool cpu_bf16_gemms() const override { return ops_->gemm_bf16(); }

 private:
  // train.precision: fp32, bf16 (GEMM inputs rounded to bf16, fp32 accumulation; Ops::set_gemm_bf16)
  // or auto: both GEMM rates probed on this rank's threads, bf16 when at least 1.3x faster. Every
  // rank takes the same decision (the slowest rank's ratio decides), so the layout's numerics are
  // uniform.
  void choose_precision() {
    const std::string& want = cfg_.train.precision;
    if (want == "fp8") {
      // The casts emulate the GPU's FP8 operands; their codes' values are exact in bf16, so the
      // bf16 GEMMs (where oneDNN has them; else fp32) multiply them exactly with fp32 sums, as the
      // GPU's FP8 GEMMs do. The other GEMMs are bf16 as on the GPU.
      const bool bf16 = ops_->set_gemm_bf16(true);
      precision_note_ = fmt::format("fp8 linears (train.precision; emulated: E4M3/E5M2 codes through {} GEMMs)",
                                    bf16 ? "bf16" : "fp32");
      return;
    }
    if (want == "fp32" || want == "bf16") {
      usage_check(ops_->set_gemm_bf16(want == "bf16"),
                  "train.precision = \"bf16\": this CPU has no bf16 GEMM in oneDNN (it needs AVX-512); use "
                  "\"fp32\" or \"auto\"");
      precision_note_ = want == "bf16" ? "bf16 GEMMs (train.precision)" : "fp32 (train.precision)";
      return;
    }
    const double f32 = measure_peak_flops(*ops_);
    // Every rank takes the same decision: a rank without bf16 GEMMs counts as a ratio of 0.
    const bool have_bf16 = ops_->set_gemm_bf16(true);
    const double b16 = have_bf16 ? measure_peak_flops(*ops_) : 0.0;
    const double ratio = -grid_.world().all_reduce_scalar(-(b16 / f32), ReduceOp::max);  // the minimum over ranks
    const bool use = ratio >= 1.3;
    ops_->set_gemm_bf16(use);
    probe_ = use ? b16 : f32;  // the chosen precision's probe: peak_flops() need not run it again
    if (!have_bf16) {
      precision_note_ = "fp32 (auto: this CPU has no bf16 GEMM in oneDNN)";
      return;
    }
    precision_note_ = fmt::format("{} (auto: bf16 GEMM probe {:.0f} vs fp32 {:.0f} GFLOP/s, {:.2f}x {} 1.3x)",
                                  use ? "bf16 GEMMs" : "fp32", b16 / 1e9, f32 / 1e9, ratio, use ? ">=" : "<");
  }
  std::string precision_note_;
  double probe_ = 0;  // auto: this rank's GEMM probe in the chosen precision
  const JobConfig& cfg_;
  ProcessGrid& grid_;
  std::string chunks_note_, batch_note_;
  std::unique_ptr<Ops> ops_;
};

}  // namespace

std::unique_ptr<TrainBackend> make_cpu_backend(const TrainSetup& s) { return std::make_unique<CpuBackend>(s); }

}  // namespace mpitron
