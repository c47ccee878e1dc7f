// Checkpoint files on disk: names, temp + rename, `latest`, keep-k, which one train.resume
// selects, owner flags, the sampler position across DP sizes. The parallel HDF5 I/O itself is in
// checkpoint_io.cpp.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <system_error>

#include "mpitron/core/error.hpp"
#include "mpitron/dist/fault_inject.hpp"
#include "mpitron/parallel/partition.hpp"
#include "mpitron/train/checkpoint.hpp"

namespace mpitron {

namespace fs = std::filesystem;

CheckpointShard checkpoint_shard_for(const ModelConfig& cfg, const GridShape& shape, const GridCoord& coord,
                                     const std::vector<int>& pp_layers, int zero) {
  return checkpoint_shard_of(cfg, model_shard_for(cfg, shape, coord, pp_layers), coord, zero);
}

CheckpointShard checkpoint_shard_of(const ModelConfig& cfg, const ModelShard& shard, const GridCoord& coord, int zero) {
  CheckpointShard s;
  s.shard = shard;
  s.table = gpt_param_table(cfg, s.shard);
  // One copy of each model shard per (tp, pp) coordinate: dp 0 / cp 0 writes it, unless ZeRO
  // splits it over DP (then every DP rank writes its own range).
  s.params.owner = coord.cp == 0 && (zero >= 3 || coord.dp == 0);
  s.exp_avg.owner = s.exp_avg_sq.owner = coord.cp == 0 && (zero >= 1 || coord.dp == 0);
  return s;
}

SamplerState sampler_state_for(const CheckpointMeta& m, int dp) {
  uint64_t global = m.sampler.position * static_cast<uint64_t>(m.sampler_dp);
  usage_check(global % static_cast<uint64_t>(dp) == 0,
              "cannot resume: the checkpoint's data position ({} samples of epoch {}) is not divisible by dp = {}; "
              "keep train.global_batch a multiple of train.micro_batch x dp",
              global, m.sampler.epoch, dp);
  return SamplerState{m.sampler.epoch, global / static_cast<uint64_t>(dp)};
}

void check_model_compatible(const ModelConfig& have, const ModelConfig& want, const std::string& path) {
  auto differ = [&](const char* key, long long a, long long b) {
    usage_fail(
        "checkpoint '{}' holds a different model: {} = {} there, {} in this job. Resume with the same "
        "[model] settings, or start fresh with --train.resume=never (or another job.run_dir)",
        path, key, a, b);
  };
  if (have.arch != want.arch) differ("model.arch (0 gpt2, 1 llama)", int(have.arch), int(want.arch));
  if (have.n_layer != want.n_layer) differ("model.n_layer", have.n_layer, want.n_layer);
  if (have.n_head != want.n_head) differ("model.n_head", have.n_head, want.n_head);
  if (have.n_kv_head != want.n_kv_head) differ("model.n_kv_head", have.n_kv_head, want.n_kv_head);
  if (have.d_model != want.d_model) differ("model.d_model", have.d_model, want.d_model);
  if (have.d_ff != want.d_ff) differ("model.d_ff", have.d_ff, want.d_ff);
  if (have.vocab_size != want.vocab_size) differ("model.vocab_size", have.vocab_size, want.vocab_size);
  if (have.seq_len != want.seq_len) differ("model.seq_len", have.seq_len, want.seq_len);
  if (have.tied_embeddings != want.tied_embeddings)
    differ("model.tied_embeddings", have.tied_embeddings, want.tied_embeddings);
}

CheckpointManager::CheckpointManager(std::string dir, int keep, MPI_Comm comm)
    : dir_(std::move(dir)), keep_(keep), comm_(comm) {}

std::string CheckpointManager::file_name(int64_t step) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "step_%08lld.h5", static_cast<long long>(step));
  return buf;
}

namespace {

// step_NNNNNNNN.h5 files in dir, sorted by step.
std::vector<std::pair<long long, fs::path>> list_checkpoints(const std::string& dir) {
  std::vector<std::pair<long long, fs::path>> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::string n = e.path().filename().string();
    bool match = n.size() == 16 && n.rfind("step_", 0) == 0 && n.ends_with(".h5") &&
                 std::all_of(n.begin() + 5, n.begin() + 13, [](char c) { return c >= '0' && c <= '9'; });
    long long step = match ? std::stoll(n.substr(5, 8)) : 0;
    if (match)
      out.push_back({step, e.path()});
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::string CheckpointManager::save(const CheckpointMeta& meta, std::span<const CheckpointShard> shards) {
  int rank = 0;
  MPI_Comm_rank(comm_, &rank);
  const std::string name = file_name(meta.step);
  const std::string final_path = dir_ + "/" + name;
  // Hidden while incomplete: nothing (keep-k, resume, a user's glob) ever picks up a partial file.
  const std::string tmp = dir_ + "/." + name + ".tmp";
  if (rank == 0) {
    std::error_code ec;
    fs::create_directories(dir_, ec);
    check(!ec, "cannot create checkpoint folder '{}': {}", dir_, ec.message());
  }
  MPI_Barrier(comm_);
  write_checkpoint_file(tmp, comm_, meta, shards);
  MPI_Barrier(comm_);
  fault_point("ckpt_rename");
  if (rank == 0) {
    // rename() is atomic on POSIX file systems: `final_path` is either absent or complete.
    check(std::rename(tmp.c_str(), final_path.c_str()) == 0, "cannot rename '{}' to '{}'", tmp, final_path);
    const std::string link_tmp = dir_ + "/.latest.tmp", link = dir_ + "/latest";
    ::unlink(link_tmp.c_str());
    check(::symlink(name.c_str(), link_tmp.c_str()) == 0, "cannot create symlink '{}'", link_tmp);
    check(std::rename(link_tmp.c_str(), link.c_str()) == 0, "cannot rename '{}' to '{}'", link_tmp, link);
    if (keep_ > 0) {
      auto all = list_checkpoints(dir_);
      // Only complete files are listed; the newest `keep` survive, and the one just written always.
      for (size_t i = 0; i + static_cast<size_t>(keep_) < all.size(); ++i)
        if (all[i].second.filename() != name) {
          std::error_code ec;
          fs::remove(all[i].second, ec);
        }
    }
  }
  MPI_Barrier(comm_);
  return final_path;
}

std::string resolve_checkpoint_path(const std::string& path) {
  fs::path p = path;
  std::error_code ec;
  if (fs::is_directory(p, ec)) {
    if (fs::exists(p / "latest", ec)) p = p / "latest";
    else if (fs::exists(p / "ckpt" / "latest", ec)) p = p / "ckpt" / "latest";  // a run folder
    else usage_fail("'{}' is a folder without a checkpoint 'latest' in it", path);
  }
  if (fs::is_symlink(p, ec) && !fs::exists(p, ec))
    usage_fail("'{}' points to '{}', which does not exist (deleted?)", p.string(), fs::read_symlink(p, ec).string());
  usage_check(fs::exists(p, ec), "checkpoint '{}' does not exist", path);
  return fs::canonical(p, ec).string();
}

std::optional<std::string> resolve_resume(const std::string& resume, const std::string& ckpt_dir) {
  if (resume == "never" || resume.empty()) return std::nullopt;
  if (resume == "auto") {
    std::error_code ec;
    fs::path latest = fs::path(ckpt_dir) / "latest";
    if (!fs::exists(latest, ec) && !fs::is_symlink(latest, ec)) return std::nullopt;
    return resolve_checkpoint_path(latest.string());
  }
  return resolve_checkpoint_path(resume);
}

}  // namespace mpitron
