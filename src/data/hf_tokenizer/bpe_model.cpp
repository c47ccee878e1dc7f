// tokenizer.json's BPE model: any id layout, merges by rank (a heap over a linked list of
// symbols, as tokenizers' Word::merge_all: O(n log n), so a document that is one word is fine),
// ignore_merges, byte_fallback, unk_token / fuse_unk.
#include <algorithm>

#include "internal.hpp"

namespace mpitron::hf {

const std::array<uint32_t, 256>& byte_to_char() {
  static const std::array<uint32_t, 256> cp = [] {
    std::array<uint32_t, 256> t{};
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t[b] = printable ? static_cast<uint32_t>(b) : static_cast<uint32_t>(256 + n++);
    }
    return t;
  }();
  return cp;
}

int byte_of_char(uint32_t cp) {
  static const std::array<int16_t, 0x144> inv = [] {
    std::array<int16_t, 0x144> t{};
    t.fill(-1);
    for (int b = 0; b < 256; ++b) t[byte_to_char()[b]] = static_cast<int16_t>(b);
    return t;
  }();
  return cp < inv.size() ? inv[cp] : -1;
}

namespace {

uint64_t pair_key(int32_t a, int32_t b) { return (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b); }
uint64_t mix(uint64_t k) { return (k ^ (k >> 29)) * 0x9E3779B97F4A7C15ull; }
constexpr uint64_t kEmpty = ~0ull;

std::string byte_token(int b) { return fmt::format("<0x{:02X}>", b); }

// A byte-level token string (GPT-2's byte characters) -> its bytes; false if a character is not
// one of them (an added-style token the byte-level words can never produce).
bool byte_level_bytes(const std::string& s, std::string* out) {
  out->clear();
  uint32_t cp;
  for (size_t i = 0; i < s.size();) {
    const int len = utf8_at(s, i, &cp);
    const int b = len > 0 ? byte_of_char(cp) : -1;
    if (b < 0) return false;
    out->push_back(static_cast<char>(b));
    i += static_cast<size_t>(len);
  }
  return true;
}

}  // namespace

BpeModel::BpeModel(const json& m, bool byte_level, const Ctx& c) : byte_level_(byte_level) {
  if (m.contains("dropout") && !m["dropout"].is_null()) c.fail("dropout {} is not supported (only null)", m["dropout"].dump());
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (!str_field(m, k, c).empty()) c.fail("\"{}\" '{}' is not supported (only empty or null)", k, str_field(m, k, c));
  ignore_merges_ = bool_field(m, "ignore_merges", c, false);
  byte_fallback_ = bool_field(m, "byte_fallback", c, false);
  fuse_unk_ = bool_field(m, "fuse_unk", c, false);
  if (!m.contains("vocab") || !m["vocab"].is_object()) c.fail("BPE needs a \"vocab\" object (token -> id)");
  if (!m.contains("merges") || !m["merges"].is_array()) c.fail("BPE needs a \"merges\" list");
  const json& v = m["vocab"];
  by_token_.reserve(v.size());
  std::vector<bool> given;
  for (auto it = v.begin(); it != v.end(); ++it) {
    const json& id = it.value();
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= (int64_t{1} << 30))
      c.fail("vocab: the id of '{}' is not an integer in [0, 2^30) (got {})", it.key(), id.dump());
    const auto i = static_cast<int32_t>(id.get<int64_t>());
    if (static_cast<size_t>(i) >= tokens_.size()) tokens_.resize(static_cast<size_t>(i) + 1), given.resize(tokens_.size());
    if (given[i])
      c.fail("vocab: id {} is given to both '{}' and '{}'", i, tokens_[i], it.key());
    tokens_[i] = it.key();
    given[i] = true;
    by_token_.emplace(it.key(), i);
  }
  by_key_.reserve(by_token_.size());
  std::string bytes;
  for (const auto& [tok, id] : by_token_) {
    if (!byte_level_) by_key_.emplace(tok, id);
    else if (byte_level_bytes(tok, &bytes)) by_key_.emplace(bytes, id);
  }
  byte_unit_.fill(-1);
  ascii_unit_.fill(-1);
  fallback_.fill(-1);
  for (int b = 0; b < 256; ++b) {
    auto it = by_key_.find(std::string(1, static_cast<char>(b)));
    if (byte_level_ && it != by_key_.end()) byte_unit_[b] = it->second;
    if (!byte_level_ && b < 128 && it != by_key_.end()) ascii_unit_[b] = it->second;
    if (byte_fallback_) fallback_[b] = id_of(byte_token(b));
  }
  const std::string unk = str_field(m, "unk_token", c);
  if (!unk.empty()) {
    unk_ = id_of(unk);
    if (unk_ < 0) c.fail("unk_token '{}' is not in the vocabulary", unk);
  }
  // Merges: "a b" (older files) or ["a", "b"]; merge i has rank i and makes the token a + b. A
  // pair listed twice keeps its later rank (tokenizers collects them into a map).
  const json& ms = m["merges"];
  size_t cap = 16;
  while (cap < ms.size() * 2 + 16) cap <<= 1;
  table_.assign(cap, Merge{kEmpty, 0, 0});
  mask_ = cap - 1;
  for (size_t i = 0; i < ms.size(); ++i) {
    const json& x = ms[i];
    std::string a, b;
    if (x.is_string()) {
      const std::string s = x.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        c.fail("merges[{}] '{}' is not 'LEFT RIGHT' (one space)", i, s);
      a = s.substr(0, sp), b = s.substr(sp + 1);
    } else if (x.is_array() && x.size() == 2 && x[0].is_string() && x[1].is_string()) {
      a = x[0].get<std::string>(), b = x[1].get<std::string>();
    } else {
      c.fail("merges[{}] is not a pair of token strings (got {})", i, x.dump().substr(0, 100));
    }
    const int32_t ia = id_of(a), ib = id_of(b), ir = id_of(a + b);
    if (ia < 0 || ib < 0 || ir < 0)
      c.fail("merges[{}] ['{}', '{}'] names a token that is not in the vocabulary: '{}'", i, a, b,
             ia < 0 ? a : ib < 0 ? b : a + b);
    const uint64_t k = pair_key(ia, ib);
    for (uint64_t h = mix(k) & mask_;; h = (h + 1) & mask_) {
      if (table_[h].key == kEmpty || table_[h].key == k) {
        table_[h] = Merge{k, static_cast<int32_t>(i), ir};
        break;
      }
    }
  }
}

int32_t BpeModel::id_of(const std::string& token) const {
  auto it = by_token_.find(token);
  return it == by_token_.end() ? -1 : it->second;
}

const BpeModel::Merge* BpeModel::find_merge(int32_t a, int32_t b) const {
  const uint64_t k = pair_key(a, b);
  for (uint64_t h = mix(k) & mask_;; h = (h + 1) & mask_) {
    const Merge& m = table_[h];
    if (m.key == k) return &m;
    if (m.key == kEmpty) return nullptr;
  }
}

namespace {

struct Sym {
  int32_t id, prev, next;
  bool alive;
};
struct Cand {
  int32_t rank, pos, id;
};
// The heap's top is the lowest rank, then the leftmost position.
bool later(const Cand& x, const Cand& y) { return x.rank != y.rank ? x.rank > y.rank : x.pos > y.pos; }

}  // namespace

void BpeModel::encode(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    auto it = by_key_.find(word);
    if (it != by_key_.end()) return out.push_back(it->second);
  }
  // The word's characters as symbols (tokenizers' BPE::merge_word): a character not in the
  // vocabulary becomes its <0xNN> byte tokens (byte_fallback, when all exist), else unk_token
  // (consecutive ones fused with fuse_unk), else nothing.
  thread_local std::vector<int32_t> ids;
  ids.clear();
  int32_t pending_unk = -1;
  std::string unit;
  for (size_t i = 0; i < word.size();) {
    int32_t id = -1;
    std::string_view u;
    if (byte_level_) {
      const auto b = static_cast<unsigned char>(word[i]);
      id = byte_unit_[b];
      if (id < 0) {  // tokenizers sees the byte's character: its UTF-8 bytes fall back
        unit.clear();
        append_utf8(unit, byte_to_char()[b]);
        u = unit;
      }
      i += 1;
    } else {
      uint32_t cp;
      const int len = utf8_at(word, i, &cp);
      const size_t n = len > 0 ? static_cast<size_t>(len) : 1;
      u = word.substr(i, n);
      if (n == 1 && static_cast<unsigned char>(word[i]) < 128) {
        id = ascii_unit_[static_cast<unsigned char>(word[i])];
      } else {
        auto it = by_key_.find(u);
        if (it != by_key_.end()) id = it->second;
      }
      i += n;
    }
    if (id >= 0) {
      if (pending_unk >= 0) ids.push_back(pending_unk), pending_unk = -1;
      ids.push_back(id);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (char ch : u) all = all && fallback_[static_cast<unsigned char>(ch)] >= 0;
      if (all) {
        for (char ch : u) ids.push_back(fallback_[static_cast<unsigned char>(ch)]);
        continue;  // as tokenizers: a pending unk stays pending
      }
    }
    if (unk_ >= 0) {
      if (pending_unk >= 0 && !fuse_unk_) ids.push_back(pending_unk);
      pending_unk = unk_;
    }
  }
  if (pending_unk >= 0) ids.push_back(pending_unk);
  const auto n = static_cast<int32_t>(ids.size());
  if (n < 2) {
    out.insert(out.end(), ids.begin(), ids.end());
    return;
  }
  thread_local std::vector<Sym> sym;
  thread_local std::vector<Cand> heap;
  sym.resize(static_cast<size_t>(n));
  heap.clear();
  for (int32_t k = 0; k < n; ++k) sym[k] = Sym{ids[k], k - 1, k + 1 < n ? k + 1 : -1, true};
  for (int32_t k = 0; k + 1 < n; ++k)
    if (const Merge* m = find_merge(ids[k], ids[k + 1])) heap.push_back({m->rank, k, m->id});
  std::make_heap(heap.begin(), heap.end(), later);
  auto push = [&](int32_t pos, const Merge* m) {
    heap.push_back({m->rank, pos, m->id});
    std::push_heap(heap.begin(), heap.end(), later);
  };
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const Cand top = heap.back();
    heap.pop_back();
    Sym& s = sym[top.pos];
    if (!s.alive || s.next < 0) continue;
    Sym& r = sym[s.next];
    const Merge* m = find_merge(s.id, r.id);
    if (!m || m->id != top.id) continue;  // a stale entry
    s.id = top.id;
    r.alive = false;
    s.next = r.next;
    if (s.next >= 0) sym[s.next].prev = top.pos;
    if (s.prev >= 0)
      if (const Merge* p = find_merge(sym[s.prev].id, s.id)) push(s.prev, p);
    if (s.next >= 0)
      if (const Merge* q = find_merge(s.id, sym[s.next].id)) push(top.pos, q);
  }
  for (int32_t k = 0; k >= 0; k = sym[k].next) out.push_back(sym[k].id);
}

}  // namespace mpitron::hf
