// ShardWriter: streams tokens into a chunked, extendible /tokens dataset of a `.tmp` file.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <mutex>

#include "mpitron/data/h5.hpp"
#include "mpitron/core/error.hpp"
#include "mpitron/data/hdf5_lock.hpp"
#include "mpitron/data/shard.hpp"

namespace mpitron {

struct ShardWriter::H5 {
  h5::Id file, tokens, mask, docs;
};

namespace {

h5::Id create_extendible(hid_t file, const char* name, hid_t type, hsize_t chunk) {
  hsize_t dims = 0, maxdims = H5S_UNLIMITED;
  h5::Id space(H5Screate_simple(1, &dims, &maxdims));
  h5::Id dcpl(H5Pcreate(H5P_DATASET_CREATE));
  H5Pset_chunk(dcpl, 1, &chunk);
  H5Pset_obj_track_times(dcpl, false);  // no timestamps: the same input gives the same bytes
  return h5::Id(H5Dcreate2(file, name, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT));
}

void append_1d(hid_t ds, hsize_t at, hsize_t n, hid_t memtype, const void* data, const std::string& file) {
  if (n == 0) return;
  hsize_t newsize = at + n;
  check(H5Dset_extent(ds, &newsize) >= 0, "{}: HDF5 cannot extend a dataset (disk full?)", file);
  h5::Id fspace(H5Dget_space(ds));
  H5Sselect_hyperslab(fspace, H5S_SELECT_SET, &at, nullptr, &n, nullptr);
  h5::Id mspace(H5Screate_simple(1, &n, nullptr));
  check(H5Dwrite(ds, memtype, mspace, fspace, H5P_DEFAULT, data) >= 0, "{}: HDF5 write failed (disk full?)", file);
}

}  // namespace

ShardWriter::ShardWriter(std::string path, const Tokenizer& tok, int64_t chunk_tokens, bool loss_mask)
    : h5_(std::make_unique<H5>()),
      path_(std::move(path)),
      vocab_size_(tok.vocab_size()),
      eot_(tok.eot()),
      tokenizer_json_(tok.to_json()),
      wide_(tok.vocab_size() > 65536),
      with_mask_(loss_mask),
      chunk_(static_cast<size_t>(chunk_tokens)) {
  std::lock_guard lock(hdf5_mutex());
  h5::quiet();
  std::string tmp = tmp_path();
  // The 1.10 file format: superblock, object headers and the chunk index of /tokens (an extensible
  // array) carry checksums, so a corrupted shard's metadata is an HDF5 error on open or read, not
  // a crash inside libhdf5 (tests/fuzz). Needs HDF5 >= 1.10 to read (Debian 12 has 1.10.8).
  h5::Id fapl(H5Pcreate(H5P_FILE_ACCESS));
  check(H5Pset_libver_bounds(fapl, H5F_LIBVER_V110, H5F_LIBVER_V110) >= 0, "HDF5: cannot set the file format version");
  h5::Id fcpl(H5Pcreate(H5P_FILE_CREATE));
  H5Pset_obj_track_times(fcpl, false);
  h5_->file = h5::Id(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, fcpl, fapl));
  check(h5_->file.valid(), "cannot create shard '{}' (does the folder exist and is it writable?)", tmp);
  buf_.reserve(chunk_);
}

ShardWriter::~ShardWriter() {
  if (committed_) return;
  {
    std::lock_guard lock(hdf5_mutex());
    h5_.reset();
  }
  std::error_code ec;
  std::filesystem::remove(tmp_path(), ec);
}

void ShardWriter::begin_document(bool continued) {
  docs_.push_back(static_cast<uint64_t>(num_tokens_));
  continued_.push_back(continued ? 1 : 0);
}

void ShardWriter::add_source(const std::string& file) {
  if (sources_.empty() || sources_.back() != file) sources_.push_back(file);
}

void ShardWriter::append(const int32_t* ids, size_t n, const uint8_t* mask) {
  check(!closed_, "{}: append after close", path_);
  check(with_mask_ || !mask, "{}: a loss mask given to a writer made without one", path_);
  for (size_t i = 0; i < n; ++i) {
    int32_t id = ids[i];
    check(id >= 0 && id < vocab_size_, "{}: token {} at index {} is outside the vocabulary [0, {})", path_, id,
          num_tokens_ + static_cast<int64_t>(i), vocab_size_);
    buf_.push_back(static_cast<uint32_t>(id));
    if (with_mask_) mask_buf_.push_back(mask ? static_cast<uint8_t>(mask[i] != 0) : uint8_t{1});
    if (buf_.size() == chunk_) flush();
  }
  num_tokens_ += static_cast<int64_t>(n);
}

void ShardWriter::flush() {
  std::lock_guard lock(hdf5_mutex());
  if (!h5_->tokens.valid()) {
    // Created at the first flush: a shard smaller than one chunk gets a chunk of its own size
    // instead of a mostly empty 1M-token one.
    hsize_t chunk = std::max<hsize_t>(1, std::min<hsize_t>(chunk_, buf_.size()));
    h5_->tokens = create_extendible(h5_->file, "tokens", wide_ ? H5T_STD_U32LE : H5T_STD_U16LE, chunk);
    check(h5_->tokens.valid(), "{}: cannot create /tokens", tmp_path());
    if (with_mask_) {
      h5_->mask = create_extendible(h5_->file, "loss_mask", H5T_STD_U8LE, chunk);
      check(h5_->mask.valid(), "{}: cannot create /loss_mask", tmp_path());
    }
  }
  if (buf_.empty()) return;
  // HDF5 converts uint32 memory to the file's uint16 type (values were range-checked above).
  append_1d(h5_->tokens, written_, buf_.size(), H5T_NATIVE_UINT32, buf_.data(), tmp_path());
  if (with_mask_) append_1d(h5_->mask, written_, mask_buf_.size(), H5T_NATIVE_UINT8, mask_buf_.data(), tmp_path());
  written_ += static_cast<int64_t>(buf_.size());
  buf_.clear();
  mask_buf_.clear();
}

void ShardWriter::close() {
  if (closed_) return;
  flush();
  std::lock_guard lock(hdf5_mutex());
  std::string tmp = tmp_path();
  h5_->docs = create_extendible(h5_->file, "doc_offsets", H5T_STD_U64LE, std::max<hsize_t>(1, std::min<hsize_t>(docs_.size(), 4096)));
  check(h5_->docs.valid(), "{}: cannot create /doc_offsets", tmp);
  append_1d(h5_->docs, 0, docs_.size(), H5T_NATIVE_UINT64, docs_.data(), tmp);
  if (packed_seq_len_ > 0) {
    h5::Id cont = create_extendible(h5_->file, "doc_continued", H5T_STD_U8LE,
                                    std::max<hsize_t>(1, std::min<hsize_t>(continued_.size(), 4096)));
    check(cont.valid(), "{}: cannot create /doc_continued", tmp);
    append_1d(cont, 0, continued_.size(), H5T_NATIVE_UINT8, continued_.data(), tmp);
    h5::write_attr_i64(h5_->file, "packed_seq_len", packed_seq_len_);
  }
  hid_t f = h5_->file;
  // Fixed-length strings: no global heap (h5.hpp). h5py reads them as bytes; json.loads takes those.
  h5::write_attr_fixed_str(f, "format", "mpitron-shard-v1");
  h5::write_attr_i64(f, "vocab_size", vocab_size_);
  h5::write_attr_i64(f, "eot", eot_);
  h5::write_attr_i64(f, "num_tokens", num_tokens_);
  h5::write_attr_fixed_str(f, "tokenizer", tokenizer_json_);
  h5::write_attr_fixed_strs(f, "source", sources_);
  h5_->tokens.reset();
  h5_->mask.reset();
  h5_->docs.reset();
  check(H5Fflush(f, H5F_SCOPE_GLOBAL) >= 0, "{}: HDF5 flush failed (disk full?)", tmp);
  h5_->file.reset();
  closed_ = true;
}

void ShardWriter::commit() {
  close();
  std::error_code ec;
  std::filesystem::rename(tmp_path(), path_, ec);
  check(!ec, "cannot rename '{}' to '{}': {}", tmp_path(), path_, ec.message());
  committed_ = true;
}

}  // namespace mpitron
