#include "mpitron/model/shard_geometry.hpp"

#include "mpitron/core/error.hpp"
#include "mpitron/model/arch.hpp"
#include "mpitron/model/rope_scaling.hpp"

namespace mpitron {

ShardGeometry::ShardGeometry(const ModelConfig& cfg, const ModelShard& s)
    : tp(s.tp_size), cp(s.cp_size), cp_rank(s.cp_rank), seq_len(cfg.seq_len), hd(cfg.head_dim()),
      sp(s.sequence_parallel && s.tp_size > 1) {
  const BlockSpec& spec = block_spec(cfg);
  const int kv = kv_heads(cfg);
  check(tp >= 1 && s.tp_rank >= 0 && s.tp_rank < tp && cp >= 1 && cp_rank >= 0 && cp_rank < cp,
        "model shard: tp rank {} of {}, cp rank {} of {}", s.tp_rank, tp, cp_rank, cp);
  check(cfg.n_head > 0 && (cfg.head_size > 0 || cfg.d_model % cfg.n_head == 0) && kv > 0 && cfg.n_head % kv == 0 &&
            (!spec.rope() || hd % 2 == 0) && (!spec.ff_is_4d || cfg.d_ff == 4 * cfg.d_model),
        "model {}: bad config d_model {} n_head {} n_kv_head {} d_ff {}", cfg.name, cfg.d_model, cfg.n_head, kv,
        cfg.d_ff);
  // The layout rules (parallel/layout_rules.hpp) have refused a layout that cannot split the model.
  check(cfg.n_head % tp == 0 && kv % tp == 0 && cfg.d_ff % tp == 0 && cfg.seq_len % (2 * cp) == 0,
        "model {}: tp {} / cp {} cannot split heads {} / {}, d_ff {}, seq_len {}", cfg.name, tp, cp, cfg.n_head, kv,
        cfg.d_ff, cfg.seq_len);
  if (spec.rope()) rope_freqs = rope_frequencies(cfg);  // once per model, on the host: both devices read it
  Tl = cfg.seq_len / cp;
  check(!sp || Tl % tp == 0, "sequence parallel needs seq_len / cp ({}) divisible by tp ({})", Tl, tp);
  h_local = cfg.n_head / tp, kv_local = kv / tp, c_local = h_local * hd, f_local = cfg.d_ff / tp;
  qkv_local = (h_local + 2 * kv_local) * hd, fc_local = spec.fc_factor() * f_local;
  vp = cfg.padded_vocab(tp) / tp, vocab_begin = int64_t{s.tp_rank} * vp;
  for (int r = 0; r < cp; ++r)
    for (int t = 0; t < Tl; ++t) all_positions.push_back(cp_global_position(t, r, cp, cfg.seq_len));
}

void ShardGeometry::document_rows(const int32_t* positions, int64_t BT, int32_t* pos, int32_t* start,
                                  const char* who) const {
  for (int64_t i = 0; i < BT; ++i) {
    const int64_t at = full_index(i);
    const int32_t p = positions[at], g = static_cast<int32_t>(at % seq_len);
    check(p >= 0 && p <= g && (g == 0 || p == 0 || positions[at - 1] == p - 1),
          "{}: document position {} at {} does not continue its document", who, p, at);
    pos[i] = p;
    start[i] = g - p;
  }
}

}  // namespace mpitron
