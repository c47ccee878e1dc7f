// tokenizer.json pre-tokenizers: Split, ByteLevel, Digits, Metaspace, Sequence. Each works on
// every word of the previous step on its own, as Hugging Face's PreTokenizedString::split does,
// and drops empty words.
#include "internal.hpp"

namespace mpitron::hf {
namespace {

// GPT-2's pattern, which ByteLevel's use_regex runs (in Oniguruma's syntax, translated as any).
constexpr const char* kGpt2Regex = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

// Replaces w.spans by the kept pieces of each span (segments relative to the span).
template <class Segs>
void split_spans(Words& w, Segs&& segs_of, Behavior b) {
  thread_local std::vector<Words::Span> spans;
  thread_local std::vector<Seg> segs, kept;
  spans.clear();
  for (const auto& s : w.spans) {
    segs_of(w.view(s), segs);
    apply_behavior(segs, b, kept);
    for (const auto& k : kept) spans.push_back({s.off + k.off, k.len, s.first && k.off == 0});
  }
  w.spans.swap(spans);
}

class Split : public PreTokenizer {
 public:
  Split(std::unique_ptr<Regex> re, Behavior b, bool invert) : re_(std::move(re)), b_(b), invert_(invert) {}
  void apply(Words& w) const override {
    split_spans(
        w,
        [&](std::string_view s, std::vector<Seg>& segs) {
          re_->find_matches(s, segs);
          if (invert_)
            for (auto& g : segs) g.match = !g.match;
        },
        b_);
  }

 private:
  std::unique_ptr<Regex> re_;
  Behavior b_;
  bool invert_;
};

// Every word rewritten by `write` (which appends the new spelling of a word to the text), the
// spans following: ByteLevel's prefix space and Metaspace's replacement share this.
template <class F>
void rewrite_words(Words& w, F&& write) {
  thread_local std::string text;
  thread_local std::vector<Words::Span> spans;
  text.clear();
  spans.clear();
  for (const auto& s : w.spans) {
    const auto off = static_cast<uint32_t>(text.size());
    write(text, w.view(s), s);
    spans.push_back({off, static_cast<uint32_t>(text.size()) - off, s.first});
  }
  w.text.swap(text);
  w.spans.swap(spans);
}

class ByteLevel : public PreTokenizer {
 public:
  ByteLevel(bool add_prefix_space, bool use_regex, const Ctx& c)
      : prefix_(add_prefix_space), re_(use_regex ? std::make_unique<Regex>(kGpt2Regex, false, c) : nullptr) {}
  void apply(Words& w) const override {
    if (prefix_)  // a space before every word that does not start with one
      rewrite_words(w, [](std::string& text, std::string_view v, const Words::Span&) {
        if (v.empty() || v[0] != ' ') text += ' ';
        text += v;
      });
    if (re_) split_spans(w, [&](std::string_view s, std::vector<Seg>& segs) { re_->find_matches(s, segs); }, Behavior::isolated);
  }

 private:
  bool prefix_;
  std::unique_ptr<Regex> re_;
};

// Each ASCII digit is a match of its own (tokenizers' char-predicate pattern).
void digit_segs(std::string_view s, std::vector<Seg>& segs) {
  segs.clear();
  if (s.empty()) return segs.push_back({0, 0, false});
  uint32_t last = 0;
  for (uint32_t i = 0; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9') continue;
    if (last < i) segs.push_back({last, i - last, false});
    segs.push_back({i, 1, true});
    last = i + 1;
  }
  if (last < s.size()) segs.push_back({last, static_cast<uint32_t>(s.size()) - last, false});
}

class Digits : public PreTokenizer {
 public:
  explicit Digits(bool individual) : b_(individual ? Behavior::isolated : Behavior::contiguous) {}
  void apply(Words& w) const override { split_spans(w, digit_segs, b_); }

 private:
  Behavior b_;
};

enum class Prepend { always, first, never };

class Metaspace : public PreTokenizer {
 public:
  Metaspace(std::string rep, Prepend scheme, bool split) : rep_(std::move(rep)), scheme_(scheme), split_(split) {}
  void apply(Words& w) const override {
    rewrite_words(w, [&](std::string& text, std::string_view v, const Words::Span& s) {
      const size_t off = text.size();
      for (char ch : v) {
        if (ch == ' ') text += rep_;
        else text += ch;
      }
      const std::string_view done = std::string_view(text).substr(off);
      const bool starts = done.substr(0, rep_.size()) == rep_;
      if (!starts && (scheme_ == Prepend::always || (scheme_ == Prepend::first && s.first))) text.insert(off, rep_);
    });
    if (split_)
      split_spans(
          w,
          [&](std::string_view s, std::vector<Seg>& segs) {
            segs.clear();
            if (s.empty()) return segs.push_back({0, 0, false});
            size_t last = 0;
            for (size_t at = s.find(rep_); at != std::string_view::npos; at = s.find(rep_, at + rep_.size())) {
              if (last < at) segs.push_back({static_cast<uint32_t>(last), static_cast<uint32_t>(at - last), false});
              segs.push_back({static_cast<uint32_t>(at), static_cast<uint32_t>(rep_.size()), true});
              last = at + rep_.size();
            }
            if (last < s.size()) segs.push_back({static_cast<uint32_t>(last), static_cast<uint32_t>(s.size() - last), false});
          },
          Behavior::merged_with_next);
  }

 private:
  std::string rep_;
  Prepend scheme_;
  bool split_;
};

class Sequence : public PreTokenizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<PreTokenizer>> v) : v_(std::move(v)) {}
  void apply(Words& w) const override {
    for (const auto& p : v_) p->apply(w);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> v_;
};

}  // namespace

PreTokenizerInfo parse_pre_tokenizer(const json& j, const Ctx& c) {
  const std::string t = type_of(j, c);
  PreTokenizerInfo r;
  if (t == "Split") {
    if (!j.contains("pattern")) c.fail("Split needs a \"pattern\"");
    if (!j.contains("behavior")) c.fail("Split needs a \"behavior\"");
    r.pre = std::make_unique<Split>(parse_pattern(j["pattern"], c.at("pattern")), parse_behavior(j["behavior"], c),
                                    bool_field(j, "invert", c, false));
  } else if (t == "ByteLevel") {
    // tokenizers' defaults: add_prefix_space true (ByteLevel::default), use_regex true.
    r.pre = std::make_unique<ByteLevel>(bool_field(j, "add_prefix_space", c, true), bool_field(j, "use_regex", c, true), c);
    r.byte_level = true;
  } else if (t == "Digits") {
    r.pre = std::make_unique<Digits>(bool_field(j, "individual_digits", c, false));
  } else if (t == "Metaspace") {
    const std::string rep = str_field(j, "replacement", c, "\xE2\x96\x81");
    uint32_t cp;
    if (rep.empty() || utf8_at(rep, 0, &cp) != static_cast<int>(rep.size()))
      c.fail("\"replacement\" must be one character (got '{}')", rep);
    Prepend scheme = bool_field(j, "add_prefix_space", c, true) ? Prepend::always : Prepend::never;
    if (j.contains("prepend_scheme") && !j["prepend_scheme"].is_null()) {
      const std::string s = str_field(j, "prepend_scheme", c);
      if (s == "always") scheme = Prepend::always;
      else if (s == "first") scheme = Prepend::first;
      else if (s == "never") scheme = Prepend::never;
      else c.fail("prepend_scheme '{}' is not one of always, first, never", s);
    }
    r.pre = std::make_unique<Metaspace>(rep, scheme, bool_field(j, "split", c, true));
  } else if (t == "Sequence") {
    if (!j.contains("pretokenizers") || !j["pretokenizers"].is_array()) c.fail("Sequence needs a \"pretokenizers\" list");
    std::vector<std::unique_ptr<PreTokenizer>> v;
    for (size_t i = 0; i < j["pretokenizers"].size(); ++i) {
      const Ctx ci = c.at("pretokenizers", i);
      if (r.byte_level) ci.fail("a pre-tokenizer after ByteLevel is not supported (ByteLevel must be the last step)");
      PreTokenizerInfo p = parse_pre_tokenizer(j["pretokenizers"][i], ci);
      r.byte_level = r.byte_level || p.byte_level;
      v.push_back(std::move(p.pre));
    }
    r.pre = std::make_unique<Sequence>(std::move(v));
  } else {
    c.fail("type '{}' is not supported (supported: Split, ByteLevel, Digits, Metaspace, Sequence)", t);
  }
  return r;
}

}  // namespace mpitron::hf
