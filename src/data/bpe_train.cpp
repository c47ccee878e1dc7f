// BPE training with incremental pair counts.
//
// Words (pre-tokenized chunks) are counted once; a pair's count is the sum of its occurrences
// weighted by word frequency. Each step takes the most frequent pair from a max-heap (ties: the
// smallest (left, right)), rewrites only the words that contain it (an index pair -> words),
// and applies the resulting count deltas. Heap entries are lazy: a popped entry whose count is
// stale is pushed back with the current count. Cost per merge ~ size of the affected words,
// not of the corpus.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <queue>
#include <unordered_map>

#include "mpitron/core/error.hpp"
#include "mpitron/data/tokenizer.hpp"

namespace mpitron {
namespace {

uint64_t key(int32_t a, int32_t b) { return (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b); }

struct Entry {
  int64_t count;
  uint64_t pair;
  // std::priority_queue pops the largest: larger count first, then the smaller pair key.
  bool operator<(const Entry& o) const { return count != o.count ? count < o.count : pair > o.pair; }
};

}  // namespace

Tokenizer train_bpe(const std::vector<std::string>& texts, const BpeTrainOptions& opt) {
  usage_check(opt.vocab_size >= 257, "--vocab {} is too small: the byte tokenizer alone needs 257 (256 bytes + eot)",
              opt.vocab_size);
  // 1. unique words and their frequencies
  std::unordered_map<std::string_view, int64_t> freq;
  std::vector<std::string_view> chunks;
  for (const auto& t : texts) {
    pretokenize(t, chunks);
    for (auto c : chunks) ++freq[c];
  }
  std::vector<std::pair<std::string_view, int64_t>> uniq(freq.begin(), freq.end());
  std::sort(uniq.begin(), uniq.end());  // deterministic word order (hash order is not)
  std::vector<std::vector<int32_t>> words(uniq.size());
  std::vector<int64_t> wcount(uniq.size());
  for (size_t w = 0; w < uniq.size(); ++w) {
    for (unsigned char c : uniq[w].first) words[w].push_back(c);
    wcount[w] = uniq[w].second;
  }
  freq.clear();

  // 2. initial pair counts and where each pair occurs
  std::unordered_map<uint64_t, int64_t> count;
  std::unordered_map<uint64_t, std::vector<int32_t>> where;
  for (size_t w = 0; w < words.size(); ++w) {
    const auto& s = words[w];
    for (size_t i = 0; i + 1 < s.size(); ++i) {
      uint64_t k = key(s[i], s[i + 1]);
      count[k] += wcount[w];
      auto& v = where[k];
      if (v.empty() || v.back() != static_cast<int32_t>(w)) v.push_back(static_cast<int32_t>(w));
    }
  }
  std::priority_queue<Entry> heap;
  for (auto& [k, c] : count) heap.push({c, k});

  // 3. merges
  const int target = opt.vocab_size - 257;
  std::vector<std::pair<int32_t, int32_t>> merges;
  merges.reserve(target);
  std::vector<int32_t> stamp(words.size(), -1);
  std::unordered_map<uint64_t, int64_t> delta;
  while (static_cast<int>(merges.size()) < target && !heap.empty()) {
    Entry e = heap.top();
    heap.pop();
    auto it = count.find(e.pair);
    int64_t cur = it == count.end() ? 0 : it->second;
    if (cur != e.count) {
      if (cur > 0) heap.push({cur, e.pair});
      continue;
    }
    if (cur < opt.min_count) break;
    int32_t a = static_cast<int32_t>(e.pair >> 32), b = static_cast<int32_t>(e.pair & 0xffffffffu);
    int32_t id = 256 + static_cast<int32_t>(merges.size());
    merges.emplace_back(a, b);
    delta.clear();
    std::vector<int32_t> affected = std::move(where[e.pair]);
    where.erase(e.pair);
    for (int32_t w : affected) {
      if (stamp[w] == id) continue;
      stamp[w] = id;
      auto& s = words[w];
      int64_t f = wcount[w];
      bool found = false;
      for (size_t i = 0; i + 1 < s.size(); ++i)
        if (s[i] == a && s[i + 1] == b) found = true;
      if (!found) continue;  // stale index entry
      for (size_t i = 0; i + 1 < s.size(); ++i) delta[key(s[i], s[i + 1])] -= f;
      size_t o = 0;
      for (size_t i = 0; i < s.size(); ++i) {
        if (i + 1 < s.size() && s[i] == a && s[i + 1] == b) {
          s[o++] = id;
          ++i;
        } else {
          s[o++] = s[i];
        }
      }
      s.resize(o);
      for (size_t i = 0; i + 1 < s.size(); ++i) {
        uint64_t k = key(s[i], s[i + 1]);
        delta[k] += f;
        if (s[i] == id || s[i + 1] == id) {
          auto& v = where[k];
          if (v.empty() || v.back() != w) v.push_back(w);
        }
      }
    }
    // Apply in key order so the heap's push order, and so ties, never depend on hash order.
    std::vector<std::pair<uint64_t, int64_t>> ds(delta.begin(), delta.end());
    std::sort(ds.begin(), ds.end());
    for (auto [k, d] : ds) {
      if (d == 0) continue;
      int64_t& c = count[k];
      c += d;
      if (d > 0) heap.push({c, k});
      if (c <= 0) count.erase(k);
    }
    if (opt.verbose && (merges.size() % 1000 == 0))
      std::fprintf(stderr, "tokenizer: %zu/%d merges\n", merges.size(), target);
  }
  return Tokenizer::bpe(std::move(merges));
}

}  // namespace mpitron
