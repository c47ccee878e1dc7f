// The text of TOML values and keys as the job-key registry (job_config.cpp) reads and writes
// them: trimming, UTF-8 validity, basic-string quoting and its inverse, bare or quoted keys.
#pragma once
#include <string>

namespace mpitron {

// s without leading and trailing spaces, tabs, CR and LF.
std::string trim(const std::string& s);

// UTF-8 as TOML requires it (no overlong forms, no surrogates, <= U+10FFFF).
bool valid_utf8(const std::string& s);

// A "..." TOML basic string has its escapes decoded, a '...' literal string is taken as is, and
// anything else (a command-line value) is kept verbatim (trimmed).
std::string unquote(const std::string& text);

// A TOML basic string: quotes, backslashes and control characters escaped.
std::string quote(const std::string& s);

// A TOML key: bare when it can be, else quoted.
std::string toml_key(const std::string& k);

}  // namespace mpitron
