// Checkpoint files on disk: names, temp + rename, `latest`, keep-k, which one train.resume
// selects, owner flags, the sampler position across DP sizes. The parallel HDF5 I/O itself is in
// checkpoint_io.cpp.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "mpitron/core/error.hpp"
#include "mpitron/distributed/fault_inject.hpp"
#include "mpitron/model/param_tables.hpp"
#include "mpitron/model/rope_scaling.hpp"
#include "mpitron/parallel/partition.hpp"
#include "mpitron/checkpoint/checkpoint.hpp"
#include "checkpoint_format.hpp"

namespace mpitron {

namespace fs = std::filesystem;

CheckpointShard checkpoint_shard_for(const ModelConfig& cfg, const GridShape& shape, const GridCoord& coord,
                                     const std::vector<int>& pp_layers, int zero) {
  return checkpoint_shard_of(cfg, model_shard_for(cfg, shape, coord, pp_layers), coord, zero, shape.dp * shape.cp);
}

CheckpointShard checkpoint_shard_of(const ModelConfig& cfg, const ModelShard& shard, const GridCoord& coord, int zero,
                                    int data_context, ParamSet set) {
  CheckpointShard s;
  s.shard = shard;
  s.table = model_param_table(cfg, s.shard);
  std::erase_if(s.table, [&](const ParamInfo& p) { return !in_param_set(p, set); });
  // One copy of each model shard per (tp, pp) coordinate, held by its dp x cp ranks: they write
  // it together, rank f its f-th slice (the bytes and the checksums spread over the copies), unless
  // ZeRO splits it over DP x CP (then every rank of that group writes its own range). Routed
  // experts under expert parallel: the first rank of their expert_dp group (data x context rank
  // f = dp * cp + cp_rank below ep), or each its ZeRO range of them.
  const int f = data_context_rank(coord, shard.cp_size);
  if (set == ParamSet::experts) {
    s.params.owner = zero >= 3 || f < shard.ep_size;
    s.exp_avg.owner = s.exp_avg_sq.owner = zero >= 1 || f < shard.ep_size;
    return s;
  }
  s.params.owner = s.exp_avg.owner = s.exp_avg_sq.owner = true;
  if (zero < 3) s.params.part = f, s.params.parts = data_context;
  if (zero < 1) s.exp_avg.part = s.exp_avg_sq.part = f, s.exp_avg.parts = s.exp_avg_sq.parts = data_context;
  return s;
}

// Over the OpenMP threads: a synchronous save's scan of the whole state (0.09 s per GB on one core).
bool all_finite(const float* x, size_t n) {
  uint32_t bad = 0;
#pragma omp parallel for reduction(| : bad) schedule(static) if (n > (size_t{1} << 18))
  for (size_t i = 0; i < n; ++i) bad |= (~std::bit_cast<uint32_t>(x[i]) & 0x7f800000u) == 0;
  return bad == 0;
}

std::string first_non_finite(std::span<const CheckpointShard> shards, bool saved_only) {
  struct Kind {
    const char* what;
    CkptRange CheckpointShard::*range;
  };
  static constexpr Kind kinds[] = {{"parameter", &CheckpointShard::params},
                                   {"exp_avg (AdamW first moment) of", &CheckpointShard::exp_avg},
                                   {"exp_avg_sq (AdamW second moment) of", &CheckpointShard::exp_avg_sq}};
  for (const CheckpointShard& s : shards)
    for (const Kind& k : kinds) {
      const CkptRange r = saved_only ? (s.*k.range).saved() : s.*k.range;
      if (!r.data || (saved_only && !r.owner) || (k.range != &CheckpointShard::params && !s.has_optimizer)) continue;
      for (const ParamInfo& p : s.table) {  // tensors only: alignment gaps between them hold nothing
        const size_t b = std::max(p.offset, r.begin), e = std::min(p.offset + p.numel, r.end);
        if (b >= e || all_finite(r.data + (b - r.begin), e - b)) continue;
        for (size_t i = b; i < e; ++i)
          if (!std::isfinite(r.data[i - r.begin]))
            return fmt::format("{} '{}' (element {} of this rank's shard: {})", k.what, p.name, i - p.offset,
                               r.data[i - r.begin]);
      }
    }
  return {};
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
  if (have.qkv_bias != want.qkv_bias) differ("model.qkv_bias", have.qkv_bias, want.qkv_bias);
  if (have.head_dim() != want.head_dim()) differ("model.head_dim", have.head_dim(), want.head_dim());
  if (have.qk_norm != want.qk_norm) differ("model.qk_norm", have.qk_norm, want.qk_norm);
  if (have.arch == Arch::llama && (have.norm_eps != want.norm_eps || have.rope_theta != want.rope_theta))
    usage_fail("checkpoint '{}' holds a different model: norm_eps {} rope_theta {} there, {} and {} in this job", path,
               have.norm_eps, have.rope_theta, want.norm_eps, want.rope_theta);
  if (have.arch == Arch::llama && have.rope_scaling != want.rope_scaling)
    usage_fail("checkpoint '{}' holds a different model: RoPE scaling {}{} there, {}{} in this job (model.rope_*)",
               path, rope_scaling_name(have.rope_scaling.type), rope_scaling_summary(have.rope_scaling),
               rope_scaling_name(want.rope_scaling.type), rope_scaling_summary(want.rope_scaling));
}

CheckpointManager::CheckpointManager(std::string dir, int keep, MPI_Comm comm)
    : dir_(std::move(dir)), keep_(keep), comm_(comm) {}

std::string CheckpointManager::file_name(int64_t step) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "step_%08lld.h5", static_cast<long long>(step));
  return buf;
}

namespace {

// The step of a complete checkpoint's file name "step_NNNNNNNN.h5", or -1 for any other name
// (the hidden ".step_N.h5.tmp" of a save in progress or killed, `latest`, anything else).
long long step_of_name(const std::string& n) {
  bool match = n.size() == 16 && n.rfind("step_", 0) == 0 && n.ends_with(".h5") &&
               std::all_of(n.begin() + 5, n.begin() + 13, [](char c) { return c >= '0' && c <= '9'; });
  return match ? std::stoll(n.substr(5, 8)) : -1;
}

// step_NNNNNNNN.h5 files in dir, sorted by step.
std::vector<std::pair<long long, fs::path>> list_checkpoints(const std::string& dir) {
  std::vector<std::pair<long long, fs::path>> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (long long step = step_of_name(e.path().filename().string()); step >= 0) out.push_back({step, e.path()});
  std::sort(out.begin(), out.end());
  return out;
}

std::string errno_text() { return std::strerror(errno); }

// fsync of a file or folder by path: a rename is durable only once the folder is synced, and the
// file's data before it is renamed into place (else a power loss can leave a complete-looking
// name over missing data).
void sync_path(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  check(fd >= 0, "cannot open '{}' to sync it to disk: {}", path, errno_text());
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  // EINVAL: a file system that cannot sync folders (some FUSE mounts); nothing more to do there.
  check(rc == 0 || err == EINVAL, "cannot sync '{}' to disk: {}", path, std::strerror(err));
}

// Bytes of tensor data a checkpoint of this model holds (the file is a little larger).
uint64_t tensor_bytes(const ModelConfig& cfg, bool has_optimizer) {
  uint64_t n = 0;
  for (const auto& p : ckpt_format::full_table(cfg)) {
    uint64_t e = 1;
    for (hsize_t d : ckpt_format::file_dims(p, cfg)) e *= d;
    n += e;
  }
  return n * 4 * (has_optimizer ? 3 : 1);
}

// Why writing `tmp` failed, when the system can tell: HDF5's MPI-IO driver turns a full disk or a
// file size limit into a short write (errno is gone by the time it reports "file write failed"),
// so ask again with one byte at the end of what the file needs, and say how much room there is.
// Returned as the suffix of the error's message `said` (": why (room)", or " (room)" when `said`
// names the cause already: the tensor data's own pwrite), or "" when the system cannot tell.
std::string diagnose_write_failure(const std::string& tmp, const std::string& dir, uint64_t need,
                                   const std::string& said) {
  std::string why;
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd >= 0) {
    char zero = 0;
    if (::pwrite(fd, &zero, 1, static_cast<off_t>(need)) < 0) why = errno_text();
    ::close(fd);
  }
  if (why.empty()) return "";
  auto mb = [](double b) { return fmt::format("{:.1f} MB", b / 1e6); };
  std::string room;
  struct rlimit lim{};
  struct statvfs fsst{};
  if (::getrlimit(RLIMIT_FSIZE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY && lim.rlim_cur < need)
    room = fmt::format("the file size limit (ulimit -f) is {}", mb(static_cast<double>(lim.rlim_cur)));
  else if (::statvfs(dir.c_str(), &fsst) == 0)
    room = fmt::format("{} free there", mb(static_cast<double>(fsst.f_bavail) * fsst.f_frsize));
  const std::string detail = fmt::format("{}; the checkpoint needs about {}", room, mb(static_cast<double>(need)));
  return said.ends_with(why) ? fmt::format(" ({})", detail) : fmt::format(": {} ({})", why, detail);
}

}  // namespace

std::string CheckpointManager::save(const CheckpointMeta& meta, std::span<const CheckpointShard> shards,
                                    const CheckpointWriteOptions& opt) {
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
    // Partial saves of a killed job: dead weight on a disk that may be nearly full.
    for (const auto& n : remove_stale_checkpoint_temps(dir_))
      std::printf("removed %s/%s (a partial checkpoint left by a save that did not finish)\n", dir_.c_str(),
                  n.c_str());
  }
  MPI_Barrier(comm_);
  try {
    write_checkpoint_file(tmp, comm_, meta, shards, opt);
  } catch (const std::exception& e) {
    // Only this rank knows; it is about to abort the job (fatal.cpp). Free the space it took.
    // `latest` and the older files were not touched: nothing is renamed or pruned before here.
    const bool has_optimizer = shards.empty() || shards.front().has_optimizer;
    std::string why = diagnose_write_failure(tmp, dir_, tensor_bytes(meta.model, has_optimizer), e.what());
    bool removed = ::unlink(tmp.c_str()) == 0 || errno == ENOENT;
    fail("{}{}; step {} was not saved{}; `latest` and the older checkpoints are untouched", e.what(),
         why, meta.step, removed ? " (the partial file was removed)" : "");
  }
  MPI_Barrier(comm_);
  fault_point("ckpt_rename");
  if (rank == 0) {
    sync_path(tmp);
    // rename() is atomic on POSIX file systems: `final_path` is either absent or complete.
    check(std::rename(tmp.c_str(), final_path.c_str()) == 0, "cannot rename '{}' to '{}': {}", tmp, final_path,
          errno_text());
    sync_path(dir_);
    const std::string link_tmp = dir_ + "/.latest.tmp", link = dir_ + "/latest";
    ::unlink(link_tmp.c_str());
    check(::symlink(name.c_str(), link_tmp.c_str()) == 0, "cannot create symlink '{}': {}", link_tmp, errno_text());
    check(std::rename(link_tmp.c_str(), link.c_str()) == 0, "cannot rename '{}' to '{}': {}", link_tmp, link,
          errno_text());
    sync_path(dir_);
    // Pruning comes last: until the new file is complete and `latest` names it, every older
    // checkpoint stays.
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

std::vector<std::string> remove_stale_checkpoint_temps(const std::string& dir) {
  std::vector<std::string> removed;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::string n = e.path().filename().string();
    bool partial = (n.rfind(".step_", 0) == 0 && n.ends_with(".h5.tmp")) || n == ".latest.tmp";
    std::error_code rm;
    if (partial && fs::remove(e.path(), rm)) removed.push_back(n);
  }
  std::sort(removed.begin(), removed.end());
  return removed;
}

ResumeCandidates resume_candidates(const std::string& resume, const std::string& ckpt_dir) {
  ResumeCandidates c;
  if (resume == "never" || resume.empty()) return c;
  if (resume != "auto") {
    c.files.push_back(resolve_checkpoint_path(resume));
    return c;
  }
  c.fallback = true;
  std::error_code ec;
  const fs::path latest = fs::path(ckpt_dir) / "latest";
  long long newest = -1;  // only files older than what `latest` names are fallbacks
  if (fs::exists(latest, ec)) {
    const fs::path target = fs::canonical(latest, ec);
    c.files.push_back(target.string());
    newest = step_of_name(target.filename().string());
    if (newest < 0) newest = (1LL << 62);  // `latest` names a file of another name: all are older
  } else if (fs::is_symlink(latest, ec)) {
    c.problem = fmt::format("'{}' points to '{}', which does not exist", latest.string(),
                            fs::read_symlink(latest, ec).string());
  }
  auto all = list_checkpoints(ckpt_dir);
  if (newest < 0 && !all.empty() && c.problem.empty())
    c.problem = fmt::format("'{}' has checkpoints but no 'latest'", ckpt_dir);
  for (auto it = all.rbegin(); it != all.rend(); ++it)
    if (newest < 0 || it->first < newest) c.files.push_back(fs::canonical(it->second, ec).string());
  return c;
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
