// ZeRO-3 parameter storage: this rank keeps only its shard of the flat parameters; a unit's full
// weights (a block, the embeddings, the final LN) are all-gathered into a working buffer just
// before the model reads them and freed right after, with the next unit's gather prefetched.
//
// How the full parameters really go away: the model is built as usual (initialisation is defined
// on full tensors), this class copies its shard out of model.param_data() and DataParallel calls
// model.release_param_buffer() (TransformerModel::release_param_buffer): the flat Mem::params
// buffer is freed and every weight pointer is null until a unit is gathered and bound
// (TransformerModel::bind_param) into its working buffer. So the tracked params bytes are 4*S (the
// shard) between steps, and during a step 4*S plus the working set: the embedding unit (wte, wpe:
// needed by the embedding and again by the tied LM head, so it stays for the whole forward;
// backward reads no embedding weights), the final LN, the block in use and the prefetched one.
// (Start-up still holds the full buffer once, while initialising.)
//
// Schedule (L blocks; "keep" = not freed because the next use follows immediately):
//   forward:  emb gathered, prefetch block 0; block l: wait, prefetch l+1 (or the head), run,
//             free (keep block L-1 when backward follows); head: run, keep; end: free emb.
//   backward: head: prefetch block L-1 (kept), run, free; block l: wait, prefetch l-1, run, free.
#pragma once
#include <vector>

#include "mpitron/distributed/comm.hpp"
#include "mpitron/model/model_chunk.hpp"
#include "mpitron/ops/flat_vector_ops.hpp"
#include "mpitron/parallel/collective_progress.hpp"
#include "mpitron/parallel/grad_buckets.hpp"

namespace mpitron {

class ShardedParams {
 public:
  // Takes this rank's shard of `set`'s range; the caller then releases the model's flat buffer
  // (model.release_param_buffer(), once every set took its shard).
  ShardedParams(ModelChunk& model, Comm& dp, FlatOps& ops, CommProgress& progress, ParamSet set = ParamSet::all);
  float* shard() { return shard_.data(); }
  FlatRange range() const { return range_; }
  void on_event(ModelChunk::UnitEvent ev, int unit);
  void gather_full(float* out);      // every parameter of the set, at its flat offsets in out, e.g. for a dump
  size_t largest_unit_floats() const;  // the biggest working buffer

 private:
  struct Unit : UnitRange {
    Buffer<float> buf;
    CommProgress::Handle handle = 0;
    bool pending = false, present = false;
  };
  Unit* unit(int u);  // nullptr when the unit has no parameters on this shard
  void start_gather(int u);
  void ensure(int u);
  void release(int u);

  ModelChunk& model_;
  Comm& dp_;
  FlatOps& ops_;
  CommProgress& progress_;
  FlatRange region_;  // the set's flat range
  FlatRange range_;   // this rank's shard of it (flat offsets)
  Buffer<float> shard_;
  std::vector<Unit> units_;  // [0] embedding, [1] head, [2 + l] block l
  int n_layers_ = 0;
};

}  // namespace mpitron
