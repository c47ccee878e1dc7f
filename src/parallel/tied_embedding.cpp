#include "mpitron/parallel/tied_embedding.hpp"

#include "mpitron/core/error.hpp"

namespace mpitron {
namespace {

// The token embedding copy this rank keeps for the tie, or nullptr (middle stages, pp = 1, or an
// untied LM head).
const ParamInfo* tied_wte(ModelChunk& model, ProcessGrid& grid) {
  if (!model.config().tied_embeddings || grid.shape().pp == 1 || !(grid.is_first_stage() || grid.is_last_stage()))
    return nullptr;
  const ParamInfo* p = model.find_token_embedding();
  check(p != nullptr, "tied embedding: stage {} has no token embedding", grid.coord().pp);
  check(grid.embedding().size() == 2, "tied embedding: embedding group of {} ranks (expected 2)",
        grid.embedding().size());
  return p;
}

}  // namespace

void sync_tied_embedding(ModelChunk& model, ProcessGrid& grid) {
  if (const ParamInfo* p = tied_wte(model, grid)) {
    grid.embedding().broadcast(model.param_data() + p->offset, p->numel, DType::f32, /*root=first stage*/ 0);
    model.params_changed();
  }
}

void all_reduce_tied_embedding_grad(ModelChunk& model, ProcessGrid& grid) {
  if (const ParamInfo* p = tied_wte(model, grid))
    grid.embedding().all_reduce(model.grad_data() + p->offset, p->numel, DType::f32, ReduceOp::sum);
}

Comm* tied_embedding_group(ModelChunk& model, ProcessGrid& grid) {
  return tied_wte(model, grid) ? &grid.embedding() : nullptr;
}

}  // namespace mpitron
