// Shards: writer -> dataset read back (windows across shard boundaries), prep output equals the
// tokenized input, and every bad input gives a message naming the file.
#include <hdf5.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "mpitron/core/error.hpp"
#include "mpitron/data/loader.hpp"
#include "mpitron/data/prep.hpp"
#include "mpitron/data/shard.hpp"

using namespace mpitron;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path p;
  TempDir() {
    p = fs::temp_directory_path() / ("mpitron_shards_" + std::to_string(getpid()) + "_" + std::to_string(counter()++));
    fs::remove_all(p);
    fs::create_directories(p);
  }
  ~TempDir() { fs::remove_all(p); }
  std::string str() const { return p.string(); }
  static int& counter() {
    static int c = 0;
    return c;
  }
};

// Writes tokens 0..n-1 (mod 251) into shards of `per` tokens under dir.
std::vector<int32_t> write_series(const std::string& dir, int64_t n, int64_t per, const Tokenizer& tok = Tokenizer::byte()) {
  std::vector<int32_t> all(n);
  for (int64_t i = 0; i < n; ++i) all[i] = static_cast<int32_t>((i * 7) % 251);
  for (int64_t s = 0; s * per < n; ++s) {
    ShardWriter w(fmt::format("{}/train_{:05d}.h5", dir, s), tok, 64);
    w.begin_document();
    w.add_source("synthetic");
    w.append(all.data() + s * per, static_cast<size_t>(std::min(per, n - s * per)));
    w.commit();
  }
  return all;
}

void write_file(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

bool has(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

}  // namespace

BOOST_AUTO_TEST_SUITE(shards)

BOOST_AUTO_TEST_CASE(writer_and_dataset_read_across_shards) {
  TempDir d;
  auto all = write_series(d.str(), 1000, 300);
  TokenDataset ds(d.str(), "train");
  BOOST_TEST(ds.files().size() == 4u);
  BOOST_TEST(ds.num_tokens() == 1000);
  BOOST_TEST(ds.vocab_size() == 257);
  BOOST_TEST(ds.num_samples(10) == 99);  // (1000 - 1) / 10
  std::vector<int32_t> buf(1000);
  for (auto [start, n] : std::vector<std::pair<int64_t, int64_t>>{{0, 1000}, {295, 11}, {299, 302}, {999, 1}, {0, 0}}) {
    ds.read(start, n, buf.data());
    BOOST_TEST(std::equal(buf.begin(), buf.begin() + n, all.begin() + start));
  }
  BOOST_CHECK_THROW(ds.read(995, 10, buf.data()), Error);
  BOOST_TEST(!fs::exists(d.p / "train_00000.h5.tmp"));
}

BOOST_AUTO_TEST_CASE(uncommitted_writer_leaves_nothing) {
  TempDir d;
  {
    ShardWriter w(d.str() + "/train_00000.h5", Tokenizer::byte());
    int32_t x[3] = {1, 2, 3};
    w.append(x, 3);
    int32_t bad = 300;
    BOOST_CHECK_THROW(w.append(&bad, 1), Error);
  }
  BOOST_TEST(fs::is_empty(d.p));
}

BOOST_AUTO_TEST_CASE(prep_output_equals_tokenized_input) {
  TempDir d;
  fs::create_directories(d.p / "in");
  write_file(d.p / "in/a.txt", "first fortune\n%\nsecond one\nwith two lines\n%\n");
  write_file(d.p / "in/b.txt", "third\n%\nfourth\n%\nfifth \xff\xfe bytes\n");
  BpeTrainOptions bo;
  bo.vocab_size = 270;
  bo.min_count = 1;
  Tokenizer tok = train_bpe({"first fortune second one third fourth fifth"}, bo);
  fs::path tj = d.p / "tok.json";
  write_file(tj, tok.to_json(true));
  PrepOptions o;
  o.inputs = {(d.p / "in/*.txt").string()};
  o.out = (d.p / "out").string();
  o.tokenizer = tj.string();
  o.doc_separator = "%";
  o.val_fraction = 0.4;  // docs 1 and 3 (k * 0.4 crosses an integer at k = 1, 3)
  o.shard_tokens = 20;
  o.progress = 0;
  o.workers = 2;
  PrepResult r = run_prep(o);
  BOOST_TEST(r.documents == 5);
  std::vector<std::string> docs = {"first fortune\n", "second one\nwith two lines\n", "third\n", "fourth\n",
                                   "fifth \xff\xfe bytes\n"};
  std::vector<int32_t> want_train, want_val;
  for (int k = 0; k < 5; ++k) {
    auto ids = tok.encode(docs[k]);
    ids.push_back(tok.eot());
    auto& w = (k == 1 || k == 3) ? want_val : want_train;
    w.insert(w.end(), ids.begin(), ids.end());
  }
  for (auto [split, want] : {std::pair{"train", want_train}, std::pair{"val", want_val}}) {
    TokenDataset ds(o.out, split);
    BOOST_TEST(ds.num_tokens() == static_cast<int64_t>(want.size()));
    BOOST_TEST(ds.files().size() == (want.size() + 19) / 20);
    BOOST_TEST(ds.eot() == tok.eot());
    BOOST_TEST((Tokenizer::from_json(ds.tokenizer_json()) == tok));
    std::vector<int32_t> got(want.size());
    ds.read(0, static_cast<int64_t>(got.size()), got.data());
    BOOST_TEST(got == want, boost::test_tools::per_element());
  }
  for (auto& e : fs::directory_iterator(o.out)) BOOST_TEST(e.path().extension() == ".h5");
}

BOOST_AUTO_TEST_CASE(prep_bad_inputs) {
  TempDir d;
  PrepOptions o;
  o.out = (d.p / "out").string();
  o.progress = 0;
  o.inputs = {(d.p / "nothing*.txt").string()};
  BOOST_TEST(has(error_of([&] { run_prep(o); }), "no input files match"));
  write_file(d.p / "empty.txt", "");
  write_file(d.p / "ok.txt", "hello");
  o.inputs = {(d.p / "ok.txt").string(), (d.p / "empty.txt").string()};
  std::string e = error_of([&] { run_prep(o); });
  BOOST_TEST(has(e, "empty.txt"));
  BOOST_TEST(has(e, "empty"));
  BOOST_TEST(!fs::exists(d.p / "out/train_00000.h5"));
  o.inputs = {(d.p / "ok.txt").string()};
  o.tokenizer = (d.p / "ok.txt").string();  // not JSON
  BOOST_TEST(has(error_of([&] { run_prep(o); }), "ok.txt: not valid JSON"));
}

BOOST_AUTO_TEST_CASE(dataset_bad_shards_name_the_file) {
  TempDir d;
  BOOST_TEST(has(error_of([&] { TokenDataset(d.str(), "train"); }), "no train_*.h5 shards in"));
  write_file(d.p / "train_00000.h5", "this is not HDF5");
  BOOST_TEST(has(error_of([&] { TokenDataset(d.str(), "train"); }), "train_00000.h5: not an HDF5 file"));
  fs::remove(d.p / "train_00000.h5");

  write_series(d.str(), 100000, 100000);
  fs::path f = d.p / "train_00000.h5";
  fs::resize_file(f, fs::file_size(f) / 2);  // truncated
  std::string e = error_of([&] {
    TokenDataset ds(d.str(), "train");
    std::vector<int32_t> b(100000);
    ds.read(0, 100000, b.data());
  });
  BOOST_TEST(has(e, "train_00000.h5"));
  fs::remove(f);

  // no /tokens
  {
    hid_t h = H5Fcreate(f.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    H5Fclose(h);
  }
  BOOST_TEST(has(error_of([&] { TokenDataset(d.str(), "train"); }), "train_00000.h5: no /tokens dataset"));
  fs::remove(f);

  // a token >= vocab_size: caught at load, naming shard and index
  write_series(d.str(), 1000, 1000);
  {
    hid_t h = H5Fopen(f.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t ds = H5Dopen2(h, "tokens", H5P_DEFAULT);
    hid_t fs_ = H5Dget_space(ds);
    hsize_t at = 500, one = 1;
    H5Sselect_hyperslab(fs_, H5S_SELECT_SET, &at, nullptr, &one, nullptr);
    hid_t ms = H5Screate_simple(1, &one, nullptr);
    uint32_t v = 300;
    H5Dwrite(ds, H5T_NATIVE_UINT32, ms, fs_, H5P_DEFAULT, &v);
    H5Sclose(ms);
    H5Sclose(fs_);
    H5Dclose(ds);
    H5Fclose(h);
  }
  e = error_of([&] {
    TokenDataset ds(d.str(), "train");
    std::vector<int32_t> b(1000);
    ds.read(0, 1000, b.data());
  });
  BOOST_TEST(has(e, "train_00000.h5: token 300 at index 500 is >= vocab_size 257"));
  fs::remove(f);

  // shards that disagree on the tokenizer
  write_series(d.str(), 100, 100);
  BpeTrainOptions bo;
  bo.vocab_size = 300;
  bo.min_count = 1;
  Tokenizer other = train_bpe({"some other text to learn merges from"}, bo);
  {
    ShardWriter w(d.str() + "/train_00001.h5", other);
    int32_t x[2] = {1, 2};
    w.append(x, 2);
    w.commit();
  }
  e = error_of([&] { TokenDataset(d.str(), "train"); });
  BOOST_TEST(has(e, "train_00000.h5"));
  BOOST_TEST(has(e, "train_00001.h5"));
  BOOST_TEST(has(e, "disagree"));
}

BOOST_AUTO_TEST_CASE(loader_rejects_seq_len_larger_than_data) {
  TempDir d;
  write_series(d.str(), 50, 50);
  LoaderOptions o;
  o.dir = d.str();
  o.seq_len = 64;
  std::string e = error_of([&] { DataLoader l(o); });
  BOOST_TEST(has(e, "seq_len 64 is larger than the data"));
  BOOST_TEST(has(e, d.str()));
  o.seq_len = 49;  // exactly one sample of 50 tokens
  DataLoader l(o);
  BOOST_TEST(l.samples_per_epoch() == 1);
  o.dp_size = 2;
  BOOST_TEST(has(error_of([&] { DataLoader l2(o); }), "fewer than the 2 data-parallel ranks"));
  o.split = "val";
  BOOST_TEST(has(error_of([&] { ValidationLoader v(o); }), "no val_*.h5 shards"));
}

// Loss masks and document positions through the loader, against answers worked by hand: two
// shards, documents of lengths 5, 9 and 12 (each followed by the eot id 256), the second shard
// without a /loss_mask (all trained), the first masking every third token.
BOOST_AUTO_TEST_CASE(loader_loss_mask_and_document_positions) {
  TempDir d;
  const Tokenizer tok = Tokenizer::byte();
  std::vector<int32_t> all;
  std::vector<int64_t> starts;
  for (int len : {5, 9, 12}) {
    starts.push_back(static_cast<int64_t>(all.size()));
    for (int t = 0; t < len; ++t) all.push_back(97 + t);
    all.push_back(tok.eot());
  }
  const int64_t split = 18;  // inside the second document: it continues in the next shard
  {
    ShardWriter w(d.str() + "/train_00000.h5", tok, 8, /*loss_mask=*/true);
    std::vector<uint8_t> mask(split);
    for (int64_t i = 0; i < split; ++i) mask[i] = i % 3 != 0;
    for (size_t k = 0; k < starts.size() && starts[k] < split; ++k) {  // document by document
      const int64_t end = std::min(k + 1 < starts.size() ? starts[k + 1] : split, split);
      w.begin_document();
      w.append(all.data() + starts[k], static_cast<size_t>(end - starts[k]), mask.data() + starts[k]);
    }
    w.commit();
    // The rest: no document starts here (the third starts at 16), no /loss_mask.
    ShardWriter v(d.str() + "/train_00001.h5", tok, 8);
    v.append(all.data() + split, all.size() - split);
    v.commit();
  }
  BOOST_TEST(starts[2] == 16);
  TokenDataset ds(d.str(), "train");
  BOOST_TEST(ds.has_loss_mask());
  ds.load_doc_starts();
  BOOST_TEST((ds.doc_starts() == std::vector<int64_t>{0, 6, 16}));
  std::vector<uint8_t> m(10);
  ds.read_loss_mask(12, 10, m.data());  // 12..17 from the first shard's mask, 18..21 all ones
  BOOST_TEST((m == std::vector<uint8_t>{0, 1, 1, 0, 1, 1, 1, 1, 1, 1}));

  LoaderOptions lo;
  lo.dir = d.str();
  lo.seq_len = 10;
  lo.shuffle = false;
  lo.prefetch = 0;
  lo.document_mask = true;
  DataLoader dl(lo);
  Batch b;
  dl.next(b);  // window [0, 11): segments open at 0 and at 5 (the first document's eot)
  BOOST_TEST((b.positions == std::vector<int32_t>{0, 1, 2, 3, 4, 0, 1, 2, 3, 4}));
  BOOST_TEST((b.targets == std::vector<int32_t>{98, 99, -1, 101, tok.eot(), -1, 98, 99, -1, 101}));
  dl.next(b);  // window [10, 21): 15 (the second document's eot) opens the third
  BOOST_TEST((b.positions == std::vector<int32_t>{0, 1, 2, 3, 4, 0, 1, 2, 3, 4}));
  BOOST_TEST((b.targets == std::vector<int32_t>{102, -1, 104, 105, -1, 97, 98, 99, 100, 101}));
  lo.document_mask = false;
  DataLoader plain(lo);
  plain.next(b);
  BOOST_TEST(b.positions.empty());
}

// prep --pack: the trained-token count prep reports is the number of ones its shards' /loss_mask
// holds (train + val), after packing masked each block's first token; --pack 1, which would mask
// every target, is refused before anything is written.
BOOST_AUTO_TEST_CASE(prep_pack_reports_the_loss_mask_it_writes) {
  TempDir d;
  std::string text;
  for (int k = 0; k < 12; ++k) text += std::string(static_cast<size_t>(3 + 5 * k), static_cast<char>('a' + k)) + "\n%\n";
  write_file(d.p / "in.txt", text);
  PrepOptions o;
  o.inputs = {(d.p / "in.txt").string()};
  o.out = (d.p / "out").string();
  o.doc_separator = "%";
  o.val_fraction = 0.25;
  o.shard_tokens = 40;  // several shards: the count spans them
  o.progress = 0;
  o.pack = 16;
  PrepResult r = run_prep(o);
  int64_t ones = 0, all = 0;
  for (const char* split : {"train", "val"}) {
    TokenDataset ds(o.out, split);
    BOOST_TEST(ds.packed_seq_len() == 16);
    std::vector<uint8_t> m(static_cast<size_t>(ds.num_tokens()));
    ds.read_loss_mask(0, ds.num_tokens(), m.data());
    ones += std::accumulate(m.begin(), m.end(), int64_t{0});
    all += ds.num_tokens();
  }
  BOOST_TEST(all == r.train_tokens + r.val_tokens);
  BOOST_TEST(r.trained_tokens == ones);
  // Every document token but the block starts: the documents (each with its eot) less one per block
  // a document piece opens.
  BOOST_TEST(ones < all - r.padding_tokens);
  BOOST_TEST(ones > 0);

  o.pack = 0;  // off: no /loss_mask, nothing to report
  o.out = (d.p / "plain").string();
  BOOST_TEST(run_prep(o).trained_tokens == -1);
  BOOST_TEST(TokenDataset(o.out, "train").packed_seq_len() == 0);

  o.out = (d.p / "one").string();
  for (int bad : {1, -1}) {
    o.pack = bad;
    BOOST_TEST(has(error_of([&] { run_prep(o); }),
                   fmt::format("option --pack: '{}' is not allowed (allowed: an integer, 0 (off) or ", bad)));
  }
  BOOST_TEST(!fs::exists(o.out));
}

// A split mixing packed and unpacked shards, or two window lengths, is refused whichever file
// sorts first, naming both files and how each was packed.
BOOST_AUTO_TEST_CASE(dataset_refuses_mixed_packing_in_either_order) {
  const Tokenizer tok = Tokenizer::byte();
  auto shard = [&](const fs::path& path, int pack) {
    ShardWriter w(path.string(), tok, 64, /*loss_mask=*/pack > 0);
    if (pack > 0) w.set_packing(pack);
    const std::vector<int32_t> x(9, 97);
    w.begin_document();
    w.append(x.data(), x.size());
    w.commit();
  };
  for (auto [first, second] : {std::pair{8, 0}, std::pair{0, 8}, std::pair{8, 16}}) {
    TempDir d;
    shard(d.p / "train_00000.h5", first);
    shard(d.p / "train_00001.h5", second);
    const std::string e = error_of([&] { TokenDataset(d.str(), "train"); });
    auto packing = [](int p) {
      return p > 0 ? fmt::format("packed for windows of {} + 1 tokens (prep --pack {})", p, p) : std::string("not packed");
    };
    BOOST_TEST(has(e, fmt::format("shards disagree: {}/train_00000.h5 was {}", d.str(), packing(first))), e);
    BOOST_TEST(has(e, fmt::format("but {}/train_00001.h5 was {}", d.str(), packing(second))), e);
  }
  TempDir same;  // the same length throughout loads
  shard(same.p / "train_00000.h5", 8);
  shard(same.p / "train_00001.h5", 8);
  BOOST_TEST(TokenDataset(same.str(), "train").packed_seq_len() == 8);
}

BOOST_AUTO_TEST_CASE(parse_count_takes_whole_counts_with_a_suffix) {
  BOOST_TEST(parse_count("50M", "--shard-tokens") == 50'000'000);
  BOOST_TEST(parse_count("1.5k", "--shard-tokens") == 1500);
  BOOST_TEST(parse_count("7", "--shard-tokens") == 7);
  for (const char* bad : {"0", "0.5", "-3", "x", "M", "1e30G", "inf", "", " 5"})
    BOOST_TEST(has(error_of([&] { parse_count(bad, "--shard-tokens"); }),
                   fmt::format("option --shard-tokens: '{}' is not allowed (allowed: an integer, >= 1", bad)),
               bad);
}

BOOST_AUTO_TEST_SUITE_END()
