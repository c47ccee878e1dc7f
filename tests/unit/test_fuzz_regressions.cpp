// Regression tests for the bugs the fuzzers found (tests/fuzz; README "Fuzzing"): each input
// here once crashed, aborted, exhausted memory or was misread; now it loads correctly or is a
// clear Error naming the file.
#include <hdf5.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "mpitron/cli/job_args.hpp"
#include "mpitron/config/job_config.hpp"
#include "mpitron/core/error.hpp"
#include "mpitron/data/loader.hpp"
#include "mpitron/data/shard.hpp"
#include "mpitron/data/tokenizer.hpp"

using namespace mpitron;
namespace fs = std::filesystem;

namespace {

struct Scratch {
  fs::path dir = fs::temp_directory_path() / ("mpitron_fuzzreg_" + std::to_string(getpid()));
  Scratch() { fs::create_directories(dir); }
  ~Scratch() { fs::remove_all(dir); }
  std::string file(const std::string& name, const std::string& text) const {
    std::string p = (dir / name).string();
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }
};

// The Error's message, or "(accepted)".
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(accepted)";
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

BOOST_AUTO_TEST_SUITE(fuzz_regressions)

// toml++ 3.3 asserted (abort) on a bad table header, and hit __builtin_unreachable on non-ASCII
// characters where it looks for whitespace.
BOOST_AUTO_TEST_CASE(job_file_toml_parser_traps) {
  Scratch s;
  JobConfig c;
  for (const char* text : {"[+model]\n", "[job]\n[ +x]\n", "[[[train]]]\n"}) {
    std::string p = s.file("bad.toml", text), e = error_of([&] { load_job_file(c, p); });
    BOOST_TEST((has(e, p) && has(e, "TOML error")), text << " -> " << e);
  }
  std::string p = s.file("key.toml", "[job]\nname\xc3\xa9 = 1\n");
  std::string e = error_of([&] { load_job_file(c, p); });
  BOOST_TEST((has(e, p + ":2:5:") && has(e, "non-ASCII")), e);
  p = s.file("ml.toml", "[job]\nname = \"\"\"\\\n   \xc2\xa7x\"\"\"\n");
  e = error_of([&] { load_job_file(c, p); });
  BOOST_TEST(has(e, "line-ending backslash"), e);
  // Non-ASCII where TOML allows it: strings (also quoted keys) and comments.
  p = s.file("ok.toml", "# caf\xc3\xa9\n[job]\nname = \"caf\xc3\xa9 \xe2\x80\x94 \"  # \xc2\xa7\nrun_dir = '''x\n\xc2\xa7'''\n"
                        "[env]\n\"\xc3\xa9\" = \"\"\"a\\\n  b\xc3\xa9\"\"\"\n");
  BOOST_TEST(error_of([&] { load_job_file(c, p); }) == "(accepted)");
  BOOST_TEST(c.job.name == "caf\xc3\xa9 \xe2\x80\x94 ");
  BOOST_TEST(c.job.run_dir == "x\n\xc2\xa7");
  BOOST_TEST(c.env.at("\xc3\xa9") == "ab\xc3\xa9");
}

// String values were stored with their escapes doubled, and job_to_toml wrote text that did not
// load back (raw newlines, unquoted keys).
BOOST_AUTO_TEST_CASE(job_to_toml_round_trip) {
  Scratch s;
  JobConfig c;
  std::string p = s.file("j.toml",
                         "[job]\nname = \"a\\\"b\\\\c\\nd\\te\\u0001f\"\nrun_dir = 'C:\\runs\\x'\n"
                         "[env]\n\"a b\" = \"x\"\n\"\" = \"empty key\"\nenv_override = true\n");
  load_job_file(c, p);
  BOOST_TEST(c.job.name == "a\"b\\c\nd\te\x01" "f");
  BOOST_TEST(c.job.run_dir == "C:\\runs\\x");
  BOOST_TEST(c.env.at("a b") == "x");
  BOOST_TEST(c.env_override);
  JobConfig d;
  load_job_file(d, s.file("again.toml", job_to_toml(c)));
  BOOST_TEST(job_to_toml(d) == job_to_toml(c));
  BOOST_TEST(d.job.name == c.job.name);
  BOOST_TEST(d.env == c.env);
}

BOOST_AUTO_TEST_CASE(job_overrides_checked) {
  JobConfig c;
  apply_job_overrides(c, {"--env.env_override=true"});
  BOOST_TEST(c.env_override);  // the flag (docs/jobs.md), not a variable named env_override
  BOOST_TEST(c.env.empty());
  BOOST_TEST(has(error_of([&] { set_job_key(c, "train.seed", "18446744073709551615"); }), "largest TOML integer"));
  set_job_key(c, "train.seed", "9223372036854775807");
  BOOST_TEST(c.train.seed == 9223372036854775807ull);
  BOOST_TEST(has(error_of([&] { set_job_key(c, "job.name", "a\xff"); }), "UTF-8"));
  BOOST_TEST(has(error_of([&] { set_job_key(c, "env.X\xc3", "1"); }), "UTF-8"));
}

// 40 merges each doubling the previous token asked build_tables() for 2^40 bytes; nlohmann's
// get<int32_t> truncated 1.5 and wrapped 2^32.
BOOST_AUTO_TEST_CASE(tokenizer_json_limits) {
  std::string merges = "[32, 32]";
  for (int i = 0; i < 40; ++i) merges += ", [" + std::to_string(256 + i) + ", " + std::to_string(256 + i) + "]";
  auto bpe = [](const std::string& m) {
    return R"({"format": "mpitron-tokenizer", "version": 1, "type": "bpe", "pretokenizer": "mpitron-v1", "merges": [)" +
           m + "]}";
  };
  std::string e = error_of([&] { Tokenizer::from_json(bpe(merges), "t.json"); });
  BOOST_TEST((has(e, "t.json") && has(e, "at most 128 bytes")), e);
  BOOST_TEST(has(error_of([&] { Tokenizer::from_json(bpe("[1.5, 2]"), "t.json"); }), "merge 0 is not a [left, right] pair"));
  BOOST_TEST(has(error_of([&] { Tokenizer::from_json(bpe("[4294967296, 0]"), "t.json"); }), "4294967296"));
  BOOST_TEST(has(error_of([&] {
                   Tokenizer::from_json(
                       R"({"format": "mpitron-tokenizer", "version": 1, "type": "bpe", "pretokenizer": "mpitron-v1", "merges": {"a": [1, 2]}})",
                       "t.json");
                 }),
                 "needs a \"merges\" list"));
  BOOST_TEST(has(error_of([&] {
                   Tokenizer::from_json(R"({"format": "mpitron-tokenizer", "version": 1, "type": "byte", "vocab_size": 2147483648})",
                                        "t.json");
                 }),
                 "\"vocab_size\" must be an integer"));
  // 128 bytes is fine: merges that build a 128-byte token of spaces.
  std::string ok = "[32, 32]";
  for (int i = 0; i < 6; ++i) ok += ", [" + std::to_string(256 + i) + ", " + std::to_string(256 + i) + "]";
  Tokenizer t = Tokenizer::from_json(bpe(ok), "t.json");
  BOOST_TEST(t.decode_one(262).size() == 128u);
  BOOST_TEST(t.decode(t.encode(std::string(300, ' '))) == std::string(300, ' '));
}

// A shard attribute's shape comes from the file: H5Aread wrote all of its elements into a
// one-element buffer. A /tokens claiming more tokens than stored read as endless fill values.
BOOST_AUTO_TEST_CASE(shard_attributes_and_sizes_checked) {
  Scratch s;
  auto make = [&](const std::string& name, auto&& edit) {
    fs::path d = s.dir / name;
    fs::create_directories(d);
    {
      ShardWriter w((d / "train_00000.h5").string(), Tokenizer::byte(), 16);
      std::vector<int32_t> ids(40, 65);
      w.begin_document();
      w.append(ids.data(), ids.size());
      w.commit();
    }
    hid_t f = H5Fopen((d / "train_00000.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    BOOST_REQUIRE(f >= 0);
    edit(f);
    H5Fclose(f);
    return d.string();
  };
  std::string ok = make("ok", [](hid_t) {});
  BOOST_TEST(TokenDataset(ok, "train").num_tokens() == 40);

  std::string shaped = make("shaped", [](hid_t f) {
    H5Adelete(f, "vocab_size");
    hsize_t n = 3;
    hid_t sp = H5Screate_simple(1, &n, nullptr);
    hid_t a = H5Acreate2(f, "vocab_size", H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
    int64_t v[3] = {257, 257, 257};
    H5Awrite(a, H5T_NATIVE_INT64, v);
    H5Aclose(a);
    H5Sclose(sp);
  });
  std::string e = error_of([&] { TokenDataset(shaped, "train"); });
  BOOST_TEST((has(e, shaped) && has(e, "'vocab_size' is not one integer")), e);

  std::string hollow = make("hollow", [](hid_t f) {
    // /tokens grown to 10^12 tokens without writing them, num_tokens to match.
    hid_t ds = H5Dopen2(f, "tokens", H5P_DEFAULT);
    hsize_t n = 1000000000000ull;
    H5Dset_extent(ds, &n);
    H5Dclose(ds);
    hid_t a = H5Aopen(f, "num_tokens", H5P_DEFAULT);
    int64_t v = static_cast<int64_t>(n);
    H5Awrite(a, H5T_NATIVE_INT64, &v);
    H5Aclose(a);
  });
  e = error_of([&] { TokenDataset(hollow, "train"); });
  BOOST_TEST((has(e, hollow) && has(e, "claims 1000000000000 tokens")), e);
}

BOOST_AUTO_TEST_SUITE_END()
