// One rank's share of the model, the same arithmetic on both devices: the per-rank widths under
// tensor parallel (whole heads per rank, Megatron's split), this rank's positions of every
// sequence under context parallel (two load-balanced chunks), where each local row sits in the
// trainer's full [B, seq_len] arrays, and the rotary embedding over those positions. The CPU
// TransformerModel and the GPU TransformerModelCuda both hold one; only the element type and the
// ops differ.
#pragma once
#include <cstdint>
#include <vector>

#include "mpitron/model/config.hpp"
#include "mpitron/model/model_chunk.hpp"
#include "mpitron/ops/attention_segments.hpp"
#include "mpitron/ops/rope_freqs.hpp"

namespace mpitron {

// Document masking (data.document_mask) of one micro-batch, per local row ([B, Tl], this rank's
// positions under cp): pos, the token's position in its document (wpe's row, RoPE's angle; host
// memory: RoPE runs once per run of consecutive positions); start, the sequence index of its
// document's first token (the first key it attends to; the device's memory, which the attention
// kernels read). Both nullptr: no document masking. segments: the GPU's cuDNN path, the same
// documents as attention segments on the device (ops/attention_segments.hpp; cp 1), or nullptr.
struct DocumentRows {
  const int32_t* pos = nullptr;
  const int32_t* start = nullptr;
  const DeviceSegments* segments = nullptr;
  explicit operator bool() const { return pos != nullptr; }
};

struct ShardGeometry {
  // Checks that the shard can split this model (UsageError naming the sizes when it cannot).
  ShardGeometry(const ModelConfig& cfg, const ModelShard& shard);

  int tp = 1, cp = 1, cp_rank = 0;
  int seq_len = 0, Tl = 0;  // positions per sequence: in all, and on this rank (seq_len / cp)
  int hd = 0;               // head dim
  bool sp = false;          // sequence parallel (tp > 1 only)
  RopeFreqs rope_freqs;  // RoPE models: the rotation of every pair (model/rope_scaling.hpp); empty otherwise
  // Per rank: query heads, key/value heads, attention width (h_local hd), MLP width (F/tp), the
  // fused q|k|v output width ((H + 2 KV) hd / tp), fc's output width (F/tp, or 2F/tp for gate|up),
  // and the vocabulary rows (padded vocab / tp) starting at vocab_begin.
  int64_t h_local = 0, kv_local = 0, c_local = 0, f_local = 0, qkv_local = 0, fc_local = 0;
  int64_t vp = 0, vocab_begin = 0;
  // Global position of every rank's local positions: [cp, Tl] (0..T-1 without cp).
  std::vector<int32_t> all_positions;

  const int32_t* positions() const { return all_positions.data() + int64_t{cp_rank} * Tl; }  // this rank's
  // Local row i of a micro-batch ([B, Tl]) in the trainer's full [B, seq_len] arrays.
  int64_t full_index(int64_t i) const { return cp == 1 ? i : i / Tl * seq_len + positions()[i % Tl]; }
  // Document masking: this rank's BT rows of a micro-batch from the trainer's positions (each token's
  // position in its document, full [B, seq_len] layout): pos[i], the row's position in its document;
  // start[i], the sequence index of its document's first token (DocumentRows). Throws (naming
  // `who`) where a position does not continue its document.
  void document_rows(const int32_t* positions, int64_t BT, int32_t* pos, int32_t* start, const char* who) const;
  // Rows of a [B * Tl, ...] activation this rank holds outside the TP layers: all, or 1/tp under SP.
  int64_t local_rows(int64_t BT) const { return sp ? BT / tp : BT; }

  // Rotary embedding of this rank's query and key heads in x ([B * Tl, qkv_local] rows, q first,
  // then k) at their global positions: each chunk's positions are consecutive, so one call per
  // sequence and chunk under cp, one for the whole batch without. inverse: the rotation back
  // (the backward). Ops is Ops (fp32) or CudaOps (bf16). With doc_pos ([B, Tl] positions in the
  // documents) one call per run of consecutive positions (a document's part of a chunk).
  template <class Ops, class T>
  void rope(Ops& ops, T* x, int B, bool inverse, const int32_t* doc_pos = nullptr) const {
    const int chunk = cp > 1 ? Tl / 2 : Tl;
    // nb sequences of n rows from q at positions pos0 .. pos0 + n - 1: the query heads, then the key heads.
    auto rotate = [&](T* q, int nb, int n, int pos0) {
      ops.rope(q, nb, n, static_cast<int>(h_local), hd, qkv_local, rope_freqs, pos0, inverse);
      ops.rope(q + c_local, nb, n, static_cast<int>(kv_local), hd, qkv_local, rope_freqs, pos0, inverse);
    };
    if (doc_pos) {
      for (int64_t r = 0; r < int64_t{B} * Tl;) {
        int64_t e = r + 1;
        while (e % chunk != 0 && doc_pos[e] == doc_pos[e - 1] + 1) ++e;
        rotate(x + r * qkv_local, 1, static_cast<int>(e - r), doc_pos[r]);
        r = e;
      }
      return;
    }
    for (int b = 0; b < (cp > 1 ? B : 1); ++b)
      for (int c = 0; c < Tl / chunk; ++c)
        rotate(x + (int64_t{b} * Tl + int64_t{c} * chunk) * qkv_local, cp > 1 ? 1 : B, chunk, positions()[c * chunk]);
  }
  // Attention's backward passes through the rotation: dq, dk rotated back.
  template <class Ops, class T>
  void rope_backward(Ops& ops, T* dqkv, int B, const int32_t* doc_pos = nullptr) const {
    rope(ops, dqkv, B, /*inverse=*/true, doc_pos);
  }
};

}  // namespace mpitron
