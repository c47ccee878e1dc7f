// Fuzz target: `mpitron prep` on one text file of arbitrary bytes (invalid UTF-8, NULs, CRLF,
// huge lines, separator lines), twice per input:
//   - byte tokenizer, `--doc-separator %`, a val split, 4000-token shards, 2 tokenizer threads;
//   - a small BPE tokenizer (trained once at start-up, loaded from its JSON file), one document
//     per file, no val split, 1500-token shards.
// Shards go to a scratch folder in /dev/shm, emptied after every run.
//
// Oracle for an accepted input: the shards open as training opens them (TokenDataset: the checks
// of `prep --check`), and decoding them gives back exactly the input's documents (as a multiset:
// val documents are interleaved out of order). Every HDF5 file open costs ~1 ms here, so the
// shards are read once.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_common.hpp"
#include "mpitron/data/prep.hpp"
#include "mpitron/data/shard.hpp"
#include "mpitron/data/tokenizer.hpp"

using namespace mpitron;

namespace {

const char* const kTrainText =
    "The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs away.\n"
    "%\n"
    "A fortune a day keeps the doctor away -- or so the saying goes, in 1999 and 2024.\n"
    "%\n"
    "  Indented lines, tabs\tand\tnewlines\n\nare whitespace runs; caf\xc3\xa9 na\xc3\xafve \xe2\x80\x94 UTF-8.\n";

struct Run {
  std::string tokenizer, separator;
  double val_fraction;
  int64_t shard_tokens;
  int workers;
};

// The documents of every shard of `split` in out_dir, decoded (documents end at eot).
void decode_split(const std::string& dir, const std::string& split, const Tokenizer& tok,
                  std::vector<std::string>& docs) {
  if (list_shards(dir, split).empty()) return;
  TokenDataset ds(dir, split);
  std::vector<int32_t> ids(static_cast<size_t>(ds.num_tokens()));
  ds.read(0, ds.num_tokens(), ids.data());
  std::vector<int32_t> cur;
  for (int32_t id : ids) {
    if (id == tok.eot()) {
      docs.push_back(tok.decode(cur));
      cur.clear();
    } else {
      cur.push_back(id);
    }
  }
  if (!cur.empty()) fuzz::bug("split " + split + " does not end with the end-of-text id");
}

void prep_and_check(const std::string& input, const std::string& text, const Run& r) {
  const std::string out = fuzz::scratch("out");
  std::error_code ec;
  fuzz::fs::remove_all(out, ec);
  PrepOptions o;
  o.inputs = {input};
  o.tokenizer = r.tokenizer;
  o.out = out;
  o.shard_tokens = r.shard_tokens;
  o.val_fraction = r.val_fraction;
  o.workers = r.workers;
  o.doc_separator = r.separator;
  o.progress = 0;
  PrepResult res = run_prep(o);

  // From here on the input was accepted: anything wrong is a bug, not a rejection.
  try {
    Tokenizer tok = Tokenizer::load(r.tokenizer);
    std::vector<std::string> got, want = split_documents(text, r.separator);
    decode_split(out, "train", tok, got);
    decode_split(out, "val", tok, got);
    std::sort(got.begin(), got.end());
    std::sort(want.begin(), want.end());
    if (got != want || res.documents != static_cast<int64_t>(want.size()))
      fuzz::bug("the shards do not decode to the input's " + std::to_string(want.size()) + " documents (got " +
                std::to_string(got.size()) + ")");
  } catch (const Error& e) {
    fuzz::bug(std::string("prep accepted the input but its shards do not read back: ") + e.what());
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::init("prep");
  BpeTrainOptions bo;
  bo.vocab_size = 320;
  Tokenizer bpe = train_bpe({kTrainText}, bo);
  std::string json = bpe.to_json(true);
  fuzz::write_file(fuzz::scratch("bpe.json"), reinterpret_cast<const uint8_t*>(json.data()), json.size());
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::begin_input();
  static const std::string input = fuzz::scratch("input.txt");
  // Shards of a few thousand tokens: inputs of up to 32 KB still span several shards, without
  // hundreds of HDF5 files per input.
  static const Run runs[] = {{"byte", "%", 0.25, 4000, 2}, {fuzz::scratch("bpe.json"), "", 0.0, 1500, 1}};
  fuzz::write_file(input, data, size);
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (const Run& r : runs) fuzz::run_one([&] { prep_and_check(input, text, r); });
  return 0;
}
