// A pre-check of a TOML file's text before toml++ parses it (load_job_file, the plan profile reader).
//
// toml++ 3.3 (Debian's) has undefined behaviour on some inputs: a non-ASCII code point where
// its parser asks "is this whitespace?" reaches __builtin_unreachable (upstream
// marzer/tomlplusplus#190, #295). It asks that of characters outside strings and comments, of
// the character after a backslash in a multi-line basic string, and of the first character after
// a line-ending backslash. TOML allows non-ASCII only inside strings and comments, so rejecting it
// elsewhere loses no valid file; the two backslash cases are rejected with a hint. A quote where
// no string can start (x = 2'...: toml++ reads on through it as part of the bare value) is
// rejected too, so that what follows it is never taken for a string. UsageError names the file,
// line and column.
#pragma once
#include <string>
#include <string_view>

namespace mpitron {

void check_toml_text(std::string_view text, const std::string& path);

}  // namespace mpitron
