// TOML text to a table, every failure a UsageError naming the file and position (toml_parse.hpp).
#include "mpitron/config/toml_parse.hpp"

#include <fmt/format.h>

#include "mpitron/config/toml_guard.hpp"
#include "mpitron/core/error.hpp"

namespace mpitron {
namespace {

bool check_fires(std::string_view text) {
  try {
    check_toml_text(text, "");
    (void)toml::parse(text);
  } catch (const TomlCheckFailed&) {
    return true;
  } catch (const std::exception&) {  // a parse error or the guard's: not the check
  }
  return false;
}

// toml++ reads left to right, so the shortest prefix of the text on which its internal check fires
// ends with the character that made it fire (binary search: the empty text parses). Returns its
// offset, or npos when the prefixes do not fire it.
size_t check_failure_offset(std::string_view text) {
  if (!check_fires(text)) return std::string_view::npos;
  size_t lo = 0, hi = text.size();  // the prefix of lo bytes does not fire it, that of hi bytes does
  while (hi - lo > 1) {
    const size_t mid = lo + (hi - lo) / 2;
    (check_fires(text.substr(0, mid)) ? hi : lo) = mid;
  }
  return hi - 1;
}

}  // namespace

toml::table parse_toml(std::string_view text, const std::string& path) {
  check_toml_text(text, path);
  try {
    return toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    const toml::source_position at = e.source().begin;
    if (at.line == 0) usage_fail("{}: TOML error: {}", path, e.description());
    usage_fail("{}:{}:{}: TOML error: {}", path, at.line, at.column, e.description());
  } catch (const TomlCheckFailed& e) {
    const size_t off = check_failure_offset(text);
    if (off == std::string_view::npos)
      usage_fail("{}: TOML error: the file is malformed (the parser's check `{}` failed)", path, e.what());
    size_t line = 1, col = 1;  // columns in code points, as toml++ counts them
    for (size_t i = 0; i < off; ++i) {
      if (text[i] == '\n') {
        line += 1;
        col = 1;
      } else if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) col += 1;
    }
    const unsigned char c = static_cast<unsigned char>(text[off]);
    const std::string shown =
        c > 0x20 && c < 0x7f ? fmt::format("'{}'", static_cast<char>(c)) : fmt::format("byte 0x{:02x}", c);
    // The checks that inputs reach are on a key's first character ('+' or '[' in a table header).
    usage_fail("{}:{}:{}: TOML error: unexpected character {} (a key is bare, of A-Z a-z 0-9 _ -, or quoted)", path,
               line, col, shown);
  }
}

}  // namespace mpitron
