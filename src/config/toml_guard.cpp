// A small TOML lexer (strings and comments only) for check_toml_text: see toml_guard.hpp.
#include "mpitron/config/toml_guard.hpp"

#include "mpitron/core/error.hpp"

namespace mpitron {
namespace {

class Scan {
 public:
  Scan(std::string_view t, const std::string& path) : t_(t), path_(path) {}

  void run() {
    char before = '\n';  // the last character outside strings and comments other than a space or tab
    while (i_ < t_.size()) {
      char c = t_[i_];
      if (c == '#') {
        skip_to_line_end();  // comments may hold any UTF-8 (toml++ validates it)
      } else if (c == '"' || c == '\'') {
        // A string is a value or a key: it follows '=', '[', '{', ',' or '.', or begins a line.
        // toml++ takes a quote anywhere else (x = 2'...) as part of a bare value and asks
        // "whitespace?" of the characters after it, non-ASCII ones included.
        if (std::string_view("\n=[{,.").find(before) == std::string_view::npos)
          fail_at("a quote where no string can start (a string follows =, [, {, a comma or a dot, or begins a line)");
        string(c);
        before = c;
      } else {
        if (static_cast<unsigned char>(c) >= 0x80)
          fail_at("a non-ASCII character outside a string or comment (TOML allows them only there)");
        if (c != ' ' && c != '\t') before = c;
        advance();
      }
    }
  }

 private:
  bool at(size_t k, char c) const { return i_ + k < t_.size() && t_[i_ + k] == c; }
  void advance() {
    if (t_[i_] == '\n') {
      ++line_;
      line_start_ = i_ + 1;
    }
    ++i_;
  }
  void skip_to_line_end() {
    while (i_ < t_.size() && t_[i_] != '\n') advance();
  }
  [[noreturn]] void fail_at(const char* what) const {
    usage_fail("{}:{}:{}: TOML error: {}", path_, line_, i_ - line_start_ + 1, what);
  }

  // From the opening quote to just after the closing one (or to the end of the line / file, where
  // toml++ reports the unterminated string itself).
  void string(char q) {
    const bool multi = at(1, q) && at(2, q);
    if (!multi && at(1, q)) {  // "" or '': an empty string
      i_ += 2;
      return;
    }
    i_ += multi ? 3 : 1;
    while (i_ < t_.size()) {
      char c = t_[i_];
      if (c == q) {
        if (!multi) {
          ++i_;
          return;
        }
        size_t run = 0;
        while (at(run, q)) ++run;
        if (run >= 3) {  // """ closes; up to two more quotes before it belong to the string
          i_ += run < 5 ? run : 5;
          return;
        }
        i_ += run;
        continue;
      }
      if (c == '\n' && !multi) return;
      if (c == '\\' && q == '"') {
        advance();
        if (multi) {
          // toml++ asks "whitespace?" of the character after the backslash and, when it is, of
          // every character it then trims (a line-ending backslash), up to the first other one.
          size_t start = i_;
          while (i_ < t_.size() && (t_[i_] == ' ' || t_[i_] == '\t' || t_[i_] == '\r' || t_[i_] == '\n')) advance();
          if (i_ < t_.size() && static_cast<unsigned char>(t_[i_]) >= 0x80)
            fail_at(i_ > start ? "a non-ASCII character right after a line-ending backslash (toml++ 3.3 cannot read "
                                 "it; move it to the line before or write it as \\uXXXX)"
                               : "a backslash followed by a non-ASCII character (not a valid escape)");
          if (i_ > start) continue;
        }
        if (i_ < t_.size()) advance();  // the escaped character (\" does not close the string)
        continue;
      }
      advance();
    }
  }

  std::string_view t_;
  const std::string& path_;
  size_t i_ = 0, line_ = 1, line_start_ = 0;
};

}  // namespace

void check_toml_text(std::string_view text, const std::string& path) { Scan(text, path).run(); }

}  // namespace mpitron
