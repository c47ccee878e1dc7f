// The trainer's side of checkpoints: what a save holds (parameters, AdamW moments and step count,
// step, sampler state, seeds, config, layout, tokenizer), when it happens (checkpoint.every, the
// last step, an agreed preemption signal, a non-finite loss under nan_policy = "stop") and resume
// (train.resume). The file format and the collective I/O are checkpoint.hpp's.
#pragma once
#include <string>

#include "mpitron/cli/job_config.hpp"
#include "mpitron/data/loader.hpp"
#include "mpitron/dist/grid.hpp"
#include "mpitron/model/gpt.hpp"
#include "mpitron/parallel/stage_model.hpp"
#include "mpitron/train/checkpoint.hpp"

namespace mpitron {

class TrainCheckpointer {
 public:
  TrainCheckpointer(const JobConfig& cfg, ProcessGrid& grid, const ModelConfig& mc, StageModel& model,
                    DataLoader& data);

  // Collective. Loads the checkpoint train.resume selects (parameters, moments, AdamW step count,
  // sampler position, converted to this layout) and returns its step; 0 when starting fresh.
  int resume();
  double resumed_loss() const { return resumed_loss_; }
  // Before a step's batches are fetched: the sampler state a "last good step" checkpoint records.
  void begin_step();
  // Collective, after step `step` is complete. Saves when checkpoint.every divides it, at the
  // last step, or when any rank got SIGUSR1/SIGTERM. True: preempted, the trainer must stop now
  // (and exit with kExitPreempted).
  bool end_of_step(int step, double loss);
  // Collective: nan_policy = "stop" hit a non-finite step: saves the state before it (the
  // parameters are untouched until the optimizer runs). Returns the path written.
  std::string save_last_good(int failed_step, double last_good_loss);

 private:
  std::string save(int step, double loss, const SamplerState& s);
  std::vector<CheckpointShard> shard_view();  // one per model chunk

  const JobConfig& cfg_;
  ProcessGrid& grid_;
  ModelConfig mc_;
  StageModel& model_;
  DataLoader& data_;
  CheckpointManager mgr_;
  SamplerState before_step_;
  int last_saved_ = -1;
  double resumed_loss_ = 0;
};

}  // namespace mpitron
