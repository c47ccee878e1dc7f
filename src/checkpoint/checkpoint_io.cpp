// Parallel HDF5 reading and writing of one checkpoint file (checkpoint.hpp has the contract).
//
// Hyperslab mapping, worked example: c_attn.weight, full [3C, C] = [12, 4], tp = 2, split over
// rows in 3 parts (q, k, v) of 4 rows, each split over tp. tp rank 1 holds local rows 0..5 =
// q rows 2..3, k rows 6..7, v rows 10..11 of the full tensor: 3 file hyperslabs. A ZeRO range of
// the flat buffer covering local elements [5, 19) of it is head row 1 (cols 1..3), full rows 2..3,
// tail row 4 (cols 0..2); each piece is then split where it crosses a q/k/v part boundary.
// Local order and full-tensor row-major order agree (the mapping is monotonic): each block is a
// run of consecutive elements on both sides, or one such run per row, moved with pread / pwrite
// at the dataset's offset in the file (transfer_pieces). HDF5 makes the file and its metadata.
#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <exception>
#include <map>
#include <array>
#include <atomic>
#include <bit>
#include <memory>
#include <future>
#include <mutex>
#include <thread>
#include <nlohmann/json.hpp>

#include "mpitron/data/h5.hpp"
#include "mpitron/core/error.hpp"
#include "mpitron/distributed/fault_inject.hpp"
#include "mpitron/core/rng.hpp"
#include "mpitron/core/version.hpp"
#include "mpitron/data/hdf5_lock.hpp"
#include "mpitron/checkpoint/checkpoint.hpp"
#include "checkpoint_format.hpp"
#include "checkpoint_meta.hpp"

namespace mpitron {
namespace {

using h5::Id;
using json = nlohmann::json;
using ckpt_meta::make_group;
using ckpt_meta::meta_from_json;
using ckpt_meta::meta_to_json;
using ckpt_meta::read_attr_u64;
using ckpt_meta::read_meta;
using ckpt_meta::write_attr_u64;
using ckpt_meta::write_meta;
using ckpt_format::cause_suffix;
using ckpt_format::check_h5;
using ckpt_format::file_dims;
using ckpt_format::full_table;
using ckpt_format::Kind;
using ckpt_format::kKinds;

// A tensor seen as 2-D: [n] -> [1, n]; [r, c] -> [r, c].
struct View {
  int64_t rows, cols;
};
View view_of(const std::vector<int64_t>& s) { return s.size() == 1 ? View{1, s[0]} : View{s[0], s[1]}; }
int view_split_dim(const ParamInfo& p) {
  if (p.split_dim < 0) return -1;
  return p.full_shape.size() == 1 ? 1 : p.split_dim;
}

// One rectangle of a tensor: where it is in the file's 2-D view, where it is locally.
struct Block {
  int64_t frow, fcol, nrows, ncols;
  int64_t lstart;  // local flat index (within the tensor) of its first element
  int64_t lpitch;  // local row pitch
};

// Blocks covering local elements [lo, hi) of p, in local order; rows at or beyond file_rows
// (wte padding) are dropped.
std::vector<Block> blocks_for(const ParamInfo& p, int64_t file_rows, int64_t lo, int64_t hi) {
  std::vector<Block> out;
  if (lo >= hi) return out;
  const View L = view_of(p.local_shape), F = view_of(p.full_shape);
  const int sd = view_split_dim(p);
  const int64_t lsplit = sd == 0 ? L.rows : L.cols, fsplit = sd == 0 ? F.rows : F.cols;
  const int64_t lpart = sd >= 0 ? lsplit / p.split_parts : 0, fpart = sd >= 0 ? fsplit / p.split_parts : 0;

  auto push = [&](int64_t lr, int64_t lc, int64_t nr, int64_t nc) {
    int64_t fr = lr, fc = lc;
    if (sd >= 0) {
      int64_t x = sd == 0 ? lr : lc;
      int64_t fx = (x / lpart) * fpart + p.local_offset_in_full + x % lpart;
      (sd == 0 ? fr : fc) = fx;
    }
    if (fr >= file_rows) return;
    nr = std::min(nr, file_rows - fr);
    out.push_back({fr, fc, nr, nc, lr * L.cols + lc, L.cols});
  };
  // Split a local rectangle where it crosses a part boundary of the split dimension.
  auto piece = [&](int64_t lr, int64_t lc, int64_t nr, int64_t nc) {
    if (nr <= 0 || nc <= 0) return;
    if (sd < 0) return push(lr, lc, nr, nc);
    int64_t a = sd == 0 ? lr : lc, n = sd == 0 ? nr : nc;
    while (n > 0) {
      int64_t take = std::min(n, lpart - a % lpart);
      if (sd == 0) push(a, lc, take, nc);
      else push(lr, a, nr, take);
      a += take;
      n -= take;
    }
  };
  int64_t r0 = lo / L.cols, c0 = lo % L.cols, r1 = hi / L.cols, c1 = hi % L.cols;
  if (r0 == r1) {
    piece(r0, c0, 1, c1 - c0);
    return out;
  }
  if (c0 > 0) {
    piece(r0, c0, 1, L.cols - c0);
    ++r0;
  }
  piece(r0, 0, r1 - r0, L.cols);
  if (c1 > 0) piece(r1, 0, 1, c1);
  return out;
}

// This rank's selection for one tensor and one kind of state.
struct Selection {
  std::vector<Block> blocks;
  int64_t mem_base = 0;  // index in the range's data of local element 0 of the tensor
  float* data = nullptr;

  bool empty() const { return blocks.empty(); }
};

// Elements of tensor p inside range r: local [lo, hi).
Selection select(const ParamInfo& p, const CkptRange& r, int64_t file_rows) {
  Selection s;
  s.data = r.data;
  s.mem_base = static_cast<int64_t>(p.offset) - static_cast<int64_t>(r.begin);
  if (!r.data) return s;
  int64_t lo = static_cast<int64_t>(std::max(r.begin, p.offset)) - static_cast<int64_t>(p.offset);
  int64_t hi = static_cast<int64_t>(std::min(r.end, p.offset + p.numel)) - static_cast<int64_t>(p.offset);
  s.blocks = blocks_for(p, file_rows, lo, hi);
  return s;
}

// Does this rank write (own) tensor p of the range? One owner per element in any layout.
bool owns(const CheckpointShard& s, const CkptRange& r, const ParamInfo& p) {
  if (!r.owner) return false;
  if (p.split_dim < 0 && s.shard.tp_rank != 0) return false;              // TP replicas
  if (is_token_embedding(p.name) && !s.shard.has_embedding) return false;  // the tied copy on the last stage
  return true;
}

// Which of this rank's shards holds a tensor (each name is in at most one of them).
class LocalTensors {
 public:
  explicit LocalTensors(std::span<const CheckpointShard> shards) {
    for (const auto& s : shards)
      for (const auto& p : s.table) {
        check(!map_.count(p.name), "checkpoint: tensor '{}' is in two model chunks of one rank", p.name);
        map_[p.name] = {&s, &p};
      }
  }
  std::pair<const CheckpointShard*, const ParamInfo*> find(const std::string& name) const {
    auto it = map_.find(name);
    return it == map_.end() ? std::pair<const CheckpointShard*, const ParamInfo*>{nullptr, nullptr} : it->second;
  }

 private:
  std::map<std::string, std::pair<const CheckpointShard*, const ParamInfo*>> map_;
};

// A selection as runs of consecutive elements both in the file and in memory, cut in pieces of
// at most 1 MB.
struct Piece {
  int64_t file_index;  // flat index in the file's tensor
  float* mem;
  int64_t n;
  bool hash;  // part of this rank's checksum
};
void add_pieces(std::vector<Piece>& out, const Selection& s, int64_t file_cols, bool hash) {
  constexpr int64_t kMax = int64_t{1} << 18;
  auto add = [&](int64_t f, float* m, int64_t n) {
    for (int64_t at = 0; at < n; at += kMax) out.push_back({f + at, m + at, std::min(kMax, n - at), hash});
  };
  for (const Block& b : s.blocks) {
    float* m = s.data + s.mem_base + b.lstart;
    const int64_t f = b.frow * file_cols + b.fcol;
    if (b.nrows == 1 || (b.ncols == file_cols && b.lpitch == b.ncols))
      add(f, m, b.nrows * b.ncols);
    else
      for (int64_t r = 0; r < b.nrows; ++r) add(f + r * file_cols, m + r * b.lpitch, b.ncols);
  }
}

// Moves the pieces between memory and a contiguous dataset at file offset `at` with pread or
// pwrite (the checkpoint's data bypass HDF5: its MPI-IO path cost a copy, and a gpt2-124m save
// spent 0.3 s in H5Dwrite where the kernel's copy takes 0.15), over the OpenMP threads where
// `threads`, and returns the checksum of the pieces marked `hash`. Each is hashed while it is in
// the core's cache, after its read or before its write: hashing a tensor in a pass of its own,
// from memory, took as long as the read (both bound by memory bandwidth). An Error names `what`
// on a failed transfer, or a short read (past the agreement, the file changed).
enum class Io { read, write };
uint64_t transfer_pieces(Io io, int fd, haddr_t at, const std::vector<Piece>& pieces, int format,
                         [[maybe_unused]] bool threads,  // unread where OpenMP is off (the fuzzers)
                         const std::string& what) {
  static_assert(std::endian::native == std::endian::little, "checkpoint data are F32LE, moved as they are");
  uint64_t h = 0;
  std::atomic<int> failed{0};
#pragma omp parallel for schedule(dynamic, 1) reduction(+ : h) if (threads && pieces.size() > 1)
  for (size_t i = 0; i < pieces.size(); ++i) {
    const Piece& pc = pieces[i];
    const auto checksum = [&] {
      return ckpt_format::tensor_checksum(format, pc.mem, static_cast<size_t>(pc.n), static_cast<size_t>(pc.file_index));
    };
    if (pc.hash && io == Io::write) h += checksum();
    char* mem = reinterpret_cast<char*>(pc.mem);
    size_t left = static_cast<size_t>(pc.n) * 4;
    off_t off = static_cast<off_t>(at + 4 * static_cast<haddr_t>(pc.file_index));
    while (left > 0) {
      const ssize_t done = io == Io::read ? ::pread(fd, mem, left, off) : ::pwrite(fd, mem, left, off);
      if (done < 0 && errno == EINTR) continue;
      if (done <= 0) {
        int none = 0;
        failed.compare_exchange_strong(none, done < 0 ? errno : -1);
        break;
      }
      mem += done, left -= static_cast<size_t>(done), off += done;
    }
    if (pc.hash && io == Io::read) h += checksum();
  }
  const int e = failed.load();
  check(e == 0, "{}: {}", what,
        e > 0 ? std::strerror(e) : io == Io::read ? "the file ends before it (truncated?)" : "the write made no progress");
  return h;
}

// A descriptor of the checkpoint file, closed when it goes.
class PosixFile {
 public:
  PosixFile(const std::string& path, int flags) : fd_(::open(path.c_str(), flags | O_CLOEXEC)) {}
  ~PosixFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  PosixFile(const PosixFile&) = delete;
  PosixFile& operator=(const PosixFile&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_;
};

Id mpio_fapl(MPI_Comm comm) {
  Id fapl(H5Pcreate(H5P_FILE_ACCESS));
  check(H5Pset_fapl_mpio(fapl, comm, MPI_INFO_NULL) >= 0, "HDF5: cannot set the MPI-IO driver");
  // File format of HDF5 1.8 (superblock v2, object header v2, new-style groups), not the 1.6
  // default: those carry checksums, so HDF5 itself detects a flipped bit in any metadata block it
  // reads. Upper bound 1.8 too: any HDF5 >= 1.8 (h5py, h5dump, MATLAB) reads the files.
  check(H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_V18) >= 0, "HDF5: cannot set the libver bounds");
  return fapl;
}

// A file opened collectively. Closing it is collective too (H5Fclose flushes metadata with MPI
// calls; MPI_File_close synchronises), so a rank that throws while its peers are elsewhere must
// NOT close it on the way out: it would wait for them forever instead of reaching MPI_Abort
// (src/distributed/fatal.cpp). Left open, it ends with the job. Objects inside it (datasets, groups)
// close locally while the file stays open, so plain Ids are fine for those.
class CollectiveFile {
 public:
  explicit CollectiveFile(hid_t id) : id_(id), exceptions_(std::uncaught_exceptions()) {}
  ~CollectiveFile() {
    if (id_ >= 0 && std::uncaught_exceptions() == exceptions_) H5Fclose(id_);
  }
  CollectiveFile(const CollectiveFile&) = delete;
  CollectiveFile& operator=(const CollectiveFile&) = delete;
  operator hid_t() const { return id_; }
  bool valid() const { return id_ >= 0; }
  herr_t close() {
    herr_t rc = H5Fclose(id_);
    id_ = -1;
    return rc;
  }

 private:
  hid_t id_;
  int exceptions_;
};


Id collective_dxpl() {
  Id dxpl(H5Pcreate(H5P_DATASET_XFER));
  check(H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE) >= 0, "HDF5: cannot set collective transfers");
  return dxpl;
}

// One tensor from CheckpointWriteOptions::tensor_source into dataset `ds` (of `dims`), a block of
// rows at a time: blocks of about 4 MB stay in the caches and reuse their pages (a buffer the
// tensor's size is faulted in page by page, and freed buffers that large go back to the kernel).
// Two blocks in flight: a thread reads and checksums the next while this one writes. Returns the
// tensor's checksum.
uint64_t write_from_source(const std::function<void(const std::string&, int64_t, int64_t, float*)>& source,
                           const std::string& name, hid_t ds, const std::vector<hsize_t>& dims, hid_t dxpl,
                           size_t block_floats, std::array<std::vector<float>, 2>& bufs, const std::string& what) {
  const int64_t rows = static_cast<int64_t>(dims[0]);
  size_t cols = 1;
  for (size_t d = 1; d < dims.size(); ++d) cols *= static_cast<size_t>(dims[d]);
  const int64_t block = std::max<int64_t>(1, std::min(rows, static_cast<int64_t>(block_floats / cols)));
  for (auto& b : bufs)
    if (b.size() < static_cast<size_t>(block) * cols) b.resize(static_cast<size_t>(block) * cols);
  auto fill = [&](int64_t r0, std::vector<float>& buf) {
    const int64_t n = std::min(block, rows - r0);
    source(name, r0, n, buf.data());
    return ckpt_format::tensor_checksum(kCheckpointFormatVersion, buf.data(), static_cast<size_t>(n) * cols,
                                        static_cast<size_t>(r0) * cols);
  };
  Id file_space(H5Dget_space(ds));
  uint64_t sum = 0;
  std::future<uint64_t> next = std::async(std::launch::async, fill, int64_t{0}, std::ref(bufs[0]));
  for (int64_t r0 = 0, b = 0; r0 < rows; r0 += block, b ^= 1) {
    sum += next.get();
    if (r0 + block < rows) next = std::async(std::launch::async, fill, r0 + block, std::ref(bufs[b ^ 1]));
    const int64_t n = std::min(block, rows - r0);
    std::vector<hsize_t> start(dims.size(), 0), count = dims;
    start[0] = static_cast<hsize_t>(r0);
    count[0] = static_cast<hsize_t>(n);
    check_h5(H5Sselect_hyperslab(file_space, H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr) >= 0,
             "cannot write {}: selecting rows {}..{}", what, r0, r0 + n);
    const hsize_t numel = static_cast<hsize_t>(n) * cols;
    Id mem_space(H5Screate_simple(1, &numel, nullptr));
    check_h5(H5Dwrite(ds, H5T_NATIVE_FLOAT, mem_space, file_space, dxpl, bufs[b].data()) >= 0, "cannot write {}",
             what);
  }
  return sum;
}

std::string now_utc() {
  char buf[32];
  std::time_t t = std::time(nullptr);
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

}  // namespace

void ckpt_format::fill_params_from_full(std::span<CheckpointShard> shards, const ModelConfig& cfg,
                                        const std::function<std::vector<float>(const std::string&)>& full) {
  const LocalTensors local{std::span<const CheckpointShard>(shards.data(), shards.size())};
  for (const auto& t : full_table(cfg)) {
    auto [sh, p] = local.find(t.name);
    if (!p) continue;
    const CkptRange& range = sh->params;
    Selection sel = select(*p, range, INT64_MAX);  // every row: the padded vocabulary rows too
    if (!sel.data || sel.empty()) continue;
    const std::vector<hsize_t> dims = file_dims(t, cfg);
    const int64_t rows = static_cast<int64_t>(dims[0]), cols = dims.size() == 1 ? 1 : static_cast<int64_t>(dims[1]);
    const std::vector<float> v = full(t.name);
    check(v.size() == static_cast<size_t>(rows * cols), "{}: {} values, the model needs {}", t.name, v.size(),
          rows * cols);
    for (const auto& b : sel.blocks)
      for (int64_t r = 0; r < b.nrows; ++r) {
        float* dst = sel.data + sel.mem_base + b.lstart + r * b.lpitch;
        const int64_t fr = dims.size() == 1 ? 0 : b.frow + r;
        if (fr >= rows && dims.size() > 1) {
          std::fill(dst, dst + b.ncols, 0.f);  // padded vocabulary rows are zero, as init makes them
          continue;
        }
        std::copy(v.begin() + fr * cols + b.fcol, v.begin() + fr * cols + b.fcol + b.ncols, dst);
      }
  }
}

void write_checkpoint_file(const std::string& path, MPI_Comm comm, const CheckpointMeta& meta_in,
                           std::span<const CheckpointShard> shards, const CheckpointWriteOptions& opt) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  // Rank 0's metadata is the truth (attributes must be identical on every rank).
  std::string blob;
  if (rank == 0) {
    CheckpointMeta m = meta_in;
    if (m.version.empty()) m.version = kVersion;
    if (m.created.empty()) m.created = now_utc();
    blob = meta_to_json(m).dump();
  }
  long long n = static_cast<long long>(blob.size());
  MPI_Bcast(&n, 1, MPI_LONG_LONG, 0, comm);
  blob.resize(static_cast<size_t>(n));
  MPI_Bcast(blob.data(), static_cast<int>(n), MPI_CHAR, 0, comm);
  const CheckpointMeta meta = meta_from_json(json::parse(blob));
  const ModelConfig& cfg = meta.model;

  const LocalTensors local(shards);
  const auto table = full_table(cfg);
  const bool has_optimizer = !opt.tensor_source && (shards.empty() || shards.front().has_optimizer);

  std::unique_lock<std::mutex> lock(hdf5_mutex());
  h5::quiet();
  Id fapl = mpio_fapl(comm);
  errno = 0;  // error_cause() reports errno: only this write's
  Id fcpl(H5Pcreate(H5P_FILE_CREATE));
  ckpt_meta::set_compact_storage(fcpl);  // the root group's links and attributes
  CollectiveFile f(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl, fapl));
  check_h5(f.valid(), "cannot create checkpoint file '{}' (does the folder exist and is it writable?)", path);
  Id dxpl = collective_dxpl();
  write_meta(f, meta, rank == 0, dxpl);
  // The streamed import's tensors (tensor_source) in independent H5Dwrites (write_meta's small
  // datasets stay collective): collective ones made each rank wait for the others, and at np 1
  // their two-phase copy cost 5 ms per tensor. The shards' tensors bypass HDF5 (transfer_pieces).
  Id data_dxpl(H5Pcreate(H5P_DATASET_XFER));
  check(H5Pset_dxpl_mpio(data_dxpl, H5FD_MPIO_INDEPENDENT) >= 0, "HDF5: cannot set independent transfers");
  ckpt_meta::write_attr_u64(f, "meta_checksum", ckpt_format::meta_checksum(meta));
  { Id g = make_group(f, "optim"); }

  std::array<std::vector<float>, 2> source_rows;  // tensor_source's blocks, reused
  std::vector<Id> written;  // the datasets, open until their checksums are written
  std::vector<uint64_t> sums;
  // The tensors' data go straight to the file with pwrite on a descriptor of this rank's own,
  // hashed on the way (transfer_pieces); the background writer's on its own thread only, the
  // training threads keep the cores.
  const PosixFile file(path, O_WRONLY);
  check(file.fd() >= 0, "cannot write checkpoint '{}': {}", path, std::strerror(errno));
  for (const Kind& k : kKinds) {
    if (k.range != &CheckpointShard::params && !has_optimizer) continue;
    Id g = make_group(f, k.group);
    for (const auto& full : table) {
      if (opt.background) {  // between tensors (no HDF5 call open): the data loader's reads go in
        lock.unlock();
        std::this_thread::yield();
        lock.lock();
      }
      std::vector<hsize_t> dims = file_dims(full, cfg);
      Id space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr));
      Id dcpl(H5Pcreate(H5P_DATASET_CREATE));
      H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
      H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY);  // its place in the file is known at creation
      Id ds(H5Dcreate2(g, full.name.c_str(), H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT));
      check_h5(ds.valid(), "cannot write checkpoint '{}': cannot create dataset '{}/{}'", path, k.group, full.name);
      const std::string dataset = fmt::format("checkpoint '{}': dataset '{}/{}'", path, k.group, full.name);
      const std::string what = "cannot write " + dataset;
      if (opt.tensor_source) {
        sums.push_back(write_from_source(opt.tensor_source, full.name, ds, dims, data_dxpl, opt.source_block_floats,
                                         source_rows, dataset));
        written.push_back(std::move(ds));
        continue;
      }
      Selection sel;
      if (auto [sh, p] = local.find(full.name); p && owns(*sh, (*sh).*k.range, *p))
        sel = select(*p, ((*sh).*k.range).saved(), static_cast<int64_t>(dims[0]));
      const haddr_t at = H5Dget_offset(ds);
      check_h5(at != HADDR_UNDEF, "{}: HDF5 gave it no place in the file", what);
      const int64_t cols = dims.size() == 1 ? 1 : static_cast<int64_t>(dims[1]);
      std::vector<Piece> pieces;
      add_pieces(pieces, sel, cols, true);
      sums.push_back(transfer_pieces(Io::write, file.fd(), at, pieces, kCheckpointFormatVersion, !opt.background, what));
      written.push_back(std::move(ds));
      if (written.size() == 1) fault_point("ckpt_write");
    }
  }
  // The data to stable storage: this descriptor's, then HDF5's (H5Fflush on the MPI-IO driver is
  // MPI_File_sync on every rank); the checksums, the "complete" mark and the metadata follow in a
  // second, small flush.
  errno = 0;
  check(::fsync(file.fd()) == 0, "cannot write checkpoint '{}': syncing it to disk failed: {}", path,
        std::strerror(errno));
  check_h5(H5Fflush(f, H5F_SCOPE_GLOBAL) >= 0, "cannot write checkpoint '{}': flushing it to disk failed", path);
  MPI_Allreduce(MPI_IN_PLACE, sums.data(), static_cast<int>(sums.size()), MPI_UINT64_T, MPI_SUM, comm);
  for (size_t i = 0; i < written.size(); ++i) write_attr_u64(written[i], "checksum", sums[i]);
  written.clear();
  h5::write_attr_i64(f, "complete", 1);
  // To stable storage before the caller renames the file into place: H5Fflush on the MPI-IO
  // driver is MPI_File_sync on every rank (data from every node, not only this one's cache). A
  // full disk often shows up only here (delayed allocation, NFS).
  errno = 0;
  check_h5(H5Fflush(f, H5F_SCOPE_GLOBAL) >= 0, "cannot write checkpoint '{}': flushing it to disk failed", path);
  errno = 0;
  check_h5(f.close() >= 0, "cannot write checkpoint '{}': closing it failed", path);
}

CheckpointMeta read_checkpoint_file(const std::string& path, MPI_Comm comm, const ModelConfig& expect,
                                    std::span<CheckpointShard> shards) {
  std::vector<uint64_t> sums, stored;
  std::vector<std::string> names;
  CheckpointMeta meta;
  const bool has_optimizer = shards.empty() || shards.front().has_optimizer;
  // Every rank must agree that the file is usable BEFORE it reads: the ranks move on to an older
  // candidate together, and HDF5's walk of the metadata below must not crash or hang on a damaged
  // file. Rank 0 checks it alone (metadata only, in a child process), and every rank throws the
  // same verdict.
  agree_checkpoint_usable(path, comm, expect, has_optimizer);
  {
  std::lock_guard<std::mutex> lock(hdf5_mutex());
  h5::quiet();
  Id f(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  // Past the agreement, anything failing here is not a property of the file (an I/O error, a
  // file replaced meanwhile): Error, and the job aborts.
  check_h5(f.valid(), "cannot open checkpoint '{}'", path);
  meta = read_meta(f, path);
  const int format = ckpt_meta::read_format_version(f, path);
  const ModelConfig& cfg = expect;

  const LocalTensors local{std::span<const CheckpointShard>(shards.data(), shards.size())};
  const auto table = full_table(cfg);
  // The data straight from the file (contiguous datasets of F32LE, as the writer makes them), not
  // through H5Dread: see transfer_pieces.
  const PosixFile file(path, O_RDONLY);
  check(file.fd() >= 0, "cannot open checkpoint '{}': {}", path, std::strerror(errno));
  for (const Kind& k : kKinds) {
    if (k.range != &CheckpointShard::params && !has_optimizer) continue;
    Id g(H5Gopen2(f, k.group, H5P_DEFAULT));
    check_h5(g.valid(), "{}: cannot open group '{}'", path, k.group);
    for (const auto& full : table) {
      std::string dname = std::string(k.group) + "/" + full.name;
      // Presence, type and shape were checked by agree_checkpoint_usable.
      Id ds(H5Dopen2(g, full.name.c_str(), H5P_DEFAULT));
      check_h5(ds.valid(), "{}: cannot open dataset '{}'", path, dname);
      std::vector<hsize_t> dims = file_dims(full, cfg);
      const int64_t cols = dims.size() == 1 ? 1 : static_cast<int64_t>(dims[1]);
      auto [sh, p] = local.find(full.name);
      const CkptRange& range = p ? (*sh).*k.range : CkptRange{};
      // Verified: the elements this rank would save, its slice of a copy the group holds (the
      // rest of what it holds is read, not hashed). Each piece is hashed as it arrives.
      std::vector<Piece> pieces;
      if (p) {
        const int64_t rows = static_cast<int64_t>(dims[0]);
        auto part = [&](size_t b, size_t e) {
          return CkptRange{range.data + (b - range.begin), b, e, range.owner, 0, 1};
        };
        if (!owns(*sh, range, *p)) {
          add_pieces(pieces, select(*p, range, rows), cols, false);
        } else {
          const CkptRange mine = range.saved();
          add_pieces(pieces, select(*p, mine, rows), cols, true);
          add_pieces(pieces, select(*p, part(range.begin, mine.begin), rows), cols, false);
          add_pieces(pieces, select(*p, part(mine.end, range.end), rows), cols, false);
        }
      }
      const haddr_t at = H5Dget_offset(ds);
      check_h5(at != HADDR_UNDEF || pieces.empty(), "{}: dataset '{}' is not stored contiguously", path, dname);
      const uint64_t sum = transfer_pieces(Io::read, file.fd(), at, pieces, format, true,
                                           fmt::format("{}: cannot read dataset '{}'", path, dname));
      // Padded vocabulary rows (not in the file) are zero, as init_weights makes them.
      if (p && range.data && is_vocab_rows(full.name)) {
        const int64_t base = static_cast<int64_t>(p->offset) - static_cast<int64_t>(range.begin);
        int64_t lo = static_cast<int64_t>(std::max(range.begin, p->offset) - p->offset);
        int64_t hi = static_cast<int64_t>(std::min(range.end, p->offset + p->numel)) - static_cast<int64_t>(p->offset);
        for (const auto& b : blocks_for(*p, INT64_MAX, lo, hi))
          for (int64_t r = 0; r < b.nrows; ++r)
            if (b.frow + r >= static_cast<int64_t>(dims[0]))
              for (int64_t c = 0; c < b.ncols; ++c) range.data[base + b.lstart + r * b.lpitch + c] = 0.f;
      }
      sums.push_back(sum);
      stored.push_back(read_attr_u64(ds, "checksum", path));
      names.push_back(dname);
    }
  }
  }  // every HDF5 object closed, lock released
  MPI_Allreduce(MPI_IN_PLACE, sums.data(), static_cast<int>(sums.size()), MPI_UINT64_T, MPI_SUM, comm);
  // Every rank holds the same sums now: all throw, or none does.
  for (size_t i = 0; i < sums.size(); ++i)
    if (sums[i] != stored[i])
      throw CorruptCheckpoint(fmt::format(
          "checkpoint '{}' is corrupted: dataset '{}' does not match its checksum (a flipped bit?)", path, names[i]));
  return meta;
}

CheckpointMeta read_checkpoint_meta(const std::string& path) {
  check_checkpoint_structure_isolated(path, false);  // HDF5 must not crash or hang on it below
  std::lock_guard<std::mutex> lock(hdf5_mutex());
  h5::quiet();
  Id f = ckpt_format::open_serial(path);
  return ckpt_format::read_verified_meta(f, path);
}

std::vector<float> read_checkpoint_tensor(const std::string& path, const std::string& dataset,
                                          std::vector<int64_t>* shape) {
  std::lock_guard<std::mutex> lock(hdf5_mutex());
  h5::quiet();
  Id f = ckpt_format::open_serial(path);
  usage_check(H5Lexists(f, dataset.c_str(), H5P_DEFAULT) > 0, "checkpoint '{}' has no dataset '{}'", path, dataset);
  Id ds(H5Dopen2(f, dataset.c_str(), H5P_DEFAULT));
  Id sp(H5Dget_space(ds));
  int nd = H5Sget_simple_extent_ndims(sp);
  std::vector<hsize_t> d(static_cast<size_t>(std::max(nd, 0)));
  H5Sget_simple_extent_dims(sp, d.data(), nullptr);
  size_t n = 1;
  for (auto x : d) n *= x;
  ckpt_meta::check_tensor_shape(f, ds, path, dataset);  // before n (from the file) is allocated
  std::vector<float> out(n);
  if (H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) < 0)
    throw CorruptCheckpoint(fmt::format("checkpoint '{}': cannot read dataset '{}'{}", path, dataset, cause_suffix()));
  if (h5::has_attr(ds, "checksum"))
    ckpt_format::check_tensor_checksum(ckpt_meta::read_format_version(f, path), out, ds, path, dataset);
  if (shape) shape->assign(d.begin(), d.end());
  return out;
}

}  // namespace mpitron
