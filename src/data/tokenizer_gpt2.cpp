// GPT-2's byte-level BPE (tokenizer.hpp): its pre-tokenizer, and its vocabulary read from
// OpenAI's encoder.json + vocab.bpe or from a Hugging Face tokenizer.json.
//
// GPT-2 spells every byte as one printable Unicode character (bytes_to_unicode: the printable
// Latin-1 bytes as themselves, the other 68 as U+0100..U+0143), so its token strings are UTF-8
// of those characters; read back, each token is a byte string. Its ids put the 256 byte tokens
// first (in character order, not byte order), then merge i of vocab.bpe as id 256 + i, then
// <|endoftext|> = 50256: mpitron's BPE layout with a byte-id permutation, which is what the
// loaders check and build.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "mpitron/core/error.hpp"
#include "mpitron/data/hf_tokenizer.hpp"
#include "mpitron/data/text_input.hpp"
#include "mpitron/data/tokenizer.hpp"

namespace mpitron {
namespace {

using json = nlohmann::json;

// bytes_to_unicode(): the code point GPT-2 spells byte b with.
std::array<uint32_t, 256> byte_chars() {
  std::array<uint32_t, 256> cp{};
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    cp[b] = printable ? static_cast<uint32_t>(b) : static_cast<uint32_t>(256 + n++);
  }
  return cp;
}

// A GPT-2 token string (UTF-8 of byte characters) -> its bytes; false if a character is not one.
bool token_bytes(const std::string& s, std::string* out) {
  static const std::unordered_map<uint32_t, unsigned char> inverse = [] {
    std::unordered_map<uint32_t, unsigned char> m;
    auto cp = byte_chars();
    for (int b = 0; b < 256; ++b) m[cp[b]] = static_cast<unsigned char>(b);
    return m;
  }();
  out->clear();
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    uint32_t u;
    if (c < 0x80) {
      u = c, i += 1;
    } else if ((c >> 5) == 6 && i + 1 < s.size()) {  // the byte characters are all < U+0800
      u = ((c & 0x1Fu) << 6) | (static_cast<unsigned char>(s[i + 1]) & 0x3Fu), i += 2;
    } else {
      return false;
    }
    auto it = inverse.find(u);
    if (it == inverse.end()) return false;
    out->push_back(static_cast<char>(it->second));
  }
  return true;
}

// vocab (token string -> id) and merges (pairs of token strings, rank order) -> the tokenizer,
// checking GPT-2's layout. `where` names the source in errors; `eot` is the end-of-text string.
Tokenizer build(const std::unordered_map<std::string, int64_t>& vocab,
                const std::vector<std::pair<std::string, std::string>>& merges, const std::string& eot,
                const std::string& where) {
  std::unordered_map<std::string, int32_t> id_of;  // token bytes -> id
  std::array<int32_t, 256> byte_ids{};
  byte_ids.fill(-1);
  std::string bytes;
  for (const auto& [tok, id] : vocab) {
    if (tok == eot) continue;
    usage_check(token_bytes(tok, &bytes), "{}: token '{}' (id {}) is not written in GPT-2's byte characters (only "
                "byte-level BPE vocabularies are supported)", where, tok, id);
    usage_check(id >= 0 && id < static_cast<int64_t>(vocab.size()), "{}: id {} of '{}' outside [0, {})", where, id, tok,
                vocab.size());
    id_of[bytes] = static_cast<int32_t>(id);
    if (bytes.size() == 1) byte_ids[static_cast<unsigned char>(bytes[0])] = static_cast<int32_t>(id);
  }
  for (int b = 0; b < 256; ++b)
    usage_check(byte_ids[b] >= 0 && byte_ids[b] < 256, "{}: byte {} has no token among ids 0..255 (not GPT-2's layout)",
                where, b);
  std::vector<std::pair<int32_t, int32_t>> pairs;
  pairs.reserve(merges.size());
  std::string a, b;
  for (size_t i = 0; i < merges.size(); ++i) {
    const auto& [sa, sb] = merges[i];
    usage_check(token_bytes(sa, &a) && token_bytes(sb, &b), "{}: merge {} '{} {}' is not in GPT-2's byte characters",
                where, i, sa, sb);
    auto ia = id_of.find(a), ib = id_of.find(b), ir = id_of.find(a + b);
    usage_check(ia != id_of.end() && ib != id_of.end() && ir != id_of.end(), "{}: merge {} '{} {}' uses or makes a "
                "token that is not in the vocabulary", where, i, sa, sb);
    usage_check(ir->second == 256 + static_cast<int32_t>(i), "{}: merge {} '{} {}' makes id {}, not {} (only the "
                "GPT-2 layout, merge i -> id 256 + i, is supported)", where, i, sa, sb, ir->second, 256 + i);
    pairs.emplace_back(ia->second, ib->second);
  }
  auto e = vocab.find(eot);
  usage_check(e != vocab.end(), "{}: no end-of-text token '{}'", where, eot);
  usage_check(e->second == 256 + static_cast<int64_t>(merges.size()) && vocab.size() == merges.size() + 257,
              "{}: '{}' is id {} of a vocabulary of {}; mpitron needs it last, after the 256 bytes and {} merges", where,
              eot, e->second, vocab.size(), merges.size());
  try {
    return Tokenizer::bpe(std::move(pairs), byte_ids, "gpt2");
  } catch (const Error& x) {
    usage_fail("{}: {}", where, x.what());
  }
}

std::unordered_map<std::string, int64_t> vocab_of(const json& j, const std::string& where) {
  usage_check(j.is_object(), "{}: the vocabulary must be a JSON object of token -> id", where);
  std::unordered_map<std::string, int64_t> v;
  for (auto it = j.begin(); it != j.end(); ++it) {
    usage_check(it.value().is_number_integer(), "{}: the id of '{}' is not an integer", where, it.key());
    v[it.key()] = it.value().get<int64_t>();
  }
  return v;
}

json parse_json(const std::string& text, const std::string& where) {
  json j = json::parse(text, nullptr, false);
  usage_check(!j.is_discarded(), "{}: not valid JSON", where);
  return j;
}

// JavaScript's \s (js-tiktoken and gpt-3-encoder run the pattern with the u flag), for PCRE2.
#define JS_SPACE "\\t\\n\\x{0B}\\f\\r \\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}\\x{FEFF}"
constexpr const char* kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" JS_SPACE "\\p{L}\\p{N}]+|[" JS_SPACE "]+(?![^" JS_SPACE
    "])|[" JS_SPACE "]+";
#undef JS_SPACE

struct Gpt2Regex {
  pcre2_code* code = nullptr;
  Gpt2Regex() {
    int err = 0;
    PCRE2_SIZE at = 0;
    code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kGpt2Pattern), PCRE2_ZERO_TERMINATED,
                         PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &at, nullptr);
    if (!code) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      fail("GPT-2 pre-tokenizer: PCRE2 cannot compile its pattern at {}: {}", at, reinterpret_cast<char*>(msg));
    }
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter where JIT is missing
  }
  ~Gpt2Regex() { pcre2_code_free(code); }
};

const Gpt2Regex& gpt2_regex() {
  static const Gpt2Regex r;
  return r;
}

}  // namespace

void pretokenize_gpt2(std::string_view text, std::vector<std::string_view>& chunks) {
  chunks.clear();
  const pcre2_code* code = gpt2_regex().code;
  struct Data {
    pcre2_match_data* md;
    explicit Data(const pcre2_code* c) : md(pcre2_match_data_create_from_pattern(c, nullptr)) {}
    ~Data() { pcre2_match_data_free(md); }
  };
  thread_local Data data(code);
  const auto* s = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t at = 0, n = text.size();
  while (at < n) {
    int rc = pcre2_match(code, s, n, at, 0, data.md, nullptr);
    size_t begin = n, end = n;
    if (rc > 0) {
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data.md);
      begin = ov[0], end = ov[1];
    } else {
      check(rc == PCRE2_ERROR_NOMATCH, "GPT-2 pre-tokenizer: PCRE2 match error {}", rc);
    }
    if (begin > at) chunks.emplace_back(text.data() + at, begin - at);  // bytes no branch matches (invalid UTF-8)
    if (end > begin) chunks.emplace_back(text.data() + begin, end - begin);
    at = end > begin ? end : (begin == n ? n : begin + 1);  // an empty match cannot happen: every branch eats
  }
}

Tokenizer Tokenizer::gpt2_files(const std::string& dir) {
  const std::string enc = dir + "/encoder.json", bpe = dir + "/vocab.bpe";
  auto vocab = vocab_of(parse_json(read_whole_file(enc, "GPT-2 encoder.json"), enc), enc);
  const std::string text = read_whole_file(bpe, "GPT-2 vocab.bpe");
  std::vector<std::pair<std::string, std::string>> merges;
  std::istringstream in(text);
  std::string line;
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line.rfind("#version", 0) == 0) continue;
    const size_t sp = line.find(' ');
    usage_check(sp != std::string::npos && sp > 0 && sp + 1 < line.size() && line.find(' ', sp + 1) == std::string::npos,
                "{}:{}: not a merge 'LEFT RIGHT': '{}'", bpe, line_no, line);
    merges.emplace_back(line.substr(0, sp), line.substr(sp + 1));
  }
  return build(vocab, merges, "<|endoftext|>", dir + " (gpt2)");
}

namespace {

// GPT-2's exact layout, which the "gpt2" BPE reproduces: no normalizer, the ByteLevel
// pre-tokenizer alone with GPT-2's regex and no prefix space, a plain BPE model, <|endoftext|> the
// only added token (and the end-of-text). Its ids must still pass build()'s layout checks.
bool gpt2_shape(const json& j, const std::string& eos_token) {
  auto null_or = [&](const char* k, auto&& ok) { return !j.contains(k) || j[k].is_null() || ok(j[k]); };
  auto byte_level = [](const json& x) { return x.is_object() && x.value("type", std::string()) == "ByteLevel"; };
  if (!null_or("normalizer", [](const json&) { return false; })) return false;
  if (!j.contains("pre_tokenizer") || !byte_level(j["pre_tokenizer"])) return false;
  const json& p = j["pre_tokenizer"];
  if (p.value("add_prefix_space", true) != false || p.value("use_regex", true) != true) return false;
  if (!null_or("post_processor", byte_level) || !null_or("decoder", byte_level)) return false;
  const json& m = j["model"];
  auto empty = [&](const char* k) { return !m.contains(k) || m[k].is_null() || m[k] == ""; };
  auto off = [&](const char* k) { return !m.contains(k) || m[k].is_null() || m[k] == false; };
  if (!empty("dropout") || !empty("unk_token") || !empty("continuing_subword_prefix") || !empty("end_of_word_suffix") ||
      !off("fuse_unk") || !off("byte_fallback") || !off("ignore_merges"))
    return false;
  if (!j.contains("added_tokens") || !j["added_tokens"].is_array() || j["added_tokens"].size() != 1) return false;
  const json& a = j["added_tokens"][0];
  return a.is_object() && a.value("content", std::string()) == "<|endoftext|>" && a.value("special", false) &&
         (eos_token.empty() || eos_token == "<|endoftext|>") && j["model"].value("type", std::string()) == "BPE" &&
         j["model"].contains("vocab") && j["model"].contains("merges") && j["model"]["merges"].is_array();
}

bool gpt2_shaped(const json& j, const std::string& eos_token) {
  try {
    return gpt2_shape(j, eos_token);
  } catch (const json::exception&) {  // a field of an unexpected type: the pipeline names it
    return false;
  }
}

}  // namespace

Tokenizer Tokenizer::hf_json(const std::string& path) {
  const std::string text = read_whole_file(path, "tokenizer.json");
  json j = parse_json(text, path);
  usage_check(j.is_object() && j.contains("model") && j["model"].is_object(), "{}: no \"model\" object (not a Hugging "
              "Face tokenizer.json?)", path);
  const std::string eos = hf::eos_token_beside(path);
  if (gpt2_shaped(j, eos)) {
    try {
      auto vocab = vocab_of(j["model"]["vocab"], path);
      std::vector<std::pair<std::string, std::string>> merges;
      for (const auto& x : j["model"]["merges"]) {  // "a b" (older files) or ["a", "b"]
        if (x.is_string()) {
          const std::string s = x.get<std::string>();
          const size_t sp = s.find(' ');
          usage_check(sp != std::string::npos, "{}: merge {} '{}' is not 'LEFT RIGHT'", path, merges.size(), s);
          merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
        } else {
          usage_check(x.is_array() && x.size() == 2 && x[0].is_string() && x[1].is_string(), "{}: merge {} is not a "
                      "pair of strings", path, merges.size());
          merges.emplace_back(x[0].get<std::string>(), x[1].get<std::string>());
        }
      }
      const json& t = j["added_tokens"][0];
      vocab["<|endoftext|>"] = t.value("id", int64_t{-1});
      return build(vocab, merges, "<|endoftext|>", path);
    } catch (const UsageError&) {
      // GPT-2's shape with another id layout: the general pipeline takes any layout.
    }
  }
  return hf_json_parsed(std::move(j), path, eos);
}

std::vector<std::string> Tokenizer::byte_level_tokens() const {
  if (type_ == "sentencepiece" || hf_) return {};
  const auto cp = byte_chars();
  std::vector<std::string> out(vocab_size());
  for (int id = 0; id < vocab_size(); ++id) {
    if (id == eot()) {
      out[id] = "<|endoftext|>";
      continue;
    }
    for (unsigned char b : decode_one(id)) {  // GPT-2's byte characters, UTF-8 (all < U+0800)
      const uint32_t u = cp[b];
      if (u < 0x80) {
        out[id].push_back(static_cast<char>(u));
      } else {
        out[id].push_back(static_cast<char>(0xC0 | (u >> 6)));
        out[id].push_back(static_cast<char>(0x80 | (u & 0x3F)));
      }
    }
  }
  return out;
}

std::string Tokenizer::to_hf_json() const {
  if (hf_) return hf::canonical_json(*hf_);
  if (type_ == "sentencepiece" || (pretok_ != "gpt2" && !merges_.empty())) return {};
  const std::vector<std::string> tokens = byte_level_tokens();
  const std::string eot_text = "<|endoftext|>";
  json vocab = json::object();
  for (int id = 0; id < vocab_size(); ++id) vocab[tokens[id]] = id;
  json merges = json::array();
  for (const auto& [l, r] : merges_) merges.push_back(json::array({tokens[l], tokens[r]}));
  const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true},
                           {"use_regex", true}};
  json j = {{"version", "1.0"},
            {"truncation", nullptr},
            {"padding", nullptr},
            {"added_tokens", json::array({{{"id", eot()},
                                           {"content", eot_text},
                                           {"single_word", false},
                                           {"lstrip", false},
                                           {"rstrip", false},
                                           {"normalized", true},
                                           {"special", true}}})},
            {"normalizer", nullptr},
            {"pre_tokenizer", byte_level},
            {"post_processor", byte_level},
            {"decoder", byte_level},
            {"model",
             {{"type", "BPE"},
              {"dropout", nullptr},
              {"unk_token", nullptr},
              {"continuing_subword_prefix", ""},
              {"end_of_word_suffix", ""},
              {"fuse_unk", false},
              {"byte_fallback", false},
              {"vocab", vocab},
              {"merges", merges}}}};
  return j.dump(1);
}

}  // namespace mpitron
