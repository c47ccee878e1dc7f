// The tokenizer.json pipeline (hf_tokenizer.hpp): added tokens, normalizer, pre-tokenizer, BPE,
// post-processor (the BOS it adds), decoder, the end-of-text choice, and mpitron's packed copy.
#include <utf8proc.h>
#include <zlib.h>

#include <atomic>
#include <filesystem>
#include <mutex>
#include <unordered_map>

#include "../sentencepiece_model.hpp"  // base64
#include "internal.hpp"
#include "mpitron/data/text_input.hpp"

namespace mpitron::hf {

struct Added {
  std::string content;
  int32_t id = -1;
  bool special = false, normalized = false, lstrip = false, rstrip = false, single_word = false;
};

// Leftmost-longest matching of a set of added tokens (tokenizers' aho-corasick, MatchKind::
// LeftmostLongest), with single_word, lstrip and rstrip as AddedVocabulary::find_matches.
class AddedMatcher {
 public:
  void add(const Added* a) {
    by_first_[static_cast<unsigned char>(a->content[0])].push_back(a);
    empty_ = false;
  }
  bool empty() const { return empty_; }
  // parts: (off, len, id) with id -1 for text; covers s.
  struct Part {
    uint32_t off, len;
    int32_t id;
  };
  void split(std::string_view s, std::vector<Part>& parts) const;

 private:
  std::array<std::vector<const Added*>, 256> by_first_;
  bool empty_ = true;
};

class Pipeline {
 public:
  std::string file;
  std::unique_ptr<Normalizer> normalizer;
  PreTokenizerInfo pre;
  std::unique_ptr<BpeModel> model;
  DecoderInfo dec;
  bool has_decoder = false;
  std::vector<Added> added;
  std::unordered_map<std::string, int32_t> added_by_content;
  AddedMatcher raw, norm;               // non-special added tokens: matched before / after normalizing
  std::vector<uint8_t> special_id;      // id -> 1 when it is a special added token
  std::vector<const std::string*> token_of;  // id -> the string decode starts from (nullptr: none)
  std::vector<std::string> id_bytes;    // a ByteLevel decoder: id -> its bytes
  int vocab = 0, eot = -1, bos = -1;
  std::string canonical;
  mutable std::string packed;
  mutable std::once_flag packed_once;
  uint64_t serial = 0;
};

namespace {

std::atomic<uint64_t> next_serial{1};

// Rust regex's \w, near enough for single_word: letters, marks, decimal digits, connector
// punctuation, letter numbers, ZWNJ/ZWJ.
bool is_word_char(uint32_t cp) {
  if (cp == 0x200C || cp == 0x200D) return true;
  const auto c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO) || (c >= UTF8PROC_CATEGORY_MN && c <= UTF8PROC_CATEGORY_ME) ||
         c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_PC;
}

size_t last_char_start(std::string_view s) {
  size_t k = s.size() - 1;
  while (k > 0 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80 && s.size() - k < 4) --k;
  return k;
}

}  // namespace

void AddedMatcher::split(std::string_view s, std::vector<Part>& parts) const {
  parts.clear();
  const size_t n = s.size();
  size_t start_offset = 0, i = 0;
  uint32_t cp;
  while (i < n) {
    const auto& cands = by_first_[static_cast<unsigned char>(s[i])];
    const Added* best = nullptr;
    for (const Added* a : cands)
      if (a->content.size() <= n - i && (!best || a->content.size() > best->content.size()) &&
          s.compare(i, a->content.size(), a->content) == 0)
        best = a;
    if (!best) {
      ++i;
      continue;
    }
    size_t start = i, stop = i + best->content.size();
    i = stop;  // matches never overlap, skipped ones included
    if (best->single_word) {
      bool start_space = true, stop_space = true;
      if (start > 0) {
        const size_t k = last_char_start(s.substr(0, start));
        start_space = !(utf8_at(s, k, &cp) > 0 && is_word_char(cp));
      }
      if (stop < n) stop_space = !(utf8_at(s, stop, &cp) > 0 && is_word_char(cp));
      if (!start_space || !stop_space) continue;
    }
    if (best->lstrip) {
      size_t b = start;
      while (b > 0) {
        const size_t k = last_char_start(s.substr(0, b));
        if (utf8_at(s, k, &cp) <= 0 || !is_white_space(cp)) break;
        b = k;
      }
      start = std::max(b, start_offset);
    }
    if (best->rstrip) {
      int len;
      while (stop < n && (len = utf8_at(s, stop, &cp)) > 0 && is_white_space(cp)) stop += static_cast<size_t>(len);
      i = std::max(i, stop);
    }
    if (start_offset < start) parts.push_back({static_cast<uint32_t>(start_offset), static_cast<uint32_t>(start - start_offset), -1});
    parts.push_back({static_cast<uint32_t>(start), static_cast<uint32_t>(stop - start), best->id});
    start_offset = stop;
  }
  if (start_offset < n) parts.push_back({static_cast<uint32_t>(start_offset), static_cast<uint32_t>(n - start_offset), -1});
}

namespace {

void parse_post_processor(const json& j, const Ctx& c, Pipeline& p) {
  if (j.is_null()) return;
  const std::string t = type_of(j, c);
  if (t == "ByteLevel") return;  // offsets only
  if (t == "Sequence") {
    if (!j.contains("processors") || !j["processors"].is_array()) c.fail("Sequence needs a \"processors\" list");
    for (size_t i = 0; i < j["processors"].size(); ++i) parse_post_processor(j["processors"][i], c.at("processors", i), p);
    return;
  }
  if (t != "TemplateProcessing")
    c.fail("type '{}' is not supported (supported: TemplateProcessing, ByteLevel, Sequence, null)", t);
  // The special tokens before $A in "single" are the BOS (one at most); what follows $A is left to
  // prep, which ends every document with the end-of-text id.
  if (!j.contains("single") || !j["single"].is_array()) c.fail("TemplateProcessing needs a \"single\" list");
  const json& st = j.contains("special_tokens") ? j["special_tokens"] : json::object();
  std::vector<int32_t> before;
  for (size_t i = 0; i < j["single"].size(); ++i) {
    const json& x = j["single"][i];
    if (x.contains("Sequence")) break;
    if (!x.contains("SpecialToken") || !x["SpecialToken"].contains("id") || !x["SpecialToken"]["id"].is_string())
      c.at("single", i).fail("not a SpecialToken or Sequence piece");
    const std::string name = x["SpecialToken"]["id"].get<std::string>();
    if (!st.contains(name) || !st[name].contains("ids") || !st[name]["ids"].is_array())
      c.at("special_tokens").fail("'{}' is not listed with its ids", name);
    for (const auto& id : st[name]["ids"]) {
      if (!id.is_number_unsigned() || id.get<uint64_t>() >= static_cast<uint64_t>(p.vocab))
        c.at("special_tokens").fail("'{}' has id {}, not a token", name, id.dump());
      before.push_back(static_cast<int32_t>(id.get<uint64_t>()));
    }
  }
  if (before.size() > 1) c.at("single").fail("{} tokens before $A (one BOS at most is supported)", before.size());
  if (!before.empty()) {
    if (p.bos >= 0 && p.bos != before[0]) c.fail("a second TemplateProcessing with another BOS");
    p.bos = before[0];
  }
}

int32_t token_id(const Pipeline& p, const std::string& content) {
  auto it = p.added_by_content.find(content);
  if (it != p.added_by_content.end()) return it->second;
  return p.model->id_of(content);
}

std::string pack(const std::string& text) {
  uLongf n = compressBound(text.size());
  std::string z(n, '\0');
  check(compress2(reinterpret_cast<Bytef*>(z.data()), &n, reinterpret_cast<const Bytef*>(text.data()), text.size(), 6) == Z_OK,
        "tokenizer: zlib could not compress the tokenizer.json");
  z.resize(n);
  return base64_encode(z);
}

}  // namespace

std::string unpack_json(std::string_view packed, std::string_view where) {
  std::string z;
  usage_check(base64_decode(packed, &z), "{}: \"tokenizer_json_zlib\" is not base64", where);
  z_stream st{};
  usage_check(inflateInit(&st) == Z_OK, "{}: zlib cannot start", where);
  std::string out;
  st.next_in = reinterpret_cast<Bytef*>(z.data());
  st.avail_in = static_cast<uInt>(z.size());
  int rc = Z_OK;
  char buf[1 << 16];
  while (rc == Z_OK) {
    st.next_out = reinterpret_cast<Bytef*>(buf);
    st.avail_out = sizeof buf;
    rc = inflate(&st, Z_NO_FLUSH);
    out.append(buf, sizeof buf - st.avail_out);
    if (out.size() > (size_t{256} << 20)) rc = Z_MEM_ERROR;  // no tokenizer.json is that large
    if (rc == Z_BUF_ERROR && st.avail_in == 0) break;
  }
  inflateEnd(&st);
  usage_check(rc == Z_STREAM_END && st.avail_in == 0, "{}: \"tokenizer_json_zlib\" is not a complete zlib stream", where);
  return out;
}

std::string eos_token_beside(const std::string& path) {
  const auto cfg = std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  std::error_code ec;
  if (!std::filesystem::exists(cfg, ec)) return {};
  const json j = json::parse(read_whole_file(cfg.string(), "tokenizer_config.json"), nullptr, false);
  usage_check(!j.is_discarded() && j.is_object(), "{}: not a JSON object", cfg.string());
  if (!j.contains("eos_token") || j["eos_token"].is_null()) return {};
  const json& e = j["eos_token"];
  if (e.is_string()) return e.get<std::string>();
  usage_check(e.is_object() && e.contains("content") && e["content"].is_string(),
              "{}: \"eos_token\" must be a string or {{\"content\": ...}}", cfg.string());
  return e["content"].get<std::string>();
}

std::shared_ptr<const Pipeline> load(std::string_view text, std::string_view where, const LoadOptions& opt) {
  json j = json::parse(text.begin(), text.end(), nullptr, false);
  usage_check(!j.is_discarded(), "{}: not valid JSON", where);
  return load_parsed(std::move(j), where, opt);
}

std::shared_ptr<const Pipeline> load_parsed(json&& j, std::string_view where, const LoadOptions& opt) {
  auto p = std::make_shared<Pipeline>();
  p->file = std::string(where);
  usage_check(j.is_object() && j.contains("model") && j["model"].is_object(),
              "{}: no \"model\" object (not a Hugging Face tokenizer.json?)", where);
  auto at = [&](const char* k) { return Ctx{p->file, k}; };
  for (const char* k : {"truncation", "padding"})
    if (j.contains(k) && !j[k].is_null()) at(k).fail("must be null (mpitron cuts and packs sequences itself)");
  const std::string mt = type_of(j["model"], at("model"));
  if (mt != "BPE")
    at("model").fail("type '{}' is not supported (supported: BPE; SentencePiece models: --tokenizer sp:FILE.model)", mt);
  // Pre-tokenizer first: whether the vocabulary is spelled in byte characters.
  if (j.contains("pre_tokenizer") && !j["pre_tokenizer"].is_null()) p->pre = parse_pre_tokenizer(j["pre_tokenizer"], at("pre_tokenizer"));
  if (j.contains("normalizer") && !j["normalizer"].is_null()) p->normalizer = parse_normalizer(j["normalizer"], at("normalizer"));
  p->model = std::make_unique<BpeModel>(j["model"], p->pre.byte_level, at("model"));
  if (j.contains("decoder") && !j["decoder"].is_null()) {
    p->dec = parse_decoder(j["decoder"], at("decoder"));
    p->has_decoder = true;
  }
  // Added tokens.
  const auto& toks = p->model->tokens();
  p->vocab = static_cast<int>(toks.size());
  if (j.contains("added_tokens") && !j["added_tokens"].is_null()) {
    if (!j["added_tokens"].is_array()) at("added_tokens").fail("must be a list");
    const json& at_list = j["added_tokens"];
    p->added.reserve(at_list.size());
    for (size_t i = 0; i < at_list.size(); ++i) {
      const Ctx ci{p->file, "added_tokens[" + std::to_string(i) + "]"};
      const json& x = at_list[i];
      if (!x.is_object()) ci.fail("not an object");
      Added a;
      a.content = str_field(x, "content", ci);
      if (a.content.empty()) ci.fail("no \"content\"");
      if (!x.contains("id") || !x["id"].is_number_unsigned() || x["id"].get<uint64_t>() >= (uint64_t{1} << 30))
        ci.fail("'{}': \"id\" must be an integer in [0, 2^30)", a.content);
      a.id = static_cast<int32_t>(x["id"].get<uint64_t>());
      a.special = bool_field(x, "special", ci, false);
      a.normalized = bool_field(x, "normalized", ci, !a.special);
      a.lstrip = bool_field(x, "lstrip", ci, false);
      a.rstrip = bool_field(x, "rstrip", ci, false);
      a.single_word = bool_field(x, "single_word", ci, false);
      const int32_t in_vocab = p->model->id_of(a.content);
      if (in_vocab >= 0 && in_vocab != a.id)
        ci.fail("'{}' has id {}, but the vocabulary gives '{}' id {}", a.content, a.id, a.content, in_vocab);
      if (static_cast<size_t>(a.id) < toks.size() && !toks[a.id].empty() && toks[a.id] != a.content)
        ci.fail("'{}' has id {}, which the vocabulary gives to '{}'", a.content, a.id, toks[a.id]);
      if (!p->added_by_content.emplace(a.content, a.id).second) ci.fail("'{}' is listed twice", a.content);
      p->vocab = std::max(p->vocab, a.id + 1);
      p->added.push_back(std::move(a));
    }
  }
  p->special_id.assign(static_cast<size_t>(p->vocab), 0);
  p->token_of.assign(static_cast<size_t>(p->vocab), nullptr);
  for (size_t id = 0; id < toks.size(); ++id)
    if (!toks[id].empty()) p->token_of[id] = &toks[id];
  std::vector<int32_t> id_owner(static_cast<size_t>(p->vocab), -1);
  for (size_t i = 0; i < p->added.size(); ++i) {
    const Added& a = p->added[i];
    if (id_owner[a.id] >= 0)
      usage_fail("{}: added_tokens[{}]: '{}' has id {}, as '{}' does", where, i, a.content, a.id, p->added[id_owner[a.id]].content);
    id_owner[a.id] = static_cast<int32_t>(i);
    p->token_of[a.id] = &a.content;
    p->special_id[a.id] = a.special;
    // Special tokens inside a text are plain text (tiktoken's rule): only the others are matched.
    if (!a.special) (a.normalized ? p->norm : p->raw).add(&a);
  }
  if (j.contains("post_processor")) parse_post_processor(j["post_processor"], at("post_processor"), *p);
  // The ByteLevel decoder's bytes per id (decode is then per token).
  if (p->has_decoder && p->dec.byte_level_only) {
    p->id_bytes.assign(static_cast<size_t>(p->vocab), std::string());
    for (size_t id = 0; id < p->id_bytes.size(); ++id) {
      if (!p->token_of[id] || p->special_id[id]) continue;
      std::vector<std::string> one{*p->token_of[id]};
      p->dec.dec->decode_chain(one);
      p->id_bytes[id] = one.empty() ? std::string() : one[0];
    }
  }
  // End of text: mpitron's stored choice, else tokenizer_config.json's eos_token, else by name.
  if (opt.eot_id >= 0) {
    usage_check(opt.eot_id < p->vocab && p->token_of[opt.eot_id], "{}: eot {} is not a token id", where, opt.eot_id);
    p->eot = opt.eot_id;
  } else if (!opt.eos_token.empty()) {
    p->eot = token_id(*p, opt.eos_token);
    usage_check(p->eot >= 0, "{}: the end-of-text token '{}' (tokenizer_config.json's eos_token) is not one of its tokens",
                where, opt.eos_token);
  } else {
    for (const char* name : {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"})
      if (p->eot < 0) p->eot = token_id(*p, name);
    usage_check(p->eot >= 0, "{}: no end-of-text token: none of <|endoftext|>, <|end_of_text|>, </s>, <eos> is a token "
                "(put a tokenizer_config.json with \"eos_token\" beside it)", where);
  }
  p->canonical = j.dump();
  p->serial = next_serial++;
  return p;
}

namespace {

// The ids of one text part that is not an added token: normalize, match the normalized added
// tokens, pre-tokenize, BPE each word (through the cache).
void encode_text(const Pipeline& p, std::string_view part, bool first, std::vector<int32_t>& out, EncodeCache& cache) {
  thread_local std::string normalized;
  std::string_view s = part;
  if (p.normalizer) {
    normalized.assign(part);
    p.normalizer->normalize(normalized);
    s = normalized;
  }
  thread_local std::vector<AddedMatcher::Part> subs;
  if (p.norm.empty()) {
    subs.assign(1, {0, static_cast<uint32_t>(s.size()), -1});
  } else {
    p.norm.split(s, subs);
  }
  thread_local Words w;
  for (const auto& sub : subs) {
    if (sub.id >= 0) {
      out.push_back(sub.id);
      continue;
    }
    if (sub.len == 0) continue;
    w.text.assign(s.substr(sub.off, sub.len));
    w.spans.assign(1, {0, sub.len, first && sub.off == 0});
    if (p.pre.pre) p.pre.pre->apply(w);
    for (const auto& sp : w.spans) {
      const std::string_view word = w.view(sp);
      if (word.size() > 256) {  // long words (a whole document without pre-tokenizer) skip the cache
        p.model->encode(word, out);
        continue;
      }
      auto it = cache.find(word);
      if (it == cache.end()) {
        std::vector<int32_t> ids;
        p.model->encode(word, ids);
        if (cache.size() > 1000000) cache.clear();
        it = cache.emplace(std::string(word), std::move(ids)).first;
      }
      out.insert(out.end(), it->second.begin(), it->second.end());
    }
  }
}

}  // namespace

void encode(const Pipeline& p, std::string_view text, std::vector<int32_t>& out, EncodeCache* cache) {
  if (!cache) {  // a cache per thread for this pipeline
    thread_local uint64_t owner = 0;
    thread_local EncodeCache own;
    if (owner != p.serial) own.clear(), owner = p.serial;
    cache = &own;
  }
  if (p.raw.empty()) return encode_text(p, text, true, out, *cache);
  std::vector<AddedMatcher::Part> parts;
  p.raw.split(text, parts);
  for (const auto& part : parts) {
    if (part.id >= 0) out.push_back(part.id);
    else encode_text(p, text.substr(part.off, part.len), part.off == 0, out, *cache);
  }
}

std::string decode(const Pipeline& p, const std::vector<int32_t>& ids) {
  for (int32_t id : ids) check(id >= 0 && id < p.vocab, "token id {} out of range [0, {})", id, p.vocab);
  if (!p.id_bytes.empty()) {
    std::string out;
    for (int32_t id : ids) out += p.id_bytes[id];
    return out;
  }
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids)  // special tokens decode to nothing (skip_special_tokens), as mpitron's eot
    if (p.token_of[id] && !p.special_id[id]) tokens.push_back(*p.token_of[id]);
  std::string out;
  if (!p.has_decoder) {  // tokenizers joins the tokens with spaces
    for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
    return out;
  }
  p.dec.dec->decode_chain(tokens);
  for (const auto& t : tokens) out += t;
  return out;
}

int vocab_size(const Pipeline& p) { return p.vocab; }
int eot(const Pipeline& p) { return p.eot; }
int bos(const Pipeline& p) { return p.bos; }
int added_id(const Pipeline& p, std::string_view content) {
  auto it = p.added_by_content.find(std::string(content));
  return it == p.added_by_content.end() ? -1 : it->second;
}
std::string token_text(const Pipeline& p, int id) {
  return id >= 0 && id < p.vocab && p.token_of[id] ? *p.token_of[id] : std::string();
}
bool streams_bytes(const Pipeline& p) { return !p.id_bytes.empty(); }
const std::string& canonical_json(const Pipeline& p) { return p.canonical; }
const std::string& packed_json(const Pipeline& p) {
  std::call_once(p.packed_once, [&] {
    if (p.packed.empty()) p.packed = pack(p.canonical);
  });
  return p.packed;
}
bool same(const Pipeline& a, const Pipeline& b) { return a.eot == b.eot && a.canonical == b.canonical; }

void set_packed(const Pipeline& p, std::string packed) {
  std::call_once(p.packed_once, [&] { p.packed = std::move(packed); });
}

}  // namespace mpitron::hf
