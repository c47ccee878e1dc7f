// DistributedSampler (torch semantics) and DataLoader state/resume/prefetch.
#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>

#include "mpitron/core/error.hpp"
#include "mpitron/data/blend.hpp"
#include "mpitron/data/loader.hpp"
#include "mpitron/data/sampler.hpp"
#include "mpitron/data/shard.hpp"

using namespace mpitron;
namespace fs = std::filesystem;

namespace {

// Shards under a temp folder whose token i is i % 65521, vocab 65536 (a BPE with no real
// merges is not needed: the loader only checks ids < vocab_size).
struct Corpus {
  fs::path dir;
  explicit Corpus(int64_t n, int64_t per) {
    dir = fs::temp_directory_path() / ("mpitron_sampler_" + std::to_string(getpid()) + "_" + std::to_string(n));
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::vector<std::pair<int32_t, int32_t>> merges;
    for (int i = 0; i < 65536 - 257; ++i) merges.emplace_back(i % 256, (i / 256) % 256);  // ids only
    Tokenizer tok = Tokenizer::bpe(merges);
    for (int64_t s = 0; s * per < n; ++s) {
      ShardWriter w(fmt::format("{}/train_{:05d}.h5", dir.string(), s), tok, 4096);
      std::vector<int32_t> ids;
      for (int64_t i = s * per; i < std::min(n, (s + 1) * per); ++i) ids.push_back(static_cast<int32_t>(i % 65521));
      w.begin_document();
      w.append(ids.data(), ids.size());
      w.commit();
    }
  }
  ~Corpus() { fs::remove_all(dir); }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(sampler)

BOOST_AUTO_TEST_CASE(worked_example_from_the_header) {
  DistributedSampler d1(10, 4, 1, false, 0, true);
  BOOST_TEST(d1.indices() == (std::vector<int64_t>{1, 5}), boost::test_tools::per_element());
  DistributedSampler p1(10, 4, 1, false, 0, false), p3(10, 4, 3, false, 0, false);
  BOOST_TEST(p1.indices() == (std::vector<int64_t>{1, 5, 9}), boost::test_tools::per_element());
  BOOST_TEST(p3.indices() == (std::vector<int64_t>{3, 7, 1}), boost::test_tools::per_element());
  DistributedSampler tiny(1, 4, 3, false, 0, false);  // padding longer than the data
  BOOST_TEST(tiny.indices() == (std::vector<int64_t>{0}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(ranks_partition_each_epoch) {
  for (bool drop_last : {true, false})
    for (int64_t n : {1000, 1003}) {
      const int D = 4;
      for (uint64_t epoch : {0, 1, 7}) {
        std::multiset<int64_t> all;
        std::set<int64_t> uniq;
        for (int r = 0; r < D; ++r) {
          DistributedSampler s(n, D, r, true, 42, drop_last);
          s.set_epoch(epoch);
          auto idx = s.indices();
          BOOST_TEST(idx.size() == static_cast<size_t>(drop_last ? n / D : (n + D - 1) / D));
          all.insert(idx.begin(), idx.end());
          uniq.insert(idx.begin(), idx.end());
        }
        BOOST_TEST(all.size() == static_cast<size_t>(drop_last ? n / D * D : (n + D - 1) / D * D));
        if (drop_last) {
          BOOST_TEST(uniq.size() == all.size());  // disjoint
        } else {
          BOOST_TEST(uniq.size() == static_cast<size_t>(n));  // union is everything (padding repeats)
        }
        for (auto i : uniq) BOOST_TEST((i >= 0 && i < n));
      }
    }
}

BOOST_AUTO_TEST_CASE(order_depends_on_seed_and_epoch_only) {
  DistributedSampler a(500, 2, 0, true, 7), b(500, 2, 0, true, 7), c(500, 2, 0, true, 8);
  BOOST_TEST((a.indices() == b.indices()));
  BOOST_TEST((a.indices() != c.indices()));
  auto e0 = a.indices();
  a.set_epoch(1);
  BOOST_TEST((a.indices() != e0));
  a.set_epoch(0);
  BOOST_TEST((a.indices() == e0));
  DistributedSampler ns(500, 2, 1, false, 7);
  BOOST_TEST(ns[3] == 7);
}

BOOST_AUTO_TEST_CASE(loader_batches_are_windows_and_resume_is_exact) {
  Corpus c(20000, 6000);  // 4 shards; windows cross their boundaries
  LoaderOptions o;
  o.dir = c.dir.string();
  o.seq_len = 64;
  o.micro_batch = 3;
  o.dp_size = 2;
  o.dp_rank = 1;
  o.seed = 5;
  DataLoader l(o);
  BOOST_TEST(l.vocab_size() == 65536);
  int64_t n = (20000 - 1) / 64;
  BOOST_TEST(l.samples_per_epoch() == n / 2);
  BOOST_TEST(l.batches_per_epoch() == n / 2 / 3);
  BOOST_TEST(l.batches_per_epoch() == 52);
  DistributedSampler ref(n, 2, 1, true, 5, true);
  std::vector<Batch> seq;
  for (int i = 0; i < 120; ++i) {  // > 2 epochs (52 batches per epoch)
    Batch b;
    l.next(b);
    seq.push_back(b);
  }
  // batch k of epoch 0 = samples ref[3k..3k+2]; every row is tokens [s*64, s*64 + 65)
  for (int k = 0; k < 3; ++k)
    for (int j = 0; j < 3; ++j) {
      int64_t s = ref[3 * k + j];
      for (int t = 0; t < 64; ++t) {
        BOOST_TEST(seq[k].inputs[j * 64 + t] == (s * 64 + t) % 65521);
        BOOST_TEST(seq[k].targets[j * 64 + t] == (s * 64 + t + 1) % 65521);
      }
    }
  // epoch 1 starts after batches_per_epoch batches, with the epoch-1 permutation
  ref.set_epoch(1);
  BOOST_TEST(seq[l.batches_per_epoch()].inputs[0] == (ref[0] * 64) % 65521);

  // resume: a fresh loader restored from state() after k batches continues the exact sequence
  for (int k : {0, 1, 50, 51, 52, 110}) {
    DataLoader a(o);
    Batch b;
    for (int i = 0; i < k; ++i) a.next(b);
    SamplerState st = a.state();
    DataLoader r(o);
    r.restore(st);
    for (int i = k; i < std::min(k + 5, 120); ++i) {
      r.next(b);
      BOOST_TEST((b.inputs == seq[i].inputs));
    }
  }
  SamplerState at_end;
  {
    DataLoader a(o);
    Batch b;
    for (int i = 0; i < 52; ++i) a.next(b);
    at_end = a.state();
  }
  BOOST_TEST(at_end.epoch == 1u);
  BOOST_TEST(at_end.position == 0u);

  // no prefetch gives the same sequence
  o.prefetch = 0;
  DataLoader sync(o);
  Batch b;
  for (int i = 0; i < 60; ++i) {
    sync.next(b);
    BOOST_TEST((b.inputs == seq[i].inputs));
  }
  BOOST_CHECK_THROW(sync.restore({0, 100000}), UsageError);
}

BOOST_AUTO_TEST_CASE(validation_loader_is_fixed_and_spread_over_ranks) {
  Corpus c(5000, 5000);
  fs::rename(c.dir / "train_00000.h5", c.dir / "val_00000.h5");
  LoaderOptions o;
  o.dir = c.dir.string();
  o.split = "val";
  o.seq_len = 32;
  o.micro_batch = 2;
  o.dp_size = 2;
  std::set<int32_t> starts;
  for (int r = 0; r < 2; ++r) {
    o.dp_rank = r;
    ValidationLoader v(o, 5);
    BOOST_TEST(v.num_batches() == 5);
    Batch b;
    std::vector<int32_t> first;
    int k = 0;
    while (v.next(b)) {
      if (k == 0) first = b.inputs;
      for (int j = 0; j < 2; ++j) starts.insert(b.inputs[j * 32]);
      ++k;
    }
    BOOST_TEST(k == 5);
    v.reset();
    v.next(b);
    BOOST_TEST((b.inputs == first));
  }
  BOOST_TEST(starts.size() == 20u);  // 2 ranks x 5 batches x 2 samples, all different
  BOOST_TEST(*starts.begin() == 0);
  BOOST_TEST(*starts.rbegin() == 19 * 32);
}

// A blend's index (blend.hpp): every prefix of an epoch within one draw of the weights, each
// corpus's draws per epoch = round(w N), and inside one pass over a corpus every sample exactly
// once (a permutation), different passes differently ordered; the same seed, the same index.
BOOST_AUTO_TEST_CASE(blend_index_mix_and_passes) {
  const std::vector<int64_t> n = {357, 1478, 20};
  const std::vector<double> w = {0.7, 0.25, 0.05};
  BlendIndex b(n, w, 11), again(n, w, 11);
  const int64_t N = 357 + 1478 + 20;
  BOOST_TEST(b.size() == N);
  std::vector<int64_t> drawn(3, 0);
  double worst = 0;
  for (int64_t p = 0; p < N; ++p) {
    auto [k, s] = b.sample(p, 0);
    BOOST_REQUIRE(k >= 0 && k < 3);
    BOOST_REQUIRE(s >= 0 && s < n[k]);
    BOOST_REQUIRE((again.sample(p, 0) == std::pair<int, int64_t>{k, s}));
    ++drawn[k];
    for (int c = 0; c < 3; ++c) worst = std::max(worst, std::abs(drawn[c] - w[c] * static_cast<double>(p + 1)));
  }
  BOOST_TEST(worst <= 1.0);
  for (int c = 0; c < 3; ++c) {
    BOOST_TEST(drawn[c] == b.draws(c));
    BOOST_TEST(std::abs(static_cast<double>(drawn[c]) - w[c] * N) <= 1.0);
  }
  // Corpus 0 (draws 1299 per epoch > its 357 samples): walk its draws over two epochs in order;
  // each consecutive block of 357 is one pass, a permutation; the passes differ.
  std::vector<int64_t> seq;
  for (uint64_t e = 0; e < 2; ++e)
    for (int64_t p = 0; p < N; ++p)
      if (auto [k, s] = b.sample(p, e); k == 0) seq.push_back(s);
  BOOST_REQUIRE(seq.size() >= 3 * 357);
  std::vector<std::vector<int64_t>> passes;
  for (int pass = 0; pass < 3; ++pass) {
    std::vector<int64_t> one(seq.begin() + pass * 357, seq.begin() + (pass + 1) * 357);
    std::vector<int64_t> sorted = one;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t i = 0; i < 357; ++i) BOOST_REQUIRE(sorted[i] == i);
    passes.push_back(one);
  }
  BOOST_TEST((passes[0] != passes[1]));
  BlendIndex other(n, w, 12);
  int differ = 0;
  for (int64_t p = 0; p < N; ++p) differ += other.sample(p, 0) != b.sample(p, 0);
  BOOST_TEST(differ > 0);  // another seed, other samples (the same mix)
}

BOOST_AUTO_TEST_SUITE_END()
