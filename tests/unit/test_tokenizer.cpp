// Tokenizers: lossless round trips, the pre-tokenizer, BPE merges on a hand-checked corpus,
// JSON round trip and its errors.
#include <boost/test/unit_test.hpp>
#include <fstream>
#include <random>
#include <sstream>

#include "mpitron/core/error.hpp"
#include "mpitron/data/tokenizer.hpp"

using namespace mpitron;

namespace {

std::string random_bytes(std::mt19937& g, size_t n) {
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(g() & 0xff);
  return s;
}

std::string fortune_text() {
  std::string s;
  for (const char* f : {"fortunes", "literature", "science", "people"}) {
    std::ifstream in(std::string("/usr/share/games/fortunes/") + f, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    s += ss.str();
  }
  return s;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(tokenizer)

BOOST_AUTO_TEST_CASE(byte_round_trip_random_bytes) {
  Tokenizer t = Tokenizer::byte();
  BOOST_TEST(t.vocab_size() == 257);
  BOOST_TEST(t.eot() == 256);
  std::mt19937 g(1);
  for (size_t n : {0, 1, 7, 1000, 65536}) {
    std::string s = random_bytes(g, n);
    auto ids = t.encode(s);
    BOOST_TEST(ids.size() == n);
    BOOST_TEST(t.decode(ids) == s);
  }
}

BOOST_AUTO_TEST_CASE(pretokenizer_worked_example_and_partition) {
  std::vector<std::string_view> c;
  pretokenize("Hello,  world!\n\nok 42x", c);
  std::vector<std::string> got(c.begin(), c.end());
  std::vector<std::string> want = {"Hello", ",", " ", " world", "!", "\n\n", "ok", " 42", "x"};
  BOOST_TEST(got == want, boost::test_tools::per_element());
  std::mt19937 g(2);
  std::string s = random_bytes(g, 5000) + std::string(1000, ' ') + std::string(500, 'a');
  pretokenize(s, c);
  std::string joined;
  for (auto v : c) {
    BOOST_TEST(v.size() <= kMaxChunk);
    joined += v;
  }
  BOOST_TEST(joined == s);
}

// Corpus "ab ab ab abc": words "ab" x1, " ab" x2, " abc" x1.
// Pair counts: (a,b)=4, (32,a)=3, (b,c)=1. Merge 0: a+b -> 256.
// Then " " + 256 occurs 3 times (" ab" x2, " abc") -> merge 1: (32, 256) -> 257.
// Then (257, c) = 1 < min_count 2: stop.
BOOST_AUTO_TEST_CASE(bpe_merges_hand_checked) {
  BpeTrainOptions o;
  o.vocab_size = 300;
  Tokenizer t = train_bpe({"ab ab ab abc"}, o);
  std::vector<std::pair<int32_t, int32_t>> want = {{'a', 'b'}, {' ', 256}};
  BOOST_TEST(t.merges() == want);
  BOOST_TEST(t.vocab_size() == 259);
  BOOST_TEST(t.eot() == 258);
  auto ids = t.encode("ab abc");
  std::vector<int32_t> want_ids = {256, 257, 'c'};
  BOOST_TEST(ids == want_ids, boost::test_tools::per_element());
  // Tie rule: "xy zw" -> (x,y) and (z,w) both count 1 with min_count 1: smallest pair first.
  o.min_count = 1;
  o.vocab_size = 258;
  Tokenizer t2 = train_bpe({"zw xy"}, o);
  BOOST_TEST(t2.merges().size() == 1u);
  BOOST_TEST((t2.merges()[0] == std::pair<int32_t, int32_t>{' ', 'x'}));  // (32,'x') < (32,'z') < ('x','y')
}

BOOST_AUTO_TEST_CASE(bpe_round_trip_and_determinism_on_real_text) {
  std::string text = fortune_text();
  BOOST_REQUIRE(text.size() > 100000);
  BpeTrainOptions o;
  o.vocab_size = 2048;
  Tokenizer a = train_bpe({text}, o), b = train_bpe({text}, o);
  BOOST_TEST(a.vocab_size() == 2048);
  BOOST_TEST((a.merges() == b.merges()));
  auto ids = a.encode(text);
  BOOST_TEST(ids.size() < text.size() / 2);  // it compresses
  BOOST_TEST(a.decode(ids) == text);
  EncodeCache cache;
  BOOST_TEST((a.encode(text, &cache) == ids));
  std::mt19937 g(3);
  for (int i = 0; i < 20; ++i) {
    std::string s = random_bytes(g, 1 + g() % 3000);
    BOOST_TEST(a.decode(a.encode(s)) == s);
  }
  std::string utf8 = "Grüße, 世界! \t tabs\r\n  and   spaces\n\n\n";
  BOOST_TEST(a.decode(a.encode(utf8)) == utf8);
}

BOOST_AUTO_TEST_CASE(json_round_trip_and_errors) {
  BpeTrainOptions o;
  o.vocab_size = 400;
  Tokenizer t = train_bpe({fortune_text()}, o);
  for (bool pretty : {false, true}) {
    Tokenizer u = Tokenizer::from_json(t.to_json(pretty));
    BOOST_TEST((u == t));
    BOOST_TEST(u.vocab_size() == 400);
  }
  BOOST_TEST((Tokenizer::from_json(Tokenizer::byte().to_json()) == Tokenizer::byte()));
  BOOST_CHECK_THROW(Tokenizer::from_json("{not json", "x.json"), UsageError);
  BOOST_CHECK_THROW(Tokenizer::from_json(R"({"format":"other"})"), UsageError);
  BOOST_CHECK_THROW(Tokenizer::from_json(
                        R"({"format":"mpitron-tokenizer","version":1,"type":"bpe","pretokenizer":"mpitron-v1","merges":[[300,1]]})"),
                    UsageError);
  // A merge naming its own id stays inside the token table: only the ordering check refuses it
  // (an id past the table would be caught or crash depending on the heap).
  try {
    Tokenizer::from_json(
        R"({"format":"mpitron-tokenizer","version":1,"type":"bpe","pretokenizer":"mpitron-v1","merges":[[256,1]]})");
    BOOST_FAIL("expected an error for a merge that refers to itself");
  } catch (const std::exception& e) {
    BOOST_TEST(std::string(e.what()).find("not defined before it") != std::string::npos, e.what());
  }
  try {
    Tokenizer::load("/nonexistent/tok.json");
    BOOST_FAIL("expected an error");
  } catch (const UsageError& e) {
    BOOST_TEST(std::string(e.what()).find("/nonexistent/tok.json") != std::string::npos);
  }
}

// GPT-2's pre-tokenizer on bytes: the chunks always concatenate back to the input, invalid
// UTF-8 included (each run of bytes no branch matches is a chunk of its own), and a GPT-2-style
// tokenizer (a byte-id permutation, the gpt2 pre-tokenizer) round-trips any byte string and its
// JSON. The ids themselves are checked against js-tiktoken in tests/e2e/test_tokenizer_gpt2.sh.
BOOST_AUTO_TEST_CASE(gpt2_pretokenizer_and_permuted_bytes) {
  std::vector<std::string_view> chunks;
  pretokenize_gpt2("Hello world's  2024!!\n\n", chunks);
  std::vector<std::string> got(chunks.begin(), chunks.end());
  BOOST_TEST((got == std::vector<std::string>{"Hello", " world", "'s", " ", " 2024", "!!", "\n\n"}));
  pretokenize_gpt2("a\xff\xfe b\xc3", chunks);  // invalid bytes, a truncated sequence at the end
  got.assign(chunks.begin(), chunks.end());
  BOOST_TEST((got == std::vector<std::string>{"a", "\xff\xfe", " b", "\xc3"}));
  pretokenize_gpt2("", chunks);
  BOOST_TEST(chunks.empty());
  std::mt19937 g(5);
  for (int i = 0; i < 200; ++i) {
    std::string s = random_bytes(g, g() % 400), cat;
    pretokenize_gpt2(s, chunks);
    for (auto c : chunks) {
      BOOST_REQUIRE(!c.empty());
      cat += c;
    }
    BOOST_REQUIRE(cat == s);
  }
  std::array<int32_t, 256> perm{};
  for (int b = 0; b < 256; ++b) perm[b] = (b * 7 + 3) % 256;  // a permutation (7 is odd)
  BpeTrainOptions o;
  o.vocab_size = 600;
  Tokenizer base = train_bpe({fortune_text()}, o);
  // The same merges over permuted byte ids: merge [a, b] renames its byte operands.
  auto merges = base.merges();
  for (auto& [a, b] : merges) {
    if (a < 256) a = perm[a];
    if (b < 256) b = perm[b];
  }
  Tokenizer t = Tokenizer::bpe(merges, perm, "gpt2");
  BOOST_TEST(t.pretokenizer() == "gpt2");
  BOOST_TEST((Tokenizer::from_json(t.to_json()) == t));
  BOOST_TEST(!(Tokenizer::from_json(t.to_json()) == base));
  for (int i = 0; i < 50; ++i) {
    std::string s = random_bytes(g, g() % 2000);
    BOOST_REQUIRE(t.decode(t.encode(s)) == s);
  }
  const std::string text = "Grüße, 世界! \t tabs\r\n  and   spaces 😀\n";
  BOOST_TEST(t.decode(t.encode(text)) == text);
  BOOST_TEST(t.encode("A")[0] == perm['A']);
  std::array<int32_t, 256> dup = perm;
  dup[1] = dup[0];
  BOOST_CHECK_THROW(Tokenizer::bpe(merges, dup, "gpt2"), Error);
  BOOST_CHECK_THROW(Tokenizer::bpe(merges, perm, "sentencepiece"), Error);
}

BOOST_AUTO_TEST_SUITE_END()
