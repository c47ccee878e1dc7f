// Blockwise (ring) attention's per-block kernels (Ops::attention_block_forward / _backward)
// against the whole-sequence causal attention kernel (attention_forward / _backward, itself
// checked by finite differences in test_ops_grad): a sequence cut into cp ranks' load-balanced
// chunks (cp_global_position), every rank's queries run over every rank's key/value block with
// the online softmax, as RingAttention does in a cp group, give the same output and the same
// dq, dk, dv (dk, dv summed over the blocks' visitors) within 1e-5 of the largest value.
// Grouped-query attention (4 query heads on 2 kv heads). With document masking (qstart / doc_start:
// each query sees only its document's keys) the same, documents crossing the chunk boundaries.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <vector>

#include "grad_check.hpp"
#include "mpitron/model/model_chunk.hpp"
#include "mpitron/ops/ops.hpp"

using namespace mpitron;
using namespace mpitron::testing;

namespace {

double rel_err(const std::vector<float>& a, const std::vector<float>& ref) {
  double e = 0, m = 1e-30;
  for (size_t i = 0; i < ref.size(); ++i) {
    m = std::max(m, std::fabs(static_cast<double>(ref[i])));
    e = std::max(e, std::fabs(static_cast<double>(a[i]) - ref[i]));
  }
  return e / m;
}

// doc_start [B, T] (empty: causal only): the blocks against the whole-sequence kernel.
void check_blocks(const std::vector<int32_t>& doc_start) {
  auto ops = make_cpu_ops();
  const int B = 2, T = 48, H = 4, KV = 2, hd = 8;
  const int64_t Q = int64_t{H + 2 * KV} * hd, O = int64_t{H} * hd, KVW = 2 * int64_t{KV} * hd;
  auto qkv = randn(B * T * Q, 11), dout = randn(B * T * O, 12);
  std::vector<float> out(B * T * O), att(int64_t{B} * H * T * T), dqkv(B * T * Q);
  const int32_t* ds = doc_start.empty() ? nullptr : doc_start.data();
  ops->attention_forward(out.data(), att.data(), qkv.data(), B, T, H, hd, KV, ds);
  ops->attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), B, T, H, hd, KV, ds);
  for (int cp : {1, 2, 4}) {
    const int Tl = T / cp;
    auto pos = [&](int r, int t) { return cp_global_position(t, r, cp, T); };
    // Per rank: its rows of qkv, dout; its k|v block.
    std::vector<std::vector<float>> q(cp), d(cp), kv(cp);
    std::vector<std::vector<int>> p(cp);
    std::vector<std::vector<int32_t>> qs(cp);  // per rank [B, Tl]: its rows' document starts
    for (int r = 0; r < cp; ++r) {
      for (int t = 0; t < Tl; ++t) p[r].push_back(pos(r, t));
      for (int b = 0; b < B && ds; ++b)
        for (int t = 0; t < Tl; ++t) qs[r].push_back(ds[int64_t{b} * T + p[r][t]]);
      q[r].resize(B * Tl * Q), d[r].resize(B * Tl * O), kv[r].resize(B * Tl * KVW);
      for (int b = 0; b < B; ++b)
        for (int t = 0; t < Tl; ++t) {
          const int64_t src = int64_t{b} * T + p[r][t], dst = int64_t{b} * Tl + t;
          std::copy_n(qkv.data() + src * Q, Q, q[r].data() + dst * Q);
          std::copy_n(dout.data() + src * O, O, d[r].data() + dst * O);
          std::copy_n(qkv.data() + src * Q + O, KVW, kv[r].data() + dst * KVW);
        }
    }
    std::vector<float> got_out(out.size()), got_d(dqkv.size(), 0.f);
    std::vector<std::vector<float>> dkv(cp, std::vector<float>(B * Tl * KVW, 0.f));
    for (int r = 0; r < cp; ++r) {
      const int64_t st = int64_t{B} * H * Tl;
      std::vector<float> o(B * Tl * O, 0.f), m(st, -INFINITY), l(st, 0.f), lse(st), dsum(st), dq(B * Tl * Q, 0.f);
      for (int s = 0; s < cp; ++s)
        ops->attention_block_forward(o.data(), m.data(), l.data(), q[r].data(), Q, kv[s].data(), B, Tl, Tl, H, KV, hd,
                                     p[r].data(), p[s].data(), ds ? qs[r].data() : nullptr);
      for (int64_t i = 0; i < st; ++i) lse[i] = m[i] + std::log(l[i]);
      for (int b = 0; b < B; ++b)
        for (int h = 0; h < H; ++h)
          for (int t = 0; t < Tl; ++t) {
            const int64_t i = (int64_t{b} * H + h) * Tl + t;
            float* row = o.data() + (int64_t{b} * Tl + t) * O + int64_t{h} * hd;
            for (int e = 0; e < hd; ++e) row[e] /= l[i];
            dsum[i] = static_cast<float>(dot(row, d[r].data() + (int64_t{b} * Tl + t) * O + int64_t{h} * hd, hd));
          }
      for (int s = 0; s < cp; ++s)
        ops->attention_block_backward(dq.data(), Q, dkv[s].data(), q[r].data(), Q, kv[s].data(), d[r].data(),
                                      lse.data(), dsum.data(), B, Tl, Tl, H, KV, hd, p[r].data(), p[s].data(),
                                      ds ? qs[r].data() : nullptr);
      for (int b = 0; b < B; ++b)
        for (int t = 0; t < Tl; ++t) {
          const int64_t full = int64_t{b} * T + p[r][t], loc = int64_t{b} * Tl + t;
          std::copy_n(o.data() + loc * O, O, got_out.data() + full * O);
          std::copy_n(dq.data() + loc * Q, O, got_d.data() + full * Q);
        }
    }
    for (int s = 0; s < cp; ++s)  // each block's dk|dv, summed over every rank that attended to it
      for (int b = 0; b < B; ++b)
        for (int t = 0; t < Tl; ++t)
          std::copy_n(dkv[s].data() + (int64_t{b} * Tl + t) * KVW, KVW,
                      got_d.data() + (int64_t{b} * T + p[s][t]) * Q + O);
    const double eo = rel_err(got_out, out), ed = rel_err(got_d, dqkv);
    BOOST_TEST_MESSAGE("cp " << cp << (ds ? " documents" : "") << ": output rel err " << eo << ", dqkv rel err " << ed);
    BOOST_TEST(eo <= 1e-5);
    BOOST_TEST(ed <= 1e-5);
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(attention_block)

BOOST_AUTO_TEST_CASE(blocks_over_load_balanced_chunks_equal_full_attention) { check_blocks({}); }

// Sequence 0: documents of 10, 20 and 18 tokens; sequence 1: 5 and 43 (each crosses chunks of
// 6, 12 and 24 rows at cp 4, 2, 1).
BOOST_AUTO_TEST_CASE(document_masked_blocks_equal_full_attention) {
  std::vector<int32_t> ds;
  for (const auto& lens : {std::vector<int>{10, 20, 18}, std::vector<int>{5, 43}})
    for (int at = 0, k = 0; k < static_cast<int>(lens.size()); at += lens[k++])
      for (int t = 0; t < lens[k]; ++t) ds.push_back(at);
  BOOST_REQUIRE(ds.size() == 96u);
  check_blocks(ds);
}

BOOST_AUTO_TEST_SUITE_END()
