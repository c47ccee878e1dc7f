// jinja2's lexer (jinja2/lexer.py) with transformers' settings: trim_blocks (the newline after a
// block or comment tag is dropped), lstrip_blocks (spaces and tabs from a line's start to a block
// or comment tag are dropped), keep_trailing_newline off, newlines read as \n.
#include <cstring>

#include "jinja_impl.hpp"

namespace mpitron::jinja {

void raise(TemplateError::Kind kind, const std::string& where, Pos pos, const std::string& message) {
  throw TemplateError(kind, fmt::format("{}:{}:{}: {}", where, pos.line, pos.col, message), message);
}

namespace {

// Python's \s (str.isspace()) at s[i]: its length in bytes, 0 if none.
size_t space_at(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return py_space(c) ? 1 : 0;
  uint32_t cp = 0;
  size_t n = (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
  if (n == 1 || i + n > s.size()) return 0;
  cp = c & (0x7f >> n);
  for (size_t k = 1; k < n; ++k) cp = cp << 6 | (static_cast<unsigned char>(s[i + k]) & 0x3f);
  return py_space(cp) ? n : 0;
}

// text.rstrip() (Python whitespace).
std::string_view rstrip_ws(std::string_view s) {
  size_t e = s.size();
  while (e > 0) {
    size_t k = e - 1;
    while (k > 0 && (static_cast<unsigned char>(s[k]) & 0xc0) == 0x80) --k;
    if (space_at(s, k) != e - k) break;
    e = k;
  }
  return s.substr(0, e);
}

size_t skip_ws(std::string_view s, size_t i) {
  while (i < s.size()) {
    const size_t n = space_at(s, i);
    if (n == 0) break;
    i += n;
  }
  return i;
}

bool all_ws(std::string_view s) { return !s.empty() && skip_ws(s, 0) == s.size(); }

struct Lexer {
  std::string src;  // newlines normalized
  const std::string& where;
  std::vector<Token> out;
  std::vector<size_t> line_starts;

  Pos pos_of(size_t i) const {
    size_t lo = 0, hi = line_starts.size();
    while (hi - lo > 1) {
      const size_t mid = (lo + hi) / 2;
      (line_starts[mid] <= i ? lo : hi) = mid;
    }
    int col = 1;  // in characters
    for (size_t k = line_starts[lo]; k < i && k < src.size(); ++k) col += (static_cast<unsigned char>(src[k]) & 0xc0) != 0x80;
    return {static_cast<int>(lo + 1), col};
  }
  [[noreturn]] void syntax(size_t at, const std::string& m) { raise(TemplateError::Kind::syntax, where, pos_of(at), m); }
  [[noreturn]] void unsupported(size_t at, const std::string& m) {
    raise(TemplateError::Kind::unsupported, where, pos_of(at), m);
  }

  void data(std::string_view text, size_t at) {
    if (!text.empty()) out.push_back({Tok::data, std::string(text), pos_of(at)});
  }

  // The end of a block or comment tag at i ("%}" or "#}"), with its whitespace control: returns
  // the position after it (trim_blocks: one \n; '-': all whitespace).
  size_t tag_end(size_t i, char sign) {
    i += 2;
    if (sign == '-') return skip_ws(src, i);
    if (sign == '+') return i;
    return i < src.size() && src[i] == '\n' ? i + 1 : i;
  }

  // A string literal's value (Python's unicode-escape of the text between the quotes).
  std::string unescape(std::string_view body, size_t at) {
    std::string r;
    for (size_t i = 0; i < body.size(); ++i) {
      const char c = body[i];
      if (c != '\\') {
        r += c;
        continue;
      }
      if (i + 1 >= body.size()) syntax(at, "\\ at end of string");
      const char e = body[++i];
      auto hex = [&](int n) -> uint32_t {
        uint32_t v = 0;
        for (int k = 1; k <= n; ++k) {
          if (i + k >= body.size()) syntax(at, fmt::format("truncated \\{} escape", e));
          const char h = body[i + k];
          if (!std::isxdigit(static_cast<unsigned char>(h))) syntax(at, fmt::format("truncated \\{} escape", e));
          v = v * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (h | 0x20) - 'a' + 10);
        }
        i += n;
        return v;
      };
      switch (e) {
        case '\n': break;
        case '\\': r += '\\'; break;
        case '\'': r += '\''; break;
        case '"': r += '"'; break;
        case 'a': r += '\a'; break;
        case 'b': r += '\b'; break;
        case 'f': r += '\f'; break;
        case 'n': r += '\n'; break;
        case 'r': r += '\r'; break;
        case 't': r += '\t'; break;
        case 'v': r += '\v'; break;
        case 'x': append_utf8(r, hex(2)); break;
        case 'u': append_utf8(r, hex(4)); break;
        case 'U': {
          const uint32_t v = hex(8);
          if (v > 0x10ffff) syntax(at, "illegal Unicode character in string");
          append_utf8(r, v);
          break;
        }
        case 'N': unsupported(at, "\\N{...} escapes in strings are not supported");
        default:
          if (e >= '0' && e <= '7') {
            uint32_t v = static_cast<uint32_t>(e - '0');
            for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7'; ++k)
              v = v * 8 + static_cast<uint32_t>(body[++i] - '0');
            append_utf8(r, v);
          } else if (static_cast<unsigned char>(e) >= 0x80) {
            // backslashreplace turned the character into \xNN / \uNNNN / \UNNNNNNNN, read back
            // with the backslash escaped: a backslash, then that escape's text.
            size_t n = 1;
            while (i + n < body.size() && (static_cast<unsigned char>(body[i + n]) & 0xc0) == 0x80) ++n;
            const auto cps = code_points(body.substr(i, n));
            i += n - 1;
            const uint32_t cp = cps.empty() ? 0 : cps[0];
            r += cp < 0x100 ? fmt::format("\\x{:02x}", cp) : cp < 0x10000 ? fmt::format("\\u{:04x}", cp)
                                                                            : fmt::format("\\U{:08x}", cp);
          } else {
            r += '\\';
            r += e;
          }
      }
    }
    return r;
  }

  // Tokens inside {{ }} or {% %} from i; returns the position after the closing tag.
  size_t tag(size_t i, bool block, size_t open_at) {
    std::vector<char> balance;
    while (true) {
      if (i >= src.size())
        syntax(open_at, fmt::format("unexpected end of template: the {} tag is not closed", block ? "block" : "variable"));
      if (balance.empty()) {
        if (block) {
          if (src.compare(i, 3, "+%}") == 0) {
            out.push_back({Tok::block_end, "", pos_of(i)});
            return i + 3;
          }
          if (src.compare(i, 3, "-%}") == 0) {
            out.push_back({Tok::block_end, "", pos_of(i)});
            return tag_end(i + 1, '-');
          }
          if (src.compare(i, 2, "%}") == 0) {
            out.push_back({Tok::block_end, "", pos_of(i)});
            return tag_end(i, 0);
          }
        } else {
          if (src.compare(i, 3, "-}}") == 0) {
            out.push_back({Tok::var_end, "", pos_of(i)});
            return skip_ws(src, i + 3);
          }
          if (src.compare(i, 2, "}}") == 0) {
            out.push_back({Tok::var_end, "", pos_of(i)});
            return i + 2;
          }
        }
      }
      if (const size_t w = space_at(src, i); w > 0) {
        i += w;
        continue;
      }
      const char c = src[i];
      const Pos p = pos_of(i);
      auto digit = [&](size_t k) { return k < src.size() && std::isdigit(static_cast<unsigned char>(src[k])); };
      // digits with single underscores between them, from k; returns the end (k if none)
      auto digits = [&](size_t k) {
        if (!digit(k)) return k;
        ++k;
        while (true) {
          if (digit(k)) ++k;
          else if (k + 1 < src.size() && src[k] == '_' && digit(k + 1)) k += 2;
          else return k;
        }
      };
      if (std::isdigit(static_cast<unsigned char>(c)) && !(i > 0 && src[i - 1] == '.')) {
        // float: digits ((. digits)? e[+-]? digits | . digits)
        size_t e = digits(i), f = std::string::npos;
        size_t k = e;
        if (k < src.size() && src[k] == '.' && digit(k + 1)) k = digits(k + 1);
        if (k < src.size() && (src[k] == 'e' || src[k] == 'E')) {
          size_t m = k + 1;
          if (m < src.size() && (src[m] == '+' || src[m] == '-')) ++m;
          if (digit(m)) f = digits(m);
        }
        if (f == std::string::npos && k != e) f = k;
        if (f != std::string::npos) {
          std::string t;
          for (size_t q = i; q < f; ++q)
            if (src[q] != '_') t += src[q];
          out.push_back({Tok::floating, t, p, 0, std::strtod(t.c_str(), nullptr)});
          i = f;
          continue;
        }
      }
      if (std::isdigit(static_cast<unsigned char>(c))) {
        if (c == '0' && i + 1 < src.size() && std::strchr("bBoOxX", src[i + 1]))
          unsupported(i, "binary, octal and hex integer literals are not supported");
        size_t e = c == '0' ? i + 1 : digits(i);
        if (c == '0')
          while (e + 1 < src.size() && (src[e] == '0' || (src[e] == '_' && src[e + 1] == '0'))) e += src[e] == '0' ? 1 : 2;
        std::string t;
        for (size_t q = i; q < e; ++q)
          if (src[q] != '_') t += src[q];
        errno = 0;
        const long long v = std::strtoll(t.c_str(), nullptr, 10);
        if (errno == ERANGE) unsupported(i, "integers beyond 64 bits are not supported");
        out.push_back({Tok::integer, t, p, v, 0});
        i = e;
        continue;
      }
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t e = i + 1;
        while (e < src.size() && (std::isalnum(static_cast<unsigned char>(src[e])) || src[e] == '_')) ++e;
        if (e < src.size() && static_cast<unsigned char>(src[e]) >= 0x80)
          unsupported(i, "non-ASCII names are not supported");
        out.push_back({Tok::name, src.substr(i, e - i), p});
        i = e;
        continue;
      }
      if (c == '\'' || c == '"') {
        size_t e = i + 1;
        while (e < src.size() && src[e] != c) e += src[e] == '\\' ? 2 : 1;
        if (e >= src.size()) syntax(i, "unexpected end of string");
        out.push_back({Tok::string, unescape(std::string_view(src).substr(i + 1, e - i - 1), i), p});
        i = e + 1;
        continue;
      }
      static const char* ops[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]", "(",
                                  ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";"};
      const char* hit = nullptr;
      for (const char* o : ops)
        if (src.compare(i, std::strlen(o), o) == 0) {
          hit = o;
          break;
        }
      if (!hit) {
        if (static_cast<unsigned char>(c) >= 0x80) unsupported(i, "non-ASCII characters outside strings are not supported");
        syntax(i, fmt::format("unexpected char '{}'", c));
      }
      const std::string o = hit;
      if (o == "(" || o == "[" || o == "{") {
        balance.push_back(o == "(" ? ')' : o == "[" ? ']' : '}');
      } else if (o == ")" || o == "]" || o == "}") {
        if (balance.empty()) syntax(i, fmt::format("unexpected '{}'", o));
        if (balance.back() != o[0]) syntax(i, fmt::format("unexpected '{}', expected '{}'", o, balance.back()));
        balance.pop_back();
      }
      out.push_back({Tok::op, o, p});
      i += o.size();
    }
  }

  void run() {
    size_t i = 0;
    bool line_starting = true;
    while (i < src.size()) {
      // the next tag start: {{, {% or {#
      size_t t = i;
      while (true) {
        t = src.find('{', t);
        if (t == std::string::npos || t + 1 >= src.size()) {
          t = std::string::npos;
          break;
        }
        if (src[t + 1] == '{' || src[t + 1] == '%' || src[t + 1] == '#') break;
        ++t;
      }
      if (t == std::string::npos) {
        data(std::string_view(src).substr(i), i);
        return;
      }
      const char kind = src[t + 1];
      const char sign = t + 2 < src.size() && (src[t + 2] == '-' || src[t + 2] == '+') ? src[t + 2] : 0;
      std::string_view text = std::string_view(src).substr(i, t - i);
      if (sign == '-') {
        text = rstrip_ws(text);
      } else if (sign != '+' && kind != '{') {  // lstrip_blocks: blocks and comments
        const size_t nl = text.rfind('\n');
        const size_t l = nl == std::string_view::npos ? 0 : nl + 1;
        if ((l > 0 || line_starting) && all_ws(text.substr(l))) text = text.substr(0, l);
      }
      data(text, i);
      size_t j = t + 2 + (sign ? 1 : 0);
      if (kind == '#') {
        const size_t e = src.find("#}", j);
        if (e == std::string::npos) syntax(t, "missing end of comment tag");
        const char esign = e > j && (src[e - 1] == '-' || src[e - 1] == '+') ? src[e - 1] : 0;
        i = tag_end(e, esign);
      } else if (kind == '%' && is_raw(j)) {
        i = raw(t, j);
      } else {
        out.push_back({kind == '%' ? Tok::block_begin : Tok::var_begin, "", pos_of(t)});
        i = tag(j, kind == '%', t);
      }
      line_starting = i > 0 && src[i - 1] == '\n';
    }
  }

  // {% raw %} at j (after "{%" and its sign)?
  bool is_raw(size_t j) {
    size_t k = skip_ws(src, j);
    if (src.compare(k, 3, "raw") != 0) return false;
    k = skip_ws(src, k + 3);
    return src.compare(k, 2, "%}") == 0 || src.compare(k, 3, "-%}") == 0;
  }
  // The raw block opened at t: its text is data; returns the position after {% endraw %}.
  size_t raw(size_t t, size_t j) {
    size_t k = skip_ws(src, skip_ws(src, j) + 3);
    k = src[k] == '-' ? skip_ws(src, k + 3) : k + 2;  // no trim_blocks after {% raw %} (as jinja2)
    for (size_t e = k; (e = src.find("{%", e)) != std::string::npos; e += 2) {
      size_t q = e + 2;
      const char sign = q < src.size() && (src[q] == '-' || src[q] == '+') ? src[q] : 0;
      if (sign) ++q;
      q = skip_ws(src, q);
      if (src.compare(q, 6, "endraw") != 0) continue;
      q = skip_ws(src, q + 6);
      std::string_view text = std::string_view(src).substr(k, e - k);
      if (sign == '-') {
        text = rstrip_ws(text);
      } else if (sign != '+') {
        const size_t nl = text.rfind('\n');
        const size_t l = nl == std::string_view::npos ? 0 : nl + 1;
        if (l > 0 && all_ws(text.substr(l))) text = text.substr(0, l);
      }
      if (src.compare(q, 3, "+%}") == 0) {
        data(text, k);
        return q + 3;
      }
      if (src.compare(q, 3, "-%}") == 0) {
        data(text, k);
        return tag_end(q + 1, '-');
      }
      if (src.compare(q, 2, "%}") == 0) {
        data(text, k);
        return tag_end(q, 0);
      }
    }
    syntax(t, "missing end of raw directive");
  }
};

}  // namespace

std::vector<Token> lex(std::string_view source, const std::string& where) {
  // Lines split at \r\n, \r and \n, joined with \n; one trailing newline dropped.
  std::string s;
  s.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      s += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      s += source[i];
    }
  }
  if (!s.empty() && s.back() == '\n') s.pop_back();
  Lexer lx{std::move(s), where, {}, {0}};
  for (size_t i = 0; i < lx.src.size(); ++i)
    if (lx.src[i] == '\n') lx.line_starts.push_back(i + 1);
  lx.run();
  lx.out.push_back({Tok::eof, "", lx.pos_of(lx.src.size())});
  return std::move(lx.out);
}

}  // namespace mpitron::jinja
