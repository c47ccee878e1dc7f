// Fuzz target: a tokenizer JSON file (`prep --tokenizer FILE`, the `tokenizer` attribute of
// every shard, config/tokenizer_json of every checkpoint) through Tokenizer::from_json.
//
// An accepted tokenizer must then work: encode/decode is lossless on a fixed text with
// every byte value, and to_json -> from_json gives the same tokenizer back.
//
// Seeds: MPITRON_FUZZ_WRITE_SEEDS=DIR fuzz_tokenizer writes the JSON of the byte tokenizer and of
// small BPE tokenizers made by train_bpe (compact, and pretty as `tokenizer train` writes files),
// and one in GPT-2's form (byte-id permutation, the gpt2 pre-tokenizer).
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_common.hpp"
#include "mpitron/data/tokenizer.hpp"

using namespace mpitron;

namespace {

std::string sample_text() {
  std::string s = "Hello, world!\n\n  ok 123 -- the end%\n";
  for (int b = 0; b < 256; ++b) s += static_cast<char>(b);
  return s + " the then there   ";
}

void write_seeds(const std::string& dir) {
  fuzz::fs::create_directories(dir);
  auto put = [&](const std::string& name, const std::string& json) {
    fuzz::write_file(dir + "/" + name, reinterpret_cast<const uint8_t*>(json.data()), json.size());
    std::fprintf(stderr, "wrote %s/%s\n", dir.c_str(), name.c_str());
  };
  put("byte.json", Tokenizer::byte().to_json());
  BpeTrainOptions bo;
  bo.vocab_size = 300;
  Tokenizer bpe = train_bpe({sample_text() + "the then there these those"}, bo);
  put("bpe.json", bpe.to_json());
  put("bpe_pretty.json", bpe.to_json(true));
  // GPT-2's form: a byte-id permutation and the gpt2 pre-tokenizer (PCRE2 on arbitrary bytes).
  std::array<int32_t, 256> perm{};
  for (int b = 0; b < 256; ++b) perm[b] = (b * 7 + 3) % 256;
  auto merges = bpe.merges();
  for (auto& [a, c] : merges) {
    if (a < 256) a = perm[a];
    if (c < 256) c = perm[c];
  }
  put("gpt2_style.json", Tokenizer::bpe(merges, perm, "gpt2").to_json());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::init("tokenizer");
  if (const char* dir = std::getenv("MPITRON_FUZZ_WRITE_SEEDS")) {
    write_seeds(dir);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::begin_input();
  static const std::string text = sample_text();
  std::string_view json(reinterpret_cast<const char*>(data), size);
  fuzz::run_one(
      [&] {
        Tokenizer t = Tokenizer::from_json(json, "fuzz-tokenizer.json");
        std::vector<int32_t> ids = t.encode(text);
        for (int32_t id : ids)
          if (id < 0 || id >= t.vocab_size()) fuzz::bug("encode produced id " + std::to_string(id));
        // Lossless except through a tokenizer.json pipeline (its normalizers and unknown characters
        // change text, as Hugging Face's do).
        if (t.type() != "hf" && t.decode(ids) != text) fuzz::bug("decode(encode(text)) != text");
        try {
          if (!(Tokenizer::from_json(t.to_json(), "round trip") == t)) fuzz::bug("to_json -> from_json changed it");
        } catch (const Error& e) {
          fuzz::bug(std::string("to_json wrote JSON that from_json rejects: ") + e.what());
        }
      },
      "fuzz-tokenizer.json");
  return 0;
}
