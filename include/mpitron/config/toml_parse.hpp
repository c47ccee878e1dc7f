// The one way mpitron reads TOML (job files, `data.paths`, machine profiles): include this header,
// never <toml++/toml.h> itself, and parse with parse_toml.
//
// toml++ 3.3 (Debian's) asserts on some malformed files instead of throwing a parse_error, e.g.
// on the table header "[+a]" (upstream: marzer/tomlplusplus#301), which aborts the process; under
// NDEBUG the same check is an optimiser assumption (undefined behaviour). Its internal checks
// throw TomlCheckFailed here instead, NDEBUG or not, and parse_toml reports them as a TOML error
// in the file. toml++ is header-only: every file that includes it must see the same TOML_ASSERT,
// or the program holds two definitions of the same inline functions (one of them asserting).
#pragma once
#include <stdexcept>
#include <string>
#include <string_view>

namespace mpitron {
struct TomlCheckFailed : std::logic_error {
  using std::logic_error::logic_error;
};
[[noreturn]] inline void toml_check_failed(const char* expr) { throw TomlCheckFailed(expr); }
}  // namespace mpitron

#pragma push_macro("NDEBUG")
#undef NDEBUG
#define TOML_ASSERT(expr) ((expr) ? static_cast<void>(0) : ::mpitron::toml_check_failed(#expr))
#include <toml++/toml.h>
#pragma pop_macro("NDEBUG")

namespace mpitron {

// `text` (the contents of `path`) parsed as TOML. check_toml_text's guard runs first (inputs
// toml++ 3.3 cannot take safely, toml_guard.hpp). Any failure is a UsageError
// "PATH:LINE:COL: TOML error: WHAT", the position being toml++'s, or for an internal check that
// fired, the character that made it fire.
toml::table parse_toml(std::string_view text, const std::string& path);

}  // namespace mpitron
