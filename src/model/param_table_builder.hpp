// Building a parameter table (ParamInfo, model_chunk.hpp): one tensor after the other in the flat
// layout, each starting on a 16-float boundary, split over TP along split_dim in `parts` equal
// parts (q, k, v of a fused weight). Shared by the GPT-2 and LLaMA tables.
#pragma once
#include <string>
#include <vector>

#include "mpitron/core/error.hpp"
#include "mpitron/model/transformer_model.hpp"

namespace mpitron {

struct ParamTableBuilder {
  const ModelShard& shard;
  std::vector<ParamInfo> out;
  size_t offset = 0;

  // split_dim -1: replicated. Parameters start on 16-float (64-byte) boundaries.
  void add(std::string name, std::vector<int64_t> full, int split_dim, int parts, int layer) {
    ParamInfo p;
    p.name = std::move(name);
    p.full_shape = full;
    p.local_shape = full;
    p.split_dim = shard.tp_size > 1 ? split_dim : -1;
    p.split_parts = p.split_dim >= 0 ? parts : 1;
    if (p.split_dim >= 0) {
      int64_t f = full[p.split_dim];
      check(f % (static_cast<int64_t>(parts) * shard.tp_size) == 0, "{}: dim {} ({}) not divisible by {}x{}",
            p.name, p.split_dim, f, parts, shard.tp_size);
      p.local_shape[p.split_dim] = f / shard.tp_size;
      p.local_offset_in_full = shard.tp_rank * (f / parts / shard.tp_size);
    }
    p.numel = 1;
    for (auto d : p.local_shape) p.numel *= static_cast<size_t>(d);
    p.decay = full.size() == 2;
    p.layer = layer;
    p.offset = offset;
    offset += flat_padded(p.numel);
    out.push_back(std::move(p));
  }
};

}  // namespace mpitron
