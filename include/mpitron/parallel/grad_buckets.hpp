// Gradient buckets for data parallelism, and ZeRO's shard arithmetic: pure functions of the
// parameter table, so the trainer, the memory ledger and the tests compute the same thing.
//
// Buckets are contiguous ranges of the model's flat layout, formed walking the parameters from
// the END of the table: the flat layout is [wte wpe | h.0 ... h.L-1 | ln_f], so walking it
// backwards visits ln_f, h.L-1, ..., h.0, wpe, wte: exactly the order backward finishes them.
// A parameter goes into the open bucket; the bucket closes once it holds >= bucket_floats (so a
// tensor larger than the cap gets a bucket of its own, and a cap larger than the model gives one
// bucket). Worked example, tiny model (2 blocks of 49,984 floats, wte 16,384, wpe 4,096,
// ln_f 128) with a 50,100-float cap: {ln_f, h.1} (50,112 floats, may reduce once block 1's
// backward is done), {h.0, wpe} (54,080; wpe is final only at the very end), {wte} (16,384).
//
// Backward positions: the head is 0, local block l is n_layers - l, the embedding n_layers + 1
// (ModelChunk's unit events, in the order backward emits them). A bucket may reduce once the last of
// its units has finished (ready_at); under ZeRO-2/3 its memory is needed from the first event
// that writes any of its gradients (alloc_at): the tied wte is written by the head first.
//
// Tied across pipeline stages (`tied_across_stages`: the first and the last stage each hold a
// wte copy), wte gets a bucket of its own marked `deferred`: it accumulates over the whole step
// and reduces only in DataParallel::finish_backward, after the two copies' gradients were summed
// over the embedding group (tied_embedding.hpp says why that order).
#pragma once
#include <cstddef>
#include <vector>

#include "mpitron/model/model_chunk.hpp"

namespace mpitron {

struct FlatRange {
  size_t begin = 0, end = 0;
  size_t size() const { return end - begin; }
};

// The set's (ParamSet, model_chunk.hpp) flat range: from its first parameter to where the parameter after its last one starts
// (or n_flat); empty when no parameter is in the set. Fails if another set's parameter lies inside.
FlatRange param_set_range(const std::vector<ParamInfo>& params, size_t n_flat, ParamSet s);

struct GradBucket {
  size_t begin = 0, end = 0;   // flat range (whole parameters plus their alignment padding)
  std::vector<size_t> params;  // indices into the parameter table
  int alloc_at = 0, ready_at = 0;
  bool deferred = false;  // the tied wte across stages: reduced after the step's backwards
};

int backward_position(int unit, int n_local_layers);

// The bucket cap in floats for parallel.bucket_mb (MiB) over a chunk of n_flat floats. 0 (the
// default) is automatic: a quarter of the chunk, at most 25 MiB (PyTorch DDP's cap), so a small
// model still gets about four buckets and its first all-reduce starts while backward has three
// quarters left to run (one 25 MiB bucket for the whole demo model overlapped nothing).
size_t grad_bucket_floats(double bucket_mb, size_t n_flat);

// Over the parameters of `set` only (their range: param_set_range).
std::vector<GradBucket> plan_grad_buckets(const std::vector<ParamInfo>& params, size_t n_flat, size_t bucket_floats,
                                          const ModelShard& shard, int n_local_layers, bool tied_across_stages = false,
                                          ParamSet set = ParamSet::all);

// ZeRO: rank r of N owns the flat range [r*S, (r+1)*S) clipped to [0, n), with
// S = ceil(n / (16 N)) * 16 (shards start on 64-byte boundaries). When N*16 does not divide n the
// last shards are shorter, possibly empty: e.g. n = 170,560 floats over N = 3 gives S = 56,864
// and shards of 56,864, 56,864 and 56,832.
FlatRange zero_shard(size_t n, int size, int rank);
// counts[r] = |[begin, end) ∩ shard(r)|: the v-collective counts for one bucket or unit.
std::vector<size_t> shard_counts(size_t begin, size_t end, size_t n, int size);
// The same over a parameter set's flat range (param_set_range) instead of [0, n): the shard of
// rank r is cut from `region` and given in flat offsets; begin / end are flat offsets too.
FlatRange zero_shard(FlatRange region, int size, int rank);
std::vector<size_t> shard_counts(FlatRange region, size_t begin, size_t end, int size);

// The flat range of each unit (ModelChunk's unit events): its parameters are contiguous, and the
// range runs to where the next parameter starts (alignment padding included). Indexed by
// unit_index: [0] the embedding, [1] the head, [2 + l] local block l; `params` empty when the
// unit has no parameters on this chunk (the head of a middle stage).
struct UnitRange {
  size_t begin = 0, end = 0;
  std::vector<size_t> params;  // indices into the parameter table
};
inline size_t unit_index(int unit) {
  return unit == ModelChunk::kEmbeddingUnit ? 0 : unit == ModelChunk::kHeadUnit ? 1 : 2 + static_cast<size_t>(unit);
}
// The units' parameters of `set` only.
std::vector<UnitRange> unit_ranges(const std::vector<ParamInfo>& params, size_t n_flat, const ModelShard& shard,
                                   int n_local_layers, ParamSet set = ParamSet::all);

}  // namespace mpitron
