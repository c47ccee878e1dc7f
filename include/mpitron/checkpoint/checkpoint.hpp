// Checkpoints: one parallel-HDF5 file per save, every tensor at its FULL logical shape (as if
// tp = pp = dp = 1; wte trimmed to vocab_size rows), so a checkpoint written under one layout
// loads under any other. docs/checkpoint.md documents the file for h5py users.
//
// Who writes what (collective over `comm`; every rank calls every function below):
//   - each rank describes its share as FlatRanges of its shard's flat buffers (CheckpointShard):
//     the parameters, and AdamW's exp_avg / exp_avg_sq over [begin, end) of the flat layout
//     (the whole buffer without ZeRO, this DP rank's shard with it);
//   - a rank writes the elements it OWNS: one owner per element in any layout (tp 0 for tensors TP
//     replicates, the first stage for the tied wte copy, every DP rank its own ZeRO shard; a copy
//     every data x context rank holds -- parameters without ZeRO-3, moments without ZeRO -- is
//     written by all of them together, each rank a slice, so the bytes and their checksums are
//     spread over the copies' ranks; the experts' copies by their first ranks).
//     checkpoint_shard_for() sets the owner flags and slices;
//   - each rank maps its local elements to hyperslabs of the full tensors (a TP shard of the
//     fused QKV is 3 of them; a ZeRO range cuts tensors mid-row: head row + full rows + tail row).
//   - load reads every element a rank HOLDS (owners and replicas alike).
// Every dataset carries an order-independent checksum of (full index, value bits) over all its
// elements; load recomputes it over the owned elements of the new layout and compares, so
// corrupted data is an error, not a silently different model. The file is written with HDF5
// libver bounds 1.8 (HDF5 then checksums its own metadata) plus a checksum of our metadata, so a
// flipped bit anywhere that matters is an error too (docs/checkpoint.md, "Failures").
//
// Failures (docs/checkpoint.md): a load decides "this file is unusable" on ALL ranks at once --
// rank 0 checks the file's structure alone and broadcasts the verdict before the collective
// read, and the checksums are compared after an all-reduce -- so it can be a clean error (or a
// fallback to an older file) instead of one rank throwing while its peers wait in a collective.
// A write error aborts the job (fatal.cpp) with the file and the cause (disk full, size limit).
//
// All HDF5 calls hold hdf5_mutex() (the DataLoader's prefetch thread reads shards with it).
#pragma once
#include <mpi.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "mpitron/core/error.hpp"
#include "mpitron/data/loader.hpp"
#include "mpitron/distributed/grid.hpp"
#include "mpitron/model/config.hpp"
#include "mpitron/model/param_tables.hpp"

namespace mpitron {

// The format this mpitron writes; it reads every format from 1 (they differ only in the tensors'
// checksum function: checkpoint_format.hpp).
constexpr int kCheckpointFormatVersion = 2;

// A checkpoint that cannot be used: unreadable, partial, or failing verification (a flipped bit,
// a truncated file). Every rank throws it together (see above). train.resume = auto moves on to
// an older checkpoint; an explicit path is an error. A checkpoint of ANOTHER model is a plain
// UsageError instead: no older file of the same run would do better.
class CorruptCheckpoint : public UsageError {
 public:
  using UsageError::UsageError;
};

// A range [begin, end) of this rank's flat parameter layout; data[0] is flat index `begin`.
struct CkptRange {
  float* data = nullptr;
  size_t begin = 0, end = 0;
  bool owner = false;  // save: this rank writes these elements (dedupe rules above still apply)
  // A copy `parts` ranks hold alike: this rank owns slice `part` of [begin, end) (saved()).
  int part = 0, parts = 1;
  // Where the range's data are (checkpoint_shard_for left the ownership to keep).
  void set(float* d, size_t b, size_t e) { data = d, begin = b, end = e; }
  // What this rank saves (and, loading, verifies) of the range: all of it, or its slice.
  CkptRange saved() const {
    if (parts <= 1) return *this;
    const size_t n = end - begin, b = begin + n * part / parts, e = begin + n * (part + 1) / parts;
    return {data ? data + (b - begin) : nullptr, b, e, owner, 0, 1};
  }
};

struct CheckpointShard {
  ModelShard shard;
  std::vector<ParamInfo> table;  // model_param_table(cfg, shard)
  CkptRange params, exp_avg, exp_avg_sq;
  bool has_optimizer = true;  // false: parameters only (generate, param tests)
};

// No NaN or infinity in x[0, n): every element's exponent bits tested branch-free, so the loop
// vectorises (one that returns at the first bad element does not).
bool all_finite(const float* x, size_t n);

// The shard and owner flags of grid coordinate `coord` (no data pointers yet: the caller sets
// params/exp_avg/exp_avg_sq .data/.begin/.end). zero >= 1 shards the optimizer state over DP,
// zero >= 3 also the parameters.
CheckpointShard checkpoint_shard_for(const ModelConfig& cfg, const GridShape& shape, const GridCoord& coord,
                                     const std::vector<int>& pp_layers, int zero);
// The same for a given model shard (an interleaved pipeline's chunk: partition.hpp), its tensors of
// `set` only (expert parallel: a chunk's dense and expert parameters are two shards), among
// `data_context` = dp x cp ranks holding the same copy.
CheckpointShard checkpoint_shard_of(const ModelConfig& cfg, const ModelShard& shard, const GridCoord& coord, int zero,
                                    int data_context, ParamSet set = ParamSet::all);

// Everything that is not a tensor.
struct CheckpointMeta {
  int64_t step = 0;             // optimizer steps completed = LR schedule position
  int64_t optimizer_steps = 0;  // AdamW's bias-correction count (< step when steps were skipped)
  // The data order: epoch and samples taken per DP rank under sampler_dp ranks (global position
  // = position * sampler_dp; resume under another dp converts it, see sampler_state_for()).
  SamplerState sampler;
  int sampler_dp = 1;
  uint64_t train_seed = 0, data_seed = 0;  // init is counter-based from train_seed; no other RNG
  double loss = 0;                         // training loss of the last step
  ModelConfig model;
  GridShape layout;  // resolved (dp filled in)
  int zero = 0;
  std::vector<int> pp_layers;
  std::string job_toml, tokenizer_json, version, created;
};

// This DP rank's sampler state when resuming under `dp` ranks. UsageError when the global position
// cannot be split evenly (a global batch that is not a multiple of micro_batch x dp).
SamplerState sampler_state_for(const CheckpointMeta& m, int dp);

// How a save moves its data; the file is the same either way.
//   background: checkpoint.async's writer thread (background_save.hpp). Independent MPI-IO
//     transfers instead of collective ones: a collective transfer needs every rank's writer thread
//     on a core at once, and on a host whose cores train (the CPU backend) each of them then waits
//     for its peers' time slices (bench/checkpoint: 1.2 s instead of 0.3 s for the demo model's
//     39 MB, training slowed by a third meanwhile). And hdf5_mutex() is released between tensors,
//     so the data loader's reads do not wait for a whole write.
struct CheckpointWriteOptions {
  bool background = false;
  // One process writing a parameters-only checkpoint from a source (import): the writer asks for
  // each tensor's rows [row0, row0 + rows) of its file shape (a row: all but dimension 0), a few
  // MB at a time, into `out`, and writes them before asking for more, so memory holds a few MB,
  // not the model or a tensor. The shards are then empty.
  std::function<void(const std::string& name, int64_t row0, int64_t rows, float* out)> tensor_source;
  size_t source_block_floats = size_t{1} << 20;  // the block: 4 MB (whole rows, at least one)
};

// Collective over comm: writes `path` (overwriting it). No temp name / rename here: see
// CheckpointManager::save. A rank may hold several shards (the model chunks of an interleaved
// pipeline); each tensor name is in at most one of them.
void write_checkpoint_file(const std::string& path, MPI_Comm comm, const CheckpointMeta& meta,
                           std::span<const CheckpointShard> shards, const CheckpointWriteOptions& opt = {});
inline void write_checkpoint_file(const std::string& path, MPI_Comm comm, const CheckpointMeta& meta,
                                  const CheckpointShard& shard) {
  write_checkpoint_file(path, comm, meta, std::span<const CheckpointShard>(&shard, 1));
}

// This rank's first parameter or AdamW moment that is not finite (NaN/inf), as "exp_avg of
// 'h.0.mlp.c_fc.weight' (element 17)"; empty when every value in the shards' tensors is finite.
// A save checks it first: a non-finite model is never written as a checkpoint. `saved_only`:
// only what this rank saves (CkptRange::saved of the ranges it owns): every element of the
// checkpoint is then checked once over the ranks, not by every rank holding a copy.
std::string first_non_finite(std::span<const CheckpointShard> shards, bool saved_only = false);

// The metadata as a save stores it (JSON, then HDF5 attributes), read back: UsageError naming the
// first field it cannot hold (a NaN or inf number: JSON has neither). The trainer calls it at
// start-up, so an unsavable configuration fails in the first second, not at the first save.
void check_meta_savable(const CheckpointMeta& meta);

// Collective over comm: checks the model config against `expect` (UsageError naming the first
// difference), reads every tensor this rank holds into shard's ranges, verifies checksums.
// Padded vocab rows of wte are set to 0. Returns the metadata.
CheckpointMeta read_checkpoint_file(const std::string& path, MPI_Comm comm, const ModelConfig& expect,
                                    std::span<CheckpointShard> shards);
inline CheckpointMeta read_checkpoint_file(const std::string& path, MPI_Comm comm, const ModelConfig& expect,
                                           CheckpointShard& shard) {
  return read_checkpoint_file(path, comm, expect, std::span<CheckpointShard>(&shard, 1));
}

// One process, no MPI-IO (inspect, generate): the metadata only.
CheckpointMeta read_checkpoint_meta(const std::string& path);
// One process: a full tensor by dataset path ("model/wte.weight"); shape returned in *shape.
// CorruptCheckpoint when it does not match its checksum.
std::vector<float> read_checkpoint_tensor(const std::string& path, const std::string& dataset,
                                          std::vector<int64_t>* shape);

// One process, no MPI-IO: everything a resume checks without reading tensor data -- the file
// opens (HDF5 verifies its superblock and every metadata block it reads), the metadata and its
// checksum, the `complete` mark, every tensor present as float32 of its model's shape with a
// checksum. CorruptCheckpoint naming the file and the cause otherwise; with `expect`, also
// check_model_compatible (UsageError). Returns the metadata.
CheckpointMeta check_checkpoint_structure(const std::string& path, const ModelConfig* expect = nullptr,
                                          bool has_optimizer = true);

// One process: check_checkpoint_structure plus every tensor's data against its checksum (reads
// the whole file). `digest` combines the metadata checksum and every tensor's checksum: two files
// with the same digest load to the same state.
struct CheckpointVerification {
  CheckpointMeta meta;
  int tensors = 0;
  uint64_t bytes = 0;
  uint64_t digest = 0;
};
CheckpointVerification verify_checkpoint_file(const std::string& path);
// UsageError (naming the file and the key) when a checkpoint's model cannot be loaded as `want`.
void check_model_compatible(const ModelConfig& have, const ModelConfig& want, const std::string& path);

// <dir>/step_00001000.h5, `latest` (a symlink to the newest complete file), keep-k pruning.
class CheckpointManager {
 public:
  CheckpointManager(std::string dir, int keep, MPI_Comm comm);
  // Collective. Removes partial saves a killed job left (rank 0), writes <dir>/.step_N.h5.tmp,
  // syncs it to disk, renames it, points `latest` at it, then deletes the oldest complete
  // checkpoints beyond `keep` (keep <= 0: keep all) -- never before the new file is complete.
  // Returns the final path. A write error (disk full, file size limit) on some rank: that rank
  // removes the temp file and throws an Error naming it and the cause (the job then aborts);
  // `latest` and the older files are untouched.
  std::string save(const CheckpointMeta& meta, std::span<const CheckpointShard> shards,
                   const CheckpointWriteOptions& opt = {});
  std::string save(const CheckpointMeta& meta, const CheckpointShard& shard) {
    return save(meta, std::span<const CheckpointShard>(&shard, 1));
  }
  const std::string& dir() const { return dir_; }

  static std::string file_name(int64_t step);  // "step_00001000.h5"

 private:
  std::string dir_;
  int keep_;
  MPI_Comm comm_;
};

// Which checkpoint train.resume selects: "never" -> none; "auto" -> <ckpt_dir>/latest if it
// exists; anything else is a file or a checkpoint folder (its `latest`), which must exist.
std::optional<std::string> resolve_resume(const std::string& resume, const std::string& ckpt_dir);

// The checkpoints train.resume may load, in the order to try them.
//  - "never": none.
//  - a path: that one (resolve_checkpoint_path); no fallback, a bad file is an error.
//  - "auto": what `latest` names, then every complete step_*.h5 older than it, newest first
//    (`fallback` = true). When `latest` is missing but step files exist, or names a file that is
//    gone, the step files are the candidates and `problem` says what was wrong with `latest`.
//    Hidden .step_*.h5.tmp files (partial saves) are never candidates.
struct ResumeCandidates {
  std::vector<std::string> files;
  bool fallback = false;
  std::string problem;  // "" unless `latest` itself is unusable
};
ResumeCandidates resume_candidates(const std::string& resume, const std::string& ckpt_dir);

// Removes the partial saves a killed job left in `dir` (.step_*.h5.tmp, .latest.tmp); returns
// their names. One process (rank 0), while no save is running.
std::vector<std::string> remove_stale_checkpoint_temps(const std::string& dir);
// A file, or a folder holding `latest`, to the checkpoint file it means (symlinks resolved).
std::string resolve_checkpoint_path(const std::string& path);

// The metadata check of a checkpoint runs in a child process (checkpoint_check_process.cpp). By
// default the child is a plain fork; a program that calls enable_checkpoint_check_exec() (the
// mpitron binary) makes it exec itself as `mpitron __checkpoint-check FD HAS_OPTIMIZER PATH`,
// a fresh process: a fork copies whatever locks other threads held (the data loader's, MPI's)
// and ASan's allocator, which has no fork handler, then deadlocks the child on its first malloc.
// checkpoint_check_main is that command (main() runs it before anything else); it exits.
void enable_checkpoint_check_exec();
[[noreturn]] void checkpoint_check_main(int argc, char** argv);

}  // namespace mpitron
