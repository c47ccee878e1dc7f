// Attention as a list of segments: the form in which cuDNN's fused attention takes packed
// documents and the context-parallel ring's blocks (a ragged batch: every "sequence" of the batch
// has its own query rows, key rows and lengths; cuDNN skips what lies outside them).
//
// A segment pairs a run of query rows with a run of key rows of the same batch row. Inside it the
// mask is none, or causal aligned at the top left (key k0 + j visible to query q0 + i when
// j <= i); outside every segment nothing is visible. attention_segments() derives the segments
// from the masks mpitron defines by positions (key j visible to query i when kpos[j] <= qpos[i]
// and, with documents, kpos[j] >= the first position of i's document) and checks that the
// segments say exactly that: a layout they cannot express is an error, never an approximation.
// Host-only; the GPU backend uploads segment_table() (ops/cuda/cuda_ops.hpp).
#pragma once
#include <cstdint>
#include <vector>

namespace mpitron {

struct AttentionSegments {
  int B = 0, Tq = 0, Tk = 0;
  bool causal = false;  // every segment's mask (a segment of one key per query is both)
  // Per segment: its batch row, its first query row and count, its first key row and count
  // (rows counted within the batch row: query row b * Tq + q0 of the [B * Tq] rows).
  std::vector<int32_t> b, q0, nq, k0, nk;
  int max_q = 0, max_kv = 0;  // the longest segment's rows
  int count() const { return static_cast<int>(b.size()); }
};

// Queries of B sequences at global positions qpos[Tq], keys at kpos[Tk], both strictly
// increasing; start ([B * Tq], nullptr: none) the global position of each query row's document's
// first token (data.document_mask). Query rows that see no key are in no segment. Throws Error
// when the visible keys of some query are not a causal or full segment (an internal error: the
// layouts mpitron builds, cp 1 and the ring's load-balanced chunks, always are).
AttentionSegments attention_segments(const int32_t* qpos, int Tq, const int32_t* kpos, int Tk, int B,
                                     const int32_t* start);

// The shape a cuDNN graph is built for: n segments (a power of two, at least 1, at most B Tq) of at most sq
// query and skv key rows (powers of two from 64, capped at Tq and Tk). Bucketing bounds the number
// of distinct graphs a run with varying document lengths builds (log2 of each range).
struct SegmentBuckets {
  int n = 0, sq = 0, skv = 0;
  bool operator<(const SegmentBuckets& o) const {
    return n != o.n ? n < o.n : sq != o.sq ? sq < o.sq : skv < o.skv;
  }
};
SegmentBuckets segment_buckets(const AttentionSegments& s);

// The table a device reads, [4][n] int32 (n >= s.count(), the bucketed count): per segment its
// first query row in [B * Tq] rows (b * Tq + q0), nq, its first key row in [B * Tk] rows, nk;
// entries past s.count() are empty segments (0 rows) starting where the last one ends, so that
// the first rows never decrease (cuDNN's ragged offsets).
constexpr int kSegmentTableRows = 4;
void segment_table(const AttentionSegments& s, int n, int32_t* out);

// A segment table in device memory and what it describes (CudaOps::attention_segments_*).
struct DeviceSegments {
  const int32_t* table = nullptr;  // [kSegmentTableRows][shape.n] (segment_table)
  SegmentBuckets shape;            // the table's entries and the graph's rows
  int count = 0;                   // segments in use; 0: the call does nothing
  bool causal = false;
  int B = 0, Tq = 0, Tk = 0;
};

}  // namespace mpitron
