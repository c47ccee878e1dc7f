// attention_segments (the ragged batches cuDNN's attention takes) against the masks mpitron
// defines by position: key j visible to query i when kpos[j] <= qpos[i] and, with documents,
// kpos[j] >= the first position of i's document. For every cp size 1, 2, 4, every rank's
// queries against every rank's block (the ring's load-balanced chunks), with and without
// documents (random lengths from 1 up, odd ones, documents crossing the chunks), the mask the
// segments describe equals the definition element by element. Then the buckets and the table.
#include <boost/test/unit_test.hpp>
#include <vector>

#include "mpitron/core/error.hpp"
#include "mpitron/core/rng.hpp"
#include "mpitron/model/model_chunk.hpp"
#include "mpitron/ops/attention_segments.hpp"

using namespace mpitron;

namespace {

// Documents of random lengths 1 .. max_len over [B, T] global positions: each position's
// document start.
std::vector<int32_t> random_starts(int B, int T, int max_len, uint64_t seed) {
  std::vector<int32_t> s(static_cast<size_t>(B) * T);
  uint64_t n = 0;
  for (int b = 0; b < B; ++b)
    for (int t = 0, start = 0, left = 0; t < T; ++t) {
      if (left == 0) start = t, left = 1 + static_cast<int>(counter_bits(seed, b, n++) % max_len);
      s[static_cast<size_t>(b) * T + t] = start;
      --left;
    }
  return s;
}

// The segments' mask against the definition, for queries at qpos and keys at kpos.
void check_block(const std::vector<int>& qpos, const std::vector<int>& kpos, int B, const int32_t* start,
                 const char* what) {
  const int Tq = static_cast<int>(qpos.size()), Tk = static_cast<int>(kpos.size());
  const AttentionSegments s = attention_segments(qpos.data(), Tq, kpos.data(), Tk, B, start);
  std::vector<char> seg(static_cast<size_t>(B) * Tq * Tk, 0);
  for (int i = 0; i < s.count(); ++i)
    for (int q = 0; q < s.nq[i]; ++q)
      for (int k = 0; k < s.nk[i]; ++k)
        if (!s.causal || k <= q) {
          char& c = seg[(static_cast<size_t>(s.b[i]) * Tq + s.q0[i] + q) * Tk + s.k0[i] + k];
          BOOST_REQUIRE_MESSAGE(c == 0, what << ": segments overlap");
          c = 1;
        }
  int visible = 0;
  for (int b = 0; b < B; ++b)
    for (int q = 0; q < Tq; ++q)
      for (int k = 0; k < Tk; ++k) {
        const int32_t st = start ? start[static_cast<size_t>(b) * Tq + q] : 0;
        const bool want = kpos[k] <= qpos[q] && kpos[k] >= st;
        visible += want;
        BOOST_REQUIRE_MESSAGE(seg[(static_cast<size_t>(b) * Tq + q) * Tk + k] == want,
                              what << ": b " << b << " query " << q << " key " << k << " segments say "
                                   << int(seg[(static_cast<size_t>(b) * Tq + q) * Tk + k]) << ", the mask " << want);
      }
  int len_q = 0, len_kv = 0;
  for (int i = 0; i < s.count(); ++i) len_q = std::max(len_q, s.nq[i]), len_kv = std::max(len_kv, s.nk[i]);
  BOOST_TEST(s.max_q == len_q);
  BOOST_TEST(s.max_kv == len_kv);
  (void)visible;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(attention_segments_suite)

BOOST_AUTO_TEST_CASE(ring_blocks_match_the_position_masks) {
  const int B = 3, T = 48;
  for (int max_len : {0, 1, 3, 7, 20, 60})
    for (int cp : {1, 2, 4}) {
      const int Tl = T / cp;
      const auto starts = random_starts(B, T, max_len ? max_len : 1, 100 + max_len);
      std::vector<std::vector<int>> pos(cp);
      for (int r = 0; r < cp; ++r)
        for (int t = 0; t < Tl; ++t) pos[r].push_back(cp_global_position(t, r, cp, T));
      for (int r = 0; r < cp; ++r) {
        std::vector<int32_t> local(static_cast<size_t>(B) * Tl);  // rank r's rows' document starts
        for (int b = 0; b < B; ++b)
          for (int t = 0; t < Tl; ++t) local[static_cast<size_t>(b) * Tl + t] = starts[static_cast<size_t>(b) * T + pos[r][t]];
        for (int src = 0; src < cp; ++src) {
          const std::string what = "cp " + std::to_string(cp) + " rank " + std::to_string(r) + " block " +
                                   std::to_string(src) + " documents " + std::to_string(max_len);
          check_block(pos[r], pos[src], B, max_len ? local.data() : nullptr, what.c_str());
          const AttentionSegments s =
              attention_segments(pos[r].data(), Tl, pos[src].data(), Tl, B, max_len ? local.data() : nullptr);
          if (src == r && max_len != 1) BOOST_TEST(s.causal);  // the diagonal block
          if (src != r) BOOST_TEST(!s.causal);
          if (!max_len) BOOST_TEST(s.count() == B);  // one segment per sequence
        }
      }
    }
}

BOOST_AUTO_TEST_CASE(documents_of_one_token_and_empty_blocks) {
  // cp 1, every document one token: each query sees only itself (B T segments of 1 x 1).
  std::vector<int> pos(16);
  for (int t = 0; t < 16; ++t) pos[t] = t;
  std::vector<int32_t> own(2 * 16);
  for (int i = 0; i < 32; ++i) own[i] = i % 16;
  const AttentionSegments s = attention_segments(pos.data(), 16, pos.data(), 16, 2, own.data());
  BOOST_TEST(s.count() == 32);
  BOOST_TEST(s.max_q == 1);
  BOOST_TEST(s.max_kv == 1);
  // Keys all after the queries: no segment.
  std::vector<int> late = {20, 21, 22};
  BOOST_TEST(attention_segments(pos.data(), 16, late.data(), 3, 2, nullptr).count() == 0);
}

BOOST_AUTO_TEST_CASE(buckets_and_table) {
  std::vector<int> pos(256);
  for (int t = 0; t < 256; ++t) pos[t] = t;
  std::vector<int32_t> starts(2 * 256);
  for (int t = 0; t < 256; ++t) starts[t] = t < 100 ? 0 : 100, starts[256 + t] = t < 70 ? 0 : t < 71 ? 70 : 71;
  const AttentionSegments s = attention_segments(pos.data(), 256, pos.data(), 256, 2, starts.data());
  BOOST_TEST(s.count() == 5);
  BOOST_TEST(s.causal);
  const SegmentBuckets k = segment_buckets(s);
  BOOST_TEST(k.n == 8);
  BOOST_TEST(k.sq == 256);  // 185 rows -> 256
  BOOST_TEST(k.skv == 256);
  std::vector<int32_t> table(kSegmentTableRows * 8, -1);
  segment_table(s, 8, table.data());
  // Segment 1: sequence 0's second document (rows 100 .. 255); segment 3: sequence 1's row 70.
  BOOST_TEST(table[1] == 100);
  BOOST_TEST(table[8 + 1] == 156);
  BOOST_TEST(table[16 + 1] == 100);
  BOOST_TEST(table[24 + 1] == 156);
  BOOST_TEST(table[3] == 256 + 70);
  BOOST_TEST(table[8 + 3] == 1);
  BOOST_TEST(table[6] == 512);  // past the segments: empty, at the end of the last one
  BOOST_TEST(table[8 + 6] == 0);
  BOOST_TEST(table[16 + 7] == 512);
  BOOST_TEST(table[24 + 7] == 0);
  BOOST_CHECK_THROW(segment_table(s, 4, table.data()), Error);
  // Short documents: the buckets stay at 64 rows.
  std::vector<int32_t> short_docs(2 * 256);
  for (int i = 0; i < 512; ++i) short_docs[i] = i % 256 / 10 * 10;
  const SegmentBuckets k2 = segment_buckets(attention_segments(pos.data(), 256, pos.data(), 256, 2, short_docs.data()));
  BOOST_TEST(k2.sq == 64);
  BOOST_TEST(k2.n == 64);  // 2 x 26 documents
}

BOOST_AUTO_TEST_CASE(unsupported_layouts_are_refused) {
  std::vector<int> q = {0, 1, 2, 3}, down = {3, 2, 1, 0};
  BOOST_CHECK_THROW(attention_segments(q.data(), 4, down.data(), 4, 1, nullptr), Error);
  // Keys interleaved with the queries: query 3 sees keys 0 and 2 of {0, 2, 4, 6} (a prefix, but
  // query 1 sees 1 key and query 2 too: neither causal nor full).
  std::vector<int> keys = {0, 2, 4, 6};
  BOOST_CHECK_THROW(attention_segments(q.data(), 4, keys.data(), 4, 1, nullptr), Error);
}

BOOST_AUTO_TEST_SUITE_END()
