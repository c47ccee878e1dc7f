// Internal to src/data/hf_tokenizer: the components of a Hugging Face tokenizer.json pipeline
// (include/mpitron/data/hf_tokenizer.hpp). Each parser takes the component's JSON and a Ctx
// naming the file and the component's place ("pre_tokenizer.pretokenizers[1]") for errors.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "mpitron/core/error.hpp"
#include "mpitron/data/hf_tokenizer.hpp"

namespace mpitron::hf {

using json = nlohmann::json;

// Where a component sits: the file and the JSON path, for error messages.
struct Ctx {
  std::string file, path;
  Ctx at(const std::string& key) const { return {file, path.empty() ? key : path + "." + key}; }
  Ctx at(const std::string& key, size_t i) const { return at(key + "[" + std::to_string(i) + "]"); }
  template <class... A>
  [[noreturn]] void fail(fmt::format_string<A...> f, A&&... a) const {
    usage_fail("{}: {}: {}", file, path, fmt::format(f, std::forward<A>(a)...));
  }
};

// Field readers that refuse the wrong JSON type, naming the field.
std::string str_field(const json& j, const char* key, const Ctx& c, const std::string& dflt = "");
bool bool_field(const json& j, const char* key, const Ctx& c, bool dflt);
std::string type_of(const json& j, const Ctx& c);  // j["type"], the object checked

// ---- UTF-8 ----
// The length of the valid UTF-8 sequence at s[i] (1-4) with its code point, or 0 when the byte
// starts no valid sequence (stray continuation, overlong, surrogate, > U+10FFFF, truncated).
int utf8_at(std::string_view s, size_t i, uint32_t* cp);
void append_utf8(std::string& out, uint32_t cp);
bool is_white_space(uint32_t cp);  // Unicode White_Space (Rust's char::is_whitespace)

// ---- patterns (Split, Replace, Metaspace, Digits) ----
// One piece of a subject: [off, off + len), a match of the pattern or the text between two.
struct Seg {
  uint32_t off, len;
  bool match;
};

// A compiled Oniguruma regex (through PCRE2) or a literal string.
class Regex {
 public:
  // pattern: the Oniguruma pattern; literal: a plain string to find. Refuses what PCRE2 cannot
  // compile or what the translation cannot express exactly, naming c.
  Regex(const std::string& pattern, bool literal, const Ctx& c);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  // Hugging Face's find_matches over s: the whole of s as alternating matches and gaps, empty
  // matches kept (onig's iteration rule: an empty match right after the previous match is
  // skipped by one character). An empty s gives [{0, 0, false}].
  void find_matches(std::string_view s, std::vector<Seg>& out) const;

 private:
  void* code_ = nullptr;  // pcre2_code*
  std::string literal_;
  bool is_literal_ = false;
};

// Translates an Oniguruma (Ruby syntax) pattern for PCRE2 with UTF + UCP; refuses constructs it
// cannot express exactly (c names the component).
std::string onig_to_pcre2(const std::string& pattern, const Ctx& c);

// {"String": s} or {"Regex": r}.
std::unique_ptr<Regex> parse_pattern(const json& j, const Ctx& c);

enum class Behavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };
Behavior parse_behavior(const json& j, const Ctx& c);
// Hugging Face's NormalizedString::split: the kept pieces (non-empty) of the segments.
void apply_behavior(const std::vector<Seg>& segs, Behavior b, std::vector<Seg>& kept);

// ---- normalizers ----
class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // s -> its normalized form (in place).
  virtual void normalize(std::string& s) const = 0;
};
std::unique_ptr<Normalizer> parse_normalizer(const json& j, const Ctx& c);

// ---- pre-tokenizers ----
// The words of one text segment, each a span of `text`. `first`: the word starts at the start of
// the input (Metaspace's prepend_scheme "first").
struct Words {
  struct Span {
    uint32_t off, len;
    bool first;
  };
  std::string text;
  std::vector<Span> spans;
  std::string_view view(const Span& s) const { return std::string_view(text).substr(s.off, s.len); }
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual void apply(Words& w) const = 0;
};
struct PreTokenizerInfo {
  std::unique_ptr<PreTokenizer> pre;
  bool byte_level = false;  // a ByteLevel pre-tokenizer (the last step): the vocabulary is bytes
};
PreTokenizerInfo parse_pre_tokenizer(const json& j, const Ctx& c);

// ---- model ----
class BpeModel {
 public:
  BpeModel(const json& m, bool byte_level, const Ctx& c);
  // Appends the ids of one word (bytes: byte-level; UTF-8 otherwise).
  void encode(std::string_view word, std::vector<int32_t>& out) const;
  // Token strings by id as the file spells them (empty: no token); the largest id + 1.
  const std::vector<std::string>& tokens() const { return tokens_; }
  int32_t id_of(const std::string& token) const;  // -1 if absent (token as the file spells it)

 private:
  struct Merge {
    uint64_t key;
    int32_t rank, id;
  };
  const Merge* find_merge(int32_t a, int32_t b) const;
  void add_unit(std::string_view unit, std::vector<int32_t>& ids) const;

  bool byte_level_, ignore_merges_, byte_fallback_, fuse_unk_;
  int32_t unk_ = -1;
  std::vector<std::string> tokens_;                // id -> the file's string
  std::unordered_map<std::string, int32_t, ChunkHash, std::equal_to<>> by_key_;  // word-space string -> id
  std::unordered_map<std::string, int32_t> by_token_;                           // file string -> id
  std::array<int32_t, 256> byte_unit_{};           // byte-level: id of each byte's character, or -1
  std::array<int32_t, 128> ascii_unit_{};          // otherwise: id of each ASCII character, or -1
  std::array<int32_t, 256> fallback_{};            // <0xNN> ids (byte_fallback), or -1
  std::vector<Merge> table_;                       // open addressing over key = left << 32 | right
  uint64_t mask_ = 0;
};

// GPT-2's byte characters: the code point byte b is spelled with, and the inverse (-1: none).
const std::array<uint32_t, 256>& byte_to_char();
int byte_of_char(uint32_t cp);

// ---- decoders ----
class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};
struct DecoderInfo {
  std::unique_ptr<Decoder> dec;
  bool byte_level_only = false;  // only ByteLevel steps: decode is per token
};
DecoderInfo parse_decoder(const json& j, const Ctx& c);

}  // namespace mpitron::hf
