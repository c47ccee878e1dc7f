// The GPU backend of the training loop (train_backend.hpp; train.backend = "nccl"): one GPU per
// rank, the model (or its tensor-parallel slice, its pipeline chunks) on each GPU
// (TransformerModelCuda: bf16 compute, fp32 master weights and gradients). Everything else is
// TrainBackend's, the CPU backend's code: DataParallel with ZeRO 0-3 and AdamW over CudaFlatOps
// (device memory; the collectives are NCCL's on the DP communicator's own stream, ordered after the
// compute stream by event: Comm::set_compute_stream, so buckets reduce while backward continues),
// the pipeline executor (stage tensors staged through host memory on ProcessGrid::pp_host()), and
// the checkpoint state (device buffers staged through host memory, the common file format: a GPU
// checkpoint resumes on CPU and back). This file holds only what is the GPU's: device and
// stream set-up, the chunks, the datasheet peak, the layout line. GPU builds only.
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <string>
#include <vector>

#include "mpitron/core/error.hpp"
#include "mpitron/core/memory.hpp"
#include "mpitron/model/cuda/transformer_model_cuda.hpp"
#include "mpitron/ops/cuda/cuda_flat_ops.hpp"
#include "mpitron/ops/cuda/cuda_ops.hpp"
#include "mpitron/parallel/partition.hpp"
#include "mpitron/parallel/pipeline.hpp"
#include "mpitron/train/train_backend.hpp"

namespace mpitron {
namespace {

// Dense bf16 tensor-core peak of one GPU from its datasheet, by device name; 0 when unknown
// (then MFU needs train.peak_flops).
double datasheet_bf16_peak(const std::string& name) {
  auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
  if (has("H100") && has("PCIe")) return 756e12;
  if (has("H100") || has("H200") || has("GH200")) return 989e12;
  if (has("A100")) return 312e12;
  return 0;
}

class GpuBackend final : public TrainBackend {
 public:
  explicit GpuBackend(const TrainSetup& s)
      : cfg_(s.cfg), launch_(s.launch), grid_(s.grid), chunks_note_(chunks_note(s)), batch_note_(batch_note(s)) {
    const JobConfig& cfg = s.cfg;
    const GridShape& gs = grid_.shape();
    usage_check(cfg.train.recompute == "none" || cfg.train.recompute == "full",
                "train.recompute must be \"none\" or \"full\" (got \"{}\")", cfg.train.recompute);
    // (ep with ZeRO-3 is refused by the layout rules: parallel/layout_rules.hpp.)
    usage_check(launch_.device >= 0, "train.backend = \"nccl\" needs a GPU on every rank ({})", launch_.device_note);
    CudaOpsOptions oo;
    oo.attention = cfg.model.attention;
    oo.device = launch_.device;
    ops_ = make_cuda_ops(oo);
    fp8_ = cfg.train.precision == "fp8";
    if (fp8_) {  // the FP8 tensor cores: Ada (8.9) and Hopper (9.0) on
      cudaDeviceProp prop{};
      cuda::cuda_check(cudaGetDeviceProperties(&prop, launch_.device), "cudaGetDeviceProperties");
      usage_check(prop.major * 10 + prop.minor >= 89,
                  "train.precision = \"fp8\" needs FP8 tensor cores (compute capability 8.9 or later: Ada, Hopper); "
                  "{} on rank {} is {}.{}: use train.precision = \"bf16\"",
                  prop.name, launch_.rank, prop.major, prop.minor);
    }
    flat_ = make_cuda_flat_ops(*ops_);
    // The DP (DataParallel's gradient group is dp_cp: DP and CP together) and embedding-group
    // collectives read what the compute stream wrote: ordered after it. (TransformerModelCuda
    // orders tp and cp.)
    grid_.dp().set_compute_stream(ops_->stream());
    grid_.dp_cp().set_compute_stream(ops_->stream());
    if (gs.pp > 1) grid_.embedding().set_compute_stream(ops_->stream());
    if (gs.ep > 1) grid_.expert_dp().set_compute_stream(ops_->stream());  // the experts' DataParallel group
    // This rank's pipeline stage(s) and tensor-parallel slice (partition.hpp: one chunk, or
    // parallel.virtual_stages under interleaved 1F1B), each initialised to the CPU model's values.
    std::vector<ModelShard> shards =
        model_chunks_for(s.mc, gs, grid_.coord(), cfg.parallel.pp_layers, s.schedule.virtual_stages);
    std::vector<std::unique_ptr<ModelChunk>> chunks;
    for (size_t c = 0; c < shards.size(); ++c) {
      shards[c].sequence_parallel = cfg.parallel.sp;  // run_training has checked tp > 1
      ModelOptions opts{s.schedule.max_in_flight(grid_.coord().pp, static_cast<int>(c)),
                        cfg.train.recompute == "full"};
      opts.fp8 = fp8_;
      auto m = std::make_unique<TransformerModelCuda>(
          s.mc, shards[c], *ops_, s.bp.micro, opts, gs.tp > 1 ? &grid_.tp() : nullptr,
          gs.cp > 1 ? &grid_.cp() : nullptr, gs.ep > 1 ? &grid_.ep() : nullptr);
      m->init_weights(cfg.train.seed);  // the CPU model's values (counter-based init)
      chunks.push_back(std::move(m));
    }
    // NCCL runs its collectives on its own; CommProgress only has to notice they completed (to run
    // the ZeRO callbacks and time them), which polling at the unit events does: no progress
    // thread querying the communicator's events.
    DataParallelOptions dp = dp_options(cfg);
    dp.progress = ProgressMode::poll;
    build(s, std::move(chunks), *flat_, grid_.pp_host(), dp);
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, launch_.device);
    gpu_ = prop.name;
  }
  ~GpuBackend() override { release_stage(); }

  std::string layout_line(const PeakFlops& pf) const override {
    const double peak = pf.peak;
    const GridShape& gs = grid_.shape();
    return fmt::format("layout world {} = dp {}{} x tp {}{} x pp {}{} (one {} per rank, {}, attention {}) | {} | "
                       "peak {:g} TFLOP/s/GPU{}",
                       launch_.world, gs.dp, gs.cp > 1 ? fmt::format(" x cp {}", gs.cp) : "", gs.tp,
                       cfg_.parallel.sp ? " + sp" : "", gs.pp, chunks_note_, gpu_,
                       fp8_ ? "bf16, fp8 linears (E4M3/E5M2, current scaling)" : "bf16", attention_note(), batch_note_, peak / 1e12,
                       peak > 0 ? " (" + pf.how + ")" : " (unknown GPU: set train.peak_flops for MFU)");
  }
  PeakFlops peak_flops() override { return {datasheet_bf16_peak(gpu_), 0, "datasheet dense bf16"}; }
  // Which attention runs: the cp ring's blocks and data.document_mask's documents as cuDNN
  // segments (model.attention = "cudnn") or on the block kernels / masked scores ("naive").
  std::string attention_note() const {
    const std::string& k = ops_->attention_kind();
    const bool cudnn = k == "cudnn", cp = grid_.shape().cp > 1;
    std::string note = k;
    if (cp) note += cudnn ? "; cp ring: cuDNN segments" : "; cp ring: block kernels";
    if (cfg_.data.document_mask) note += cudnn ? "; documents: cuDNN segments" : cp ? "" : "; documents: masked scores";
    return note;
  }
  MemTracker& memory() override { return MemTracker::cuda(); }

 private:
  const JobConfig& cfg_;
  const LaunchInfo& launch_;
  ProcessGrid& grid_;
  std::string chunks_note_, batch_note_;
  std::unique_ptr<CudaOps> ops_;
  std::unique_ptr<FlatOps> flat_;
  std::string gpu_;
  bool fp8_ = false;  // train.precision = "fp8": the blocks' linears in FP8 (cuda_fp8_linear.cpp)
};

}  // namespace

std::unique_ptr<TrainBackend> make_gpu_backend(const TrainSetup& s) { return std::make_unique<GpuBackend>(s); }

}  // namespace mpitron

// The entry point (train_backend.hpp): run_training's way here, through MPITRON_CUDA_ENTRY.
extern "C" std::unique_ptr<mpitron::TrainBackend> mpitron_cuda_make_gpu_backend(const mpitron::TrainSetup& s) {
  return mpitron::make_gpu_backend(s);
}
