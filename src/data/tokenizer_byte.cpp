// The byte tokenizer (ids 0..255 are bytes, 256 is eot), decoding, and the pre-tokenizer that
// BPE training and encoding share.
#include "mpitron/core/error.hpp"
#include "mpitron/data/hf_tokenizer.hpp"
#include "mpitron/data/tokenizer.hpp"
#include "sentencepiece_model.hpp"

namespace mpitron {
namespace {

enum class Cls : uint8_t { letter, digit, space, other };

Cls cls(unsigned char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80) return Cls::letter;
  if (c >= '0' && c <= '9') return Cls::digit;
  if (c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\v' || c == '\f') return Cls::space;
  return Cls::other;
}

}  // namespace

Tokenizer::Tokenizer() {
  for (int b = 0; b < 256; ++b) byte_ids_[b] = b;
  build_tables();
}

Tokenizer Tokenizer::byte() { return Tokenizer(); }

std::string Tokenizer::decode_one(int32_t id) const {
  check(id >= 0 && id < vocab_size(), "token id {} out of range [0, {})", id, vocab_size());
  if (sp_) return sp_decode(*sp_, {id});
  if (hf_) return hf::decode(*hf_, {id});
  return bytes_of_[id];
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  if (sp_) {
    for (int32_t id : ids) check(id >= 0 && id < vocab_size(), "token id {} out of range [0, {})", id, vocab_size());
    return sp_decode(*sp_, ids);
  }
  if (hf_) return hf::decode(*hf_, ids);
  std::string out;
  out.reserve(ids.size() * 2);
  for (int32_t id : ids) {
    check(id >= 0 && id < vocab_size(), "token id {} out of range [0, {})", id, vocab_size());
    out += bytes_of_[id];
  }
  return out;
}

// Worked example: "Hello,  world!\n\nok" -> "Hello" "," " " " world" "!" "\n\n" "ok".
void pretokenize(std::string_view text, std::vector<std::string_view>& chunks) {
  chunks.clear();
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  size_t n = text.size(), i = 0;
  while (i < n) {
    size_t start = i;
    Cls c = cls(s[i]);
    if (s[i] == ' ' && i + 1 < n && cls(s[i + 1]) != Cls::space) {
      c = cls(s[i + 1]);
      i += 2;
      while (i < n && cls(s[i]) == c && i - start < kMaxChunk) ++i;
    } else if (c == Cls::space) {
      while (i < n && cls(s[i]) == Cls::space && i - start < kMaxChunk) ++i;
      // Leave the last space of a run to the word that follows (" world", not "  " + "world").
      if (i < n && i - start > 1 && s[i - 1] == ' ' && cls(s[i]) != Cls::space) --i;
    } else {
      while (i < n && cls(s[i]) == c && i - start < kMaxChunk) ++i;
    }
    chunks.emplace_back(text.data() + start, i - start);
  }
}

}  // namespace mpitron
