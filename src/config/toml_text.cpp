#include "toml_text.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdint>

namespace mpitron {

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n"), e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

// UTF-8 as TOML requires it (no overlong forms, no surrogates, <= U+10FFFF). Values from the
// command line are checked: job_to_toml must be able to write them back.
bool valid_utf8(const std::string& s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t n = s.size(), i = 0;
  while (i < n) {
    unsigned c = p[i];
    int len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || i + len > n) return false;
    uint32_t cp = len == 1 ? c : c & (0x7F >> len);
    for (int k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += static_cast<size_t>(len);
  }
  return true;
}

// Appends code point cp as UTF-8.
static void put_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// The inverse of quote(): a "..." TOML basic string has its escapes decoded (load_job_file hands
// string values over as quote(value)), a '...' literal string is taken as is, and anything else
// (a command-line value) is kept verbatim.
std::string unquote(const std::string& text) {
  std::string v = trim(text);
  if (v.size() < 2 || (v.front() != '"' && v.front() != '\'') || v.back() != v.front()) return v;
  if (v.front() == '\'') return v.substr(1, v.size() - 2);
  std::string out;
  for (size_t i = 1; i + 1 < v.size(); ++i) {
    if (v[i] != '\\' || i + 2 >= v.size()) {
      out += v[i];
      continue;
    }
    char e = v[++i];
    switch (e) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'u':
      case 'U': {
        size_t digits = e == 'u' ? 4 : 8;
        uint32_t cp = 0;
        auto [p, ec] = std::from_chars(v.data() + i + 1, v.data() + std::min(i + 1 + digits, v.size() - 1), cp, 16);
        if (ec != std::errc() || p != v.data() + i + 1 + digits) {
          out += '\\';
          out += e;
          break;
        }
        put_utf8(out, cp);
        i += digits;
        break;
      }
      default: out += e;  // \" and \\ (and anything else: the character itself)
    }
  }
  return out;
}

// A TOML basic string: quotes, backslashes and control characters escaped (TOML forbids them raw).
std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    unsigned char u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7F) {
      out += fmt::format("\\u{:04X}", static_cast<unsigned>(u));
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// A TOML key: bare when it can be, else quoted.
std::string toml_key(const std::string& k) {
  bool bare = !k.empty() && std::all_of(k.begin(), k.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
  return bare ? k : quote(k);
}

}  // namespace mpitron
