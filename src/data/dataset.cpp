// TokenDataset: all <split>_*.h5 shards of a folder as one token stream, read by hyperslab.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <mutex>

#include "mpitron/data/h5.hpp"
#include "mpitron/core/error.hpp"
#include "mpitron/data/hdf5_lock.hpp"
#include "mpitron/data/shard.hpp"

namespace fs = std::filesystem;

namespace mpitron {

struct TokenDataset::Shard {
  std::string path;
  h5::Id file, tokens, mask;  // mask: /loss_mask, when the shard has one
  int64_t n = 0;
};

namespace {

// A 1-D integer dataset of exactly n elements, or UsageError naming the shard.
h5::Id open_parallel_1d(hid_t file, const char* name, int64_t n, const std::string& path) {
  h5::Id ds(H5Dopen2(file, name, H5P_DEFAULT));
  usage_check(ds.valid(), "{}: cannot open /{} (corrupt?)", path, name);
  h5::Id space(H5Dget_space(ds));
  h5::Id type(H5Dget_type(ds));
  hsize_t len = 0;
  usage_check(H5Sget_simple_extent_ndims(space) == 1 && H5Tget_class(type) == H5T_INTEGER,
              "{}: /{} must be a 1-D integer dataset", path, name);
  H5Sget_simple_extent_dims(space, &len, nullptr);
  usage_check(static_cast<int64_t>(len) == n, "{}: /{} has {} entries but /tokens has {}: they must be parallel", path,
              name, len, n);
  return ds;
}

// How a shard was packed, for the message when shards disagree.
std::string packing_text(int64_t seq_len) {
  return seq_len > 0 ? fmt::format("packed for windows of {} + 1 tokens (prep --pack {})", seq_len, seq_len)
                     : std::string("not packed (prep without --pack)");
}

// Elements [off, off + cnt) of a 1-D dataset into out, as memtype.
void read_1d(hid_t ds, hsize_t off, hsize_t cnt, hid_t memtype, void* out, const std::string& path, const char* name) {
  h5::Id fspace(H5Dget_space(ds));
  H5Sselect_hyperslab(fspace, H5S_SELECT_SET, &off, nullptr, &cnt, nullptr);
  h5::Id mspace(H5Screate_simple(1, &cnt, nullptr));
  check(H5Dread(ds, memtype, mspace, fspace, H5P_DEFAULT, out) >= 0,
        "{}: HDF5 read of /{} [{}, {}) failed (truncated or corrupt?)", path, name, off, off + cnt);
}

}  // namespace

std::vector<std::string> list_shards(const std::string& dir, const std::string& split) {
  std::vector<std::string> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  std::string prefix = split + "_";
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::string name = e.path().filename().string();
    if (name.size() > prefix.size() + 3 && name.compare(0, prefix.size(), prefix) == 0 &&
        name.compare(name.size() - 3, 3, ".h5") == 0)
      out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

TokenDataset::TokenDataset(const std::string& dir, const std::string& split) : dir_(dir), split_(split) {
  std::error_code ec;
  usage_check(fs::is_directory(dir, ec), "data folder '{}' does not exist (make it with `mpitron prep --out {}`)", dir, dir);
  files_ = list_shards(dir, split);
  usage_check(!files_.empty(), "no {}_*.h5 shards in '{}' (make them with `mpitron prep --out {}`)", split, dir, dir);
  std::lock_guard lock(hdf5_mutex());
  h5::quiet();
  std::string first_tok_file;
  for (const auto& path : files_) {
    auto s = std::make_unique<Shard>();
    s->path = path;
    htri_t is = H5Fis_hdf5(path.c_str());
    usage_check(is > 0, "{}: not an HDF5 file (or truncated)", path);
    s->file = h5::Id(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
    usage_check(s->file.valid(), "{}: HDF5 cannot open it (truncated or corrupt?)", path);
    usage_check(H5Lexists(s->file, "tokens", H5P_DEFAULT) > 0, "{}: no /tokens dataset (not an mpitron shard?)", path);
    s->tokens = h5::Id(H5Dopen2(s->file, "tokens", H5P_DEFAULT));
    usage_check(s->tokens.valid(), "{}: cannot open /tokens (corrupt?)", path);
    h5::Id space(H5Dget_space(s->tokens));
    h5::Id type(H5Dget_type(s->tokens));
    usage_check(H5Sget_simple_extent_ndims(space) == 1 && H5Tget_class(type) == H5T_INTEGER,
                "{}: /tokens must be a 1-D integer dataset", path);
    hsize_t n = 0;
    H5Sget_simple_extent_dims(space, &n, nullptr);
    s->n = static_cast<int64_t>(n);
    int64_t vocab, eot, num;
    std::string tok;
    try {
      vocab = h5::read_attr_i64(s->file, "vocab_size", path);
      eot = h5::read_attr_i64(s->file, "eot", path);
      num = h5::read_attr_i64(s->file, "num_tokens", path);
      tok = h5::read_attr_str(s->file, "tokenizer", path);
    } catch (const Error& e) {
      usage_fail("{}", e.what());
    }
    usage_check(num == s->n, "{}: attribute num_tokens = {} but /tokens has {} (truncated?)", path, num, s->n);
    usage_check(vocab > 0 && vocab <= INT32_MAX && eot >= 0 && eot < vocab, "{}: bad vocab_size {} / eot {}", path,
                vocab, eot);
    const size_t tsize = H5Tget_size(type);
    usage_check(tsize >= 1 && tsize <= 8, "{}: /tokens has a {}-byte integer type", path, tsize);
    usage_check(tsize >= 4 || vocab <= 65536, "{}: vocab_size {} does not fit /tokens' 16-bit type", path, vocab);
    // The tokens must be in the file: a /tokens that claims more than its allocated chunks hold
    // would read as endless fill values (prep --check reads them all). Filtered (compressed)
    // datasets store fewer bytes than they hold, so only unfiltered ones are checked.
    {
      h5::Id dcpl(H5Dget_create_plist(s->tokens));
      hsize_t stored = H5Dget_storage_size(s->tokens);
      usage_check(!dcpl.valid() || H5Pget_nfilters(dcpl) != 0 ||
                      stored / tsize >= static_cast<hsize_t>(s->n),
                  "{}: /tokens claims {} tokens but the file stores {} bytes of them (truncated or corrupt?)", path,
                  s->n, stored);
    }
    // Every shard packed for the same window length, or none packed: an unpacked shard's windows
    // would cut documents where the packed ones' loss mask expects block starts, and the loader
    // checks model.seq_len against one length for the whole folder. Compared with the first
    // shard, so the order of the files does not matter.
    int64_t packed = 0;
    if (h5::has_attr(s->file, "packed_seq_len")) {
      try {
        packed = h5::read_attr_i64(s->file, "packed_seq_len", path);
      } catch (const Error& e) {
        usage_fail("{}", e.what());
      }
      // 0 would read as "not packed"; 1 (prep --pack 1, refused since) masks every target.
      usage_check(packed >= 2, "{}: packed_seq_len {} (prep --pack needs a window length >= 2; prep it again)", path,
                  packed);
    }
    if (shards_.empty()) {
      packed_seq_len_ = packed;
    } else {
      usage_check(packed == packed_seq_len_, "shards disagree: {} was {}, but {} was {}; prep the folder again with one "
                  "--pack setting", first_tok_file, packing_text(packed_seq_len_), path, packing_text(packed));
    }
    if (H5Lexists(s->file, "loss_mask", H5P_DEFAULT) > 0) {
      s->mask = open_parallel_1d(s->file, "loss_mask", s->n, path);
      has_mask_ = true;
    }
    if (shards_.empty()) {
      vocab_size_ = static_cast<int>(vocab);
      eot_ = static_cast<int>(eot);
      tokenizer_json_ = tok;
      first_tok_file = path;
    } else {
      usage_check(vocab == vocab_size_ && eot == eot_,
                  "shards disagree: {} has vocab_size {} / eot {}, but {} has vocab_size {} / eot {}", first_tok_file,
                  vocab_size_, eot_, path, vocab, eot);
      if (tok != tokenizer_json_) {
        // Compare meaning, not bytes (whitespace may differ between writers).
        bool same = false;
        try {
          same = Tokenizer::from_json(tok, path) == Tokenizer::from_json(tokenizer_json_, first_tok_file);
        } catch (const Error&) {
        }
        usage_check(same, "shards disagree: {} and {} were made with different tokenizers", first_tok_file, path);
      }
    }
    starts_.push_back(total_);
    total_ += s->n;
    shards_.push_back(std::move(s));
  }
  starts_.push_back(total_);
}

TokenDataset::~TokenDataset() {
  std::lock_guard lock(hdf5_mutex());
  shards_.clear();
}

int64_t TokenDataset::num_samples(int seq_len) const {
  if (seq_len <= 0 || total_ < 1) return 0;
  return (total_ - 1) / seq_len;
}

std::string TokenDataset::describe() const {
  return fmt::format("{}/{}_*.h5 ({} shard{}, {} tokens)", dir_, split_, files_.size(), files_.size() == 1 ? "" : "s", total_);
}

// Calls f(shard, offset in it, count, elements done before) for each shard [start, start + n)
// touches, in order, under the HDF5 lock.
template <class F>
void TokenDataset::each_shard_range(int64_t start, int64_t n, const char* what, F&& f) const {
  check(start >= 0 && n >= 0 && start + n <= total_, "{} [{}, {}) beyond the {} tokens of {}", what, start, start + n,
        total_, describe());
  size_t s = std::upper_bound(starts_.begin(), starts_.end(), start) - starts_.begin() - 1;
  std::lock_guard lock(hdf5_mutex());
  for (int64_t done = 0; done < n; ++s) {
    const Shard& sh = *shards_[s];
    const hsize_t off = static_cast<hsize_t>(start + done - starts_[s]);
    const hsize_t cnt = static_cast<hsize_t>(std::min<int64_t>(n - done, sh.n - static_cast<int64_t>(off)));
    if (cnt > 0) f(sh, off, cnt, done);
    done += static_cast<int64_t>(cnt);
  }
}

void TokenDataset::read(int64_t start, int64_t n, int32_t* out) const {
  each_shard_range(start, n, "read", [&](const Shard& sh, hsize_t off, hsize_t cnt, int64_t done) {
    int32_t* o = out + done;
    read_1d(sh.tokens, off, cnt, H5T_NATIVE_INT32, o, sh.path, "tokens");
    // The cheap load-time check: every token handed to the model is inside the vocabulary.
    for (hsize_t i = 0; i < cnt; ++i)
      if (static_cast<uint32_t>(o[i]) >= static_cast<uint32_t>(vocab_size_))
        fail("{}: token {} at index {} is >= vocab_size {}", sh.path, static_cast<uint32_t>(o[i]), off + i, vocab_size_);
  });
}

void TokenDataset::read_loss_mask(int64_t start, int64_t n, uint8_t* out) const {
  each_shard_range(start, n, "loss mask", [&](const Shard& sh, hsize_t off, hsize_t cnt, int64_t done) {
    uint8_t* o = out + done;
    if (!sh.mask.valid()) {
      std::fill(o, o + cnt, uint8_t{1});
      return;
    }
    read_1d(sh.mask, off, cnt, H5T_NATIVE_UINT8, o, sh.path, "loss_mask");
    for (hsize_t i = 0; i < cnt; ++i) o[i] = o[i] != 0;
  });
}

void TokenDataset::load_doc_starts() {
  if (!doc_starts_.empty()) return;
  std::lock_guard lock(hdf5_mutex());
  for (size_t k = 0; k < shards_.size(); ++k) {
    const Shard& sh = *shards_[k];
    usage_check(H5Lexists(sh.file, "doc_offsets", H5P_DEFAULT) > 0,
                "{}: no /doc_offsets: data.document_mask needs the document boundaries `mpitron prep` records", sh.path);
    h5::Id ds(H5Dopen2(sh.file, "doc_offsets", H5P_DEFAULT));
    usage_check(ds.valid(), "{}: cannot open /doc_offsets (corrupt?)", sh.path);
    h5::Id space(H5Dget_space(ds));
    usage_check(H5Sget_simple_extent_ndims(space) == 1, "{}: /doc_offsets must be 1-D", sh.path);
    hsize_t n = 0;
    H5Sget_simple_extent_dims(space, &n, nullptr);
    std::vector<uint64_t> offs(n);
    if (n > 0) read_1d(ds, 0, n, H5T_NATIVE_UINT64, offs.data(), sh.path, "doc_offsets");
    for (size_t i = 0; i < offs.size(); ++i) {
      usage_check(offs[i] < static_cast<uint64_t>(sh.n) && (i == 0 || offs[i] > offs[i - 1]),
                  "{}: /doc_offsets[{}] = {} is not ascending inside the shard's {} tokens", sh.path, i, offs[i], sh.n);
      doc_starts_.push_back(starts_[k] + static_cast<int64_t>(offs[i]));
    }
  }
}

}  // namespace mpitron
