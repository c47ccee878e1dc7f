// Tokenizers: byte-level (the zero-setup default) and byte-level BPE trained on the user's corpus.
//
// Both map bytes, not characters, so decode(encode(x)) == x for any byte string (invalid UTF-8
// included). Ids: 0..255 are the bytes; 256.. are BPE merges in the order they were learned;
// the end-of-text id (eot) is the last id, vocab_size - 1. The byte tokenizer is the BPE one
// with no merges: vocab_size 257, eot 256.
//
// JSON (docs/data.md has the full description):
//   {"format": "mpitron-tokenizer", "version": 1, "type": "bpe", "vocab_size": 8192,
//    "eot": 8191, "pretokenizer": "mpitron-v1", "merges": [[32, 116], [104, 101], ...]}
// merges[i] = [left, right] creates id 256 + i.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace mpitron {

// Memo of chunk -> ids for one thread (BPE encoding is the cost of prep; words repeat).
using EncodeCache = std::unordered_map<std::string, std::vector<int32_t>>;

class Tokenizer {
 public:
  Tokenizer();  // the byte tokenizer
  static Tokenizer byte();
  static Tokenizer bpe(std::vector<std::pair<int32_t, int32_t>> merges);
  // Parses the JSON above; `where` names the source (file, shard) in error messages.
  static Tokenizer from_json(std::string_view json, std::string_view where = "tokenizer JSON");
  // "byte" or a path to a tokenizer JSON file.
  static Tokenizer load(const std::string& spec);

  std::vector<int32_t> encode(std::string_view text, EncodeCache* cache = nullptr) const;
  std::string decode(const std::vector<int32_t>& ids) const;  // eot decodes to nothing
  std::string decode_one(int32_t id) const;
  int vocab_size() const { return 257 + static_cast<int>(merges_.size()); }
  int eot() const { return vocab_size() - 1; }
  const std::string& type() const { return type_; }  // "byte" | "bpe"
  const std::vector<std::pair<int32_t, int32_t>>& merges() const { return merges_; }
  // Compact canonical JSON (stored in every shard). pretty: one merge per line (for files).
  std::string to_json(bool pretty = false) const;
  bool operator==(const Tokenizer& o) const { return type_ == o.type_ && merges_ == o.merges_; }

 private:
  void build_tables();
  void encode_chunk(std::string_view chunk, std::vector<int32_t>& out) const;

  std::string type_ = "byte";
  std::vector<std::pair<int32_t, int32_t>> merges_;
  std::unordered_map<uint64_t, int32_t> rank_;  // (left << 32 | right) -> merge index
  std::vector<std::string> bytes_of_;           // id -> bytes (eot -> "")
};

// Pre-tokenization shared by training and encoding: splits text into chunks that BPE merges
// never cross. A chunk is an optional single space followed by a run of letters (ASCII letters
// and every byte >= 0x80, i.e. UTF-8 text), of digits, or of other symbols; or a run of
// whitespace (a run that precedes a word leaves its last space to that word). Runs longer than
// kMaxChunk bytes are cut. The chunks concatenate back to the input exactly.
constexpr size_t kMaxChunk = 128;
void pretokenize(std::string_view text, std::vector<std::string_view>& chunks);

struct BpeTrainOptions {
  int vocab_size = 8192;   // including the 256 bytes and eot
  int64_t min_count = 2;   // stop when the best pair occurs fewer times
  bool verbose = false;
};

// Trains merges on the concatenation of `texts` (each text is pretokenized on its own).
// Deterministic: each step merges the most frequent adjacent pair; ties go to the smallest
// (left id, right id). Incremental: only the words that contain the merged pair are updated.
Tokenizer train_bpe(const std::vector<std::string>& texts, const BpeTrainOptions& opt);

}  // namespace mpitron
