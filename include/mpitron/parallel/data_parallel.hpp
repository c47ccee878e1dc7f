// Data parallelism over the DP group: gradient buckets reduced while backward still runs, and
// ZeRO stages 1-3 (optimizer state, gradients, parameters sharded over the group).
//
// Per rank, with P = model.num_params() floats (the flat layout; under expert parallel each of the
// two parameter sets on its own, P its range and N its group's size), N = dp size and S this rank's
// ZeRO shard (grad_buckets.hpp: ~P/N, 16-float aligned):
//   stage  params                  grads                     AdamW moments  communication per step
//   0      4P                      4P                        8P             all-reduce per bucket
//   1      4P                      4P                        8S             reduce-scatter per bucket, all-gather params
//   2      4P                      4S (+ buckets in flight)  8S             reduce-scatter per bucket, all-gather params
//   3      4S (+ units gathered)   4S (+ buckets in flight)  8S             + all-gather per unit, forward and backward
// Bytes; fp32 master weights are the parameters themselves (no separate copy in fp32 training).
//
// Gradient accumulation: stages 0 and 1 accumulate full gradients locally and communicate only
// during the last micro-batch's backward. Stages 2 and 3 have no full gradient buffer to
// accumulate in, so every micro-batch reduce-scatters its buckets into the gradient shard (as
// DeepSpeed does); that is their price for the memory.
//
// Pipeline parallel with tied embeddings (tied_embedding.hpp): the first and last stages' wte
// copies get one deferred bucket (grad_buckets.hpp). In finish_backward its local gradient,
// accumulated over the step's micro-batches, is first summed with the other copy's over the
// embedding group, then reduced over DP like any bucket. Summing over the tie BEFORE the DP
// reduction is what lets ZeRO work: the two stages cut their flat buffers into DP shards
// differently, so after a reduce-scatter their wte shards would not line up. (ZeRO-2/3 keep
// that one bucket's gradients for the whole step.)
//
// Both backends run this class: the model is a ModelChunk (the CPU TransformerModel or the GPU's
// TransformerModelCuda) and every buffer here (bucket gradients, the gradient shard, AdamW moments,
// reduce-scatter landing zones) lives on the device of `ops` (FlatOps::allocator). On the GPU the
// collectives are NCCL's on the communicator's stream, ordered after the compute stream by event
// (Comm::set_compute_stream); CommProgress sees them complete by that stream's events, and the
// completion callbacks then enqueue their copies / additions on the compute stream.
//
// The reduction is a plain sum: the model's backward already scales by 1 / (target tokens in the
// global batch), so the summed gradient is the single-rank gradient of the global batch.
#pragma once
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "mpitron/distributed/comm.hpp"
#include "mpitron/model/model_chunk.hpp"
#include "mpitron/ops/flat_vector_ops.hpp"
#include "mpitron/parallel/collective_progress.hpp"
#include "mpitron/parallel/exact_sum.hpp"
#include "mpitron/parallel/fixed_point_grads.hpp"
#include "mpitron/parallel/grad_buckets.hpp"
#include "mpitron/parallel/param_gather.hpp"
#include "mpitron/parallel/zero3_params.hpp"
#include "mpitron/parallel/adamw.hpp"

namespace mpitron {

struct DataParallelOptions {
  int zero = 0;
  double bucket_mb = 0;  // 0: automatic (grad_bucket_floats)
  ProgressMode progress = ProgressMode::thread;
  AdamWOptions adamw;
  // This rank holds one end of a wte tied across pipeline stages: the first and last stage of
  // its pipeline (grid.embedding()); nullptr otherwise (pp = 1, middle stages).
  Comm* tied_group = nullptr;
  bool tied_copy = false;  // the last stage's copy: left out of grad_sum_squares (counted once)
  // The parameters this object synchronises (grad_buckets.hpp ParamSet). Expert parallel gives a
  // chunk two: `dense` over dp x cp and `experts` over expert_dp (StageModel builds them in that
  // order and installs one unit hook that calls both); `all` installs its own hook.
  ParamSet params = ParamSet::all;
  Comm* ep = nullptr;  // `experts`: the ep group (the gradient norm adds the other ranks' experts)
  // train.reproducible: each micro-batch's gradients go into a fixed-point accumulator as their
  // bucket finishes (fixed_point_grads.hpp) and are reduced exactly at finish_backward, blocking;
  // the gradient norm is summed exactly (exact_sum.hpp). The accumulator is in host memory: on a
  // GPU the gradients are copied down per bucket and micro-batch and the reduced ones copied up.
  bool reproducible = false;
};

class DataParallel {
 public:
  // Installs itself as the model's unit hook; under ZeRO-2/3 frees the model's flat gradient
  // buffer, under ZeRO-3 its flat parameter buffer (after taking this rank's shard).
  DataParallel(ModelChunk& model, Comm& dp, FlatOps& ops, const DataParallelOptions& opt);
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  // Zero the gradients; this step runs `micro_batches` backwards on this rank (the schedule may
  // order them as it likes; the last one to run is the one that communicates under ZeRO 0/1).
  void begin_step(int micro_batches);
  void finish_backward();              // after the last backward: all gradient communication done
  // Over the DP group; every element counted exactly once. tp_rank > 0: only TP-sharded
  // parameters (replicated ones are counted by TP rank 0; tp_grad_norm.hpp). The tied wte copy
  // of the last stage is left out (the first stage counts it).
  double grad_sum_squares(int tp_rank = 0);
  // The same sum, exact (reproducible): added to `into`, already over dp (and ep) like the above.
  void grad_sum_squares_exact(int tp_rank, ExactSum& into);
  // Clipping: the gradients times s in the next optimizer_step (AdamW reads them scaled; they stay
  // as they are in memory, one pass over them saved).
  void scale_grads(float s);
  // AdamW on this rank's shard, then the parameters all-gathered: ZeRO-1/2 on the CPU launches
  // one gather per unit and the next forward waits for each at its unit (param_gather.hpp). Where
  // this rank updates every weight of its set in place, AdamW also writes the model's bf16 copy
  // (ModelChunk::param_bf16_data) instead of params_changed() converting the weights again.
  void optimizer_step(double lr);
  // Every parameter of the flat buffer current (the ZeRO-1/2 gathers of the last step done):
  // before reading or writing the whole buffer outside a forward (checkpoints).
  void sync_params();
  CommTiming take_timing() { return progress_.take_timing(); }

  // Every parameter in the flat layout, in host memory (ZeRO-3: gathered, a collective call; a
  // device's: copied to `scratch`).
  const float* full_params(Buffer<float>& scratch);
  // ZeRO-3 on the host: this set's parameters, gathered, at their flat offsets in `out` (n floats).
  void gather_params_into(float* out);
  // The model's unit events (installed as its hook for ParamSet::all; StageModel calls it otherwise).
  void on_unit_event(ModelChunk::UnitEvent ev, int unit) { on_event(ev, unit); }
  ParamSet param_set() const { return opt_.params; }
  FlatRange region() const { return region_; }
  const std::vector<GradBucket>& buckets() const { return buckets_; }
  FlatRange shard() const { return shard_; }
  // Checkpoints (train/train_checkpoint.cpp): this rank's AdamW (moments over shard()) and its
  // parameter shard (ZeRO-3; otherwise model.param_data() + shard().begin), on the device of ops.
  AdamW& optimizer() { return *optim_; }
  float* shard_params() { return param_shard(); }
  int zero() const { return opt_.zero; }
  std::string describe() const;  // one line for the start-up log

 private:
  void on_event(ModelChunk::UnitEvent ev, int unit);
  void alloc_bucket(size_t b);
  void launch_bucket(size_t b, bool last_backward);
  void reduce_deferred_buckets();
  void add_to_fixed_point(size_t b);  // reproducible: bucket b's gradients of this micro-batch
  void reduce_fixed_point();          // reproducible: the exact reductions of finish_backward
  // reproducible on a device: n floats of device memory at g as host memory (copied into
  // host_stage_; host memory is returned as it is) ...
  const float* on_host(const float* g, size_t n);
  // ... and n floats that `fill` writes into host memory, stored at dst (device or host memory).
  void store_from_host(float* dst, size_t n, const std::function<void(float*)>& fill);
  float* grad_shard();
  float* param_shard();
  // The tied wte copy's part of this rank's shard: (offset in the shard, length), length 0 if none.
  std::pair<size_t, size_t> tied_wte_in_shard() const;

  ModelChunk& model_;
  Comm& dp_;
  FlatOps& ops_;
  DataParallelOptions opt_;
  int n_layers_ = 0;
  size_t n_ = 0;         // the chunk's flat buffer
  FlatRange region_;     // this object's parameters' range of it (param_set_range; [0, n) for `all`)
  FlatRange shard_;      // this rank's ZeRO shard of region_ (region_ without ZeRO), flat offsets
  void trace_unit(ModelChunk::UnitEvent ev, int unit);
  std::map<int, std::chrono::steady_clock::time_point> trace_open_[2];  // forward, backward: unit -> start
  std::vector<GradBucket> buckets_;
  size_t bucket_floats_ = 0;  // the cap (grad_bucket_floats)
  std::vector<Buffer<float>> bucket_bufs_;  // ZeRO-2/3: a bucket's gradients, alloc_at .. reduced
  std::vector<CommProgress::Handle> bucket_ops_;
  std::vector<bool> bucket_in_flight_;
  Buffer<float> grad_shard_;  // ZeRO-2/3
  CommProgress progress_;
  std::unique_ptr<ShardedParams> zero3_;
  std::unique_ptr<ParamAllGather> param_gather_;  // declared after progress_: destroyed (waited) first
  std::vector<ParamInfo> shard_table_;  // the parameter table cut to the shard, offsets from its start
  std::unique_ptr<AdamW> optim_;
  std::unique_ptr<FixedPointGrads> fixed_;  // reproducible: over region_, offsets from its start
  std::vector<float> host_stage_;           // reproducible on a device: see on_host
  int micro_batches_ = 1, backwards_done_ = 0;
  float grad_scale_ = 1.f;  // scale_grads' factor, applied by the next optimizer_step
};

}  // namespace mpitron
