// Text or JSON Lines files (plain, .gz, .zst) -> HDF5 shards (`mpitron prep`; docs/data.md).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "mpitron/config/value_rules.hpp"

namespace mpitron {

struct PrepOptions {
  std::vector<std::string> inputs;   // glob patterns (or plain paths)
  std::string tokenizer = "byte";    // "byte" or a tokenizer JSON file
  std::string out;                   // output folder
  int64_t shard_tokens = 50'000'000; // tokens per shard (the last one holds the rest)
  double val_fraction = 0.005;       // of the documents, spread evenly; 0 = no val split
  int workers = 1;                   // tokenizer threads
  std::string doc_separator;         // a line equal to this separates documents ("" = one per file)
  std::string format = "auto";       // "auto" (by extension: .jsonl/.ndjson[.gz|.zst]), "text", "jsonl", "chat"
  std::string jsonl_field = "text";  // JSONL: the string field holding a document's text
  bool skip_bad_lines = false;       // JSONL: count and skip bad lines instead of stopping
  // format "chat" (chat.hpp): JSONL conversations rendered with this template; the shards get a
  // /loss_mask: "assistant" trains the assistant's replies only, "all" every token.
  std::string chat_template;
  std::string loss_on = "assistant";
  // --pack SEQ_LEN (0: off; else >= 2): whole documents packed greedily into blocks of SEQ_LEN
  // tokens, each block a training window of SEQ_LEN + 1 (the next block's first token, never a
  // target, ends it); the rest of a block is padding (the end-of-text id, never trained); a
  // document longer than a block is split (recorded in /doc_continued). The shards get a
  // /loss_mask. SEQ_LEN 1 would leave nothing to train: a block's only token is its first.
  int pack = 0;
  int progress = -1;                 // -1: a bar on a terminal, plain lines otherwise; 0: quiet; 1: lines
};

struct PrepResult {
  int64_t bytes = 0, documents = 0, train_tokens = 0, val_tokens = 0;  // bytes: decompressed text
  int64_t bad_lines = 0;                     // JSONL lines skipped (skip_bad_lines)
  // Shards with a /loss_mask (chat, --pack): the ones written in it, train + val (what training
  // can target: after packing masked each block's first token); -1 when the shards have none.
  int64_t trained_tokens = -1;
  int64_t padding_tokens = 0, split_documents = 0;  // --pack: padding written, documents split
  std::vector<std::string> first_bad_lines;  // "FILE:LINE: why" of the first few
  std::vector<std::string> shards;
  double seconds = 0;
};

// Expands the patterns (sorted, deduplicated). UsageError naming the pattern if one matches
// nothing, naming the file if one is empty or unreadable.
std::vector<std::string> expand_inputs(const std::vector<std::string>& patterns);

// Splits a file's text into documents: one per file, or at lines equal to `separator`
// (fortune files use "%"). Empty documents are dropped.
std::vector<std::string> split_documents(const std::string& text, const std::string& separator);

PrepResult run_prep(const PrepOptions& opt);

// The ranges of prep's numeric options: cmd_prep checks the command line with them and run_prep
// its PrepOptions, so both refuse a value with the same words (config/value_rules.hpp).
namespace prep_range {
inline Range pack() { return at_least(2, "off"); }        // model.seq_len's own rule, or 0
inline Range val_fraction() { return between(0, 1, true); }
inline Range workers() { return between(1, 256); }        // threads; more would only cost memory
inline Range shard_tokens() { return at_least(1); }
inline Range check_seq_len() { return at_least(2); }      // prep --check --seq-len: model.seq_len's rule
}  // namespace prep_range

// "50M" -> 50000000; also K, G, plain numbers and "1.5K" (the result must be a whole number in
// `r`). UsageError "option WHAT: 'TEXT' is not allowed (allowed: ...)" otherwise (value_rules).
int64_t parse_count(const std::string& text, const std::string& what, const Range& r = at_least(1));

}  // namespace mpitron
