#include "mpitron/train/train_checkpoint.hpp"

#include "mpitron/checkpoint/hf_import.hpp"

#include <fmt/ranges.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>
#include <filesystem>
#include <limits>
#include <optional>

#include "mpitron/core/error.hpp"
#include "mpitron/core/trace.hpp"
#include "mpitron/core/version.hpp"
#include "mpitron/distributed/step_activity.hpp"
#include "mpitron/distributed/wait_registry.hpp"
#include "mpitron/distributed/fault_inject.hpp"
#include "mpitron/train/preemption.hpp"

namespace mpitron {
namespace {

// Checkpoint I/O is collective (MPI-IO under HDF5): a rank that stops mid-save leaves the others
// waiting inside HDF5, where no Comm sees it. The whole save or load is one wait for the hang
// watchdog, with checkpoint.timeout_s as its limit (large files on slow disks take a while).
CommOpTag io_wait(const char* what, double limit_s) {
  CommOpTag t;
  t.what = what;
  t.limit_s = limit_s;
  return t;
}

// Bytes of host memory available for new allocations: MemAvailable of /proc/meminfo, or
// MPITRON_HOST_MEM_AVAILABLE (bytes; tests) when set; -1 when unknown.
int64_t host_mem_available() {
  if (const char* e = std::getenv("MPITRON_HOST_MEM_AVAILABLE")) return std::strtoll(e, nullptr, 10);
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (!f) return -1;
  char line[256];
  long long kb = -1;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "MemAvailable: %lld kB", &kb) == 1) break;
  std::fclose(f);
  return kb < 0 ? -1 : kb * 1024;
}

// checkpoint.async: the snapshots of a node's ranks must fit in its available host memory. Every
// rank refuses together, with the first bad node's figures.
void check_snapshot_fits(int64_t mine, MPI_Comm world) {
  int rank = 0;
  MPI_Comm_rank(world, &rank);
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  int64_t on_node = mine;
  int local = 1;
  MPI_Allreduce(MPI_IN_PLACE, &on_node, 1, MPI_INT64_T, MPI_SUM, node);
  MPI_Comm_size(node, &local);
  MPI_Comm_free(&node);
  const int64_t avail = host_mem_available();
  std::string bad;
  if (avail >= 0 && on_node > avail) {
    char host[256] = "this node";
    gethostname(host, sizeof host - 1);
    bad = fmt::format(
        "checkpoint.async = true: the host snapshots of the {} rank(s) on {} take {} (rank {}'s: {}), more than the "
        "{} of host memory available there (MemAvailable); set checkpoint.async = false, or spread the state over "
        "more ranks (parallel.zero shards the optimizer state, zero 3 the parameters too)",
        local, host, format_bytes(on_node), rank, format_bytes(mine), format_bytes(avail));
  }
  int first_bad = bad.empty() ? std::numeric_limits<int>::max() : rank;
  MPI_Allreduce(MPI_IN_PLACE, &first_bad, 1, MPI_INT, MPI_MIN, world);
  if (first_bad == std::numeric_limits<int>::max()) return;
  long long n = static_cast<long long>(bad.size());
  MPI_Bcast(&n, 1, MPI_LONG_LONG, first_bad, world);
  bad.resize(static_cast<size_t>(n));
  MPI_Bcast(bad.data(), static_cast<int>(n), MPI_CHAR, first_bad, world);
  usage_fail("{}", bad);
}

}  // namespace

TrainCheckpointer::TrainCheckpointer(const JobConfig& cfg, ProcessGrid& grid, const ModelConfig& mc,
                                     CheckpointState& state, DataLoader& data)
    : cfg_(cfg),
      grid_(grid),
      mc_(mc),
      state_(state),
      data_(data),
      mgr_(cfg.run_dir() + "/ckpt", cfg.checkpoint.keep, MPI_COMM_WORLD) {
  usage_check(cfg.checkpoint.every >= 0, "checkpoint.every must be >= 0 (got {})", cfg.checkpoint.every);
  usage_check(cfg.train.nan_policy == "stop" || cfg.train.nan_policy == "skip",
              "train.nan_policy must be \"stop\" or \"skip\" (got \"{}\")", cfg.train.nan_policy);
  // Whatever a save stores is serialised once now: a value it cannot hold fails before step 1.
  check_meta_savable(meta_for(0, 0.0, data_.state()));
  // A file size limit (ulimit -f) must be a write error naming the checkpoint and "File too
  // large", like a full disk, not a silent kill by SIGXFSZ halfway through a save.
  std::signal(SIGXFSZ, SIG_IGN);
  if (cfg.checkpoint.async) {
    background_ = std::make_unique<BackgroundSave>(mgr_.dir(), cfg.checkpoint.keep, MPI_COMM_WORLD);
    const std::vector<CheckpointShard> shards = state_.shards();
    check_snapshot_fits(snapshot_bytes_of(shards), MPI_COMM_WORLD);
    background_->reserve(shards);  // now: a snapshot that cannot be allocated fails before step 1
    if (grid.rank() == 0) {
      std::printf("checkpoint.async: periodic saves from a host snapshot (rank 0's: %s), written by a background "
                  "thread\n",
                  format_bytes(background_->snapshot_bytes()).c_str());
      std::fflush(stdout);
    }
  }
}

// Host memory (CPU): the shards point at the live buffers. Device memory (GPU): they point at
// host copies, made here for a save and written back in loaded() after a load.
std::vector<CheckpointShard> StageCheckpointState::shards() {
  FlatOps& ops = model_.ops();
  const bool device = ops.allocator() != nullptr;
  std::vector<CheckpointShard> out;
  size_t k = 0;  // host_ index: one per parameter set
  for (int c = 0; c < model_.size(); ++c) {
    ModelChunk& model = model_.chunk(c);
    for (DataParallel* set : model_.sets(c)) {
      DataParallel& ddp = *set;
      const int zero = ddp.zero();
      ddp.sync_params();  // ZeRO-1/2: the last step's parameter gathers
      CheckpointShard s = checkpoint_shard_of(mc_, model.shard(), coord_, zero, shape_.dp * shape_.cp, ddp.param_set());
      const FlatRange r = ddp.shard(), g = ddp.region();
      AdamW& opt = ddp.optimizer();
      // The set's parameters: its range of the flat buffer, or (ZeRO-3) this rank's shard of it.
      const FlatRange pr = zero >= 3 ? r : g;
      float* p = zero >= 3 ? ddp.shard_params() : model.param_data() + g.begin;
      float *m = opt.exp_avg(), *v = opt.exp_avg_sq();
      if (device) {
        if (host_.size() <= k) host_.resize(k + 1);
        HostCopy& h = host_[k];
        h.p.resize(pr.size()), h.m.resize(r.size()), h.v.resize(r.size());
        ops.to_host(h.p.data(), p, pr.size());
        ops.to_host(h.m.data(), m, r.size());
        ops.to_host(h.v.data(), v, r.size());
        p = h.p.data(), m = h.m.data(), v = h.v.data();
      }
      ++k;
      s.params.set(p, pr.begin, pr.end);
      s.exp_avg.set(m, r.begin, r.end);
      s.exp_avg_sq.set(v, r.begin, r.end);
      out.push_back(std::move(s));
    }
  }
  return out;
}

void StageCheckpointState::loaded() {
  FlatOps& ops = model_.ops();
  size_t k = 0;
  for (int c = 0; c < model_.size(); ++c) {
    ModelChunk& model = model_.chunk(c);
    for (DataParallel* set : model_.sets(c)) {
      DataParallel& ddp = *set;
      if (ops.allocator()) {  // the file was read into the host copies
        const HostCopy& h = host_.at(k);
        ops.from_host(ddp.zero() >= 3 ? ddp.shard_params() : model.param_data() + ddp.region().begin, h.p.data(),
                      h.p.size());
        ops.from_host(ddp.optimizer().exp_avg(), h.m.data(), h.m.size());
        ops.from_host(ddp.optimizer().exp_avg_sq(), h.v.data(), h.v.size());
      }
      ++k;
    }
    if (model_.ddp(c).zero() < 3) model.params_changed();
  }
}

namespace {

void bcast_string(std::string& s, MPI_Comm comm, int root = 0) {
  long long n = static_cast<long long>(s.size());
  MPI_Bcast(&n, 1, MPI_LONG_LONG, root, comm);
  s.resize(static_cast<size_t>(n));
  MPI_Bcast(s.data(), static_cast<int>(n), MPI_CHAR, root, comm);
}

// Rank 0 lists the candidates (and removes partial saves); every rank gets the same list, so all
// try the same files in the same order. A bad train.resume path is the same UsageError on all.
ResumeCandidates agreed_candidates(const std::string& resume, const std::string& dir, MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  ResumeCandidates c;
  std::string error, files;
  if (rank == 0) {
    std::error_code ec;
    if (std::filesystem::is_directory(dir, ec))
      for (const auto& n : remove_stale_checkpoint_temps(dir))
        std::printf("removed %s/%s (a partial checkpoint left by a save that did not finish)\n", dir.c_str(),
                    n.c_str());
    try {
      c = resume_candidates(resume, dir);
    } catch (const UsageError& e) {
      error = e.what();
    }
    for (const auto& f : c.files) files += f + '\n';
  }
  bcast_string(error, comm);
  if (!error.empty()) throw UsageError(error);
  bcast_string(files, comm);
  bcast_string(c.problem, comm);
  int fallback = c.fallback;
  MPI_Bcast(&fallback, 1, MPI_INT, 0, comm);
  c.fallback = fallback != 0;
  c.files.clear();
  for (size_t at = 0, nl; (nl = files.find('\n', at)) != std::string::npos; at = nl + 1)
    c.files.push_back(files.substr(at, nl - at));
  return c;
}

}  // namespace

int TrainCheckpointer::resume() {
  const bool rank0 = grid_.rank() == 0;
  const ResumeCandidates cands = agreed_candidates(cfg_.train.resume, mgr_.dir(), MPI_COMM_WORLD);
  if (cands.files.empty()) {
    // `latest` names a file that is gone, and nothing else is there: the run had checkpoints.
    usage_check(cands.problem.empty(),
                "train.resume = auto: {} and there is no other checkpoint. Not starting from scratch silently: "
                "start fresh with --train.resume=never, or resume from a file with --train.resume=PATH",
                cands.problem);
    if (!cfg_.train.init_from.empty()) init_from();
    return 0;
  }
  if (rank0 && !cands.problem.empty()) {
    std::fprintf(stderr, "mpitron: warning: %s; trying the step_*.h5 files there, newest first\n",
                 cands.problem.c_str());
    std::fflush(stderr);
  }
  fault_point("ckpt_load");
  std::vector<CheckpointShard> s = state_.shards();
  // train.resume = auto: the newest checkpoint that verifies. Every rank reaches the same verdict
  // on each file (read_checkpoint_file), so all move on together. An explicit path: no fallback.
  std::optional<CheckpointMeta> loaded;
  double read_s = 0;  // the load of the file that verified
  std::string path;
  std::vector<std::string> failed;
  for (const auto& candidate : cands.files) {
    try {
      ActivityPhase phase("checkpoint load");
      CommWait io(io_wait("the read of a checkpoint", cfg_.checkpoint.timeout_s));
      const auto t0 = std::chrono::steady_clock::now();
      loaded = read_checkpoint_file(candidate, MPI_COMM_WORLD, mc_, s);
      read_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      path = candidate;
      break;
    } catch (const CorruptCheckpoint& e) {
      if (!cands.fallback)
        throw CorruptCheckpoint(fmt::format("{} (train.resume names it; choose another checkpoint)", e.what()));
      if (rank0) {
        std::fprintf(stderr, "mpitron: warning: %s\n", e.what());
        std::fflush(stderr);
      }
      failed.push_back(std::filesystem::path(candidate).filename().string());
    }
  }
  if (!loaded)
    usage_fail(
        "train.resume = auto: no checkpoint in '{}' verifies (tried {}; the reasons are above). Not starting from "
        "scratch over them: move them away, or start fresh with --train.resume=never",
        mgr_.dir(), fmt::format("{}", fmt::join(failed, ", ")));
  if (rank0 && !failed.empty()) {
    const std::string skipped = fmt::format("{}", fmt::join(failed, ", "));
    std::fprintf(stderr, "mpitron: resuming from %s instead (the newest checkpoint that verifies; skipped %s)\n",
                 std::filesystem::path(path).filename().string().c_str(), skipped.c_str());
    std::fflush(stderr);
  }
  const CheckpointMeta& m = *loaded;
  state_.loaded();
  state_.set_optimizer_steps(static_cast<int>(m.optimizer_steps));
  data_.restore(sampler_state_for(m, grid_.shape().dp));
  before_step_ = data_.state();
  last_saved_ = last_started_ = static_cast<int>(m.step);
  resumed_loss_ = m.loss;
  if (grid_.rank() == 0) {
    std::error_code ec;
    const double mb = static_cast<double>(std::filesystem::file_size(path, ec)) / 1e6;
    std::printf("resumed from %s: step %lld (written under tp %d x cp %d x dp %d x pp %d, zero %d; read %.1f MB in "
                "%.2f s, %.0f MB/s)%s\n",
                path.c_str(), static_cast<long long>(m.step), m.layout.tp, m.layout.cp, m.layout.dp, m.layout.pp,
                m.zero, ec ? 0.0 : mb, read_s, ec || read_s <= 0 ? 0.0 : mb / read_s,
                m.step >= cfg_.train.steps ? "; train.steps already reached" : "");
    const GridShape& g = grid_.shape();
    if (g.tp != m.layout.tp || g.cp != m.layout.cp || g.dp != m.layout.dp || g.pp != m.layout.pp)
      std::printf("layout changed since the checkpoint: tp %d x cp %d x dp %d x pp %d (%d ranks) -> tp %d x cp %d x dp %d x "
                  "pp %d (%d ranks)%s\n",
                  m.layout.tp, m.layout.cp, m.layout.dp, m.layout.pp, m.layout.tp * m.layout.cp * m.layout.dp * m.layout.pp,
                  g.tp, g.cp, g.dp, g.pp, g.tp * g.cp * g.dp * g.pp,
                  cfg_.train.elastic ? "; train.elastic: the global batch is kept, the accumulation follows dp" : "");
    std::fflush(stdout);
  }
  return static_cast<int>(m.step);
}

void TrainCheckpointer::init_from() {
  const std::string& from = cfg_.train.init_from;
  ActivityPhase phase("checkpoint load");
  std::vector<CheckpointShard> s = state_.shards();
  if (from.rfind("hf:", 0) == 0) {
    const HfModel hf(from.substr(3));
    ModelConfig have = hf.config();
    if (hf_trains_at(have, mc_.seq_len)) have.seq_len = mc_.seq_len;
    check_model_compatible(have, mc_, from);
    load_hf_into_shards(hf, s);
  } else {
    for (auto& x : s) x.has_optimizer = false;  // the parameters only: AdamW starts anew
    CommWait io(io_wait("the read of a checkpoint", cfg_.checkpoint.timeout_s));
    read_checkpoint_file(resolve_checkpoint_path(from), MPI_COMM_WORLD, mc_, s);
  }
  state_.loaded();
  if (grid_.rank() == 0) {
    std::printf("initialized from %s (parameters; optimizer and step start anew)\n", from.c_str());
    std::fflush(stdout);
  }
}

void TrainCheckpointer::begin_step() { before_step_ = data_.state(); }

CheckpointMeta TrainCheckpointer::meta_for(int step, double loss, const SamplerState& sampler) const {
  CheckpointMeta m;
  m.step = step;
  m.optimizer_steps = state_.optimizer_steps();
  m.sampler = sampler;
  m.sampler_dp = grid_.shape().dp;
  m.train_seed = cfg_.train.seed;
  m.data_seed = cfg_.data.seed;
  m.loss = loss;
  m.model = mc_;
  m.layout = grid_.shape();
  m.zero = state_.zero();
  m.pp_layers = cfg_.parallel.pp_layers;
  m.job_toml = job_to_toml(cfg_);
  m.tokenizer_json = data_.tokenizer_json();
  m.version = kVersion;
  return m;
}

std::string TrainCheckpointer::last_saved_note() const {
  std::string s = last_saved_ >= 0 ? fmt::format("{}/latest names step {}", mgr_.dir(), last_saved_)
                                   : std::string("no checkpoint of this run was written");
  if (background_ && background_->in_flight())
    s += fmt::format(" (step {} is being written in the background)", background_->in_flight_step());
  return s;
}

void TrainCheckpointer::announce(const BackgroundSave::Done& d) {
  last_saved_ = static_cast<int>(d.step);
  if (grid_.rank() == 0) {
    std::printf("checkpoint step %lld -> %s (written in the background in %.2f s; the snapshot took %.3f s)\n",
                static_cast<long long>(d.step), d.path.c_str(), d.write_s, d.snapshot_s);
    std::fflush(stdout);
  }
}

void TrainCheckpointer::finish_background(const char* why) {
  if (!background_ || !background_->in_flight()) {
    if (background_)
      if (auto d = background_->poll()) announce(*d);
    return;
  }
  const std::string what =
      fmt::format("the background checkpoint write of step {} ({} waits for it)", background_->in_flight_step(), why);
  if (grid_.rank() == 0) {
    std::printf("waiting for %s\n", what.c_str());
    std::fflush(stdout);
  }
  ActivityPhase phase("checkpoint save (waiting for the background write)");
  trace::Span span("waiting for " + what);
  CommWait io(io_wait(what.c_str(), cfg_.checkpoint.timeout_s));  // the hang watchdog's limit
  if (auto d = background_->wait()) announce(*d);
}

std::string TrainCheckpointer::save(int step, double loss, const SamplerState& sampler, std::string* why,
                                    bool background) {
  const CheckpointMeta m = meta_for(step, loss, sampler);
  const std::vector<CheckpointShard> shards = state_.shards();
  // In the background: the snapshot first, checked while it is copied (one pass over the state).
  double snapshot_s = 0;
  if (background) {
    ActivityPhase phase("checkpoint snapshot");
    snapshot_s = background_->snapshot(m, shards);
  }
  // A non-finite state is never saved, whatever train.nan_policy says: resume = auto would pick
  // it up. The lowest rank that holds one says where. Each rank checks what it saves (the
  // background snapshot checked everything it holds while copying).
  {
    const std::string bad =
        background ? background_->snapshot_non_finite(shards) : first_non_finite(shards, /*saved_only=*/true);
    const int me = grid_.rank();
    int first_bad = bad.empty() ? std::numeric_limits<int>::max() : me;
    MPI_Allreduce(MPI_IN_PLACE, &first_bad, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (first_bad != std::numeric_limits<int>::max()) {
      std::string where = bad;
      bcast_string(where, MPI_COMM_WORLD, first_bad);
      *why = fmt::format("rank {}'s {} is not finite", first_bad, where);
      return "";
    }
  }
  last_started_ = step;
  if (background) {
    background_->launch();
    if (grid_.rank() == 0) {
      std::printf("checkpoint step %d: snapshot taken in %.3f s, writing in the background\n", step, snapshot_s);
      std::fflush(stdout);
    }
    return mgr_.dir() + "/" + CheckpointManager::file_name(step);
  }
  std::string path;
  {
    ActivityPhase phase("checkpoint save");
    CommWait io(io_wait("collective parallel-HDF5 write of a checkpoint", cfg_.checkpoint.timeout_s));  // the hang watchdog's limit
    path = mgr_.save(m, shards);
  }
  last_saved_ = step;
  if (grid_.rank() == 0) {
    std::printf("checkpoint step %d -> %s\n", step, path.c_str());
    std::fflush(stdout);
  }
  return path;
}

int TrainCheckpointer::end_of_step(int step, double loss) {
  // A background save that finished is announced; one that failed stops the job here (Error).
  if (background_ && !background_->in_flight())
    if (auto d = background_->poll()) announce(*d);
  const int sig = preemption_agreed(grid_.world());
  const bool due = (cfg_.checkpoint.every > 0 && step % cfg_.checkpoint.every == 0) || step == cfg_.train.steps;
  std::string why;
  if ((due || sig) && last_started_ != step) {
    // In the background: a periodic save. The last step's and a preemption's save are the ones a
    // job ends with: written in the foreground once the one in flight is done.
    const bool background = background_ && !sig && step != cfg_.train.steps;
    finish_background(sig ? "the preemption checkpoint" : background ? "the next save" : "the last step's save");
    if (save(step, loss, data_.state(), &why, background).empty())
      agreed_fail(
          "step {}: the model state holds NaN/inf ({}); checkpoint step {} not written, {} (the last good state). A "
          "diverged update: lower optim.lr, keep optim.grad_clip on, or resume from that checkpoint with another "
          "data.seed",
          step, why, step, last_saved_note());
  }
  if (sig && grid_.rank() == 0) {
    std::printf("preempted (signal %d, %s): checkpoint of step %d written; exiting with %d%s\n", sig, strsignal(sig),
                step, preemption_exit_code(sig), sig == SIGINT ? "" : " (requeue me)");
    std::fflush(stdout);
  }
  return sig;
}

std::string TrainCheckpointer::save_last_good(int failed_step, double last_good_loss, std::string* why) {
  finish_background("the last good state's save");
  if (last_saved_ == failed_step - 1) return fmt::format("{}/latest", mgr_.dir());  // already saved
  return save(failed_step - 1, last_good_loss, before_step_, why);
}

}  // namespace mpitron
