// Tied embeddings across pipeline stages, Megatron's way: the last stage holds its own copy of
// wte for the LM head. At start the first stage's wte is broadcast to it over the embedding
// group (first + last stage of each pipeline); every step, after the DP gradient sync, the two
// wte gradients are all-reduced over that group, so both copies take the same AdamW update and
// stay identical. With pp = 1 (one stage holds both) every function here does nothing.
#pragma once
#include "mpitron/dist/grid.hpp"
#include "mpitron/model/gpt.hpp"
#include "mpitron/ops/ops.hpp"

namespace mpitron {

void sync_tied_embedding(GPT& model, ProcessGrid& grid);
void all_reduce_tied_embedding_grad(GPT& model, ProcessGrid& grid);
// Sum of squares of this stage's gradients for the global grad norm, summed over the pipeline
// group, with the last stage's wte copy left out (the tied gradient counts once).
// local_sq: this rank's sum of squares over all its gradients.
double pipeline_grad_sum_squares(double local_sq, GPT& model, Ops& ops, ProcessGrid& grid);

}  // namespace mpitron
