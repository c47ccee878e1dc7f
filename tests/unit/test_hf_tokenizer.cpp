// The Hugging Face tokenizer.json pipeline (type "hf", src/data/hf_tokenizer/): each component on
// hand-written snippets, then whole tokenizers. Expected ids are derived by hand; where marked
// "tokenizers.js", @huggingface/tokenizers printed the same ids for the same snippet
// (`new Tokenizer(json, {}).encode(text, {add_special_tokens: false}).ids`). The comparison on
// real files (LLaMA-3, Qwen3, LLaMA-2) is tests/e2e/test_tokenizer_hf.sh.
#include <boost/test/unit_test.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../../src/data/hf_tokenizer/internal.hpp"
#include "mpitron/core/error.hpp"
#include "mpitron/data/hf_tokenizer.hpp"
#include "mpitron/data/tokenizer.hpp"

using namespace mpitron;
namespace fs = std::filesystem;
using nlohmann::json;
using Ids = std::vector<int32_t>;

namespace {

const hf::Ctx kCtx{"test.json", "x"};

std::string normalize(const std::string& normalizer_json, std::string s) {
  hf::parse_normalizer(json::parse(normalizer_json), kCtx)->normalize(s);
  return s;
}

std::vector<std::string> words(const std::string& pre_json, const std::string& text, bool first = true) {
  hf::Words w;
  w.text = text;
  w.spans.assign(1, {0, static_cast<uint32_t>(text.size()), first});
  hf::parse_pre_tokenizer(json::parse(pre_json), kCtx).pre->apply(w);
  std::vector<std::string> out;
  for (const auto& s : w.spans) out.emplace_back(w.view(s));
  return out;
}

std::vector<std::string> split(const std::string& behavior, const std::string& text, const std::string& pattern = R"({"String": "-"})",
                               bool invert = false) {
  return words(R"({"type": "Split", "pattern": )" + pattern + R"(, "behavior": ")" + behavior + R"(", "invert": )" +
                   (invert ? "true" : "false") + "}",
               text);
}

// Tokenizer A: byte-level BPE in LLaMA-3's shape (a Split regex, then ByteLevel without regex,
// ignore_merges), ids in no particular order, one non-special and one special added token.
const char* kA = R"({"version": "1.0", "truncation": null, "padding": null, "normalizer": null,
 "added_tokens": [{"id": 20, "content": "<x>", "special": false, "normalized": false, "lstrip": false, "rstrip": false, "single_word": false},
                  {"id": 21, "content": "abc!", "special": true, "normalized": false, "lstrip": false, "rstrip": false, "single_word": false}],
 "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
   {"type": "Split", "pattern": {"Regex": "\\p{N}{1,2}| ?\\p{L}+|\\s+"}, "behavior": "Isolated", "invert": false},
   {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]},
 "post_processor": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
 "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
 "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null, "end_of_word_suffix": null,
   "fuse_unk": false, "byte_fallback": false, "ignore_merges": true,
   "vocab": {"Ġ": 0, "abc": 1, "Ġa": 2, "b": 3, "1": 4, "a": 5, "2": 6, "ab": 7, "12": 8, "c": 9, "'": 10, "s": 11,
             "'s": 12, "S": 13, "cab": 14, "!": 15, "Ċ": 16},
   "merges": [["a", "b"], ["ab", "c"], ["Ġ", "a"], ["1", "2"]]}})";

// Tokenizer B: LLaMA-2's converted shape (Prepend + Replace normalizer, no pre-tokenizer, byte
// fallback, unk fused, the SentencePiece decoder chain, a TemplateProcessing BOS).
const char* kB = R"({"version": "1.0", "truncation": null, "padding": null,
 "added_tokens": [{"id": 0, "content": "<unk>", "special": true, "normalized": false, "lstrip": false, "rstrip": false, "single_word": false},
                  {"id": 1, "content": "<s>", "special": true, "normalized": false, "lstrip": false, "rstrip": false, "single_word": false},
                  {"id": 2, "content": "</s>", "special": true, "normalized": false, "lstrip": false, "rstrip": false, "single_word": false}],
 "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
 "pre_tokenizer": null,
 "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
   "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
 "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"},
   {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
 "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>", "continuing_subword_prefix": null, "end_of_word_suffix": null,
   "fuse_unk": true, "byte_fallback": true,
   "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "<0x41>": 3, "<0xC3>": 4, "<0xA9>": 5, "▁": 6, "h": 7, "e": 8, "l": 9, "o": 10,
             "▁h": 11, "ll": 12, "▁he": 13, "▁hell": 14, "▁hello": 15},
   "merges": ["▁ h", "l l", "▁h e", "▁he ll", "▁hell o"]}})";

// A tokenizer.json around one model and optional parts (JSON text of each, "null" for none).
std::string tok_json(const std::string& model, const std::string& pre = "null", const std::string& norm = "null",
                     const std::string& added = "[]", const std::string& dec = "null", const std::string& post = "null") {
  return R"({"version": "1.0", "truncation": null, "padding": null, "added_tokens": )" + added + R"(, "normalizer": )" + norm +
         R"(, "pre_tokenizer": )" + pre + R"(, "post_processor": )" + post + R"(, "decoder": )" + dec + R"(, "model": )" + model + "}";
}

std::string bpe_model(const std::string& vocab, const std::string& merges, const std::string& extra = "") {
  return R"({"type": "BPE", "dropout": null, "unk_token": null, )" + extra + R"("vocab": )" + vocab + R"(, "merges": )" + merges + "}";
}

const std::string kEot = R"([{"id": 9, "content": "</s>", "special": true, "normalized": false, "lstrip": false, "rstrip": false, "single_word": false}])";

Tokenizer simple(const std::string& model, const std::string& pre = "null", const std::string& norm = "null",
                 const std::string& dec = "null") {
  return Tokenizer::hf_json_text(tok_json(model, pre, norm, kEot, dec), "test.json");
}

// The UsageError message of f(), or "" when it does not throw one.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

BOOST_AUTO_TEST_SUITE(hf_tokenizer)

BOOST_AUTO_TEST_CASE(normalizers) {
  // NFC composes e + U+0301 to é; NFD takes é apart; NFKC folds the ligature and the circled one.
  BOOST_TEST(normalize(R"({"type": "NFC"})", "e\xCC\x81 A\xCC\x8A") == "\xC3\xA9 \xC3\x85");
  BOOST_TEST(normalize(R"({"type": "NFD"})", "\xC3\xA9") == "e\xCC\x81");
  BOOST_TEST(normalize(R"({"type": "NFKC"})", "\xEF\xAC\x81 \xE2\x91\xA0 x") == "fi 1 x");
  BOOST_TEST(normalize(R"({"type": "NFKD"})", "\xC3\xA9\xEF\xAC\x81") == "e\xCC\x81" "fi");
  // Invalid UTF-8 passes through; the valid text around it is still normalized.
  BOOST_TEST(normalize(R"({"type": "NFC"})", "\xFF" "e\xCC\x81\x80") == "\xFF\xC3\xA9\x80");
  // Lowercase: Unicode, and U+0130 (İ) becomes i + U+0307 as Rust's to_lowercase.
  BOOST_TEST(normalize(R"({"type": "Lowercase"})", "ÀB ΣΑ \xC4\xB0") == "àb σα i\xCC\x87");
  BOOST_TEST(normalize(R"({"type": "Strip", "strip_left": true, "strip_right": true})", "\xC2\xA0 x y\t\n") == "x y");
  BOOST_TEST(normalize(R"({"type": "Strip", "strip_left": false, "strip_right": true})", "  x  ") == "  x");
  BOOST_TEST(normalize(R"({"type": "Prepend", "prepend": "▁"})", "x") == "▁x");
  BOOST_TEST(normalize(R"({"type": "Prepend", "prepend": "▁"})", "").empty());  // only non-empty text
  BOOST_TEST(normalize(R"({"type": "Replace", "pattern": {"String": " "}, "content": "▁"})", " a  b") == "▁a▁▁b");
  BOOST_TEST(normalize(R"({"type": "Replace", "pattern": {"Regex": "\\s+"}, "content": "_"})", "a \t b\n") == "a_b_");
  BOOST_TEST(normalize(R"({"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Lowercase"}]})", "ＡＢ") == "ab");
}

BOOST_AUTO_TEST_CASE(split_behaviors) {
  // Hugging Face's documented example: "the-final--countdown" split on "-".
  using V = std::vector<std::string>;
  const std::string t = "the-final--countdown";
  BOOST_TEST(split("Removed", t) == (V{"the", "final", "countdown"}), boost::test_tools::per_element());
  BOOST_TEST(split("Isolated", t) == (V{"the", "-", "final", "-", "-", "countdown"}), boost::test_tools::per_element());
  BOOST_TEST(split("MergedWithPrevious", t) == (V{"the-", "final-", "-", "countdown"}), boost::test_tools::per_element());
  BOOST_TEST(split("MergedWithNext", t) == (V{"the", "-final", "-", "-countdown"}), boost::test_tools::per_element());
  BOOST_TEST(split("Contiguous", t) == (V{"the", "-", "final", "--", "countdown"}), boost::test_tools::per_element());
  // invert: the pattern marks what is kept; Removed then drops the rest.
  BOOST_TEST(split("Removed", "a  b c", R"({"Regex": "\\s+"})", true) == (V{"  ", " "}), boost::test_tools::per_element());
  BOOST_TEST(split("Removed", "a  b c", R"({"Regex": "\\s+"})") == (V{"a", "b", "c"}), boost::test_tools::per_element());
  // Oniguruma's \s: U+0085 is whitespace, U+FEFF is not (JavaScript's is the opposite).
  BOOST_TEST(split("Removed", "a\xC2\x85" "b\xEF\xBB\xBF" "c", R"({"Regex": "\\s"})") == (V{"a", "b\xEF\xBB\xBF" "c"}),
             boost::test_tools::per_element());
  // (?i:...) and a case-insensitive contraction, LLaMA-3's first branch.
  BOOST_TEST(split("Isolated", "DON'T", R"({"Regex": "(?i:'s|'t)|\\p{L}+"})") == (V{"DON", "'T"}), boost::test_tools::per_element());
  // \w and \b over Oniguruma's word characters (letters, marks, digits, _; not '-').
  BOOST_TEST(split("Removed", "ab_1-c\xCC\x81", R"({"Regex": "\\b"})") == (V{"ab_1", "-", "c\xCC\x81"}),
             boost::test_tools::per_element());
  // Bytes that are not UTF-8 match nothing: they stay between matches.
  BOOST_TEST(split("Isolated", "ab\xFF" "cd", R"({"Regex": "\\p{L}+"})") == (V{"ab", "\xFF", "cd"}), boost::test_tools::per_element());
  // An empty match right after a match is skipped (onig's iteration): "a*" on "baa" matches
  // "", then "aa"; nothing is lost.
  BOOST_TEST(split("Isolated", "baa", R"({"Regex": "a*"})") == (V{"b", "aa"}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(other_pre_tokenizers) {
  using V = std::vector<std::string>;
  // ByteLevel with GPT-2's regex; add_prefix_space adds a space to a word without one.
  BOOST_TEST(words(R"({"type": "ByteLevel", "add_prefix_space": false, "use_regex": true})", "Hello world's  x") ==
                 (V{"Hello", " world", "'s", " ", " x"}),
             boost::test_tools::per_element());
  BOOST_TEST(words(R"({"type": "ByteLevel", "add_prefix_space": true, "use_regex": true})", "Hi") == (V{" Hi"}),
             boost::test_tools::per_element());
  BOOST_TEST(words(R"({"type": "ByteLevel", "add_prefix_space": false, "use_regex": false})", "a b") == (V{"a b"}),
             boost::test_tools::per_element());
  BOOST_TEST(words(R"({"type": "Digits", "individual_digits": true})", "a123b") == (V{"a", "1", "2", "3", "b"}),
             boost::test_tools::per_element());
  BOOST_TEST(words(R"({"type": "Digits", "individual_digits": false})", "a123b4") == (V{"a", "123", "b", "4"}),
             boost::test_tools::per_element());
  // Metaspace: spaces become ▁, a ▁ is prepended (always / first word of the input / never),
  // and split keeps each ▁ with the word after it.
  BOOST_TEST(words(R"({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true})", "Hey  friend") ==
                 (V{"▁Hey", "▁", "▁friend"}),
             boost::test_tools::per_element());
  BOOST_TEST(words(R"({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": false})", "Hey friend") ==
                 (V{"▁Hey▁friend"}),
             boost::test_tools::per_element());
  BOOST_TEST(words(R"({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": false})", "Hey", false) ==
                 (V{"Hey"}),
             boost::test_tools::per_element());
  BOOST_TEST(words(R"({"type": "Metaspace", "replacement": "▁", "add_prefix_space": false})", "a b") == (V{"a", "▁b"}),
             boost::test_tools::per_element());
  BOOST_TEST(words(R"({"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": true},
                     {"type": "Split", "pattern": {"String": " "}, "behavior": "Removed"}]})",
                   "a 12 b") == (V{"a", "1", "2", "b"}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(llama3_shaped_byte_level_bpe) {
  const Tokenizer t = Tokenizer::hf_json_text(kA, "a.json", "abc!");
  BOOST_TEST(t.type() == "hf");
  BOOST_TEST(t.vocab_size() == 22);  // max id + 1 over vocab and added tokens
  BOOST_TEST(t.eot() == 21);
  BOOST_TEST(t.bos() == -1);
  // tokenizers.js: "abc" is in the vocabulary (ignore_merges: emitted whole); " ab" -> Ġ + ab
  // (rank 0 beats Ġ a at rank 2); " cab" -> Ġ c ab; "12" "12".
  BOOST_TEST(t.encode("abc ab cab 1212") == (Ids{1, 0, 7, 0, 9, 7, 0, 8, 8}), boost::test_tools::per_element());
  BOOST_TEST(t.encode("cab") == (Ids{14}), boost::test_tools::per_element());          // tokenizers.js
  BOOST_TEST(t.encode("ab<x>ab") == (Ids{7, 20, 7}), boost::test_tools::per_element());  // tokenizers.js
  BOOST_TEST(t.encode("a\n\nb") == (Ids{5, 16, 16, 3}), boost::test_tools::per_element());
  // "123": \p{N}{1,2} gives "12" and "3"; "3" has no token and no fallback: dropped (tokenizers.js).
  BOOST_TEST(t.encode("123") == (Ids{8}), boost::test_tools::per_element());
  // A special token inside text is plain text (tokenizers.js matches it: [21]): "abc" + "!".
  BOOST_TEST(t.encode("abc!") == (Ids{1, 15}), boost::test_tools::per_element());
  BOOST_TEST(t.special_id("abc!") == 21);
  BOOST_TEST(t.special_id("<x>") == 20);
  BOOST_TEST(t.special_id("<y>") == -1);
  BOOST_TEST(t.decode({1, 0, 7, 20, 16}) == "abc ab<x>\n");
  BOOST_TEST(t.decode({21, 1}) == "abc");  // special tokens decode to nothing
  BOOST_TEST(t.decode_one(2) == " a");
  BOOST_TEST(t.streams_bytes());
  EncodeCache cache;
  BOOST_TEST(t.encode("abc ab cab 1212", &cache) == t.encode("abc ab cab 1212"));
  BOOST_TEST(t.encode("abc ab cab 1212", &cache) == (Ids{1, 0, 7, 0, 9, 7, 0, 8, 8}));  // from the cache
}

BOOST_AUTO_TEST_CASE(llama2_shaped_byte_fallback_unk_decoders_bos) {
  const Tokenizer t = Tokenizer::hf_json_text(kB, "b.json");
  BOOST_TEST(t.eot() == 2);  // </s> by name
  BOOST_TEST(t.bos() == 1);  // TemplateProcessing's <s>
  BOOST_TEST(t.vocab_size() == 16);
  // tokenizers.js: "▁hello" whole; A and é through their <0xNN> tokens.
  BOOST_TEST(t.encode("hello") == (Ids{15}), boost::test_tools::per_element());
  BOOST_TEST(t.encode("hello Aé") == (Ids{15, 6, 3, 4, 5}), boost::test_tools::per_element());
  BOOST_TEST(t.encode("  hello") == (Ids{6, 6, 15}), boost::test_tools::per_element());
  // i has no token and no <0x69>: <unk>, and fuse_unk makes one of "iii".
  BOOST_TEST(t.encode("hi") == (Ids{11, 0}), boost::test_tools::per_element());
  BOOST_TEST(t.encode("hiii") == (Ids{11, 0}), boost::test_tools::per_element());
  // "<s>" in text is text: ▁ <unk>(<s> fused) h e ll o.
  BOOST_TEST(t.encode("<s>hello") == (Ids{6, 0, 7, 8, 12, 10}), boost::test_tools::per_element());
  // The decoder chain: ▁ -> space, bytes joined, fused, one leading space stripped.
  for (const std::string s : {"hello", "hello Aé", "  hello", " hello A"}) BOOST_TEST(t.decode(t.encode(s)) == s);
  BOOST_TEST(!t.streams_bytes());
  BOOST_TEST(t.decode({1, 15, 2}) == "hello");
}

BOOST_AUTO_TEST_CASE(bpe_model_ranks_merge_formats_and_long_words) {
  const std::string vocab = R"({"a": 0, "b": 1, "c": 2, "ab": 3, "bc": 4, "</s>": 9})";
  // Ranks decide: with "b c" first, abc -> a bc; with "a b" first, ab c. Both merge spellings.
  BOOST_TEST(simple(bpe_model(vocab, R"(["b c", "a b"])")).encode("abc") == (Ids{0, 4}), boost::test_tools::per_element());
  BOOST_TEST(simple(bpe_model(vocab, R"([["a", "b"], ["b", "c"]])")).encode("abc") == (Ids{3, 2}), boost::test_tools::per_element());
  // A pair listed twice keeps its later rank (tokenizers builds a map): "a b" at rank 2 loses
  // to "b c" at rank 1.
  BOOST_TEST(simple(bpe_model(vocab, R"(["a b", "b c", "a b"])")).encode("abc") == (Ids{0, 4}), boost::test_tools::per_element());
  // Equal ranks go left to right: "aaa" with a a -> aa gives aa a.
  const std::string va = R"({"a": 0, "aa": 1, "aaaa": 2, "</s>": 9})";
  const Tokenizer t = simple(bpe_model(va, R"(["a a", "aa aa"])"));
  BOOST_TEST(t.encode("aaa") == (Ids{1, 0}), boost::test_tools::per_element());
  BOOST_TEST(t.encode("aaaaaaa") == (Ids{2, 1, 0}), boost::test_tools::per_element());
  // One word of 400,000 characters (no pre-tokenizer): the heap does it in O(n log n).
  const auto t0 = std::chrono::steady_clock::now();
  const Ids ids = t.encode(std::string(400000, 'a'));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  BOOST_TEST(ids.size() == 100000u);
  BOOST_TEST(s < 2.0);
  // unk without fusing: one <unk> per unknown character.
  const std::string vu = R"({"<unk>": 5, "a": 0, "</s>": 9})";
  BOOST_TEST(simple(R"({"type": "BPE", "unk_token": "<unk>", "fuse_unk": false, "vocab": )" + vu + R"(, "merges": []})")
                 .encode("axya") == (Ids{0, 5, 5, 0}),
             boost::test_tools::per_element());
  BOOST_TEST(simple(R"({"type": "BPE", "unk_token": "<unk>", "fuse_unk": true, "vocab": )" + vu + R"(, "merges": []})")
                 .encode("axya") == (Ids{0, 5, 0}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(decoders) {
  const std::string vocab = R"({"▁": 0, "▁a": 1, "b": 2, "a": 3, "</s>": 9})";
  // Metaspace's decoder drops the replacement characters of the first token (prepend_scheme not
  // never, as tokenizers' Rust decoder) and turns the others into spaces.
  const Tokenizer m = simple(bpe_model(vocab, R"(["▁ a"])"), R"({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always"})",
                             "null", R"({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always"})");
  BOOST_TEST(m.encode("a b") == (Ids{1, 0, 2}), boost::test_tools::per_element());
  BOOST_TEST(m.decode({1, 0, 2}) == "a b");
  BOOST_TEST(m.decode({2, 1}) == "b a");
  // No decoder: tokens joined with spaces, as tokenizers does.
  const Tokenizer n = simple(bpe_model(vocab, "[]"));
  BOOST_TEST(n.decode({2, 1}) == "b ▁a");
  // Replace with a regex; Strip both ends.
  const Tokenizer r = simple(bpe_model(vocab, "[]"), "null", "null",
                             R"({"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"Regex": "▁+"}, "content": "_"},
                                 {"type": "Fuse"}, {"type": "Strip", "content": "_", "start": 2, "stop": 1}]})");
  BOOST_TEST(r.decode({0, 1, 2, 0}) == "ab");
}

BOOST_AUTO_TEST_CASE(added_tokens_matching_and_flags) {
  const std::string model = bpe_model(R"({"a": 0, " ": 1, "</s>": 9})", "[]");
  auto added = [](const std::string& flags) {
    return R"([{"id": 9, "content": "</s>", "special": true, "normalized": false},
               {"id": 7, "content": "<m>", "special": false, )" + flags + "}]";
  };
  auto make = [&](const std::string& flags) {
    return Tokenizer::hf_json_text(tok_json(model, "null", "null", added(flags)), "t.json");
  };
  const Tokenizer plain = make(R"("normalized": false)");
  BOOST_TEST(plain.encode("a <m> a") == (Ids{0, 1, 7, 1, 0}), boost::test_tools::per_element());
  BOOST_TEST(make(R"("normalized": false, "lstrip": true, "rstrip": true)").encode("a  <m> a") == (Ids{0, 7, 0}),
             boost::test_tools::per_element());
  // single_word: not inside a word.
  BOOST_TEST(make(R"("normalized": false, "single_word": true)").encode("a<m>") == (Ids{0}), boost::test_tools::per_element());
  BOOST_TEST(make(R"("normalized": false, "single_word": true)").encode("<m> a") == (Ids{7, 1, 0}), boost::test_tools::per_element());
  // normalized: matched after the normalizer (Lowercase makes <M> into <m>).
  const Tokenizer low = Tokenizer::hf_json_text(tok_json(model, "null", R"({"type": "Lowercase"})", added(R"("normalized": true)")), "t");
  BOOST_TEST(low.encode("A<M>") == (Ids{0, 7}), boost::test_tools::per_element());
  // Leftmost, then longest.
  const std::string two = R"([{"id": 9, "content": "</s>", "special": true}, {"id": 5, "content": "aa", "special": false, "normalized": false},
                              {"id": 6, "content": "aaa", "special": false, "normalized": false}])";
  const Tokenizer lm = Tokenizer::hf_json_text(tok_json(model, "null", "null", two), "t");
  BOOST_TEST(lm.encode("aaaaa") == (Ids{6, 5}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(end_of_text_rule_and_json_round_trip) {
  const std::string model = bpe_model(R"({"a": 0, "<|endoftext|>": 1, "<|end_of_text|>": 2, "<|im_end|>": 3})", "[]");
  // By name, in order; tokenizer_config.json's eos_token wins.
  BOOST_TEST(Tokenizer::hf_json_text(tok_json(model), "t").eot() == 1);
  BOOST_TEST(Tokenizer::hf_json_text(tok_json(model), "t", "<|im_end|>").eot() == 3);
  BOOST_TEST(contains(error_of([&] { Tokenizer::hf_json_text(tok_json(model), "t", "<eos>"); }), "'<eos>'"));
  BOOST_TEST(contains(error_of([&] { Tokenizer::hf_json_text(tok_json(bpe_model(R"({"a": 0})", "[]")), "t"); }),
                      "no end-of-text token"));
  // The mpitron JSON embeds the file and the eot choice: from_json rebuilds an equal tokenizer.
  for (const char* src : {kA, kB}) {
    const Tokenizer t = Tokenizer::hf_json_text(src, "t", src == kA ? "abc!" : "");
    const std::string j = t.to_json();
    const Tokenizer u = Tokenizer::from_json(j, "round trip");
    BOOST_TEST((u == t));
    BOOST_TEST(u.eot() == t.eot());
    BOOST_TEST(u.bos() == t.bos());
    BOOST_TEST(u.to_json() == j);
    BOOST_TEST(u.encode("hello abc ab 12") == t.encode("hello abc ab 12"));
    BOOST_TEST(!(u == Tokenizer::byte()));
  }
  BOOST_TEST(!(Tokenizer::hf_json_text(kA, "t", "abc!") == Tokenizer::hf_json_text(kA, "t", "cab")));
  // vocab_size and eot are checked against the embedded file.
  json j = json::parse(Tokenizer::hf_json_text(kB, "t").to_json());
  j["vocab_size"] = 17;
  BOOST_CHECK_THROW(Tokenizer::from_json(j.dump(), "x"), UsageError);
  j["vocab_size"] = 16;
  j["eot"] = 40;
  BOOST_CHECK_THROW(Tokenizer::from_json(j.dump(), "x"), UsageError);
  j["eot"] = 2;
  j["tokenizer_json_zlib"] = "AAAA";
  BOOST_CHECK_THROW(Tokenizer::from_json(j.dump(), "x"), UsageError);
}

BOOST_AUTO_TEST_CASE(load_from_files_and_gpt2_routing) {
  const fs::path d = fs::temp_directory_path() / ("mpitron-hf-tok-" + std::to_string(::getpid()));
  fs::create_directories(d);
  std::ofstream(d / "tokenizer.json") << kA;
  // No tokenizer_config.json: <|endoftext|> and the others are not tokens, so it is refused.
  BOOST_TEST(contains(error_of([&] { Tokenizer::load("hf:" + d.string()); }), "no end-of-text token"));
  std::ofstream(d / "tokenizer_config.json") << R"({"eos_token": {"content": "<x>"}, "bos_token": null})";
  const Tokenizer t = Tokenizer::load("hf:" + d.string());
  BOOST_TEST(t.type() == "hf");
  BOOST_TEST(t.eot() == 20);
  BOOST_TEST(Tokenizer::load("hf:" + (d / "tokenizer.json").string()).eot() == 20);
  // GPT-2's exact layout stays the "gpt2" BPE; the same file with a normalizer is an hf pipeline.
  fs::remove(d / "tokenizer_config.json");
  std::array<int32_t, 256> ids{};
  for (int b = 0; b < 256; ++b) ids[b] = b;
  const Tokenizer g = Tokenizer::bpe({{'a', 'b'}}, ids, "gpt2");
  std::ofstream(d / "tokenizer.json") << g.to_hf_json();
  BOOST_TEST(Tokenizer::load("hf:" + d.string()).type() == "bpe");
  json gj = json::parse(g.to_hf_json());
  gj["normalizer"] = json::parse(R"({"type": "NFC"})");
  std::ofstream(d / "tokenizer.json", std::ios::trunc) << gj.dump();
  const Tokenizer h = Tokenizer::load("hf:" + d.string());
  BOOST_TEST(h.type() == "hf");
  BOOST_TEST(h.eot() == g.eot());
  BOOST_TEST(h.encode("ab abc e\xCC\x81") == g.encode("ab abc \xC3\xA9"));
  fs::remove_all(d);
}

BOOST_AUTO_TEST_CASE(refusals_name_the_file_and_the_component) {
  const std::string model = bpe_model(R"({"a": 0, "b": 1, "ab": 2, "</s>": 9})", R"(["a b"])");
  auto err = [&](const std::string& text) { return error_of([&] { Tokenizer::hf_json_text(text, "f.json"); }); };
  std::string e = err(tok_json(model, R"({"type": "Sequence", "pretokenizers": [{"type": "Digits"}, {"type": "Punctuation"}]})"));
  BOOST_TEST(contains(e, "f.json: pre_tokenizer.pretokenizers[1]: type 'Punctuation' is not supported (supported: Split, ByteLevel"), e);
  e = err(tok_json(model, "null", R"({"type": "BertNormalizer"})"));
  BOOST_TEST(contains(e, "f.json: normalizer: type 'BertNormalizer' is not supported"), e);
  e = err(tok_json(model, "null", "null", kEot, R"({"type": "WordPiece"})"));
  BOOST_TEST(contains(e, "f.json: decoder: type 'WordPiece' is not supported"), e);
  e = err(tok_json(model, "null", "null", kEot, "null", R"({"type": "RobertaProcessing"})"));
  BOOST_TEST(contains(e, "f.json: post_processor: type 'RobertaProcessing' is not supported"), e);
  e = err(tok_json(R"({"type": "Unigram", "vocab": []})"));
  BOOST_TEST(contains(e, "f.json: model: type 'Unigram' is not supported"), e);
  e = err(tok_json(model, R"({"type": "Split", "pattern": {"Regex": "(a"}, "behavior": "Isolated"})"));
  BOOST_TEST(contains(e, "f.json: pre_tokenizer.pattern: regex '(a' does not compile"), e);
  e = err(tok_json(model, R"({"type": "Split", "pattern": {"Regex": "[a&&b]"}, "behavior": "Isolated"})"));
  BOOST_TEST(contains(e, "intersection"), e);
  e = err(tok_json(model, R"({"type": "Split", "pattern": {"String": "x"}, "behavior": "Merged"})"));
  BOOST_TEST(contains(e, "f.json: pre_tokenizer: behavior 'Merged' is not supported"), e);
  e = err(tok_json(model, R"({"type": "Sequence", "pretokenizers": [{"type": "ByteLevel"}, {"type": "Digits"}]})"));
  BOOST_TEST(contains(e, "pre_tokenizer.pretokenizers[1]: a pre-tokenizer after ByteLevel"), e);
  e = err(tok_json(bpe_model(R"({"a": 0, "b": 1, "</s>": 9})", R"(["a b"])")));
  BOOST_TEST(contains(e, "f.json: model: merges[0] ['a', 'b'] names a token that is not in the vocabulary: 'ab'"), e);
  e = err(tok_json(bpe_model(R"({"a": 0, "</s>": 9})", R"(["a"])")));
  BOOST_TEST(contains(e, "merges[0] 'a' is not 'LEFT RIGHT'"), e);
  e = err(tok_json(bpe_model(R"({"a": 0, "</s>": 9})", "[]", R"("continuing_subword_prefix": "##", )")));
  BOOST_TEST(contains(e, "\"continuing_subword_prefix\" '##' is not supported"), e);
  e = err(tok_json(R"({"type": "BPE", "dropout": 0.1, "vocab": {"</s>": 9}, "merges": []})"));
  BOOST_TEST(contains(e, "dropout 0.1 is not supported"), e);
  // Added tokens that collide with the vocabulary.
  e = err(tok_json(model, "null", "null", R"([{"id": 5, "content": "ab", "special": true}, {"id": 9, "content": "</s>", "special": true}])"));
  BOOST_TEST(contains(e, "f.json: added_tokens[0]: 'ab' has id 5, but the vocabulary gives 'ab' id 2"), e);
  e = err(tok_json(model, "null", "null", R"([{"id": 1, "content": "<x>", "special": true}, {"id": 9, "content": "</s>", "special": true}])"));
  BOOST_TEST(contains(e, "f.json: added_tokens[0]: '<x>' has id 1, which the vocabulary gives to 'b'"), e);
  e = err(tok_json(bpe_model(R"({"a": 0, "b": 0})", "[]")));
  BOOST_TEST(contains(e, "vocab: id 0 is given to both"), e);
  e = err(R"({"model": {"type": "BPE", "vocab": {}, "merges": []}, "truncation": {"max_length": 5}})");
  BOOST_TEST(contains(e, "f.json: truncation: must be null"), e);
}

BOOST_AUTO_TEST_SUITE_END()
