// Reading prep's inputs: plain, gzip (.gz) or Zstandard (.zst) files, as text or as JSON Lines
// (one document per line, its text in one string field: the layout of most public pre-training
// sets). docs/data.md, "Prep".
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mpitron {

// The whole file as it is stored; UsageError "cannot open WHAT 'PATH'" when it cannot be read.
std::string read_whole_file(const std::string& path, const char* what);

// The whole file, decompressed by its extension (.gz: zlib, several members allowed; .zst:
// libzstd, several frames allowed). UsageError naming the file and the cause on a corrupt or
// truncated stream.
std::string read_input_file(const std::string& path);

// "jsonl" when the name (without .gz / .zst) ends in .jsonl or .ndjson, else "text".
std::string input_format_of(const std::string& path);

// Bad lines of JSONL inputs: how many, and the first few with their place and cause.
struct BadLines {
  int64_t count = 0;
  std::vector<std::string> first;  // "FILE:LINE: why", at most kKept
  static constexpr size_t kKept = 5;
};

// The non-blank lines of a JSONL text and their 1-based line numbers.
struct JsonlLine {
  std::string_view text;
  int64_t number;
};
std::vector<JsonlLine> jsonl_lines(std::string_view text);

// A line's document: the string `field` of its JSON object. A line that is not JSON, not an
// object, lacks the field or holds something other than a string is bad: false, and *why says so.
bool jsonl_document(std::string_view line, const std::string& field, std::string* doc, std::string* why);

// Records bad line `number` of `path` (skip_bad) or throws its UsageError.
void bad_jsonl_line(const std::string& path, int64_t number, const std::string& why, bool skip_bad, BadLines* bad);

}  // namespace mpitron
