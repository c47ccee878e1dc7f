// tokenizer.json decoders: ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace, Sequence, each
// a step over the list of token strings (tokenizers' decode_chain). Bytes stay bytes: where
// tokenizers turns invalid UTF-8 into U+FFFD (ByteLevel, ByteFallback), mpitron keeps the bytes.
#include "internal.hpp"

namespace mpitron::hf {
namespace {

class ByteLevel : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string out;
    for (const auto& t : tokens) {
      const size_t mark = out.size();
      bool all = true;
      uint32_t cp;
      for (size_t i = 0; i < t.size() && all;) {
        const int len = utf8_at(t, i, &cp);
        const int b = len > 0 ? byte_of_char(cp) : -1;
        if (b < 0) all = false;
        else out.push_back(static_cast<char>(b)), i += static_cast<size_t>(len);
      }
      if (!all) out.resize(mark), out += t;  // a token not spelled in byte characters: as is
    }
    tokens.assign(1, std::move(out));
  }
};

class Metaspace : public Decoder {
 public:
  Metaspace(std::string rep, bool strip_first) : rep_(std::move(rep)), strip_first_(strip_first) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string out;
      const std::string& t = tokens[i];
      for (size_t k = 0; k < t.size();) {
        if (t.compare(k, rep_.size(), rep_) == 0) {
          if (!(i == 0 && strip_first_)) out += ' ';  // tokenizers drops every one in the first token
          k += rep_.size();
        } else {
          out += t[k++];
        }
      }
      tokens[i].swap(out);
    }
  }

 private:
  std::string rep_;
  bool strip_first_;
};

class ByteFallback : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string bytes;
    bool have = false;
    for (auto& t : tokens) {
      int b = -1;
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && std::isxdigit(static_cast<unsigned char>(t[3])) &&
          std::isxdigit(static_cast<unsigned char>(t[4])))
        b = std::stoi(t.substr(3, 2), nullptr, 16);
      if (b >= 0) {
        bytes.push_back(static_cast<char>(b));
        have = true;
        continue;
      }
      if (have) out.push_back(std::move(bytes)), bytes.clear(), have = false;
      out.push_back(std::move(t));
    }
    if (have) out.push_back(std::move(bytes));
    tokens.swap(out);
  }
};

class Fuse : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const auto& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

class Strip : public Decoder {
 public:
  Strip(std::string content, size_t start, size_t stop) : c_(std::move(content)), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) {
      size_t b = 0, e = t.size();
      for (size_t k = 0; k < start_ && b + c_.size() <= e && t.compare(b, c_.size(), c_) == 0; ++k) b += c_.size();
      for (size_t k = 0; k < stop_ && e >= b + c_.size() && t.compare(e - c_.size(), c_.size(), c_) == 0; ++k)
        e -= c_.size();
      t = t.substr(b, e - b);
    }
  }

 private:
  std::string c_;
  size_t start_, stop_;
};

class Replace : public Decoder {
 public:
  Replace(std::unique_ptr<Regex> re, std::string content) : re_(std::move(re)), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<Seg> segs;
    for (auto& t : tokens) {
      re_->find_matches(t, segs);
      std::string out;
      for (const auto& g : segs) {
        if (g.match) out += content_;
        else out.append(t, g.off, g.len);
      }
      t.swap(out);
    }
  }

 private:
  std::unique_ptr<Regex> re_;
  std::string content_;
};

class Sequence : public Decoder {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Decoder>> v) : v_(std::move(v)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& d : v_) d->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> v_;
};

size_t count_field(const json& j, const char* key, const Ctx& c) {
  if (!j.contains(key)) return 0;
  if (!j[key].is_number_unsigned()) c.fail("\"{}\" must be a count (got {})", key, j[key].dump());
  return j[key].get<size_t>();
}

}  // namespace

DecoderInfo parse_decoder(const json& j, const Ctx& c) {
  const std::string t = type_of(j, c);
  DecoderInfo r;
  if (t == "ByteLevel") {
    r.dec = std::make_unique<ByteLevel>();
    r.byte_level_only = true;
  } else if (t == "Metaspace") {
    const std::string rep = str_field(j, "replacement", c, "\xE2\x96\x81");
    bool strip = bool_field(j, "add_prefix_space", c, true);
    if (j.contains("prepend_scheme") && !j["prepend_scheme"].is_null()) {
      const std::string s = str_field(j, "prepend_scheme", c);
      if (s != "always" && s != "first" && s != "never") c.fail("prepend_scheme '{}' is not one of always, first, never", s);
      strip = s != "never";
    }
    if (rep.empty()) c.fail("\"replacement\" must be one character");
    r.dec = std::make_unique<Metaspace>(rep, strip);
  } else if (t == "ByteFallback") {
    r.dec = std::make_unique<ByteFallback>();
  } else if (t == "Fuse") {
    r.dec = std::make_unique<Fuse>();
  } else if (t == "Strip") {
    const std::string content = str_field(j, "content", c, " ");
    uint32_t cp;
    if (content.empty() || utf8_at(content, 0, &cp) != static_cast<int>(content.size()))
      c.fail("\"content\" must be one character (got '{}')", content);
    r.dec = std::make_unique<Strip>(content, count_field(j, "start", c), count_field(j, "stop", c));
  } else if (t == "Replace") {
    if (!j.contains("pattern")) c.fail("Replace needs a \"pattern\"");
    if (!j.contains("content") || !j["content"].is_string()) c.fail("Replace needs a \"content\" string");
    r.dec = std::make_unique<Replace>(parse_pattern(j["pattern"], c.at("pattern")), j["content"].get<std::string>());
  } else if (t == "Sequence") {
    if (!j.contains("decoders") || !j["decoders"].is_array()) c.fail("Sequence needs a \"decoders\" list");
    std::vector<std::unique_ptr<Decoder>> v;
    r.byte_level_only = !j["decoders"].empty();
    for (size_t i = 0; i < j["decoders"].size(); ++i) {
      DecoderInfo d = parse_decoder(j["decoders"][i], c.at("decoders", i));
      r.byte_level_only = r.byte_level_only && d.byte_level_only;
      v.push_back(std::move(d.dec));
    }
    r.dec = std::make_unique<Sequence>(std::move(v));
  } else {
    c.fail("type '{}' is not supported (supported: ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace, Sequence)", t);
  }
  return r;
}

}  // namespace mpitron::hf
