// Fuzz target: one HDF5 token shard (data/<name>/train_00000.h5), read the two ways the product
// reads shards: `mpitron prep --check DIR --seq-len 4` (TokenDataset: attributes, tokenizer,
// every token once, a validation loader) and a training DataLoader (sampler, prefetch thread,
// windows) taking a few batches.
//
// The input is written to a scratch folder in /dev/shm as the only shard. Every rejection must
// name that folder or the file in it.
//
// Seeds: MPITRON_FUZZ_WRITE_SEEDS=DIR fuzz_shard writes shards made by `prep` itself (run_prep:
// byte and BPE tokenizers, several documents, a val split) to DIR and exits (`make fuzz-seeds`).
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "fuzz_common.hpp"
#include "mpitron/data/loader.hpp"
#include "mpitron/data/prep.hpp"
#include "mpitron/data/tokenizer.hpp"

namespace mpitron {
int cmd_prep(const std::vector<std::string>& args);  // src/cli/cmd_prep.cpp (via the command table)
}

using namespace mpitron;

namespace {

void write_text(const std::string& path, const std::string& text) {
  fuzz::write_file(path, reinterpret_cast<const uint8_t*>(text.data()), text.size());
}

// prep over a small corpus, then the shards it made copied to dir/<name>_<shard file name>.
void write_seeds(const std::string& dir) {
  const std::string work = fuzz::scratch("seeds");
  fuzz::fs::create_directories(work);
  fuzz::fs::create_directories(dir);
  // Relative input names, so the shards' `source` attribute does not depend on the scratch folder.
  const fuzz::fs::path cwd = fuzz::fs::current_path();
  fuzz::fs::current_path(work);
  write_text("corpus.txt",
             "The quick brown fox jumps over the lazy dog.\n%\nA second document, with digits 12345.\n%\n"
             "caf\xc3\xa9 \xff\xfe raw bytes\n%\nthe end\n");
  BpeTrainOptions bo;
  bo.vocab_size = 270;
  std::string bpe = train_bpe({"the the the quick quick brown brown fox fox jumps"}, bo).to_json();
  write_text(work + "/bpe.json", bpe);
  struct Seed {
    const char* name;
    std::string tokenizer;
    double val;
    int64_t shard_tokens;
  };
  for (const Seed& s : {Seed{"byte", "byte", 0.0, 1000000}, Seed{"bpe", work + "/bpe.json", 0.0, 1000000},
                        Seed{"byte_small", "byte", 0.4, 40}}) {
    PrepOptions o;
    o.inputs = {"corpus.txt"};
    o.tokenizer = s.tokenizer;
    o.out = s.name;
    o.val_fraction = s.val;
    o.shard_tokens = s.shard_tokens;
    o.doc_separator = "%";
    o.progress = 0;
    for (const std::string& shard : run_prep(o).shards) {
      fuzz::fs::path to = cwd / dir / (std::string(s.name) + "_" + fuzz::fs::path(shard).filename().string());
      fuzz::fs::copy_file(shard, to, fuzz::fs::copy_options::overwrite_existing);
      std::fprintf(stderr, "wrote %s\n", to.c_str());
    }
  }
  fuzz::fs::current_path(cwd);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::init("shard");
  if (const char* dir = std::getenv("MPITRON_FUZZ_WRITE_SEEDS")) {
    write_seeds(dir);
    std::exit(0);
  }
  fuzz::fs::create_directories(fuzz::scratch("data"));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::begin_input();
  static const std::string dir = fuzz::scratch("data");
  fuzz::write_file(dir + "/train_00000.h5", data, size);
  fuzz::run_one(
      [&] {
        if (cmd_prep({"--check", dir, "--seq-len", "4"}) != 0) fuzz::bug("prep --check returned non-zero");
        LoaderOptions o;
        o.dir = dir;
        o.seq_len = 4;
        o.micro_batch = 2;
        o.prefetch = 2;
        DataLoader loader(o);
        Batch b;
        for (int i = 0; i < 3; ++i) loader.next(b);
      },
      dir);
  return 0;
}
