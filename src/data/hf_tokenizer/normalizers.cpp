// tokenizer.json normalizers: NFC, NFD, NFKC, NFKD (libutf8proc), Lowercase, Prepend, Replace,
// Strip, Sequence. Bytes that are not valid UTF-8 pass through unchanged (Hugging Face never
// sees them: its input is a Rust String).
#include <utf8proc.h>

#include <cstdlib>

#include "internal.hpp"

namespace mpitron::hf {
namespace {

// Calls f(run, valid) over s's maximal valid UTF-8 runs and its single invalid bytes, in order.
template <class F>
void for_runs(std::string_view s, F&& f) {
  size_t i = 0, start = 0;
  uint32_t cp;
  while (i < s.size()) {
    const int len = utf8_at(s, i, &cp);
    if (len > 0) {
      i += static_cast<size_t>(len);
      continue;
    }
    if (i > start) f(s.substr(start, i - start), true);
    f(s.substr(i, 1), false);
    start = ++i;
  }
  if (i > start) f(s.substr(start, i - start), true);
}

class Unicode : public Normalizer {
 public:
  // threshold: a string with no byte >= it is already in this form (NFC: every code point below
  // U+0300, which neither composes nor is composed onto; NFD: below U+00C0; NFK*: ASCII).
  Unicode(int options, unsigned char threshold) : options_(options), threshold_(threshold) {}
  void normalize(std::string& s) const override {
    bool plain = true;
    for (unsigned char c : s) plain = plain && c < threshold_;
    if (plain) return;
    std::string out;
    out.reserve(s.size() + 16);
    for_runs(s, [&](std::string_view run, bool valid) {
      if (!valid) {
        out += run;
        return;
      }
      utf8proc_uint8_t* dst = nullptr;
      const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(run.data()),
                                              static_cast<utf8proc_ssize_t>(run.size()), &dst,
                                              static_cast<utf8proc_option_t>(options_));
      check(n >= 0, "tokenizer normalizer: utf8proc: {}", utf8proc_errmsg(n));
      out.append(reinterpret_cast<const char*>(dst), static_cast<size_t>(n));
      std::free(dst);
    });
    s.swap(out);
  }

 private:
  int options_;
  unsigned char threshold_;
};

class Lowercase : public Normalizer {
 public:
  void normalize(std::string& s) const override {
    bool ascii = true;
    for (char& c : s) {
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
      ascii = ascii && static_cast<unsigned char>(c) < 0x80;
    }
    if (ascii) return;
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
      uint32_t cp;
      const int len = utf8_at(s, i, &cp);
      if (len == 0) {
        out.push_back(s[i++]);
        continue;
      }
      i += static_cast<size_t>(len);
      if (cp == 0x130) {  // the one code point whose full lowercase is two: i + combining dot above
        out += "i\xCC\x87";
        continue;
      }
      append_utf8(out, static_cast<uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))));
    }
    s.swap(out);
  }
};

class Strip : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& s) const override {
    size_t b = 0, e = s.size();
    uint32_t cp;
    if (left_)
      while (b < e) {
        const int len = utf8_at(s, b, &cp);
        if (len == 0 || !is_white_space(cp)) break;
        b += static_cast<size_t>(len);
      }
    if (right_)
      while (e > b) {
        size_t k = e - 1;  // the start of the last character
        while (k > b && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80 && e - k < 4) --k;
        const int len = utf8_at(s, k, &cp);
        if (len == 0 || k + static_cast<size_t>(len) != e || !is_white_space(cp)) break;
        e = k;
      }
    s = s.substr(b, e - b);
  }

 private:
  bool left_, right_;
};

class Prepend : public Normalizer {
 public:
  explicit Prepend(std::string p) : p_(std::move(p)) {}
  void normalize(std::string& s) const override {
    if (!s.empty()) s.insert(0, p_);
  }

 private:
  std::string p_;
};

class Replace : public Normalizer {
 public:
  Replace(std::unique_ptr<Regex> re, std::string content) : re_(std::move(re)), content_(std::move(content)) {}
  void normalize(std::string& s) const override {
    thread_local std::vector<Seg> segs;
    re_->find_matches(s, segs);
    bool any = false;
    for (const auto& g : segs) any = any || g.match;
    if (!any) return;
    std::string out;
    out.reserve(s.size() + s.size() / 2);
    for (const auto& g : segs) {
      if (g.match) out += content_;
      else out.append(s, g.off, g.len);
    }
    s.swap(out);
  }

 private:
  std::unique_ptr<Regex> re_;
  std::string content_;
};

class Sequence : public Normalizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Normalizer>> v) : v_(std::move(v)) {}
  void normalize(std::string& s) const override {
    for (const auto& n : v_) n->normalize(s);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> v_;
};

}  // namespace

std::unique_ptr<Normalizer> parse_normalizer(const json& j, const Ctx& c) {
  const std::string t = type_of(j, c);
  if (t == "NFC") return std::make_unique<Unicode>(UTF8PROC_STABLE | UTF8PROC_COMPOSE, 0xCC);
  if (t == "NFD") return std::make_unique<Unicode>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE, 0xC3);
  if (t == "NFKC") return std::make_unique<Unicode>(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT, 0x80);
  if (t == "NFKD") return std::make_unique<Unicode>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT, 0x80);
  if (t == "Lowercase") return std::make_unique<Lowercase>();
  if (t == "Strip") return std::make_unique<Strip>(bool_field(j, "strip_left", c, true), bool_field(j, "strip_right", c, true));
  if (t == "Prepend") {
    if (!j.contains("prepend") || !j["prepend"].is_string()) c.fail("Prepend needs a \"prepend\" string");
    return std::make_unique<Prepend>(j["prepend"].get<std::string>());
  }
  if (t == "Replace") {
    if (!j.contains("pattern")) c.fail("Replace needs a \"pattern\"");
    if (!j.contains("content") || !j["content"].is_string()) c.fail("Replace needs a \"content\" string");
    return std::make_unique<Replace>(parse_pattern(j["pattern"], c.at("pattern")), j["content"].get<std::string>());
  }
  if (t == "Sequence") {
    if (!j.contains("normalizers") || !j["normalizers"].is_array()) c.fail("Sequence needs a \"normalizers\" list");
    std::vector<std::unique_ptr<Normalizer>> v;
    for (size_t i = 0; i < j["normalizers"].size(); ++i)
      v.push_back(parse_normalizer(j["normalizers"][i], c.at("normalizers", i)));
    return std::make_unique<Sequence>(std::move(v));
  }
  c.fail("type '{}' is not supported (supported: NFC, NFD, NFKC, NFKD, Lowercase, Strip, Prepend, Replace, Sequence)", t);
}

}  // namespace mpitron::hf
