// Gradient bucket plans and ZeRO shard arithmetic (src/parallel/grad_buckets.cpp), plus the
// TransformerModel unit-hook sequence they rely on: buckets tile the flat layout in reverse order,
// respect the size cap, become ready exactly when backward has finished their last unit; shards
// tile [0, n).
#include <boost/test/unit_test.hpp>
#include <numeric>
#include <utility>
#include <vector>

#include "mpitron/model/config.hpp"
#include "mpitron/model/param_tables.hpp"
#include "mpitron/model/transformer_model.hpp"
#include "mpitron/parallel/grad_buckets.hpp"

using namespace mpitron;

namespace {
ModelConfig tiny() {
  ModelConfig c = model_preset("tiny");  // 2 blocks, d 64, vocab 256, seq 64
  return c;
}
size_t flat_size(const std::vector<ParamInfo>& t) { return flat_param_floats(t); }
}  // namespace

BOOST_AUTO_TEST_SUITE(dp_buckets)

BOOST_AUTO_TEST_CASE(buckets_tile_the_flat_layout_in_reverse) {
  ModelShard s;
  auto table = gpt_param_table(tiny(), s);
  const size_t n = flat_size(table);
  for (size_t cap : {size_t{1}, size_t{1000}, size_t{50000}, size_t{1} << 30}) {
    auto b = plan_grad_buckets(table, n, cap, s, 2);
    BOOST_REQUIRE(!b.empty());
    BOOST_TEST(b.front().end == n);
    BOOST_TEST(b.back().begin == 0u);
    size_t params = 0;
    for (size_t i = 0; i < b.size(); ++i) {
      if (i > 0) BOOST_TEST(b[i].end == b[i - 1].begin);  // contiguous, descending
      params += b[i].params.size();
      // Closed as soon as it reached the cap: without its last parameter it was below the cap.
      const auto& p = b[i].params;
      if (p.size() > 1) BOOST_TEST(b[i].end - table[p[p.size() - 2]].offset < cap);
      if (i + 1 < b.size()) BOOST_TEST(b[i].end - b[i].begin >= cap);
    }
    BOOST_TEST(params == table.size());
    if (cap == 1) BOOST_TEST(b.size() == table.size());  // smaller than any tensor: one each
    if (cap == (size_t{1} << 30)) BOOST_TEST(b.size() == 1u);
  }
}

// LLaMA's q|k|v and gate|up run as one GEMM each, so their gradients must be one range: with a
// cap smaller than any tensor every other tensor gets a bucket of its own, and k, v stay with q,
// up with gate.
BOOST_AUTO_TEST_CASE(llama_fused_tensors_share_a_bucket) {
  ModelShard s;
  auto table = model_param_table(model_preset("llama-tiny"), s);
  auto b = plan_grad_buckets(table, flat_size(table), 1, s, 2);
  for (const auto& bk : b) {
    std::string names;
    for (size_t i : bk.params) names += table[i].name + " ";
    const bool has_q = names.find("q_proj") != std::string::npos, has_gate = names.find("gate_proj") != std::string::npos;
    if (names.find("k_proj") != std::string::npos || names.find("v_proj") != std::string::npos)
      BOOST_TEST((has_q && bk.params.size() == 3u), names);
    else if (names.find("up_proj") != std::string::npos)
      BOOST_TEST((has_gate && bk.params.size() == 2u), names);
    else
      BOOST_TEST(bk.params.size() == 1u, names);
  }
  BOOST_TEST(b.size() == table.size() - 3 * 2u);  // 2 blocks: k, v and up join their neighbours
}

BOOST_AUTO_TEST_CASE(worked_example_of_the_header) {
  ModelShard s;
  auto table = gpt_param_table(tiny(), s);
  auto b = plan_grad_buckets(table, flat_size(table), 50100, s, 2);
  BOOST_REQUIRE(b.size() == 3u);
  BOOST_TEST(b[0].end - b[0].begin == 50112u);  // ln_f + h.1
  BOOST_TEST(b[0].ready_at == backward_position(1, 2));
  BOOST_TEST(b[1].ready_at == backward_position(TransformerModel::kEmbeddingUnit, 2));  // h.0 + wpe
  BOOST_TEST(b[2].params.size() == 1u);                                                 // wte alone
  BOOST_TEST(table[b[2].params[0]].name == "wte.weight");
  BOOST_TEST(b[2].alloc_at == 0);  // the tied head writes wte's gradient first
}

// Pipeline stages with the tie: wte gets a deferred bucket of its own on the first stage (below
// wpe) and on the last (below the blocks), whatever the cap; nothing else is deferred.
// parallel.bucket_mb = 0 (the default): a quarter of the chunk, at most 25 MiB: the tiny model
// gets four buckets (one 25 MiB bucket used to hold it all, and its only all-reduce started after
// backward), a large model PyTorch's 25 MiB; an explicit cap is taken as given.
BOOST_AUTO_TEST_CASE(automatic_bucket_cap) {
  ModelShard s;
  auto table = gpt_param_table(tiny(), s);
  const size_t n = flat_param_floats(table);
  BOOST_TEST(grad_bucket_floats(0, n) == (n + 3) / 4);
  BOOST_TEST(plan_grad_buckets(table, n, grad_bucket_floats(0, n), s, 2).size() >= 4u);
  BOOST_TEST(plan_grad_buckets(table, n, grad_bucket_floats(25, n), s, 2).size() == 1u);
  BOOST_TEST(grad_bucket_floats(0, size_t{1} << 30) == (size_t{25} << 20) / 4);
  BOOST_TEST(grad_bucket_floats(1, 10) == (size_t{1} << 20) / 4);
  BOOST_TEST(grad_bucket_floats(0, 1) == 1u);
}

BOOST_AUTO_TEST_CASE(tied_wte_across_stages_is_a_deferred_bucket_of_its_own) {
  ModelConfig c = tiny();
  ModelShard first, last;
  first.layer_begin = 0, first.layer_end = 1, first.has_head = false;
  last.layer_begin = 1, last.layer_end = 2, last.has_embedding = false;
  for (const ModelShard& s : {first, last})
    for (size_t cap : {size_t{1000}, size_t{1} << 30}) {
      auto table = gpt_param_table(c, s);
      auto b = plan_grad_buckets(table, flat_size(table), cap, s, 1, /*tied_across_stages=*/true);
      BOOST_REQUIRE(b.size() >= 2u);
      BOOST_TEST(b.back().deferred);
      BOOST_REQUIRE(b.back().params.size() == 1u);
      BOOST_TEST(table[b.back().params[0]].name == "wte.weight");
      BOOST_TEST(b.back().begin == 0u);
      for (size_t i = 0; i + 1 < b.size(); ++i) BOOST_TEST(!b[i].deferred);
      BOOST_TEST(b.back().alloc_at == (s.has_head ? 0 : backward_position(TransformerModel::kEmbeddingUnit, 1)));
    }
}

BOOST_AUTO_TEST_CASE(zero_shards_tile_and_align) {
  for (size_t n : {size_t{16}, size_t{124672}, size_t{174656}, size_t{1000000}})
    for (int size : {1, 2, 3, 4, 5, 8}) {
      size_t next = 0;
      for (int r = 0; r < size; ++r) {
        FlatRange s = zero_shard(n, size, r);
        BOOST_TEST(s.begin == next);
        BOOST_TEST(s.begin % 16 == 0u);
        next = s.end;
        auto c = shard_counts(0, n, n, size);
        BOOST_TEST(c[r] == s.size());
      }
      BOOST_TEST(next == n);
      auto c = shard_counts(n / 3, n / 2, n, size);
      BOOST_TEST(std::accumulate(c.begin(), c.end(), size_t{0}) == n / 2 - n / 3);
    }
  BOOST_TEST(zero_shard(124672, 3, 2).size() == 41536u);  // uneven: 41,568 + 41,568 + 41,536
}

BOOST_AUTO_TEST_CASE(unit_hook_order) {
  auto ops = make_cpu_ops();
  ModelConfig c = tiny();
  TransformerModel m(c, ModelShard{}, *ops, 1);
  m.init_weights(1);
  std::vector<std::pair<TransformerModel::UnitEvent, int>> ev;
  m.set_unit_hook([&](TransformerModel::UnitEvent e, int u) { ev.emplace_back(e, u); });
  std::vector<int32_t> x(c.seq_len, 1), y(c.seq_len, 2);
  int64_t nt = 0;
  m.forward(x.data(), y.data(), 1, &nt);
  m.backward(1.0f);
  using E = TransformerModel::UnitEvent;
  const int emb = TransformerModel::kEmbeddingUnit, head = TransformerModel::kHeadUnit;
  std::vector<std::pair<E, int>> want = {
      {E::pre_forward, emb},   {E::pre_forward, 0},     {E::post_forward, 0},   {E::pre_forward, 1},
      {E::post_forward, 1},    {E::pre_forward, head},  {E::post_forward, head}, {E::post_forward, emb},
      {E::pre_backward, head}, {E::post_backward, head}, {E::pre_backward, 1},   {E::post_backward, 1},
      {E::pre_backward, 0},    {E::post_backward, 0},   {E::pre_backward, emb}, {E::post_backward, emb}};
  BOOST_TEST((ev == want));
}

BOOST_AUTO_TEST_SUITE_END()
