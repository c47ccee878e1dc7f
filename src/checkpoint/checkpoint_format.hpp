// What a checkpoint file holds, as the writer, the collective reader and the verifier all see it:
// the tensor groups, every tensor's file shape, and the checksums. Private to src/checkpoint.
#pragma once
#include <hdf5.h>
#include <mpi.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "mpitron/data/h5.hpp"
#include "mpitron/core/error.hpp"
#include "mpitron/core/rng.hpp"
#include "mpitron/model/param_tables.hpp"
#include "mpitron/checkpoint/checkpoint.hpp"

namespace mpitron::ckpt_format {

// The groups of tensors, in file order, and where a shard keeps each kind.
struct Kind {
  const char* group;
  CkptRange CheckpointShard::*range;
};
inline constexpr Kind kKinds[] = {{"model", &CheckpointShard::params},
                                  {"optim/exp_avg", &CheckpointShard::exp_avg},
                                  {"optim/exp_avg_sq", &CheckpointShard::exp_avg_sq}};
inline bool is_optimizer(const Kind& k) { return k.range != &CheckpointShard::params; }

// The full model's tensor names in file order, with their full shapes.
inline std::vector<ParamInfo> full_table(const ModelConfig& cfg) { return model_param_table(cfg, ModelShard{}); }

// Rows the file stores: wte (embed_tokens, lm_head) keeps only the real vocabulary (its padding
// depends on tp).
inline std::vector<hsize_t> file_dims(const ParamInfo& p, const ModelConfig& cfg) {
  std::vector<hsize_t> d(p.full_shape.begin(), p.full_shape.end());
  if (is_vocab_rows(p.name)) d[0] = static_cast<hsize_t>(cfg.vocab_size);
  return d;
}

// Every tensor's file shape by name (the external formats' exporters and importer).
inline std::map<std::string, std::vector<int64_t>> file_shapes(const ModelConfig& cfg) {
  std::map<std::string, std::vector<int64_t>> out;
  for (const ParamInfo& p : full_table(cfg)) {
    const std::vector<hsize_t> d = file_dims(p, cfg);
    out[p.name] = std::vector<int64_t>(d.begin(), d.end());
  }
  return out;
}

// Fills the params ranges of this rank's shards (any layout) from full tensors at the file's
// shape, which full(name) returns one at a time (import from other formats).
void fill_params_from_full(std::span<CheckpointShard> shards, const ModelConfig& cfg,
                           const std::function<std::vector<float>(const std::string&)>& full);

// A tensor's checksum attribute is the sum, mod 2^64, of a hash of each element (its full flat
// index i and the 32 bits of its float): order-independent, so every rank sums the elements it
// owns and one all-reduce adds them up. The hash, by the file's format_version:
//   2: k = (i + 1) * 0x9E3779B97F4A7C15 mod 2^64; (bits XOR low32(k)) * (high32(k) OR 1), the
//      product of two 32-bit numbers in 64 bits. One changed element always changes the sum: the
//      difference is a non-zero number below 2^32 in size times an odd one below 2^32.
//      Consecutive k differ by a constant (an addition per element, no 64-bit multiply): 0.07 s
//      per GB in cache on a Xeon core, against format 1's 0.19 s, which bounded a resume.
//   1: splitmix64(splitmix64(i) XOR bits).
inline uint64_t element_hash(int format, uint64_t full_index, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  if (format == 1) return splitmix64(splitmix64(full_index) ^ bits);
  const uint64_t k = (full_index + 1) * 0x9E3779B97F4A7C15ull;
  return static_cast<uint64_t>(bits ^ static_cast<uint32_t>(k)) * (static_cast<uint32_t>(k >> 32) | 1u);
}
// The checksum of a whole tensor (the full flat index of element i is i, whatever its shape), or of
// n elements from flat index first_index, under checksum format `format` (1 or 2). Compiled twice,
// the x86-64-v4 (AVX-512) version chosen at run time where the CPU has it.
uint64_t tensor_checksum(int format, const float* data, size_t n, size_t first_index = 0);

// Root attribute "meta_checksum": a hash of everything CheckpointMeta holds (step, sampler,
// seeds, config, layout, job, tokenizer, ...). HDF5 checksums its own metadata blocks (object
// headers, heaps, B-trees: the file is written with libver bounds >= 1.8), but not the global
// heap that holds variable-length strings nor the raw bytes of the text datasets; this covers
// those. Files without it (older mpitron) load without that check.
uint64_t meta_checksum(const CheckpointMeta& m);

// ": <why>" from HDF5's error stack (and errno), or "": for messages that name what failed.
// Right after the failing call (the next HDF5 call clears the stack).
inline std::string cause_suffix() {
  std::string c = h5::error_cause();
  return c.empty() ? "" : ": " + c;
}

// check() for the result of an HDF5 call: the message gets cause_suffix() appended. Read here,
// after the call returned (as an argument of check() it could be evaluated before the call).
template <class... A>
void check_h5(bool ok, fmt::format_string<A...> f, A&&... a) {
  if (!ok) throw Error(fmt::format(f, std::forward<A>(a)...) + cause_suffix());
}

// ---- serial reading and verification (checkpoint_verify.cpp); callers hold hdf5_mutex() ----

// Opens `path` read-only with the plain (sec2) driver. CorruptCheckpoint naming the file and
// HDF5's reason ("truncated file: eof = ...", "incorrect metadata checksum ...") when it cannot.
h5::Id open_serial(const std::string& path);
// read_meta + the metadata checksum + the `complete` mark. CorruptCheckpoint when they fail.
CheckpointMeta read_verified_meta(hid_t f, const std::string& path);
// check_checkpoint_structure's file checks (no model to compare with) in this process, without
// taking hdf5_mutex(): what the child process of check_checkpoint_structure_isolated runs.
void check_structure_unlocked(const std::string& path, bool has_optimizer);
// CorruptCheckpoint unless the checksum (format `format`) of `data`, a whole tensor, equals the
// dataset's checksum attribute.
void check_tensor_checksum(int format, const std::vector<float>& data, hid_t ds, const std::string& path,
                           const std::string& dataset);

}  // namespace mpitron::ckpt_format

namespace mpitron {
// check_structure_unlocked in a child process, with a time limit: CorruptCheckpoint naming the
// file when it finds a problem, crashes or hangs (HDF5 has bugs on corrupted input). Takes
// hdf5_mutex(). checkpoint_check_process.cpp.
void check_checkpoint_structure_isolated(const std::string& path, bool has_optimizer);
// exec_child: the child execs the mpitron binary (checkpoint.hpp: enable_checkpoint_check_exec).
void check_checkpoint_structure_isolated(const std::string& path, bool has_optimizer, bool exec_child);

// Collective over comm: rank 0 runs check_checkpoint_structure(path, &expect) alone and
// broadcasts the verdict; every rank then returns, or throws the same CorruptCheckpoint /
// UsageError. Called before any collective read of the file.
void agree_checkpoint_usable(const std::string& path, MPI_Comm comm, const ModelConfig& expect,
                             bool has_optimizer);

}  // namespace mpitron
