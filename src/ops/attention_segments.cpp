// attention_segments (ops/attention_segments.hpp).
#include "mpitron/ops/attention_segments.hpp"

#include <algorithm>

#include "mpitron/core/error.hpp"

namespace mpitron {

namespace {

bool increasing(const int32_t* p, int n) {
  for (int i = 1; i < n; ++i)
    if (p[i] <= p[i - 1]) return false;
  return true;
}

int bucket(int rows, int cap) {
  int b = 64;
  while (b < rows) b *= 2;
  return std::min(b, cap);
}

}  // namespace

AttentionSegments attention_segments(const int32_t* qpos, int Tq, const int32_t* kpos, int Tk, int B,
                                     const int32_t* start) {
  check(Tq > 0 && Tk > 0 && B > 0, "attention_segments: B {}, Tq {}, Tk {} must be positive", B, Tq, Tk);
  check(increasing(qpos, Tq) && increasing(kpos, Tk), "attention_segments: positions must increase");
  AttentionSegments s;
  s.B = B, s.Tq = Tq, s.Tk = Tk;
  bool all_full = true, all_causal = true;
  std::vector<int> hi(static_cast<size_t>(Tq));  // per query row: one past its last visible key
  for (int b = 0; b < B; ++b) {
    const int32_t* st = start ? start + int64_t{b} * Tq : nullptr;
    for (int i = 0; i < Tq; ++i) hi[i] = static_cast<int>(std::upper_bound(kpos, kpos + Tk, qpos[i]) - kpos);
    for (int r0 = 0; r0 < Tq;) {  // a run of query rows of one document (the same first position)
      const int32_t s0 = st ? st[r0] : 0;
      int r1 = r0 + 1;
      while (r1 < Tq && (st ? st[r1] : 0) == s0) ++r1;
      const int lo = static_cast<int>(std::lower_bound(kpos, kpos + Tk, s0) - kpos);
      int a = r0;  // hi is non-decreasing: the rows that see a key are a suffix of the run
      while (a < r1 && hi[a] <= lo) ++a;
      if (a < r1) {
        const int nq = r1 - a, nk = hi[r1 - 1] - lo;
        bool full = true, causal = true;
        for (int i = a; i < r1; ++i) {
          full = full && hi[i] == lo + nk;
          causal = causal && hi[i] - lo == i - a + 1;
        }
        check(full || causal,
              "attention_segments: the keys query row {} of sequence {} sees are neither all of its segment's nor a "
              "causal prefix (an unsupported position layout)",
              r1 - 1, b);
        all_full = all_full && full, all_causal = all_causal && causal;
        s.b.push_back(b), s.q0.push_back(a), s.nq.push_back(nq), s.k0.push_back(lo), s.nk.push_back(nk);
        s.max_q = std::max(s.max_q, nq), s.max_kv = std::max(s.max_kv, nk);
      }
      r0 = r1;
    }
  }
  check(all_full || all_causal,
        "attention_segments: the block mixes causal and full segments (an unsupported position layout)");
  s.causal = !all_full;
  return s;
}

SegmentBuckets segment_buckets(const AttentionSegments& s) {
  SegmentBuckets k;
  k.n = 1;
  while (k.n < s.count()) k.n *= 2;
  k.n = std::max(1, std::min(k.n, s.B * s.Tq));  // every segment has a query row of its own
  k.sq = bucket(s.max_q, s.Tq), k.skv = bucket(s.max_kv, s.Tk);
  return k;
}

void segment_table(const AttentionSegments& s, int n, int32_t* out) {
  check(n >= s.count(), "segment_table: {} entries for {} segments", n, s.count());
  int32_t q_end = 0, k_end = 0;  // one past the last segment's rows: where the empty entries start
  for (int i = 0; i < n; ++i) {
    const bool used = i < s.count();
    out[i] = used ? s.b[i] * s.Tq + s.q0[i] : q_end;
    out[n + i] = used ? s.nq[i] : 0;
    out[2 * n + i] = used ? s.b[i] * s.Tk + s.k0[i] : k_end;
    out[3 * n + i] = used ? s.nk[i] : 0;
    q_end = out[i] + out[n + i], k_end = out[2 * n + i] + out[3 * n + i];
  }
}

}  // namespace mpitron
