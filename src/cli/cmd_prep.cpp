// `mpitron prep`: text files -> tokenized HDF5 shards.
#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "mpitron/cli/commands.hpp"
#include "mpitron/core/error.hpp"
#include "mpitron/data/loader.hpp"
#include "mpitron/data/prep.hpp"
#include "mpitron/data/shard.hpp"
#include "option_values.hpp"
#include "output_paths.hpp"

namespace mpitron {
namespace {

constexpr const char* kHelp = R"(usage: mpitron prep --input PATTERN... --out DIR [options]

Tokenizes text or JSON Lines files into HDF5 shards DIR/train_00000.h5 ... and
DIR/val_00000.h5 (a 1-D /tokens dataset, /doc_offsets, and the attributes vocab_size, eot,
tokenizer, num_tokens, source; see docs/data.md). Every document ends with the end-of-text id.

  --input PATTERN...     files or quoted glob patterns ('corpus/*.txt', 'web/*.jsonl.zst'); several
                         allowed; .gz (gzip) and .zst (Zstandard) files are decompressed
  --out DIR              output folder (created; its old train_/val_ shards are replaced)
  --tokenizer T          byte (default): one id per byte, plus end-of-text
                         FILE: an mpitron tokenizer JSON (`mpitron tokenizer train`)
                         gpt2:DIR: GPT-2's BPE from DIR/encoder.json + DIR/vocab.bpe
                         hf:tokenizer.json: a Hugging Face byte-level BPE tokenizer.json
                         hf:DIR: a Hugging Face model folder's tokenizer.json or tokenizer.model
                         sp:FILE.model: a SentencePiece model (LLaMA-2's family)
  --shard-tokens N       tokens per shard, >= 1, e.g. 50M (default 50M)
  --val-fraction F       fraction of documents for val_*.h5, spread evenly, 0 <= F < 1
                         (default 0.005; 0 = none)
  --doc-separator LINE   text: a line equal to LINE separates documents (fortune files: %);
                         default: each file is one document
  --format F             auto (default: .jsonl / .ndjson files, compressed or not, are JSONL;
                         the rest text), text, jsonl or chat
  --chat-template T      chat: JSONL lines {"messages": [{"role": system|user|assistant,
                         "content": ...}, ...]}, rendered as the model family's published chat
                         template: chatml, llama3, llama2 or mistral; the shards get a /loss_mask
                         hf:DIR: the model's own Jinja chat_template from DIR/tokenizer_config.json,
                         rendered as transformers' apply_chat_template renders it (a Jinja subset:
                         anything outside it is an error naming the construct and line; messages
                         may have any role and fields); the tokenizer's special tokens in the
                         rendered text become their ids, the rest is encoded as text (to see
                         the rendered text: prep with --tokenizer byte, whose shards hold it byte
                         for byte, markers included)
  --loss-on W            chat: assistant (default: only the assistant's replies and their
                         end-of-turn markers are trained on; hf:DIR: from the end of the rendering
                         of the messages before the reply with add_generation_prompt, which must
                         be a prefix of the whole, to the first end-of-turn marker) or all
                         (docs/data.md: the Jinja subset, the markers, the mask rule)
  --jsonl-field NAME     JSONL: the string field with a document's text (default text)
  --on-bad-line M        JSONL: error (default: stop at the first line that is not a JSON object
                         with that string field, naming file and line) or skip (count, report)
  --pack SEQ_LEN         pack whole documents greedily into windows of SEQ_LEN + 1 tokens (the
                         job's model.seq_len, >= 2; 0 = off, the default): padding fills each
                         window's rest and is never trained; a document longer than a window is
                         split (/doc_continued); prints the packing efficiency and how many
                         tokens the /loss_mask trains
  --workers N            tokenizer threads, 1 to 256 (default 1)
  --quiet                no progress output
  -h, --help             this text

usage: mpitron prep --check DIR [--seq-len N]
  Opens DIR's train_*.h5 (and val_*.h5 if any) as training would, reads every token once
  (ids < vocab_size), and prints a summary; with --seq-len (>= 2, as model.seq_len), also checks
  one sample fits.
)";

int check_dir(const std::string& dir, int seq_len) {
  for (const char* split : {"train", "val"}) {
    if (std::string(split) == "val" && list_shards(dir, split).empty()) continue;
    TokenDataset ds(dir, split);
    // Up to 1M tokens per read; no bigger than the split (small shards are common in tests).
    std::vector<int32_t> buf(static_cast<size_t>(std::clamp<int64_t>(ds.num_tokens(), 1, 1 << 20)));
    for (int64_t at = 0; at < ds.num_tokens(); at += static_cast<int64_t>(buf.size()))
      ds.read(at, std::min<int64_t>(static_cast<int64_t>(buf.size()), ds.num_tokens() - at), buf.data());
    if (seq_len > 0) {
      LoaderOptions o;
      o.dir = dir;
      o.split = split;
      o.seq_len = seq_len;
      o.prefetch = 0;
      ValidationLoader v(o);
    }
    std::printf("%s: vocab_size %d, eot %d, %lld samples of seq_len %d, tokens ok\n", ds.describe().c_str(),
                ds.vocab_size(), ds.eot(), static_cast<long long>(seq_len > 0 ? ds.num_samples(seq_len) : 0), seq_len);
  }
  return 0;
}

}  // namespace

int cmd_prep(const Args& args) {
  PrepOptions opt;
  std::string check;
  int seq_len = 0;
  auto value = [&](size_t& i) -> const std::string& {
    usage_check(i + 1 < args.size(), "prep: {} needs a value (see `mpitron prep --help`)", args[i]);
    return args[++i];
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kHelp, stdout);
      return 0;
    } else if (a == "--input") {
      value(i);
      opt.inputs.push_back(args[i]);
      while (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) opt.inputs.push_back(args[++i]);
    } else if (a == "--out") {
      opt.out = value(i);
    } else if (a == "--tokenizer") {
      opt.tokenizer = value(i);
    } else if (a == "--shard-tokens") {
      opt.shard_tokens = parse_count(value(i), "--shard-tokens", prep_range::shard_tokens());
    } else if (a == "--val-fraction") {
      opt.val_fraction = option_float("--val-fraction", value(i), prep_range::val_fraction());
    } else if (a == "--workers") {
      opt.workers = option_int("--workers", value(i), prep_range::workers());
    } else if (a == "--doc-separator") {
      opt.doc_separator = value(i);
    } else if (a == "--format") {
      opt.format = value(i);
    } else if (a == "--pack") {
      opt.pack = option_int("--pack", value(i), prep_range::pack());
    } else if (a == "--chat-template") {
      opt.chat_template = value(i);
    } else if (a == "--loss-on") {
      opt.loss_on = value(i);
    } else if (a == "--jsonl-field") {
      opt.jsonl_field = value(i);
    } else if (a == "--on-bad-line") {
      const std::string& m = value(i);
      usage_check(m == "error" || m == "skip", "--on-bad-line must be error or skip (got '{}')", m);
      opt.skip_bad_lines = m == "skip";
    } else if (a == "--check") {
      check = value(i);
    } else if (a == "--seq-len") {
      seq_len = option_int("--seq-len", value(i), prep_range::check_seq_len());
    } else if (a == "--quiet") {
      opt.progress = 0;
    } else {
      usage_fail("prep: unknown option '{}' (see `mpitron prep --help`)", a);
    }
  }
  if (!check.empty()) return check_dir(check, seq_len);
  usage_check(!opt.inputs.empty() && !opt.out.empty(), "prep: --input and --out are required (see `mpitron prep --help`)");
  std::vector<std::string> inputs = opt.inputs;
  // The tokenizer is an input too when it names a file or folder (not a built-in such as "byte").
  const std::string tok_path = opt.tokenizer.rfind("hf:", 0) == 0 ? opt.tokenizer.substr(3) : opt.tokenizer;
  std::error_code ec;
  if (std::filesystem::exists(tok_path, ec)) inputs.push_back(tok_path);
  check_output_apart("prep", "--out", opt.out, inputs);
  PrepResult r = run_prep(opt);
  std::printf("prep: %lld documents, %.1f MB -> %lld train + %lld val tokens in %zu shard%s under %s (%.1f s, %.1f MB/s)\n",
              static_cast<long long>(r.documents), r.bytes / 1e6, static_cast<long long>(r.train_tokens),
              static_cast<long long>(r.val_tokens), r.shards.size(), r.shards.size() == 1 ? "" : "s", opt.out.c_str(),
              r.seconds, r.seconds > 0 ? r.bytes / 1e6 / r.seconds : 0.0);
  if (opt.pack > 0) {
    const long long all = r.train_tokens + r.val_tokens;
    std::printf("prep: packed into windows of %d + 1 tokens: %lld padding tokens, efficiency %.1f%% (document "
                "tokens / all), %lld document%s split over windows\n",
                opt.pack, static_cast<long long>(r.padding_tokens),
                all > 0 ? 100.0 * static_cast<double>(all - r.padding_tokens) / static_cast<double>(all) : 0.0,
                static_cast<long long>(r.split_documents), r.split_documents == 1 ? "" : "s");
  }
  if (r.trained_tokens >= 0) {  // the shards carry a /loss_mask (chat, --pack): its ones
    const long long all = r.train_tokens + r.val_tokens;
    const std::string what = opt.format == "chat" ? "chat template " + opt.chat_template + ", loss on " + opt.loss_on
                                                  : std::string("loss mask");
    std::printf("prep: %s: %lld of %lld tokens trained (%.1f%%)\n", what.c_str(),
                static_cast<long long>(r.trained_tokens), all,
                all > 0 ? 100.0 * static_cast<double>(r.trained_tokens) / static_cast<double>(all) : 0.0);
  }
  if (r.bad_lines > 0) {
    std::fprintf(stderr, "prep: warning: skipped %lld bad JSONL line%s (--on-bad-line skip); the first:\n",
                 static_cast<long long>(r.bad_lines), r.bad_lines == 1 ? "" : "s");
    for (const auto& b : r.first_bad_lines) std::fprintf(stderr, "  %s\n", b.c_str());
  }
  return 0;
}

}  // namespace mpitron
