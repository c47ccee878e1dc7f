// ZeRO-1/2's parameter all-gather, overlapped with the next forward (the CPU backend).
//
// After the optimizer step each rank has updated only its shard of the flat parameters; the other
// ranks' shards must arrive before the model reads them. One all-gather of the whole buffer,
// blocking, put all of it on the critical path between two steps. Instead, one all-gather per unit
// (unit_ranges: the embedding, the blocks in order, the head), all launched in forward order right
// after the step, and each waited for at its unit's pre_forward event of the next step: the blocks'
// gathers run while the embedding and the earlier blocks compute, as DeepSpeed's stage 1/2
// overlap_comm does. The embedding's pre_forward is the first event of every forward, so a tied
// wte is there before the head reads it.
//
// MPITRON_FAULT=late@param_gather (tests) posts each gather only when its unit waits: nothing has
// arrived early, so a forward that read a unit before waiting would read the last step's weights.
//
// Whoever reads or writes the whole buffer outside a forward (a checkpoint, a parameter dump, a
// load) calls wait_all() first; the optimizer step does, before it writes the shard.
//
// The GPU backend keeps the blocking gather: TransformerModelCuda converts its bf16 weights for the
// whole model in params_changed(), right after the gather.
#pragma once
#include <vector>

#include "mpitron/distributed/comm.hpp"
#include "mpitron/model/model_chunk.hpp"
#include "mpitron/parallel/collective_progress.hpp"
#include "mpitron/parallel/grad_buckets.hpp"

namespace mpitron {

class ParamAllGather {
 public:
  ParamAllGather(ModelChunk& model, Comm& dp, CommProgress& progress, ParamSet set = ParamSet::all);
  ~ParamAllGather() { wait_all(); }  // never leave MPI writing into the model's buffer
  ParamAllGather(const ParamAllGather&) = delete;
  ParamAllGather& operator=(const ParamAllGather&) = delete;

  void launch();             // after the optimizer updated this rank's shard, in place
  void wait_unit(int unit);  // the model is about to read this unit's weights
  void wait_all();
  size_t units() const { return order_.size(); }  // gathers per step

 private:
  struct Unit {
    UnitRange range;
    CommProgress::Handle handle = 0;
    bool pending = false;  // launched, not yet waited for
    bool started = false;  // posted (MPITRON_FAULT=late@param_gather posts it at its wait)
  };
  void start(Unit& un);
  void wait(Unit& un);
  Comm& dp_;
  CommProgress& progress_;
  FlatRange region_;  // the parameter set's flat range (its ZeRO shards are cut from it)
  // The model's flat parameters (never released under ZeRO-1/2); the caller says they changed
  // (DataParallel::optimizer_step: params_changed), not each gather's start.
  float* params_;
  std::vector<Unit> units_;    // by unit_index
  std::vector<size_t> order_;  // unit indices with parameters, in forward order
};

}  // namespace mpitron
