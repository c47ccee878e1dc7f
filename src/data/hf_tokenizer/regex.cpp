// Patterns of a tokenizer.json (Split, Replace): Oniguruma's regexes run by PCRE2, Hugging Face's
// match iteration and split behaviours; with the UTF-8 helpers and field readers the other parts
// share.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cctype>

#include "internal.hpp"

namespace mpitron::hf {

std::string str_field(const json& j, const char* key, const Ctx& c, const std::string& dflt) {
  if (!j.contains(key) || j[key].is_null()) return dflt;
  if (!j[key].is_string()) c.fail("\"{}\" must be a string (got {})", key, j[key].dump());
  return j[key].get<std::string>();
}

bool bool_field(const json& j, const char* key, const Ctx& c, bool dflt) {
  if (!j.contains(key) || j[key].is_null()) return dflt;
  if (!j[key].is_boolean()) c.fail("\"{}\" must be true or false (got {})", key, j[key].dump());
  return j[key].get<bool>();
}

std::string type_of(const json& j, const Ctx& c) {
  if (!j.is_object()) c.fail("not a JSON object (got {})", j.dump().substr(0, 80));
  if (!j.contains("type") || !j["type"].is_string()) c.fail("no \"type\" string");
  return j["type"].get<std::string>();
}

int utf8_at(std::string_view s, size_t i, uint32_t* cp) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  const unsigned c = p[i];
  if (c < 0x80) return *cp = c, 1;
  auto cont = [&](size_t k) { return i + k < n && (p[i + k] & 0xC0) == 0x80; };
  if (c >= 0xC2 && c <= 0xDF) {
    if (!cont(1)) return 0;
    *cp = ((c & 0x1Fu) << 6) | (p[i + 1] & 0x3Fu);
    return 2;
  }
  if (c >= 0xE0 && c <= 0xEF) {
    if (!cont(1) || !cont(2)) return 0;
    const uint32_t u = ((c & 0x0Fu) << 12) | ((p[i + 1] & 0x3Fu) << 6) | (p[i + 2] & 0x3Fu);
    if (u < 0x800 || (u >= 0xD800 && u <= 0xDFFF)) return 0;
    return *cp = u, 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (!cont(1) || !cont(2) || !cont(3)) return 0;
    const uint32_t u =
        ((c & 0x07u) << 18) | ((p[i + 1] & 0x3Fu) << 12) | ((p[i + 2] & 0x3Fu) << 6) | (p[i + 3] & 0x3Fu);
    if (u < 0x10000 || u > 0x10FFFF) return 0;
    return *cp = u, 4;
  }
  return 0;
}

void append_utf8(std::string& out, uint32_t u) {
  if (u < 0x80) {
    out.push_back(static_cast<char>(u));
  } else if (u < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (u >> 6)));
    out.push_back(static_cast<char>(0x80 | (u & 0x3F)));
  } else if (u < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (u >> 12)));
    out.push_back(static_cast<char>(0x80 | ((u >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (u & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (u >> 18)));
    out.push_back(static_cast<char>(0x80 | ((u >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((u >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (u & 0x3F)));
  }
}

bool is_white_space(uint32_t u) {
  return (u >= 0x09 && u <= 0x0D) || u == 0x20 || u == 0x85 || u == 0xA0 || u == 0x1680 || (u >= 0x2000 && u <= 0x200A) ||
         u == 0x2028 || u == 0x2029 || u == 0x202F || u == 0x205F || u == 0x3000;
}

namespace {

// Oniguruma's Unicode classes, spelled for inside a PCRE2 character class.
constexpr const char* kSpace =
    "\\x{09}-\\x{0D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";
// Oniguruma's Unicode word characters: Alphabetic, marks, decimal digits, connector punctuation,
// and the Latin-1 superscript digits and fractions (as tokenizers.js measured them).
constexpr const char* kWord = "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{B2}\\x{B3}\\x{B9}\\x{BC}-\\x{BE}";
constexpr const char* kHex = "0-9a-fA-F";

}  // namespace

std::string onig_to_pcre2(const std::string& p, const Ctx& c) {
  std::string out;
  out.reserve(p.size() + 64);
  bool in_class = false;
  size_t class_start = 0;  // index in p just after '[' or '[^'
  for (size_t i = 0; i < p.size(); ++i) {
    const char ch = p[i];
    if (ch == '\\') {
      if (i + 1 >= p.size()) c.fail("regex '{}' ends with a lone backslash", p);
      const char e = p[++i];
      const char* cls = nullptr;
      bool negated = false;
      switch (e) {
        case 's': cls = kSpace; break;
        case 'S': cls = kSpace, negated = true; break;
        case 'w': cls = kWord; break;
        case 'W': cls = kWord, negated = true; break;
        case 'h': cls = kHex; break;
        case 'H': cls = kHex, negated = true; break;
        case 'b':
        case 'B': {
          if (in_class) {
            out += "\\x{08}";  // [\b] is a backspace in both
            continue;
          }
          // A word boundary over Oniguruma's word characters (PCRE2's \b uses its own \w).
          const std::string w = std::string("[") + kWord + "]";
          out += e == 'b' ? "(?:(?<!" + w + ")(?=" + w + ")|(?<=" + w + ")(?!" + w + "))"
                          : "(?:(?<!" + w + ")(?!" + w + ")|(?<=" + w + ")(?=" + w + "))";
          continue;
        }
        case 'v': out += "\\x{0B}"; continue;  // a vertical tab in Oniguruma, a class in PCRE2
        case 'u': {
          size_t k = i + 1;
          while (k < p.size() && k < i + 5 && std::isxdigit(static_cast<unsigned char>(p[k]))) ++k;
          if (k != i + 5) c.fail("regex '{}': \\u needs four hex digits", p);
          out += "\\x{" + p.substr(i + 1, 4) + "}";
          i += 4;
          continue;
        }
        default:
          out += '\\';
          out += e;
          continue;
      }
      if (in_class) {
        if (negated) c.fail("regex '{}': \\{} inside a character class is not supported", p, e);
        out += cls;
      } else {
        out += negated ? "[^" : "[";
        out += cls;
        out += "]";
      }
      continue;
    }
    if (in_class) {
      if (ch == ']' && i > class_start) {
        in_class = false;
      } else if (ch == '[') {
        if (i + 1 < p.size() && p[i + 1] == ':') {  // a POSIX bracket [:alpha:]: both read it
          const size_t close = p.find(":]", i + 2);
          if (close == std::string::npos) c.fail("regex '{}': unterminated [: :] class", p);
          out += p.substr(i, close + 2 - i);
          i = close + 1;
          continue;
        }
        c.fail("regex '{}': a nested character class is not supported", p);
      } else if (ch == '&' && i + 1 < p.size() && p[i + 1] == '&') {
        c.fail("regex '{}': class intersection && is not supported", p);
      }
      out += ch;
      continue;
    }
    if (ch == '[') {
      in_class = true;
      out += ch;
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      class_start = i + 1;
      continue;
    }
    if (ch == '(' && i + 2 < p.size() && p[i + 1] == '?') {
      // Inline options (?imx-imx) / (?imx-imx:...): Ruby's m is PCRE2's s (dot matches newline).
      size_t k = i + 2;
      while (k < p.size() && (p[k] == 'i' || p[k] == 'm' || p[k] == 'x' || p[k] == '-')) ++k;
      if (k > i + 2 && k < p.size() && (p[k] == ':' || p[k] == ')')) {
        out += "(?";
        for (size_t q = i + 2; q < k; ++q) out += p[q] == 'm' ? 's' : p[q];
        i = k - 1;
        continue;
      }
    }
    out += ch;
  }
  if (in_class) c.fail("regex '{}': unterminated character class", p);
  return out;
}

namespace {

struct MatchData {
  pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, nullptr);
  pcre2_match_context* mc = pcre2_match_context_create(nullptr);
  MatchData() { pcre2_jit_stack_assign(mc, nullptr, stack); }
  ~MatchData() {
    pcre2_match_context_free(mc);
    pcre2_jit_stack_free(stack);
    pcre2_match_data_free(md);
  }
};

}  // namespace

Regex::Regex(const std::string& pattern, bool literal, const Ctx& c) {
  if (literal) {
    if (pattern.empty()) c.fail("an empty String pattern is not supported");
    literal_ = pattern;
    is_literal_ = true;
    return;
  }
  const std::string p = onig_to_pcre2(pattern, c);
  int err = 0;
  PCRE2_SIZE at = 0;
  pcre2_compile_context* cc = pcre2_compile_context_create(nullptr);
  pcre2_set_newline(cc, PCRE2_NEWLINE_LF);
  auto* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p.data()), p.size(),
                             PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_MULTILINE, &err, &at, cc);
  pcre2_compile_context_free(cc);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    c.fail("regex '{}' does not compile (PCRE2, as '{}', at {}: {})", pattern, p, at, reinterpret_cast<char*>(msg));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // the interpreter where JIT is missing
  code_ = code;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void Regex::find_matches(std::string_view s, std::vector<Seg>& out) const {
  out.clear();
  const size_t n = s.size();
  if (n == 0) {
    out.push_back({0, 0, false});
    return;
  }
  size_t prev = 0;
  auto push_match = [&](size_t b, size_t e) {
    if (prev != b) out.push_back({static_cast<uint32_t>(prev), static_cast<uint32_t>(b - prev), false});
    out.push_back({static_cast<uint32_t>(b), static_cast<uint32_t>(e - b), true});
    prev = e;
  };
  if (is_literal_) {
    for (size_t at = s.find(literal_); at != std::string_view::npos; at = s.find(literal_, at + literal_.size()))
      push_match(at, at + literal_.size());
  } else {
    thread_local MatchData d;
    const auto* code = static_cast<const pcre2_code*>(code_);
    const auto* subj = reinterpret_cast<PCRE2_SPTR>(s.data());
    size_t last_end = 0;
    bool have_last = false;
    size_t last_match_end = 0;
    while (last_end <= n) {
      const int rc = pcre2_match(code, subj, n, last_end, 0, d.md, d.mc);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        fail("tokenizer regex: PCRE2 match error: {}", reinterpret_cast<char*>(msg));
      }
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(d.md);
      const size_t b = ov[0], e = ov[1];
      if (b == e && have_last && last_match_end == e) {  // onig: no empty match right after a match
        uint32_t cp;
        const int len = last_end < n ? utf8_at(s, last_end, &cp) : 0;
        last_end += len > 0 ? static_cast<size_t>(len) : 1;
        continue;
      }
      last_end = e;
      have_last = true;
      last_match_end = e;
      push_match(b, e);
    }
  }
  if (prev != n) out.push_back({static_cast<uint32_t>(prev), static_cast<uint32_t>(n - prev), false});
}

std::unique_ptr<Regex> parse_pattern(const json& j, const Ctx& c) {
  if (j.is_object() && j.size() == 1 && j.contains("String") && j["String"].is_string())
    return std::make_unique<Regex>(j["String"].get<std::string>(), true, c);
  if (j.is_object() && j.size() == 1 && j.contains("Regex") && j["Regex"].is_string())
    return std::make_unique<Regex>(j["Regex"].get<std::string>(), false, c);
  c.fail("\"pattern\" must be {{\"String\": ...}} or {{\"Regex\": ...}} (got {})", j.dump().substr(0, 200));
}

Behavior parse_behavior(const json& j, const Ctx& c) {
  const std::string b = j.is_string() ? j.get<std::string>() : j.dump();
  if (b == "Removed") return Behavior::removed;
  if (b == "Isolated") return Behavior::isolated;
  if (b == "MergedWithPrevious") return Behavior::merged_with_previous;
  if (b == "MergedWithNext") return Behavior::merged_with_next;
  if (b == "Contiguous") return Behavior::contiguous;
  c.fail("behavior '{}' is not supported (supported: Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous)",
         b);
}

void apply_behavior(const std::vector<Seg>& segs, Behavior b, std::vector<Seg>& kept) {
  // As tokenizers' NormalizedString::split: (segment, remove) pairs, then the non-removed,
  // non-empty ones.
  kept.clear();
  auto keep = [&](uint32_t off, uint32_t len) { kept.push_back({off, len, false}); };
  switch (b) {
    case Behavior::isolated:
      for (const auto& s : segs) keep(s.off, s.len);
      break;
    case Behavior::removed:
      for (const auto& s : segs)
        if (!s.match) keep(s.off, s.len);
      break;
    case Behavior::contiguous: {
      bool prev_match = false;
      for (const auto& s : segs) {
        if (s.match == prev_match && !kept.empty()) kept.back().len = s.off + s.len - kept.back().off;
        else keep(s.off, s.len);
        prev_match = s.match;
      }
      break;
    }
    case Behavior::merged_with_previous: {
      bool prev_match = false;
      for (const auto& s : segs) {
        if (s.match && !prev_match && !kept.empty()) kept.back().len = s.off + s.len - kept.back().off;
        else keep(s.off, s.len);
        prev_match = s.match;
      }
      break;
    }
    case Behavior::merged_with_next: {
      bool prev_match = false;
      for (size_t k = segs.size(); k-- > 0;) {
        const auto& s = segs[k];
        if (s.match && !prev_match && !kept.empty()) {
          const uint32_t end = kept.back().off + kept.back().len;
          kept.back().off = s.off;
          kept.back().len = end - s.off;
        } else {
          keep(s.off, s.len);
        }
        prev_match = s.match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
    }
  }
  size_t w = 0;
  for (const auto& s : kept)
    if (s.len) kept[w++] = s;
  kept.resize(w);
}

}  // namespace mpitron::hf
