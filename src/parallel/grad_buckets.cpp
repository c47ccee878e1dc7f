#include "mpitron/parallel/grad_buckets.hpp"

#include <algorithm>

#include "mpitron/core/error.hpp"

namespace mpitron {

int backward_position(int unit, int n_local_layers) {
  if (unit == ModelChunk::kHeadUnit) return 0;
  if (unit == ModelChunk::kEmbeddingUnit) return n_local_layers + 1;
  return n_local_layers - unit;
}

FlatRange param_set_range(const std::vector<ParamInfo>& params, size_t n_flat, ParamSet s) {
  FlatRange r{n_flat, 0};
  size_t first = params.size(), last = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    if (!in_param_set(params[i], s)) continue;
    first = std::min(first, i), last = i;
    r.begin = std::min(r.begin, params[i].offset);
    r.end = std::max(r.end, i + 1 < params.size() ? params[i + 1].offset : n_flat);
  }
  if (first == params.size()) return {};
  for (size_t i = first; i <= last; ++i)
    check(in_param_set(params[i], s), "parameter {} lies inside another parameter set's flat range", params[i].name);
  return r;
}

std::vector<GradBucket> plan_grad_buckets(const std::vector<ParamInfo>& params, size_t n_flat, size_t bucket_floats,
                                          const ModelShard& shard, int n_local_layers, bool tied_across_stages,
                                          ParamSet set) {
  check(bucket_floats > 0, "gradient bucket size must be > 0");
  std::vector<size_t> order;
  for (size_t i = 0; i < params.size(); ++i)
    if (in_param_set(params[i], set)) order.push_back(i);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return params[a].offset > params[b].offset; });
  std::vector<GradBucket> out;
  GradBucket cur;
  size_t hi = param_set_range(params, n_flat, set).end;  // the open bucket's end: where the parameter above it starts
  auto close = [&] {
    if (cur.params.empty()) return;
    cur.end = hi;
    cur.begin = params[cur.params.back()].offset;
    hi = cur.begin;
    out.push_back(std::move(cur));
    cur = GradBucket{};
  };
  for (size_t i : order) {
    const ParamInfo& p = params[i];
    const bool deferred = tied_across_stages && is_token_embedding(p.name);
    if (deferred) close();  // wte alone (it is the last parameter walked: offset 0)
    int unit = param_unit(p, shard);
    int ready = backward_position(unit, n_local_layers);
    // The tied wte: the head (position 0) writes its gradient before the embedding does.
    int first = (is_token_embedding(p.name) && shard.has_head) ? 0 : ready;
    if (cur.params.empty()) cur.alloc_at = first, cur.ready_at = ready;
    cur.alloc_at = std::min(cur.alloc_at, first);
    cur.ready_at = std::max(cur.ready_at, ready);
    cur.params.push_back(i);
    cur.deferred = deferred;
    // The open bucket spans [p.offset, hi). Never between tensors a model fuses into one GEMM
    // (LLaMA's q|k|v, gate|up): their gradients must stay one contiguous range.
    if (deferred || (hi - p.offset >= bucket_floats && !fused_with_previous(p.name))) close();
  }
  close();
  return out;
}

FlatRange zero_shard(size_t n, int size, int rank) {
  size_t s = (n + 16 * size - 1) / (16 * size) * 16;
  return {std::min(n, s * rank), std::min(n, s * (rank + 1))};
}

std::vector<size_t> shard_counts(size_t begin, size_t end, size_t n, int size) {
  std::vector<size_t> c(size);
  for (int r = 0; r < size; ++r) {
    FlatRange s = zero_shard(n, size, r);
    size_t lo = std::max(begin, s.begin), hi = std::min(end, s.end);
    c[r] = hi > lo ? hi - lo : 0;
  }
  return c;
}

FlatRange zero_shard(FlatRange region, int size, int rank) {
  const FlatRange z = zero_shard(region.size(), size, rank);
  return {region.begin + z.begin, region.begin + z.end};
}

std::vector<size_t> shard_counts(FlatRange region, size_t begin, size_t end, int size) {
  return shard_counts(begin - region.begin, end - region.begin, region.size(), size);
}

std::vector<UnitRange> unit_ranges(const std::vector<ParamInfo>& params, size_t n_flat, const ModelShard& shard,
                                   int n_local_layers, ParamSet set) {
  std::vector<UnitRange> units(2 + static_cast<size_t>(n_local_layers));
  const size_t set_end = param_set_range(params, n_flat, set).end;
  for (size_t i = 0; i < params.size(); ++i) {
    if (!in_param_set(params[i], set)) continue;
    UnitRange& u = units[unit_index(param_unit(params[i], shard))];
    const size_t end = i + 1 < params.size() && in_param_set(params[i + 1], set) ? params[i + 1].offset : set_end;
    if (u.params.empty()) u.begin = params[i].offset;
    check(u.params.empty() || u.end == params[i].offset, "the unit of parameter {} is not contiguous", params[i].name);
    u.end = end;
    u.params.push_back(i);
  }
  return units;
}

size_t grad_bucket_floats(double bucket_mb, size_t n_flat) {
  if (bucket_mb > 0) return std::max<size_t>(1, static_cast<size_t>(bucket_mb * (1 << 20) / sizeof(float)));
  const size_t max_floats = (size_t{25} << 20) / sizeof(float);
  return std::max<size_t>(1, std::min(max_floats, (n_flat + 3) / 4));
}

}  // namespace mpitron
