// Tied embeddings across pipeline stages, as Megatron does it: the last stage holds its own copy
// of wte for the LM head. At start the first stage's wte is broadcast to it over the embedding
// group (first + last stage of each pipeline); every step the two wte gradients are all-reduced
// over that group, so both copies take the same AdamW update and stay identical. Unlike
// Megatron, the sum happens BEFORE the DP reduction (data_parallel.hpp): then it also holds
// under ZeRO, whose shards cut the two stages' flat buffers differently. With pp = 1 (one stage holds both) every function here does nothing.
#pragma once
#include "mpitron/distributed/grid.hpp"
#include "mpitron/model/model_chunk.hpp"

namespace mpitron {

void sync_tied_embedding(ModelChunk& model, ProcessGrid& grid);
void all_reduce_tied_embedding_grad(ModelChunk& model, ProcessGrid& grid);
// The embedding group when this rank holds one end of the tie (first or last stage, pp > 1),
// else nullptr. The trainer hands it to DataParallel, which sums the wte gradients over it
// before the DP reduction (data_parallel.hpp); all_reduce_tied_embedding_grad is that sum for
// callers without DataParallel.
Comm* tied_embedding_group(ModelChunk& model, ProcessGrid& grid);

}  // namespace mpitron
