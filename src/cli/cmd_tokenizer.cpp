// `mpitron tokenizer train|encode|decode`: train a byte-level BPE tokenizer; try one out.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "mpitron/cli/commands.hpp"
#include "mpitron/config/value_rules.hpp"
#include "mpitron/core/error.hpp"
#include "mpitron/data/prep.hpp"
#include "mpitron/data/tokenizer.hpp"

namespace mpitron {
namespace {

constexpr const char* kHelp = R"(usage: mpitron tokenizer <train|encode|decode> [options]

  train --input PATTERN... --out tok.json [--vocab 8192] [--min-count 2]
        Learns byte-level BPE merges from text files (quoted globs allowed). Deterministic:
        each step merges the most frequent adjacent pair, ties to the smallest (left, right)
        id pair. vocab counts the 256 bytes, the merges and the end-of-text id (the last id).
  encode --tokenizer T --text STRING     print the ids
  decode --tokenizer T IDS...            print the text of the ids
  -h, --help                             this text

T (default byte), the forms prep's --tokenizer takes:
  byte                 bytes: ids 0..255, end-of-text 256 (vocab 257)
  FILE                 any other path: an mpitron tokenizer JSON (`tokenizer train` writes one)
  gpt2:DIR             GPT-2's byte-level BPE from DIR/encoder.json + DIR/vocab.bpe
  hf:tokenizer.json    a Hugging Face tokenizer.json: byte-level BPE in GPT-2's layout
  hf:DIR               a Hugging Face model folder: its tokenizer.json, else tokenizer.model
  sp:FILE.model        a SentencePiece model (LLaMA-2's family)

The JSON format and each form's ids are described in docs/data.md.
)";

int train(const Args& args) {
  std::vector<std::string> inputs;
  std::string out;
  BpeTrainOptions opt;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> const std::string& {
      usage_check(i + 1 < args.size(), "tokenizer train: {} needs a value", a);
      return args[++i];
    };
    if (a == "-h" || a == "--help") {
      std::fputs(kHelp, stdout);
      return 0;
    } else if (a == "--input") {
      inputs.push_back(value());
      while (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) inputs.push_back(args[++i]);
    } else if (a == "--out") {
      out = value();
    } else if (a == "--vocab") {
      opt.vocab_size = static_cast<int>(parse_count(value(), "--vocab"));
    } else if (a == "--min-count") {
      opt.min_count = parse_count(value(), "--min-count");
    } else {
      usage_fail("tokenizer train: unknown option '{}' (see `mpitron tokenizer --help`)", a);
    }
  }
  usage_check(!inputs.empty() && !out.empty(), "tokenizer train: --input and --out are required");
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::string> texts;
  int64_t bytes = 0;
  for (const auto& f : expand_inputs(inputs)) {
    std::ifstream in(f, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    texts.push_back(ss.str());
    bytes += static_cast<int64_t>(texts.back().size());
  }
  Tokenizer tok = train_bpe(texts, opt);
  std::string tmp = out + ".tmp";
  {
    std::ofstream o(tmp, std::ios::binary);
    usage_check(static_cast<bool>(o), "cannot write '{}'", tmp);
    o << tok.to_json(true);
    o.close();
    if (!o) {
      std::filesystem::remove(tmp);
      fail("cannot write '{}' (disk full?)", tmp);
    }
  }
  std::filesystem::rename(tmp, out);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("tokenizer: %zu merges, vocab_size %d (eot %d) from %.1f MB in %.2f s -> %s\n", tok.merges().size(),
              tok.vocab_size(), tok.eot(), bytes / 1e6, s, out.c_str());
  if (tok.vocab_size() < opt.vocab_size)
    std::printf("tokenizer: note: stopped at %d < --vocab %d: no pair occurs %lld+ times\n", tok.vocab_size(),
                opt.vocab_size, static_cast<long long>(opt.min_count));
  return 0;
}

int encode_decode(const Args& args, bool encode) {
  std::string spec = "byte", text;
  std::vector<int32_t> ids;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--tokenizer" && i + 1 < args.size()) {
      spec = args[++i];
    } else if (a == "--text" && i + 1 < args.size() && encode) {
      text = args[++i];
    } else if (!encode && a.rfind("--", 0) != 0) {
      ids.push_back(checked_int<int32_t>("tokenizer decode: token id", a, at_least(0)));
    } else {
      usage_fail("tokenizer: unknown option '{}' (see `mpitron tokenizer --help`)", a);
    }
  }
  Tokenizer tok = Tokenizer::load(spec);
  if (encode) {
    auto out = tok.encode(text);
    for (size_t i = 0; i < out.size(); ++i) std::printf(i ? " %d" : "%d", out[i]);
    std::printf("\n");
  } else {
    for (int32_t id : ids) usage_check(id >= 0 && id < tok.vocab_size(), "token id {} is outside [0, {})", id, tok.vocab_size());
    std::string s = tok.decode(ids);
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::printf("\n");
  }
  return 0;
}

}  // namespace

int cmd_tokenizer(const Args& args) {
  if (args.empty() || args[0] == "-h" || args[0] == "--help") {
    std::fputs(kHelp, stdout);
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "train") return train(args);
  if (args[0] == "encode") return encode_decode(args, true);
  if (args[0] == "decode") return encode_decode(args, false);
  usage_fail("tokenizer: unknown action '{}' (allowed: train, encode, decode)", args[0]);
}

}  // namespace mpitron
