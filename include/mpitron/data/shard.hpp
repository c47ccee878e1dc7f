// HDF5 token shards (docs/data.md): one file per shard with
//   /tokens       1-D, chunked; uint16 when vocab_size <= 65536, else uint32
//   /doc_offsets  1-D uint64: index in /tokens where each document that starts here starts
//   /loss_mask    optional, 1-D uint8 parallel to /tokens: 0 = this token is never a training
//                 target (fine-tuning data: prompts, padding); a shard without it trains on all
//   attributes    format="mpitron-shard-v1", vocab_size, eot, tokenizer (JSON), num_tokens,
//                 source (the input files that contributed text)
// Every document is followed by the eot id.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mpitron/data/tokenizer.hpp"

namespace mpitron {

// Writes one shard to `<path>.tmp`; commit() renames it to `path`. Destroying an uncommitted
// writer removes the temporary file, so an error never leaves a half-written shard.
class ShardWriter {
 public:
  // loss_mask: the shard gets a /loss_mask (append's mask; nullptr there = all ones).
  ShardWriter(std::string path, const Tokenizer& tok, int64_t chunk_tokens = 1 << 20, bool loss_mask = false);
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  // The next token starts a document (continued: a packed document's next block, /doc_continued).
  void begin_document(bool continued = false);
  // prep --pack: the shard records /doc_continued (uint8 per /doc_offsets entry) and the
  // attribute packed_seq_len.
  void set_packing(int seq_len) { packed_seq_len_ = seq_len; }
  // ids must be < vocab_size (checked); mask: n loss-mask bytes (only with a loss_mask writer).
  void append(const int32_t* ids, size_t n, const uint8_t* mask = nullptr);
  void add_source(const std::string& file);       // once per file (deduplicated)
  int64_t num_tokens() const { return num_tokens_; }
  void close();                                   // flush + attributes; file complete as .tmp
  void commit();                                  // close() if needed, then rename to path
  const std::string& path() const { return path_; }
  std::string tmp_path() const { return path_ + ".tmp"; }

 private:
  void flush();
  struct H5;
  std::unique_ptr<H5> h5_;
  std::string path_;
  int vocab_size_ = 0, eot_ = 0;
  std::string tokenizer_json_;
  bool wide_ = false;
  int64_t num_tokens_ = 0, written_ = 0;
  std::vector<uint32_t> buf_;
  std::vector<uint8_t> mask_buf_;
  bool with_mask_ = false;
  std::vector<uint64_t> docs_;
  std::vector<uint8_t> continued_;
  int packed_seq_len_ = 0;
  std::vector<std::string> sources_;
  size_t chunk_;
  bool closed_ = false, committed_ = false;
};

// The concatenation of all `<split>_*.h5` shards of a folder, in file-name order, as one token
// stream. read() takes any [start, start+n) range, crossing shard boundaries, with one HDF5
// hyperslab read per shard touched; it never loads a whole file. Thread-safe (hdf5_mutex).
class TokenDataset {
 public:
  TokenDataset(const std::string& dir, const std::string& split);
  ~TokenDataset();
  TokenDataset(const TokenDataset&) = delete;
  TokenDataset& operator=(const TokenDataset&) = delete;

  // Reads tokens [start, start + n) into out; throws Error naming the shard and index if a
  // token is >= vocab_size.
  void read(int64_t start, int64_t n, int32_t* out) const;
  int64_t num_tokens() const { return total_; }
  // Windows of seq_len + 1 tokens starting at multiples of seq_len: (num_tokens-1) / seq_len.
  int64_t num_samples(int seq_len) const;
  // Whether any shard holds a /loss_mask; read_loss_mask gives [start, start + n) of it (1 for
  // the tokens of shards without one).
  bool has_loss_mask() const { return has_mask_; }
  // prep --pack's window length (the shards' packed_seq_len; 0: not packed). The same for every
  // shard: the constructor refuses a split mixing packed and unpacked shards or two lengths.
  int64_t packed_seq_len() const { return packed_seq_len_; }
  void read_loss_mask(int64_t start, int64_t n, uint8_t* out) const;
  // Every document's first token as a global index, ascending, from the shards' /doc_offsets
  // (read and checked by load_doc_starts(); UsageError naming the shard when one is missing or
  // out of order).
  void load_doc_starts();
  const std::vector<int64_t>& doc_starts() const { return doc_starts_; }
  int vocab_size() const { return vocab_size_; }
  int eot() const { return eot_; }
  const std::string& tokenizer_json() const { return tokenizer_json_; }
  const std::vector<std::string>& files() const { return files_; }
  std::string describe() const;  // "dir/train_*.h5 (3 shards)"

 private:
  struct Shard;
  template <class F>
  void each_shard_range(int64_t start, int64_t n, const char* what, F&& f) const;
  std::vector<std::unique_ptr<Shard>> shards_;
  std::vector<int64_t> starts_;  // global index of each shard's first token; back() = total
  std::vector<std::string> files_;
  std::string dir_, split_;
  int64_t total_ = 0;
  bool has_mask_ = false;
  int64_t packed_seq_len_ = 0;
  std::vector<int64_t> doc_starts_;
  int vocab_size_ = 0, eot_ = 0;
  std::string tokenizer_json_;
};

// The shard file names of a folder for a split, sorted; empty if none.
std::vector<std::string> list_shards(const std::string& dir, const std::string& split);

}  // namespace mpitron
