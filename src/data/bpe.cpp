// Byte-level BPE encoding: within each pre-tokenized chunk, repeatedly merge the adjacent pair
// with the lowest merge index (the order training learned them), exactly as GPT-2 does.
#include <limits>

#include "mpitron/core/error.hpp"
#include "mpitron/data/hf_tokenizer.hpp"
#include "mpitron/data/tokenizer.hpp"
#include "sentencepiece_model.hpp"

namespace mpitron {
namespace {

uint64_t key(int32_t a, int32_t b) { return (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b); }

}  // namespace

Tokenizer Tokenizer::bpe(std::vector<std::pair<int32_t, int32_t>> merges) {
  Tokenizer t;
  t.type_ = "bpe";
  t.merges_ = std::move(merges);
  t.build_tables();
  return t;
}

Tokenizer Tokenizer::bpe(std::vector<std::pair<int32_t, int32_t>> merges, const std::array<int32_t, 256>& byte_ids,
                         std::string pretokenizer) {
  check(pretokenizer == "mpitron-v1" || pretokenizer == "gpt2", "unknown pretokenizer '{}' (this build has mpitron-v1, gpt2)",
        pretokenizer);
  Tokenizer t;
  t.type_ = "bpe";
  t.pretok_ = std::move(pretokenizer);
  t.merges_ = std::move(merges);
  t.byte_ids_ = byte_ids;
  t.build_tables();
  return t;
}

void Tokenizer::build_tables() {
  rank_.clear();
  rank_.reserve(merges_.size() * 2);
  bytes_of_.assign(vocab_size(), std::string());
  // Every id below 256 names exactly one byte (a permutation; the identity by default).
  std::array<bool, 256> seen{};
  identity_bytes_ = true;
  for (int b = 0; b < 256; ++b) {
    const int32_t id = byte_ids_[b];
    check(id >= 0 && id < 256 && !seen[id], "byte_ids must be a permutation of 0..255 (byte {} -> id {})", b, id);
    seen[id] = true;
    identity_bytes_ = identity_bytes_ && id == b;
    bytes_of_[id] = std::string(1, static_cast<char>(b));
  }
  for (size_t i = 0; i < merges_.size(); ++i) {
    auto [a, b] = merges_[i];
    int32_t id = 256 + static_cast<int32_t>(i);
    check(a >= 0 && b >= 0 && a < id && b < id, "BPE merge {} = [{}, {}] refers to an id that is not defined before it",
          i, a, b);
    check(rank_.emplace(key(a, b), static_cast<int32_t>(i)).second, "BPE merge {} = [{}, {}] is a duplicate", i, a, b);
    // Merges never cross a pre-tokenized chunk (mpitron-v1: at most kMaxChunk bytes); without a
    // limit 40 merges [[256, 256], [257, 257], ...] would ask for 2^40 bytes. GPT-2's longest
    // token is 128 bytes (its regex chunks are not cut, so encoding may still meet longer runs).
    size_t len = bytes_of_[a].size() + bytes_of_[b].size();
    check(len <= kMaxChunk, "BPE merge {} = [{}, {}] makes a token of {} bytes (tokens are at most {} bytes)", i, a,
          b, len, kMaxChunk);
    bytes_of_[id] = bytes_of_[a] + bytes_of_[b];
  }
}

void Tokenizer::encode_chunk(std::string_view chunk, std::vector<int32_t>& out) const {
  thread_local std::vector<int32_t> ids;
  ids.assign(chunk.size(), 0);
  for (size_t i = 0; i < chunk.size(); ++i) ids[i] = byte_ids_[static_cast<unsigned char>(chunk[i])];
  while (ids.size() > 1) {
    int32_t best = std::numeric_limits<int32_t>::max();
    for (size_t i = 0; i + 1 < ids.size(); ++i) {
      auto it = rank_.find(key(ids[i], ids[i + 1]));
      if (it != rank_.end() && it->second < best) best = it->second;
    }
    if (best == std::numeric_limits<int32_t>::max()) break;
    auto [a, b] = merges_[best];
    size_t w = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i + 1 < ids.size() && ids[i] == a && ids[i + 1] == b) {
        ids[w++] = 256 + best;
        ++i;
      } else {
        ids[w++] = ids[i];
      }
    }
    ids.resize(w);
  }
  out.insert(out.end(), ids.begin(), ids.end());
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, EncodeCache* cache) const {
  if (sp_) return sp_encode(*sp_, text);
  std::vector<int32_t> out;
  if (hf_) {
    out.reserve(text.size() / 3 + 16);
    hf::encode(*hf_, text, out, cache);
    return out;
  }
  if (merges_.empty()) {
    out.resize(text.size());
    for (size_t i = 0; i < text.size(); ++i) out[i] = byte_ids_[static_cast<unsigned char>(text[i])];
    return out;
  }
  out.reserve(text.size() / 2 + 16);
  thread_local std::vector<std::string_view> chunks;
  if (pretok_ == "gpt2") pretokenize_gpt2(text, chunks);
  else pretokenize(text, chunks);
  for (std::string_view c : chunks) {
    if (!cache) {
      encode_chunk(c, out);
      continue;
    }
    auto it = cache->find(c);
    if (it == cache->end()) {
      std::vector<int32_t> ids;
      encode_chunk(c, ids);
      if (cache->size() > 1000000) cache->clear();  // bound memory on huge vocabularies of words
      it = cache->emplace(std::string(c), std::move(ids)).first;
    }
    out.insert(out.end(), it->second.begin(), it->second.end());
  }
  return out;
}

}  // namespace mpitron
