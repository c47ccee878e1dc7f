// The pipeline executor: runs one rank's action list of a PipelineSchedule (schedule.hpp) on
// its model chunks with the PP Comm.
//
// Communication: consecutive send/recv actions form one group. The executor posts all of a
// group's irecvs and isends, then waits for the receives only; a send completes in the
// background (its staging buffer is reused once the request is done). Sends never block, so a
// rank waits only for data the schedule says must arrive first: the run cannot deadlock unless
// the schedule's own dependencies are cyclic, which simulate() rules out for every generated
// schedule (and the unit tests check). Messages carry a tag made of (direction, micro-batch,
// receiving virtual stage), so a receive can only match its own send.
//
// Activations: each chunk holds max_in_flight(rank, chunk) slots (ModelOptions::slots); a
// micro-batch takes a free slot at its forward and gives it back at its backward.
#pragma once
#include "mpitron/parallel/exact_sum.hpp"
#include <chrono>
#include <string>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "mpitron/config/job_config.hpp"
#include "mpitron/core/memory.hpp"
#include "mpitron/data/loader.hpp"
#include "mpitron/distributed/comm.hpp"
#include "mpitron/model/model_chunk.hpp"
#include "mpitron/parallel/schedule.hpp"

namespace mpitron {

struct PipelineStepStats {
  double loss_sum = 0;     // over the micro-batches whose loss this rank computed (last stage)
  ExactSum loss_exact;     // the same sum, exact: the same bits in any order (train.reproducible)
  int64_t n_targets = 0;   // their target tokens
  double compute_ms = 0;   // forward + backward
  double total_ms = 0;     // the whole step of the schedule
  double idle_fraction() const { return total_ms > 0 ? 1.0 - compute_ms / total_ms : 0.0; }
};

// The schedule a training job runs: parallel.schedule over pp stages and the step's micro-batches
// (any schedule with pp = 1 is plain gradient accumulation). UsageError for combinations
// make_schedule rejects (schedule.hpp).
PipelineSchedule pipeline_schedule_for_job(const ParallelSection& par, int pp, int microbatches);

// Every stage's idle fraction of one step (1 - compute / step time), on every rank of the PP
// group. Collective over `pp`.
std::vector<double> pipeline_idle_by_stage(const PipelineStepStats& st, Comm& pp);

class PipelineExecutor {
 public:
  // chunks[c]: this rank's model chunk c (virtual stage c*pp + rank), built with at least
  // schedule.max_in_flight(rank, c) activation slots. pp.rank() is this rank's stage; `pp`
  // moves host memory (MPI; the GPU trainer passes ProcessGrid::pp_host()).
  PipelineExecutor(const PipelineSchedule& schedule, Comm& pp, std::vector<ModelChunk*> chunks);
  ~PipelineExecutor();

  // One step: batches[i] is micro-batch i (the same on every stage of this pipeline; the first
  // stage reads its inputs, the last its targets). Backward scales the summed loss by loss_scale.
  PipelineStepStats run(const std::vector<Batch>& batches, float loss_scale);
  // Forward only (evaluation, gradients off) of one micro-batch through the whole pipeline.
  // Returns the loss sum on the rank holding the head (0 elsewhere) and sets *n_targets there.
  double forward_only(const Batch& b, int64_t* n_targets);

 private:
  struct Pending {
    Request req;
    int buf;
    std::string what;  // the timeline's name (trace.hpp), when tracing
    std::chrono::steady_clock::time_point posted{};
  };
  void init();
  int take_buffer(size_t floats);
  void release_buffer(int i) { free_.push_back(i); }
  void reap_sends(bool all);
  int tag(int dir, int mb, int receiver_vs) const;
  void run_comm_group(const std::vector<PipeAction>& acts, size_t begin, size_t end, const std::vector<Batch>& batches);

  const PipelineSchedule& s_;
  Comm& comm_;
  std::vector<ModelChunk*> chunks_;
  int rank_, V_;
  std::vector<std::vector<int>> free_slots_;   // per chunk
  std::vector<std::map<int, int>> slot_of_;    // per chunk: micro-batch -> slot
  std::vector<Buffer<float>> bufs_;            // staging buffers for messages (Mem::comm)
  std::vector<int> free_;
  std::map<std::tuple<int, int, int>, int> arrived_;  // (dir, mb, chunk) -> staging buffer
  std::vector<Pending> sends_;
};

}  // namespace mpitron
