// `mpitron prep`: text or JSON Lines files (plain, gzip, zstd) -> tokenized HDF5 shards. Inputs
// are checked before anything is written; shards are written as .tmp and renamed only when
// every one is complete (a bad JSONL line that stops prep leaves the old shards as they were).
#include "mpitron/data/prep.hpp"

#include <fmt/format.h>
#include <glob.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <set>
#include <exception>
#include <thread>

#include "mpitron/core/error.hpp"
#include "mpitron/data/chat.hpp"
#include "mpitron/data/shard.hpp"
#include "mpitron/data/text_input.hpp"
#include "mpitron/data/tokenizer.hpp"

namespace fs = std::filesystem;

namespace mpitron {
namespace {

// Consecutive shards of one split: train_00000.h5, train_00001.h5, ...
class ShardSeries {
 public:
  // loss_mask: the shards carry a /loss_mask (add_document's mask). pack > 0 (--pack): documents
  // go into blocks of `pack` tokens (shard.hpp, "packing").
  ShardSeries(std::string dir, std::string split, const Tokenizer& tok, int64_t per_shard, bool loss_mask, int pack)
      : dir_(std::move(dir)), split_(std::move(split)), tok_(tok), per_shard_(per_shard),
        loss_mask_(loss_mask || pack > 0), pack_(pack) {}

  void add_document(const std::vector<int32_t>& ids, const std::string& source, const std::vector<uint8_t>* mask) {
    source_ = source;
    if (pack_ <= 0) {
      append(ids.data(), mask ? mask->data() : nullptr, ids.size(), true, false);
      return;
    }
    // Packing: the whole document in the current block, or padding to the block's end and the
    // next block; a document longer than a block is split into blocks (each piece recorded as a
    // continuation). A block's first token is never a target: the window before it ends there.
    std::vector<uint8_t> m = mask ? *mask : std::vector<uint8_t>(ids.size(), 1);
    const int64_t len = static_cast<int64_t>(ids.size());
    if (fill_ > 0 && len > pack_ - fill_) pad(pack_ - fill_);
    splits_ += len > pack_ - fill_;
    for (int64_t at = 0; at < len;) {
      const int64_t n = std::min(len - at, pack_ - fill_);
      if (fill_ == 0) m[static_cast<size_t>(at)] = 0;
      append(ids.data() + at, m.data() + at, static_cast<size_t>(n), true, at > 0);
      fill_ = (fill_ + n) % pack_;
      at += n;
    }
    real_ += len;
  }
  // Packing: the last block padded to its end, and one more padding token, so that every block
  // is a whole window of pack + 1 tokens.
  void finish() {
    if (pack_ <= 0 || total_ == 0) return;
    if (fill_ > 0) pad(pack_ - fill_);
    pad(1);
  }
  void close_all() {
    for (auto& w : writers_) w->close();
  }
  int64_t padding() const { return pack_ > 0 ? total_ - real_ : 0; }
  int64_t split_documents() const { return splits_; }
  // The ones written to /loss_mask (0 without one): counted as written, so that it includes what
  // packing masks (each block's first token) and what a caller's mask says.
  int64_t trained() const { return trained_; }
  void commit_all() {
    for (auto& w : writers_) w->commit();
  }
  int64_t total() const { return total_; }
  std::vector<std::string> paths() const {
    std::vector<std::string> p;
    for (auto& w : writers_) p.push_back(w->path());
    return p;
  }

 private:
  ShardWriter& current() {
    if (writers_.empty() || writers_.back()->num_tokens() >= per_shard_) {
      if (!writers_.empty()) writers_.back()->close();
      std::string path = fmt::format("{}/{}_{:05d}.h5", dir_, split_, writers_.size());
      writers_.push_back(std::make_unique<ShardWriter>(path, tok_, std::min<int64_t>(per_shard_, 1 << 20), loss_mask_));
      if (pack_ > 0) writers_.back()->set_packing(static_cast<int>(pack_));
    }
    return *writers_.back();
  }
  // n tokens (and mask bytes, nullptr: all trained) into the current shard and the next ones.
  void append(const int32_t* ids, const uint8_t* mask, size_t len, bool begin, bool continued) {
    size_t at = 0;
    while (at < len) {
      ShardWriter& w = current();
      if (begin && at == 0) w.begin_document(continued);
      w.add_source(source_);
      size_t n = std::min<size_t>(len - at, static_cast<size_t>(per_shard_ - w.num_tokens()));
      w.append(ids + at, n, mask ? mask + at : nullptr);
      at += n;
    }
    total_ += static_cast<int64_t>(len);
    if (loss_mask_)  // the writer stores mask[i] != 0, and all ones for a null mask
      trained_ += mask ? std::count_if(mask, mask + len, [](uint8_t b) { return b != 0; }) : static_cast<int64_t>(len);
  }
  // Padding (the end-of-text id, never trained), belonging to no document.
  void pad(int64_t n) {
    const std::vector<int32_t> ids(static_cast<size_t>(n), tok_.eot());
    const std::vector<uint8_t> zero(static_cast<size_t>(n), 0);
    append(ids.data(), zero.data(), ids.size(), false, false);
    fill_ = (fill_ + n) % pack_;
  }
  std::string dir_, split_;
  const Tokenizer& tok_;
  int64_t per_shard_, total_ = 0;
  bool loss_mask_;
  int64_t pack_;
  int64_t fill_ = 0, real_ = 0, splits_ = 0;  // packing: tokens in the open block, documents' tokens, documents split
  int64_t trained_ = 0;
  std::string source_;
  std::vector<std::unique_ptr<ShardWriter>> writers_;
};

class Progress {
 public:
  Progress(int mode, int64_t total) : total_(total), t0_(clock::now()) {
    tty_ = mode < 0 && isatty(fileno(stderr));
    on_ = mode != 0;
  }
  void update(int64_t done, int files_done, int files, int64_t tokens, bool final = false) {
    if (!on_) return;
    double s = std::chrono::duration<double>(clock::now() - t0_).count();
    double mb = done / 1e6, rate = s > 0 ? mb / s : 0.0;
    if (tty_) {
      int width = 30, fill = total_ > 0 ? static_cast<int>(width * done / total_) : width;
      std::fprintf(stderr, "\rprep [%s%s] %3d%%  %d/%d files  %.1f MB  %.1f MB/s  %s tokens ",
                   std::string(fill, '#').c_str(), std::string(width - fill, '.').c_str(),
                   total_ > 0 ? static_cast<int>(100 * done / total_) : 100, files_done, files, mb, rate,
                   fmt::format("{}", tokens).c_str());
      if (final) std::fprintf(stderr, "\n");
    } else if (final || s - last_ >= 2.0) {
      last_ = s;
      std::fprintf(stderr, "prep: %d/%d files, %.1f/%.1f MB, %.1f MB/s, %lld tokens\n", files_done, files, mb,
                   total_ / 1e6, rate, static_cast<long long>(tokens));
    }
    std::fflush(stderr);
  }

 private:
  using clock = std::chrono::steady_clock;
  int64_t total_;
  clock::time_point t0_;
  double last_ = -1e9;
  bool tty_ = false, on_ = true;
};

}  // namespace

int64_t parse_count(const std::string& text, const std::string& what, const Range& r) {
  const Range rr = r.within<int64_t>();
  std::string t = text;
  double mult = 1;
  if (!t.empty()) {
    char c = static_cast<char>(std::toupper(static_cast<unsigned char>(t.back())));
    if (c == 'K') mult = 1e3;
    if (c == 'M') mult = 1e6;
    if (c == 'G') mult = 1e9;
    if (mult != 1) t.pop_back();
  }
  const auto v = float_from_text(t);
  const double x = v ? *v * mult : NAN;
  // A whole number ("1.5K" is, "0.5" is not) in the range; below 2^63, where the cast to int64
  // is defined (the range's int64 end is 2^63 itself as a double). The rule shown is `r`'s: a
  // count's int64 end (9.2e18) is no limit anyone meets.
  if (!v || !(x == std::floor(x)) || !rr.allows(x) || !(x < 9.2e18))
    value_refused("option " + what, text, integer_rule(r) + ", optionally with the suffix K, M or G (50M = 50000000)");
  return static_cast<int64_t>(x);
}

std::vector<std::string> expand_inputs(const std::vector<std::string>& patterns) {
  usage_check(!patterns.empty(), "no --input given");
  std::set<std::string> seen;
  std::vector<std::string> out;
  for (const auto& p : patterns) {
    glob_t g{};
    int rc = glob(p.c_str(), 0, nullptr, &g);
    std::vector<std::string> hits;
    if (rc == 0)
      for (size_t i = 0; i < g.gl_pathc; ++i) hits.emplace_back(g.gl_pathv[i]);
    globfree(&g);
    usage_check(!hits.empty(), "no input files match '{}'", p);
    for (auto& h : hits) {
      std::error_code ec;
      usage_check(!fs::is_directory(h, ec), "input '{}' is a folder; give files or a pattern such as '{}/*.txt'", h, h);
      usage_check(fs::is_regular_file(h, ec), "input '{}' is not a regular file", h);
      usage_check(access(h.c_str(), R_OK) == 0, "cannot read input file '{}'", h);
      usage_check(fs::file_size(h, ec) > 0, "input file '{}' is empty", h);
      if (seen.insert(h).second) out.push_back(h);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> split_documents(const std::string& text, const std::string& separator) {
  std::vector<std::string> docs;
  if (separator.empty()) {
    docs.push_back(text);
    return docs;
  }
  std::string cur;
  size_t i = 0;
  while (i < text.size()) {
    size_t e = text.find('\n', i);
    size_t end = e == std::string::npos ? text.size() : e + 1;
    std::string_view line(text.data() + i, (e == std::string::npos ? text.size() : e) - i);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line == separator) {
      if (!cur.empty()) docs.push_back(std::move(cur));
      cur.clear();
    } else {
      cur.append(text, i, end - i);
    }
    i = end;
  }
  if (!cur.empty()) docs.push_back(std::move(cur));
  return docs;
}

PrepResult run_prep(const PrepOptions& opt) {
  auto t0 = std::chrono::steady_clock::now();
  usage_check(!opt.out.empty(), "prep: --out is required");
  // The command line's ranges (prep.hpp), for callers that fill PrepOptions themselves.
  checked_float("option --val-fraction", opt.val_fraction, prep_range::val_fraction(), fmt::format("{}", opt.val_fraction));
  checked_int("option --shard-tokens", static_cast<double>(opt.shard_tokens), prep_range::shard_tokens(),
              std::to_string(opt.shard_tokens));
  checked_int<int>("option --workers", opt.workers, prep_range::workers(), std::to_string(opt.workers));
  checked_int<int>("option --pack", opt.pack, prep_range::pack(), std::to_string(opt.pack));
  usage_check(opt.format == "auto" || opt.format == "text" || opt.format == "jsonl" || opt.format == "chat",
              "--format must be auto, text, jsonl or chat (got '{}')", opt.format);
  const bool chat = opt.format == "chat";
  usage_check(!chat || chat_template_known(opt.chat_template),
              "--format chat needs --chat-template chatml, llama3, llama2, mistral or hf:DIR (got '{}')",
              opt.chat_template);
  usage_check(chat || opt.chat_template.empty(), "--chat-template is for --format chat");
  usage_check(opt.loss_on == "assistant" || opt.loss_on == "all", "--loss-on must be assistant or all (got '{}')",
              opt.loss_on);
  usage_check(!opt.jsonl_field.empty(), "--jsonl-field must not be empty");
  std::vector<std::string> files = expand_inputs(opt.inputs);
  Tokenizer tok = Tokenizer::load(opt.tokenizer);
  std::unique_ptr<ChatTemplate> chat_tmpl;  // parsed (hf:DIR) before anything is written
  if (chat) chat_tmpl = std::make_unique<ChatTemplate>(opt.chat_template, tok);
  std::error_code ec;
  fs::create_directories(opt.out, ec);
  usage_check(fs::is_directory(opt.out, ec), "cannot create output folder '{}'", opt.out);

  int64_t total_bytes = 0;
  for (auto& f : files) total_bytes += static_cast<int64_t>(fs::file_size(f));

  PrepResult res;
  ShardSeries train(opt.out, "train", tok, opt.shard_tokens, chat, opt.pack),
      val(opt.out, "val", tok, opt.shard_tokens, chat, opt.pack);
  const bool loss_on_all = opt.loss_on == "all";
  std::vector<EncodeCache> caches(opt.workers);
  Progress progress(opt.progress, total_bytes);
  int64_t doc_index = 0, done_bytes = 0;  // done_bytes: of the input files as stored (the progress)
  BadLines bad;
  for (size_t fi = 0; fi < files.size(); ++fi) {
    std::string text = read_input_file(files[fi]);
    const bool jsonl = chat || opt.format == "jsonl" || (opt.format == "auto" && input_format_of(files[fi]) == "jsonl");
    // Work items: a JSONL line (parsed by the workers too: with one big file, the parse is a
    // large share of prep) or a text document.
    std::vector<JsonlLine> lines;
    std::vector<std::string> docs;
    if (jsonl) lines = jsonl_lines(text);
    else docs = split_documents(text, opt.doc_separator);
    const size_t n = jsonl ? lines.size() : docs.size();
    std::vector<std::vector<int32_t>> ids(n);
    std::vector<std::vector<uint8_t>> masks(chat ? n : 0);  // chat: the loss mask per token
    std::vector<std::string> why(jsonl ? n : 0);  // a bad line's cause
    std::vector<char> empty(n, 0);                 // a JSONL document with no text (dropped)
    auto work = [&](size_t d, EncodeCache& cache) {
      if (!jsonl) {
        ids[d] = tok.encode(docs[d], &cache);
        return;
      }
      if (chat) {  // a conversation: rendered, tokenized with its loss mask
        std::vector<ChatMessage> msgs;
        std::vector<ChatPiece> pieces;
        if (!parse_chat_record(lines[d].text, &msgs, &why[d], chat_tmpl->hf())) return;
        if (!chat_tmpl->render(msgs, &pieces, &why[d], false, !loss_on_all)) return;
        tokenize_chat(tok, pieces, loss_on_all, &ids[d], &masks[d]);
        empty[d] = ids[d].empty();
        return;
      }
      std::string doc;
      if (!jsonl_document(lines[d].text, opt.jsonl_field, &doc, &why[d])) return;
      empty[d] = doc.empty();
      ids[d] = tok.encode(doc, &cache);
    };
    const int nw = std::min<int>(opt.workers, static_cast<int>(n));
    if (nw <= 1) {
      for (size_t d = 0; d < n; ++d) work(d, caches[0]);
    } else {
      std::vector<std::thread> pool;
      std::vector<std::exception_ptr> errors(nw);
      for (int w = 0; w < nw; ++w)
        pool.emplace_back([&, w] {
          try {
            for (size_t d = w; d < n; d += nw) work(d, caches[w]);
          } catch (...) {
            errors[w] = std::current_exception();
          }
        });
      for (auto& t : pool) t.join();
      for (auto& e : errors)
        if (e) std::rethrow_exception(e);
    }
    int64_t file_docs = 0;
    for (size_t d = 0; d < n; ++d) {
      if (jsonl && !why[d].empty()) {  // in line order: the first bad line is the one reported
        bad_jsonl_line(files[fi], lines[d].number, why[d], opt.skip_bad_lines, &bad);
        continue;
      }
      if (empty[d]) continue;
      // A document as the model expects it: the BOS the tokenizer's post-processor adds (LLaMA-2's
      // <s>; a chat template writes its own), the text, the end-of-text.
      if (!chat && tok.bos() >= 0) ids[d].insert(ids[d].begin(), tok.bos());
      ids[d].push_back(tok.eot());
      if (chat) masks[d].push_back(loss_on_all);  // the end-of-text after a conversation: trained with --loss-on all
      // Validation documents are spread evenly: doc k (k >= 1) goes to val when k * f crosses
      // an integer, so the second document is the first val one and then every ~1/f-th.
      bool is_val = doc_index >= 1 && opt.val_fraction > 0 &&
                    std::ceil(doc_index * opt.val_fraction) > std::ceil((doc_index - 1) * opt.val_fraction);
      (is_val ? val : train).add_document(ids[d], files[fi], chat ? &masks[d] : nullptr);
      ++doc_index, ++file_docs;
    }
    res.bytes += static_cast<int64_t>(text.size());
    res.documents += file_docs;
    done_bytes += static_cast<int64_t>(fs::file_size(files[fi]));
    progress.update(done_bytes, static_cast<int>(fi + 1), static_cast<int>(files.size()), train.total() + val.total(),
                    fi + 1 == files.size());
  }
  res.bad_lines = bad.count, res.first_bad_lines = bad.first;
  usage_check(train.total() > 0, "the inputs hold no text for the train split ({})",
              bad.count > 0 ? fmt::format("{} bad JSONL lines skipped, first: {}", bad.count, bad.first.front())
                            : fmt::format("only '{}' separator lines or empty documents?", opt.doc_separator));
  train.finish();
  val.finish();
  res.padding_tokens = train.padding() + val.padding();
  res.split_documents = train.split_documents() + val.split_documents();
  if (chat || opt.pack > 0) res.trained_tokens = train.trained() + val.trained();
  train.close_all();
  val.close_all();
  // Every shard is complete: replace the folder's old shards, then rename the new ones in.
  for (const char* split : {"train", "val"})
    for (const auto& old : list_shards(opt.out, split)) fs::remove(old, ec);
  train.commit_all();
  val.commit_all();
  res.train_tokens = train.total();
  res.val_tokens = val.total();
  res.shards = train.paths();
  for (auto& p : val.paths()) res.shards.push_back(p);
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

}  // namespace mpitron
