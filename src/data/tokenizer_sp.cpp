// SentencePiece models through libsentencepiece (tokenizer.hpp), and what Tokenizer answers
// per type (vocabulary, end-of-text, equality).
#include <sentencepiece_processor.h>

#include "mpitron/core/error.hpp"
#include "mpitron/data/text_input.hpp"
#include "mpitron/data/hf_tokenizer.hpp"
#include "mpitron/data/tokenizer.hpp"
#include "sentencepiece_model.hpp"

namespace mpitron {

struct SentencePieceModel {
  sentencepiece::SentencePieceProcessor proc;
  std::string bytes;  // the .model file (what the JSON embeds)
};

std::vector<int32_t> sp_encode(const SentencePieceModel& m, std::string_view text) {
  std::vector<int> ids;
  const auto st = m.proc.Encode(text, &ids);
  check(st.ok(), "SentencePiece could not encode a text: {}", st.ToString());
  return {ids.begin(), ids.end()};
}

std::string sp_decode(const SentencePieceModel& m, const std::vector<int32_t>& ids) {
  std::string out;
  const auto st = m.proc.Decode(std::vector<int>(ids.begin(), ids.end()), &out);
  check(st.ok(), "SentencePiece could not decode: {}", st.ToString());
  return out;
}

const std::string& sp_model_bytes(const SentencePieceModel& m) { return m.bytes; }

std::string Tokenizer::sentencepiece_model() const { return sp_ ? sp_model_bytes(*sp_) : std::string(); }

Tokenizer Tokenizer::sentencepiece(const std::string& model_bytes, std::string_view where) {
  auto m = std::make_shared<SentencePieceModel>();
  const auto st = m->proc.LoadFromSerializedProto(model_bytes);
  usage_check(st.ok(), "{}: not a SentencePiece model ({})", where, st.ToString());
  usage_check(m->proc.eos_id() >= 0, "{}: the SentencePiece model has no end-of-sentence piece (train it with an "
              "--eos_id >= 0): mpitron ends every document with it", where);
  m->bytes = model_bytes;
  Tokenizer t;
  t.type_ = "sentencepiece";
  t.sp_ = std::move(m);
  return t;
}

Tokenizer Tokenizer::sentencepiece_file(const std::string& path) {
  return sentencepiece(read_whole_file(path, "SentencePiece model"), path);
}

int Tokenizer::vocab_size() const {
  if (hf_) return hf::vocab_size(*hf_);
  return sp_ ? sp_->proc.GetPieceSize() : 257 + static_cast<int>(merges_.size());
}

int Tokenizer::eot() const {
  if (hf_) return hf::eot(*hf_);
  return sp_ ? sp_->proc.eos_id() : vocab_size() - 1;
}

int Tokenizer::bos() const { return hf_ ? hf::bos(*hf_) : -1; }

std::string Tokenizer::eot_token() const {
  if (hf_) return hf::token_text(*hf_, eot());
  if (sp_) return sp_->proc.IdToPiece(eot());
  return pretok_ == "gpt2" ? "<|endoftext|>" : "";
}

bool Tokenizer::streams_bytes() const { return hf_ ? hf::streams_bytes(*hf_) : !sp_; }

int Tokenizer::special_id(std::string_view marker) const {
  if (hf_) return hf::added_id(*hf_, marker);
  if (sp_) {
    const int id = sp_->proc.PieceToId(marker);
    return id >= 0 && id != sp_->proc.unk_id() && sp_->proc.IsControl(id) ? id : -1;
  }
  return pretok_ == "gpt2" && marker == "<|endoftext|>" ? eot() : -1;
}

bool Tokenizer::operator==(const Tokenizer& o) const {
  if (hf_ || o.hf_) return hf_ && o.hf_ && hf::same(*hf_, *o.hf_);
  if (sp_ || o.sp_) return sp_ && o.sp_ && sp_->bytes == o.sp_->bytes;
  return type_ == o.type_ && merges_ == o.merges_ && byte_ids_ == o.byte_ids_ && pretok_ == o.pretok_;
}

namespace {
constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
}

std::string base64_encode(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  for (size_t i = 0; i < in.size(); i += 3) {
    uint32_t v = static_cast<uint8_t>(in[i]) << 16;
    if (i + 1 < in.size()) v |= static_cast<uint8_t>(in[i + 1]) << 8;
    if (i + 2 < in.size()) v |= static_cast<uint8_t>(in[i + 2]);
    out += kB64[v >> 18 & 63];
    out += kB64[v >> 12 & 63];
    out += i + 1 < in.size() ? kB64[v >> 6 & 63] : '=';
    out += i + 2 < in.size() ? kB64[v & 63] : '=';
  }
  return out;
}

bool base64_decode(std::string_view in, std::string* out) {
  if (in.size() % 4 != 0) return false;
  out->clear();
  out->reserve(in.size() / 4 * 3);
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  for (size_t i = 0; i < in.size(); i += 4) {
    const bool last = i + 4 == in.size();
    const int pad = last ? (in[i + 3] == '=') + (in[i + 2] == '=') : 0;
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      const int d = k >= 4 - pad ? 0 : val(in[i + k]);
      if (d < 0) return false;
      v = v << 6 | static_cast<uint32_t>(d);
    }
    out->push_back(static_cast<char>(v >> 16));
    if (pad < 2) out->push_back(static_cast<char>(v >> 8 & 0xff));
    if (pad < 1) out->push_back(static_cast<char>(v & 0xff));
  }
  return true;
}

}  // namespace mpitron
