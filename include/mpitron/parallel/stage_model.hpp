// One pipeline rank's part of the model, ready to train: its model chunks (one, or v under the
// interleaved schedule: partition.hpp), each a ModelChunk (the CPU TransformerModel or the GPU's
// TransformerModelCuda) with its own DataParallel (gradient buckets, ZeRO shard, AdamW). Both
// backends' trainers talk to this instead of model + DataParallel pairs, so every layout (pp = 1
// included: one chunk) and both backends run the same code.
//
// Construction order matters and is fixed here: every chunk arrives initialised from the seed
// (counter-based init, so any layout gets the single-rank values), the tied wte copy on the last
// stage is then synchronised from the first stage, and only then are the DataParallel objects
// built (ZeRO-3 takes its parameter shard at that point).
//
// Collective calls go chunk by chunk in chunk order on every rank, so all DP replicas issue the
// same collectives in the same order.
#pragma once
#include <memory>
#include <vector>

#include "mpitron/distributed/grid.hpp"
#include "mpitron/model/param_tables.hpp"
#include "mpitron/model/model_chunk.hpp"
#include "mpitron/ops/flat_vector_ops.hpp"
#include "mpitron/parallel/data_parallel.hpp"

namespace mpitron {

// One model chunk's flat parameter buffer in host memory, laid out as gpt_param_table(cfg, chunk
// shard) says, with its size (under ZeRO-3 gathered first, on a GPU copied out): what
// train/param_dump.hpp writes out.
struct ChunkParams {
  const float* data = nullptr;
  size_t n = 0;
};

class StageModel {
 public:
  // `chunks` in chunk order, initialised; `ops` works on their device. dp.tied_group /
  // dp.tied_copy are filled in per chunk.
  StageModel(std::vector<std::unique_ptr<ModelChunk>> chunks, FlatOps& ops, ProcessGrid& grid,
             const DataParallelOptions& dp);
  ~StageModel();

  int size() const { return static_cast<int>(models_.size()); }
  ModelChunk& chunk(int c) { return *models_[c]; }
  DataParallel& ddp(int c) { return *ddps_[c]; }  // the chunk's (dense, under expert parallel) parameters
  // The chunk's parameter sets: its DataParallel, or under expert parallel the dense one and the
  // experts' (data_parallel.hpp ParamSet), in that order.
  std::vector<DataParallel*> sets(int c);
  FlatOps& ops() { return ops_; }
  size_t num_params() const;      // floats over all chunks (the tied copy included)
  double tp_comm_seconds() const;
  double cp_wait_seconds() const;  // the chunks' ModelChunk::cp_wait_seconds; < 0 if any is unmeasured
  // Every chunk's MoE routing statistics since the last take (ModelChunk::take_moe_stats).
  std::vector<std::pair<int, MoeStats>> take_moe_stats();
  Fp8Stats take_fp8_stats();  // every chunk's FP8 cast statistics since the last take, summed
  double ep_seconds() const;  // the chunks' token exchanges; < 0 without expert parallel

  // DataParallel's step protocol, over every chunk.
  void begin_step(int micro_batches);
  void finish_backward();
  double grad_sum_squares(int tp_rank);  // this rank's DP group, every chunk; not yet over TP / PP
  ExactSum grad_sum_squares_exact(int tp_rank);  // the same, exact (train.reproducible)
  void scale_grads(float s);
  void optimizer_step(double lr);
  CommTiming take_timing();
  int optimizer_steps() const;
  void set_optimizer_steps(int n);
  std::string describe() const;

  // Every chunk's full flat parameters in host memory (ZeRO-3: gathered; a device's: copied;
  // into scratch; collective).
  std::vector<ChunkParams> full_params(std::vector<Buffer<float>>& scratch);

 private:
  FlatOps& ops_;
  std::vector<std::unique_ptr<ModelChunk>> models_;
  std::vector<std::unique_ptr<DataParallel>> ddps_;
  std::vector<std::unique_ptr<DataParallel>> edps_;  // per chunk: its experts' (expert parallel), or null
  std::vector<DataParallel*> all_sets_;  // every chunk's sets(c), in chunk order: the step protocol's loop
};

}  // namespace mpitron
