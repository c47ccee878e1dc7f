// The trainer's side of checkpoints: what a save holds (parameters, AdamW moments and step count,
// step, sampler state, seeds, config, layout, tokenizer), when it happens (checkpoint.every, the
// last step, an agreed preemption signal, a non-finite loss under nan_policy = "stop") and resume
// (train.resume). The file format and the collective I/O are checkpoint.hpp's.
#pragma once
#include <memory>
#include <string>

#include "mpitron/config/job_config.hpp"
#include "mpitron/data/loader.hpp"
#include "mpitron/distributed/grid.hpp"
#include "mpitron/model/param_tables.hpp"
#include "mpitron/parallel/stage_model.hpp"
#include "mpitron/checkpoint/background_save.hpp"
#include "mpitron/checkpoint/checkpoint.hpp"

namespace mpitron {

// The model and optimizer state a checkpoint holds, whatever holds it: a StageModel's buffers
// (StageCheckpointState: host memory on CPU, device memory staged through host copies on GPU).
class CheckpointState {
 public:
  virtual ~CheckpointState() = default;
  // This rank's shards (one per model chunk) over host buffers. For a save the buffers hold the
  // current state once shards() returns; after a load, loaded() puts them in effect.
  virtual std::vector<CheckpointShard> shards() = 0;
  virtual void loaded() {}
  virtual int optimizer_steps() const = 0;
  virtual void set_optimizer_steps(int n) = 0;
  virtual int zero() const = 0;
};

class StageCheckpointState final : public CheckpointState {
 public:
  StageCheckpointState(StageModel& model, const ModelConfig& mc, const GridShape& shape, const GridCoord& coord)
      : model_(model), mc_(mc), shape_(shape), coord_(coord) {}
  std::vector<CheckpointShard> shards() override;
  void loaded() override;
  int optimizer_steps() const override { return model_.optimizer_steps(); }
  void set_optimizer_steps(int n) override { model_.set_optimizer_steps(n); }
  int zero() const override { return model_.ddp(0).zero(); }

 private:
  struct HostCopy {  // a device's state in host memory (empty on CPU)
    std::vector<float> p, m, v;
  };
  StageModel& model_;
  std::vector<HostCopy> host_;
  ModelConfig mc_;
  GridShape shape_;
  GridCoord coord_;
};

class TrainCheckpointer {
 public:
  TrainCheckpointer(const JobConfig& cfg, ProcessGrid& grid, const ModelConfig& mc, CheckpointState& state,
                    DataLoader& data);

  // Collective. Loads the checkpoint train.resume selects (parameters, moments, AdamW step count,
  // sampler position, converted to this layout) and returns its step; 0 when starting fresh.
  int resume();
  // Collective, on a fresh start with train.init_from set: loads those weights (any layout).
  void init_from();
  double resumed_loss() const { return resumed_loss_; }
  // Before a step's batches are fetched: the sampler state a "last good step" checkpoint records.
  void begin_step();
  // Collective, after step `step` is complete. Saves when checkpoint.every divides it, at the
  // last step, or when any rank got SIGUSR1/SIGTERM/SIGINT. Non-zero: the agreed signal; the
  // checkpoint is written and the trainer must stop now (exit with preemption_exit_code()).
  // checkpoint.async: a periodic save starts in the background (background_save.hpp); one that
  // finished is announced here, one that failed is an Error here; the last step's and a
  // preemption's save wait for the one in flight and write in the foreground.
  // A state holding NaN/inf is never saved: an Error on every rank instead, naming the rank and
  // tensor, and `latest` keeps naming the last good checkpoint.
  int end_of_step(int step, double loss);
  // Collective: nan_policy = "stop" hit a non-finite step: saves the state before it (the
  // parameters are untouched until the optimizer runs). Returns the path written, or "" when
  // that state holds NaN/inf too (not saved; `why` says where).
  std::string save_last_good(int failed_step, double last_good_loss, std::string* why);
  // The newest save's step (complete or still being written in the background); -1: none yet.
  int last_started() const { return last_started_; }
  // "ckpt/latest names step N" or "no checkpoint was written", for error messages.
  std::string last_saved_note() const;

 private:
  CheckpointMeta meta_for(int step, double loss, const SamplerState& s) const;
  // The background save in flight (if any) done; `why` names what waits for it.
  void finish_background(const char* why);
  void announce(const BackgroundSave::Done& d);
  // The path written, or "" when some rank's state is not finite (*why: the rank and tensor).
  std::string save(int step, double loss, const SamplerState& s, std::string* why, bool background = false);

  const JobConfig& cfg_;
  ProcessGrid& grid_;
  ModelConfig mc_;
  CheckpointState& state_;
  DataLoader& data_;
  CheckpointManager mgr_;
  SamplerState before_step_;
  std::unique_ptr<BackgroundSave> background_;  // checkpoint.async
  int last_saved_ = -1;    // the newest complete checkpoint's step (what `latest` names)
  int last_started_ = -1;  // the newest save's step, complete or still being written
  double resumed_loss_ = 0;
};

}  // namespace mpitron
