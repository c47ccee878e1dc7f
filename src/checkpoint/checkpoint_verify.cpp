// Is a checkpoint file usable? Decided on one process with plain HDF5 (no MPI-IO), so that a
// resume can agree on the answer before any collective read (checkpoint.hpp, "Failures").
//
// What catches a flipped bit where (the file is written with libver bounds 1.8):
//   superblock, object headers (attributes, dataspaces, layouts, the tensor checksums),
//   fractal heaps and B-trees of groups and dense attributes  -> HDF5's own metadata checksums,
//     seen when the block is read: scan_metadata() reads every one of them;
//   variable-length string attributes (global heap, no checksum), the text datasets
//     (job_toml, tokenizer_json)                              -> meta_checksum over CheckpointMeta;
//   tensor data                                               -> the per-tensor checksums, on
//     load (every rank its owned elements, summed by an all-reduce) or verify_checkpoint_file.
// Bytes nothing reads (free space, padding, rng/note) may flip unnoticed: they change nothing
// that a load produces.
#include <hdf5.h>
#include <unistd.h>

#include <cerrno>
#include <mutex>
#include <string>
#include <vector>

#include "checkpoint_format.hpp"
#include "checkpoint_meta.hpp"
#include "mpitron/core/error.hpp"
#include "mpitron/data/hdf5_lock.hpp"
#include "mpitron/checkpoint/checkpoint.hpp"

namespace mpitron {
namespace ckpt_format {
namespace {

using h5::Id;

template <class... A>
[[noreturn]] void corrupt(fmt::format_string<A...> f, A&&... a) {
  throw CorruptCheckpoint(fmt::format(f, std::forward<A>(a)...));
}

std::string dims_str(const std::vector<hsize_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

// Reads one attribute's value whatever its type (HDF5 verifies the blocks it comes from).
herr_t read_one_attr(hid_t obj, const char* name, const H5A_info_t*, void*) {
  Id a(H5Aopen(obj, name, H5P_DEFAULT));
  if (!a.valid()) return -1;
  Id type(H5Aget_type(a)), space(H5Aget_space(a));
  if (!type.valid() || !space.valid()) return -1;
  hssize_t n = H5Sget_simple_extent_npoints(space);
  if (n < 0) return -1;
  Id mem(H5Tget_native_type(type, H5T_DIR_DEFAULT));
  if (!mem.valid()) return -1;
  size_t size = H5Tget_size(mem);
  std::vector<char> buf(static_cast<size_t>(std::max<hssize_t>(n, 1)) * std::max<size_t>(size, 1));
  if (H5Aread(a, mem, buf.data()) < 0) return -1;
  if (H5Tdetect_class(mem, H5T_VLEN) > 0 || H5Tis_variable_str(mem) > 0)
    H5Dvlen_reclaim(mem, space, H5P_DEFAULT, buf.data());
  return 0;
}

herr_t scan_object(hid_t f, const char* name, const H5O_info_t* info, void*) {
  if (info->num_attrs == 0) return 0;
  Id obj(H5Oopen(f, name, H5P_DEFAULT));
  if (!obj.valid()) return -1;
  hsize_t idx = 0;
  return H5Aiterate2(obj, H5_INDEX_NAME, H5_ITER_INC, &idx, read_one_attr, nullptr) < 0 ? -1 : 0;
}

// Visits every object and reads every attribute: every metadata block of the file passes
// through HDF5's checksum verification, and the first bad one is named with HDF5's reason.
void scan_metadata(hid_t f, const std::string& path) {
  errno = 0;
  if (H5Ovisit2(f, H5_INDEX_NAME, H5_ITER_INC, scan_object, nullptr, H5O_INFO_BASIC | H5O_INFO_NUM_ATTRS) < 0)
    corrupt("checkpoint '{}' is corrupted: its HDF5 metadata does not read back{}", path, cause_suffix());
}

// Every tensor present, float32, of the model's file shape, with a checksum, its data stored
// inside the file. With `data`, also reads each one and checks it (and feeds *digest).
void check_tensors(hid_t f, const std::string& path, const ModelConfig& cfg, bool has_optimizer, bool data,
                   int* count, uint64_t* bytes, uint64_t* digest) {
  hsize_t file_size = 0;
  H5Fget_filesize(f, &file_size);
  const auto table = full_table(cfg);
  const int format = ckpt_meta::read_format_version(f, path);
  for (const Kind& k : kKinds) {
    if (is_optimizer(k) && !has_optimizer) continue;
    if ((is_optimizer(k) && H5Lexists(f, "optim", H5P_DEFAULT) <= 0) || H5Lexists(f, k.group, H5P_DEFAULT) <= 0)
      corrupt("checkpoint '{}' has no '{}' group{}", path, k.group,
              is_optimizer(k) ? " (saved without optimizer state)" : "");
    Id g(H5Gopen2(f, k.group, H5P_DEFAULT));
    if (!g.valid()) corrupt("checkpoint '{}': cannot open group '{}'{}", path, k.group, cause_suffix());
    for (const auto& p : table) {
      const std::string dname = std::string(k.group) + "/" + p.name;
      if (H5Lexists(g, p.name.c_str(), H5P_DEFAULT) <= 0) corrupt("checkpoint '{}' has no dataset '{}'", path, dname);
      Id ds(H5Dopen2(g, p.name.c_str(), H5P_DEFAULT));
      if (!ds.valid()) corrupt("checkpoint '{}': cannot open dataset '{}'{}", path, dname, cause_suffix());
      Id type(H5Dget_type(ds)), space(H5Dget_space(ds));
      if (H5Tget_class(type) != H5T_FLOAT || H5Tget_size(type) != 4)
        corrupt("checkpoint '{}': dataset '{}' is not float32", path, dname);
      const std::vector<hsize_t> dims = file_dims(p, cfg);
      std::vector<hsize_t> have(dims.size());
      if (H5Sget_simple_extent_ndims(space) != static_cast<int>(dims.size()))
        corrupt("checkpoint '{}': dataset '{}' has the wrong rank", path, dname);
      H5Sget_simple_extent_dims(space, have.data(), nullptr);
      if (have != dims)
        corrupt("checkpoint '{}': dataset '{}' is {}, the model needs {}", path, dname, dims_str(have), dims_str(dims));
      if (!h5::has_attr(ds, "checksum")) corrupt("checkpoint '{}': dataset '{}' has no checksum", path, dname);
      uint64_t n = 1;
      for (hsize_t d : dims) n *= d;
      const haddr_t at = H5Dget_offset(ds);
      if (n > 0 && (at == HADDR_UNDEF || H5Dget_storage_size(ds) != n * 4 || at + n * 4 > file_size))
        corrupt("checkpoint '{}': the data of '{}' is not (all) in the file (truncated?)", path, dname);
      if (data) {
        std::vector<float> v(n);
        if (H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) < 0)
          corrupt("checkpoint '{}': cannot read dataset '{}'{}", path, dname, cause_suffix());
        check_tensor_checksum(format, v, ds, path, dname);
        *digest = splitmix64(*digest ^ ckpt_meta::read_attr_u64(ds, "checksum", path));
        *bytes += n * 4;
      }
      ++*count;
    }
  }
}

// The file on its own (against its own model config): CorruptCheckpoint when it fails.
CheckpointMeta check_structure(hid_t f, const std::string& path, bool has_optimizer, bool data,
                               CheckpointVerification* out) {
  scan_metadata(f, path);
  CheckpointMeta m = read_verified_meta(f, path);
  int count = 0;
  uint64_t bytes = 0, digest = meta_checksum(m);
  check_tensors(f, path, m.model, has_optimizer, data, &count, &bytes, &digest);
  if (out) *out = {m, count, bytes, digest};
  return m;
}

}  // namespace

namespace {
// The loops apart, each a plain reduction the compiler vectorises.
__attribute__((target_clones("arch=x86-64-v4", "default"))) uint64_t checksum_v1(const float* data, size_t n,
                                                                                  size_t first_index) {
  uint64_t sum = 0;
  for (size_t i = 0; i < n; ++i) sum += element_hash(1, first_index + i, data[i]);
  return sum;
}
__attribute__((target_clones("arch=x86-64-v4", "default"))) uint64_t checksum_v2(const float* data, size_t n,
                                                                                  size_t first_index) {
  uint64_t sum = 0;
  for (size_t i = 0; i < n; ++i) sum += element_hash(2, first_index + i, data[i]);
  return sum;
}
}  // namespace

uint64_t tensor_checksum(int format, const float* data, size_t n, size_t first_index) {
  return format == 1 ? checksum_v1(data, n, first_index) : checksum_v2(data, n, first_index);
}

// Invalid UTF-8 (a flipped bit in a string) is hashed as U+FFFD instead of throwing: then the
// checksum, not the JSON library, reports it.
uint64_t meta_checksum(const CheckpointMeta& m) {
  return stable_hash(ckpt_meta::meta_to_json(m).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

Id open_serial(const std::string& path) {
  errno = 0;
  Id f(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (!f.valid())
    corrupt("cannot open checkpoint '{}': not a readable HDF5 file (missing, truncated or corrupted){}", path,
            cause_suffix());
  return f;
}

CheckpointMeta read_verified_meta(hid_t f, const std::string& path) {
  CheckpointMeta m;
  try {
    m = ckpt_meta::read_meta(f, path);
  } catch (const std::exception& e) {
    corrupt("checkpoint '{}' is unreadable: {}", path, e.what());
  }
  if (!h5::has_attr(f, "complete")) corrupt("checkpoint '{}' is incomplete (its writer did not finish)", path);
  if (h5::has_attr(f, "meta_checksum") && ckpt_meta::read_attr_u64(f, "meta_checksum", path) != meta_checksum(m))
    corrupt("checkpoint '{}' is corrupted: its metadata (step, config, job, tokenizer) does not match its checksum",
            path);
  return m;
}

void check_structure_unlocked(const std::string& path, bool has_optimizer) {
  h5::quiet();
  Id f = open_serial(path);
  check_structure(f, path, has_optimizer, false, nullptr);
}

void check_tensor_checksum(int format, const std::vector<float>& data, hid_t ds, const std::string& path,
                           const std::string& dataset) {
  // The full flat index of element i of a whole tensor is i, whatever its shape.
  if (ckpt_format::tensor_checksum(format, data.data(), data.size()) != ckpt_meta::read_attr_u64(ds, "checksum", path))
    corrupt("checkpoint '{}' is corrupted: dataset '{}' does not match its checksum (a flipped bit?)", path, dataset);
}

}  // namespace ckpt_format

CheckpointMeta check_checkpoint_structure(const std::string& path, const ModelConfig* expect, bool has_optimizer) {
  // Every metadata block first, in a child process (checkpoint_check_process.cpp); then the
  // same bytes again here, now known to be safe, for the metadata and the model check.
  check_checkpoint_structure_isolated(path, has_optimizer);
  std::lock_guard<std::mutex> lock(hdf5_mutex());
  h5::quiet();
  h5::Id f = ckpt_format::open_serial(path);
  CheckpointMeta m = ckpt_format::read_verified_meta(f, path);
  // Another model is the job's mistake, not the file's: a UsageError.
  if (expect) check_model_compatible(m.model, *expect, path);
  return m;
}

CheckpointVerification verify_checkpoint_file(const std::string& path) {
  check_checkpoint_structure_isolated(path, false);
  std::lock_guard<std::mutex> lock(hdf5_mutex());
  h5::quiet();
  h5::Id f = ckpt_format::open_serial(path);
  CheckpointVerification v;
  // A file saved without optimizer state (parameters only) verifies what it has.
  const bool has_optimizer = H5Lexists(f, "optim", H5P_DEFAULT) > 0 && H5Lexists(f, "optim/exp_avg", H5P_DEFAULT) > 0;
  ckpt_format::check_structure(f, path, has_optimizer, true, &v);
  return v;
}

void agree_checkpoint_usable(const std::string& path, MPI_Comm comm, const ModelConfig& expect, bool has_optimizer) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  enum : int { kUsable = 0, kCorrupt = 1, kOtherModel = 2 };
  int verdict = kUsable;
  std::string why;
  if (rank == 0) {
    try {
      check_checkpoint_structure(path, &expect, has_optimizer);
    } catch (const CorruptCheckpoint& e) {
      verdict = kCorrupt, why = e.what();
    } catch (const UsageError& e) {
      verdict = kOtherModel, why = e.what();
    } catch (const std::exception& e) {
      verdict = kCorrupt, why = fmt::format("checkpoint '{}' is unreadable: {}", path, e.what());
    }
  }
  int head[2] = {verdict, static_cast<int>(why.size())};
  // The other ranks wait for the verdict without spinning: on an oversubscribed node (tests, a
  // laptop) a busy MPI_Bcast would take the CPU from rank 0's checking child process.
  MPI_Request req;
  MPI_Ibcast(head, 2, MPI_INT, 0, comm, &req);
  for (int done = 0; MPI_Test(&req, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done;) ::usleep(500);
  why.resize(static_cast<size_t>(head[1]));
  MPI_Bcast(why.data(), head[1], MPI_CHAR, 0, comm);
  if (head[0] == kCorrupt) throw CorruptCheckpoint(why);
  if (head[0] == kOtherModel) throw UsageError(why);
}

}  // namespace mpitron
