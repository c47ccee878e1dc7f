#include "mpitron/model/model_chunk.hpp"

namespace mpitron {

const ParamInfo* ModelChunk::find_param(const std::string& name) const {
  for (const auto& p : params())
    if (p.name == name) return &p;
  return nullptr;
}

const ParamInfo* ModelChunk::find_token_embedding() const {
  for (const auto& p : params())
    if (is_token_embedding(p.name)) return &p;
  return nullptr;
}

}  // namespace mpitron
