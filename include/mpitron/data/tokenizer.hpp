// Tokenizers: byte-level (the zero-setup default), byte-level BPE trained on the user's corpus,
// and GPT-2's byte-level BPE (read from OpenAI's encoder.json + vocab.bpe or from a Hugging Face
// tokenizer.json).
//
// All map bytes, not characters, so decode(encode(x)) == x for any byte string (invalid UTF-8
// included). Ids: byte_ids()[b] is the id of byte b (0..255 in byte order for mpitron's own
// tokenizers, GPT-2's permutation for GPT-2); 256.. are BPE merges in rank order; the
// end-of-text id (eot) is the last id, vocab_size - 1 (GPT-2: 50256 = <|endoftext|>). The byte
// tokenizer is the BPE one with no merges: vocab_size 257, eot 256.
// Pre-tokenizers: "mpitron-v1" (pretokenize below) or "gpt2" (GPT-2's regex, pretokenize_gpt2).
//
// SentencePiece models (LLaMA-2 and its family; BPE or unigram, byte fallback or not) run through
// libsentencepiece: ids, vocabulary and end-of-text (its eos id) are the model's own.
//
// Hugging Face tokenizer.json files other than GPT-2's exact layout (LLaMA-3, Qwen, LLaMA-2's
// converted one, ...) are type "hf": a pipeline of normalizers, pre-tokenizers, BPE and decoders
// that gives Hugging Face's ids (hf_tokenizer.hpp; docs/data.md lists what it supports).
//
// JSON (docs/data.md has the full description):
//   {"format": "mpitron-tokenizer", "version": 1, "type": "bpe", "vocab_size": 8192,
//    "eot": 8191, "pretokenizer": "mpitron-v1", "merges": [[32, 116], [104, 101], ...]}
// merges[i] = [left, right] creates id 256 + i. GPT-2 adds "byte_ids": [256 ids] and
// "pretokenizer": "gpt2": the whole tokenizer (~600 KB) in every shard and checkpoint, so data
// and models decode without the original files. SentencePiece: {"type": "sentencepiece",
// "vocab_size": N, "eot": EOS, "model": BASE64 of the .model file} (self-contained too).
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace mpitron {

struct SentencePieceModel;  // tokenizer_sp.cpp
namespace hf {
class Pipeline;  // hf_tokenizer.hpp
}

// Memo of chunk -> ids for one thread (BPE encoding is the cost of prep; words repeat). Looked
// up by string_view (a transparent hash): a hit allocates nothing.
struct ChunkHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
using EncodeCache = std::unordered_map<std::string, std::vector<int32_t>, ChunkHash, std::equal_to<>>;

class Tokenizer {
 public:
  Tokenizer();  // the byte tokenizer
  static Tokenizer byte();
  static Tokenizer bpe(std::vector<std::pair<int32_t, int32_t>> merges);
  // A byte-level BPE with a byte-id permutation and a pre-tokenizer ("mpitron-v1" | "gpt2").
  static Tokenizer bpe(std::vector<std::pair<int32_t, int32_t>> merges, const std::array<int32_t, 256>& byte_ids,
                       std::string pretokenizer);
  // GPT-2's tokenizer from OpenAI's files: DIR/encoder.json and DIR/vocab.bpe.
  static Tokenizer gpt2_files(const std::string& dir);
  // A Hugging Face tokenizer.json: GPT-2's exact layout (ByteLevel pre-tokenizer alone, the 256
  // byte tokens first, merge i making id 256 + i, only <|endoftext|> added, last) becomes type
  // "bpe" with the "gpt2" pre-tokenizer; any other supported file type "hf". The end-of-text
  // token: tokenizer_config.json's eos_token when that file sits beside it, else the first of
  // <|endoftext|>, <|end_of_text|>, </s>, <eos> that is a token.
  static Tokenizer hf_json(const std::string& path);
  // A tokenizer.json's text as type "hf" (`where` names it in errors; eos_token: as above, empty
  // for the names).
  static Tokenizer hf_json_text(std::string_view json, std::string_view where, const std::string& eos_token = "");
  static Tokenizer hf_json_parsed(nlohmann::json&& json, std::string_view where, const std::string& eos_token);
  // A SentencePiece model file (spm_train's NAME.model), or its bytes.
  static Tokenizer sentencepiece_file(const std::string& path);
  static Tokenizer sentencepiece(const std::string& model_bytes, std::string_view where);
  // Parses the JSON above; `where` names the source (file, shard) in error messages.
  static Tokenizer from_json(std::string_view json, std::string_view where = "tokenizer JSON");
  // "byte", "gpt2:DIR", "hf:FILE", "sp:FILE.model" or a path to an mpitron tokenizer JSON file.
  static Tokenizer load(const std::string& spec);

  std::vector<int32_t> encode(std::string_view text, EncodeCache* cache = nullptr) const;
  std::string decode(const std::vector<int32_t>& ids) const;  // eot decodes to nothing
  std::string decode_one(int32_t id) const;
  int vocab_size() const;
  int eot() const;
  // The token a tokenizer.json's post-processor (TemplateProcessing) puts before every text
  // (LLaMA-2's <s>, LLaMA-3's <|begin_of_text|>), or -1: none (every other type). Prep puts it
  // before every non-chat document, generate before a plain prompt.
  int bos() const;
  // The end-of-text token as text ("<|endoftext|>", "</s>", ...; empty for the byte tokenizer and
  // mpitron's own BPE, whose end-of-text has no spelling).
  std::string eot_token() const;
  // decode(ids) is the concatenation of decode_one(id): true for byte-level tokenizers, false for
  // SentencePiece and tokenizer.json decoders that look at neighbours (Metaspace, Strip, ...).
  bool streams_bytes() const;
  // The id of a special marker this tokenizer holds as one token (SentencePiece's control pieces
  // such as <s> and </s>; GPT-2's <|endoftext|> for the gpt2 pre-tokenizer), or -1: plain text.
  int special_id(std::string_view marker) const;
  const std::string& type() const { return type_; }  // "byte" | "bpe" | "sentencepiece" | "hf"
  const std::vector<std::pair<int32_t, int32_t>>& merges() const { return merges_; }
  const std::array<int32_t, 256>& byte_ids() const { return byte_ids_; }
  const std::string& pretokenizer() const { return pretok_; }  // "mpitron-v1" | "gpt2"
  // Compact canonical JSON (stored in every shard). pretty: one merge per line (for files).
  std::string to_json(bool pretty = false) const;
  // A Hugging Face tokenizer.json (byte-level BPE, GPT-2's regex pre-tokenizer, the end-of-text
  // token as <|endoftext|>) that gives the same ids: for the "gpt2" pre-tokenizer and for the byte
  // tokenizer (no merges: every pre-tokenizer gives the same bytes). Empty when there is no exact
  // equivalent (mpitron-v1 BPE with merges, SentencePiece). Type "hf": the tokenizer.json it was
  // read from (compact, keys sorted).
  std::string to_hf_json() const;
  // Byte-level BPE token strings (GPT-2's bytes_to_unicode spelling; the end-of-text token is
  // "<|endoftext|>") by id, as tokenizer.json and GGUF's tokenizer.ggml.tokens list them. Empty
  // for SentencePiece.
  std::vector<std::string> byte_level_tokens() const;
  // SentencePiece: the .model file's bytes (empty for the other types).
  std::string sentencepiece_model() const;
  bool operator==(const Tokenizer& o) const;

 private:
  void build_tables();
  void encode_chunk(std::string_view chunk, std::vector<int32_t>& out) const;

  std::string type_ = "byte";
  std::string pretok_ = "mpitron-v1";
  std::vector<std::pair<int32_t, int32_t>> merges_;
  std::array<int32_t, 256> byte_ids_{};          // byte -> id
  bool identity_bytes_ = true;                   // byte_ids_[b] == b
  std::unordered_map<uint64_t, int32_t> rank_;  // (left << 32 | right) -> merge index
  std::vector<std::string> bytes_of_;           // id -> bytes (eot -> "")
  std::shared_ptr<const SentencePieceModel> sp_;  // type "sentencepiece"
  std::shared_ptr<const hf::Pipeline> hf_;        // type "hf"
};

// Pre-tokenization shared by training and encoding: splits text into chunks that BPE merges
// never cross. A chunk is an optional single space followed by a run of letters (ASCII letters
// and every byte >= 0x80, i.e. UTF-8 text), of digits, or of other symbols; or a run of
// whitespace (a run that precedes a word leaves its last space to that word). Runs longer than
// kMaxChunk bytes are cut. The chunks concatenate back to the input exactly.
constexpr size_t kMaxChunk = 128;
void pretokenize(std::string_view text, std::vector<std::string_view>& chunks);

// GPT-2's pre-tokenizer (tiktoken's r50k_base pattern, with JavaScript's \s as js-tiktoken and
// OpenAI's gpt-3-encoder run it):
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// through PCRE2 (UTF, Unicode properties). Bytes that are not valid UTF-8 match nothing: each run
// of them becomes a chunk of its own (encoded as bytes). Chunks concatenate back to the input.
void pretokenize_gpt2(std::string_view text, std::vector<std::string_view>& chunks);

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
