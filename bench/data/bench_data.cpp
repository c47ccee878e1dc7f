// Data pipeline benchmark (`make bench-data`): prep throughput (MB of text/s), BPE training
// time, loader throughput (tokens/s delivered to one rank, with and without prefetch), and the
// time next() stalls when a consumer at a CPU trainer's pace (50k tokens/s) pulls batches.
// Corpus: the Debian fortunes text files, repeated to ~21 MB for prep and loader runs.
// Writes a markdown report to argv[1] (default bench/results/data.md).
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "mpitron/data/loader.hpp"
#include "mpitron/data/prep.hpp"
#include "mpitron/data/tokenizer.hpp"

using namespace mpitron;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

static double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

int main(int argc, char** argv) {
  std::string report = argc > 1 ? argv[1] : "bench/results/data.md";
  fs::path tmp = fs::temp_directory_path() / ("mpitron_bench_data_" + std::to_string(getpid()));
  fs::create_directories(tmp / "corpus");
  std::vector<std::string> texts;
  int64_t corpus_bytes = 0;
  for (auto& e : fs::directory_iterator("/usr/share/games/fortunes")) {
    auto ext = e.path().extension();
    if (ext == ".dat" || ext == ".u8" || !e.is_regular_file()) continue;
    std::ifstream in(e.path(), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    texts.push_back(ss.str());
    corpus_bytes += static_cast<int64_t>(texts.back().size());
  }
  const int copies = 8;
  for (int c = 0; c < copies; ++c)
    for (size_t i = 0; i < texts.size(); ++i)
      std::ofstream(tmp / "corpus" / fmt::format("{}_{}.txt", c, i), std::ios::binary) << texts[i];
  std::string md = "# Data pipeline benchmark\n\n";
  md += fmt::format("Machine: {} hardware threads. Corpus: Debian fortunes ({:.1f} MB of text, {} files).\n\n",
                    std::thread::hardware_concurrency(), corpus_bytes / 1e6, texts.size());

  // BPE training
  BpeTrainOptions bo;
  bo.vocab_size = 8192;
  auto t0 = Clock::now();
  Tokenizer bpe = train_bpe(texts, bo);
  double train_s = since(t0);
  std::ofstream(tmp / "tok.json") << bpe.to_json(true);
  md += "## BPE training (`mpitron tokenizer train --vocab 8192`)\n\n| text | merges | seconds |\n|---|---|---|\n";
  md += fmt::format("| {:.1f} MB | {} | {:.2f} |\n", corpus_bytes / 1e6, bpe.merges().size(), train_s);
  std::vector<std::string> big;
  for (int c = 0; c < 4; ++c) big.insert(big.end(), texts.begin(), texts.end());
  t0 = Clock::now();
  Tokenizer bpe4 = train_bpe(big, bo);
  md += fmt::format("| {:.1f} MB (4 copies) | {} | {:.2f} |\n\n", 4 * corpus_bytes / 1e6, bpe4.merges().size(), since(t0));

  // prep
  md += fmt::format("## Prep (`mpitron prep`, {:.1f} MB = {} copies of the corpus)\n\n", copies * corpus_bytes / 1e6, copies);
  md += "| tokenizer | workers | MB/s | tokens | seconds |\n|---|---|---|---|---|\n";
  for (std::string tk : {std::string("byte"), (tmp / "tok.json").string()})
    for (int w : {1, 2}) {
      PrepOptions o;
      o.inputs = {(tmp / "corpus/*.txt").string()};
      o.out = (tmp / (tk == "byte" ? "byte" : "bpe")).string();
      o.tokenizer = tk;
      o.workers = w;
      o.progress = 0;
      o.doc_separator = "%";
      PrepResult r = run_prep(o);
      md += fmt::format("| {} | {} | {:.1f} | {} | {:.2f} |\n", tk == "byte" ? "byte" : "bpe 8192", w,
                        r.bytes / 1e6 / r.seconds, r.train_tokens + r.val_tokens, r.seconds);
      std::fprintf(stderr, "prep %s workers=%d: %.1f MB/s\n", tk.c_str(), w, r.bytes / 1e6 / r.seconds);
    }

  // loader
  md += "\n## Loader (one rank, shuffled windows from byte-level shards)\n\n";
  md += "| seq_len | micro_batch | prefetch | tokens/s delivered |\n|---|---|---|---|\n";
  for (int prefetch : {0, 4})
    for (auto [T, B] : {std::pair{256, 8}, std::pair{1024, 8}}) {
      LoaderOptions o;
      o.dir = (tmp / "byte").string();
      o.seq_len = T;
      o.micro_batch = B;
      o.prefetch = prefetch;
      DataLoader l(o);
      Batch b;
      l.next(b);
      int64_t tokens = 0;
      t0 = Clock::now();
      while (since(t0) < 1.5) {
        l.next(b);
        tokens += static_cast<int64_t>(b.batch) * b.seq_len;
      }
      double tps = tokens / since(t0);
      md += fmt::format("| {} | {} | {} | {:.2f} M |\n", T, B, prefetch, tps / 1e6);
      std::fprintf(stderr, "loader T=%d B=%d prefetch=%d: %.2f Mtok/s\n", T, B, prefetch, tps / 1e6);
    }
  // a consumer at 50k tokens/s (the upper end of a small GPT on 2 CPU cores)
  {
    LoaderOptions o;
    o.dir = (tmp / "byte").string();
    o.seq_len = 256;
    o.micro_batch = 8;
    DataLoader l(o);
    Batch b;
    double step = 256.0 * 8 / 50000.0, stall = 0;
    int steps = 40;
    for (int i = 0; i < steps; ++i) {
      auto t = Clock::now();
      l.next(b);
      stall += since(t);
      std::this_thread::sleep_for(std::chrono::duration<double>(step));
    }
    md += fmt::format(
        "\nWith a consumer taking {:.1f} ms per 2048-token batch (50k tokens/s), next() waited {:.1f} us per batch on "
        "average ({} batches, prefetch 4).\n",
        step * 1e3, stall / steps * 1e6, steps);
  }
  fs::remove_all(tmp);
  std::ofstream(report) << md;
  std::fputs(md.c_str(), stdout);
  return 0;
}
