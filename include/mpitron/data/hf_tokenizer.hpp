// Hugging Face tokenizer.json as a pipeline of small components, giving the ids Hugging Face's
// `tokenizers` gives (Tokenizer type "hf"; docs/data.md lists what is supported and refused).
//
//   text -> added tokens (non-special ones, matched in the raw text; special ones are plain text)
//        -> normalizer (NFC, NFKC, NFD, NFKD, Lowercase, Prepend, Replace, Strip, Sequence)
//        -> added tokens marked "normalized" (matched in the normalized text)
//        -> pre-tokenizer (Split, ByteLevel, Digits, Metaspace, Sequence)
//        -> model BPE (any id layout, ignore_merges, byte_fallback, unk_token / fuse_unk)
//   ids  -> decoder (ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace, Sequence)
//
// Everything else is refused by name (`FILE: pre_tokenizer.pretokenizers[1]: type 'Punctuation' is
// not supported (supported: ...)`), never approximated. Regexes are Oniguruma's (what the Rust
// library runs) translated for PCRE2: \s is Unicode White_Space (U+0085 in, U+FEFF out), \w is
// Alphabetic, marks, decimal digits, connector punctuation and the Latin-1 superscripts and
// fractions (\b is built from it), ^ and $ match at line breaks.
//
// Text is bytes: a ByteLevel pre-tokenizer maps the vocabulary's byte characters back to bytes at
// load, so words are byte strings and invalid UTF-8 is encoded byte by byte (no regex branch
// matches it; the Unicode normalizers pass it through). Decoding returns bytes too, where Hugging
// Face would turn invalid UTF-8 into U+FFFD.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "mpitron/data/tokenizer.hpp"

namespace mpitron::hf {

class Pipeline;

struct LoadOptions {
  // The end-of-text token by content (tokenizer_config.json's eos_token); empty: by the usual
  // names among the file's tokens (<|endoftext|>, <|end_of_text|>, </s>, <eos>).
  std::string eos_token;
  // Or by id (from mpitron's tokenizer JSON, which stores the choice); -1: not given.
  int eot_id = -1;
};

// Parses a tokenizer.json's text; `where` names it in every error (UsageError).
std::shared_ptr<const Pipeline> load(std::string_view tokenizer_json, std::string_view where, const LoadOptions& opt);
// The same, already parsed (consumed).
std::shared_ptr<const Pipeline> load_parsed(nlohmann::json&& tokenizer_json, std::string_view where, const LoadOptions& opt);

// The end-of-text choice for a tokenizer.json on disk: tokenizer_config.json beside it, if any,
// gives eos_token (a string or {"content": ...}); empty when there is none.
std::string eos_token_beside(const std::string& tokenizer_json_path);

void encode(const Pipeline& p, std::string_view text, std::vector<int32_t>& out, EncodeCache* cache);
std::string decode(const Pipeline& p, const std::vector<int32_t>& ids);
int vocab_size(const Pipeline& p);
int eot(const Pipeline& p);
int bos(const Pipeline& p);
int added_id(const Pipeline& p, std::string_view content);  // any added token by content, or -1
std::string token_text(const Pipeline& p, int id);              // as the file spells it ("" if none)
// decode(ids) == the concatenation of decode({id}) for every id sequence (a ByteLevel decoder).
bool streams_bytes(const Pipeline& p);
// The tokenizer.json as stored (compact JSON, keys sorted: the same for equal files).
const std::string& canonical_json(const Pipeline& p);
// What mpitron's tokenizer JSON embeds: base64 of the zlib-compressed canonical JSON.
const std::string& packed_json(const Pipeline& p);
std::string unpack_json(std::string_view packed, std::string_view where);
// Keeps the packed form a pipeline was read from (to_json then writes it back unchanged).
void set_packed(const Pipeline& p, std::string packed);
bool same(const Pipeline& a, const Pipeline& b);

}  // namespace mpitron::hf
