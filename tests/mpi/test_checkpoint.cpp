// Checkpoints reshard: a file written under one synthetic layout (dp/tp/pp, ZeRO 0/1/3 ranges
// that cut tensors mid-row) reads back under every other layout of this world, and under one
// rank (MPI_COMM_SELF), element for element. Values are a pure function of (kind, tensor, full
// index), so the expected local value of any shard is known. Also: metadata round trip, latest +
// keep-k, corrupted data (checksum), a different model (clear UsageError), sampler conversion,
// the candidates train.resume = auto tries, and the removal of partial saves.
// np: 1 2 4
// np under the sanitizers: 1 2
// (np 4 reads 144 layout pairs where np 2 reads 25 through the same code; under ASan + UBSan it took
// 172 s of CI's 2 cores against 28 s in the release build, mostly system time, 2026-12-05.)
#include <hdf5.h>
#include <mpi.h>

#include <boost/test/unit_test.hpp>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "mpitron/core/error.hpp"
#include "mpitron/core/rng.hpp"
#include "mpitron/checkpoint/checkpoint.hpp"

using namespace mpitron;
namespace fs = std::filesystem;

namespace {

ModelConfig tiny() {
  ModelConfig c;
  c.name = "ckpt-test";
  c.n_layer = 4;
  c.n_head = 4;
  c.n_kv_head = 4;
  c.d_model = 16;
  c.d_ff = 64;
  c.vocab_size = 100;  // padded to 128 at tp 1/2, 256 at tp 4: trimmed rows must not matter
  c.seq_len = 8;
  return c;
}

float value(int kind, const std::string& name, int64_t full_index) {
  uint64_t b = counter_bits(static_cast<uint64_t>(kind) + 11, stable_hash(name), static_cast<uint64_t>(full_index));
  return static_cast<float>(static_cast<double>(b >> 40) / (1 << 24) - 0.5);
}

// Expected value of local element i of p (0 for wte's padded rows).
float expected(int kind, const ModelConfig& cfg, const ParamInfo& p, int64_t i) {
  int64_t f = param_full_index(p, i, 0);
  if (p.name == "wte.weight" && f / cfg.d_model >= cfg.vocab_size) return 0.f;
  return value(kind, p.name, f);
}

std::vector<GridShape> layouts(int world) {
  std::vector<GridShape> out;
  for (int tp = 1; tp <= world; tp *= 2)
    for (int pp = 1; pp <= world / tp; pp *= 2)
      if (world % (tp * pp) == 0) out.push_back({tp, 1, world / (tp * pp), pp});
  return out;
}

size_t table_floats(const std::vector<ParamInfo>& t) {
  size_t n = 0;
  for (const auto& p : t) n = std::max(n, p.offset + p.numel);
  return n;
}

// This rank's buffers under a layout, with the checkpoint's view of them.
struct RankState {
  CheckpointShard cs;
  std::vector<float> params, m, v;
  size_t n = 0;

  RankState(const ModelConfig& cfg, const GridShape& shape, int rank, int zero) {
    GridCoord c = grid_coord(shape, rank);
    cs = checkpoint_shard_for(cfg, shape, c, {}, zero);
    n = table_floats(cs.table);
    // ZeRO ranges split the flat buffer evenly by floats: they cut tensors mid-row on purpose.
    size_t b = zero >= 1 ? n * c.dp / shape.dp : 0, e = zero >= 1 ? n * (c.dp + 1) / shape.dp : n;
    size_t pb = zero >= 3 ? b : 0, pe = zero >= 3 ? e : n;
    params.assign(pe - pb, -7.f);
    m.assign(e - b, -7.f);
    v.assign(e - b, -7.f);
    cs.params.set(params.data(), pb, pe);
    cs.exp_avg.set(m.data(), b, e);
    cs.exp_avg_sq.set(v.data(), b, e);
  }

  template <class F>
  void for_each(F f) {  // f(kind, param, local index, float& slot)
    const CkptRange* ranges[3] = {&cs.params, &cs.exp_avg, &cs.exp_avg_sq};
    for (int k = 0; k < 3; ++k)
      for (const auto& p : cs.table)
        for (size_t i = 0; i < p.numel; ++i) {
          size_t flat = p.offset + i;
          if (flat < ranges[k]->begin || flat >= ranges[k]->end) continue;
          f(k, p, static_cast<int64_t>(i), ranges[k]->data[flat - ranges[k]->begin]);
        }
  }
  void fill(const ModelConfig& cfg) {
    for_each([&](int k, const ParamInfo& p, int64_t i, float& x) { x = expected(k, cfg, p, i); });
  }
  int mismatches(const ModelConfig& cfg) {
    int bad = 0;
    for_each([&](int k, const ParamInfo& p, int64_t i, float& x) {
      if (x != expected(k, cfg, p, i) && bad++ < 3)
        BOOST_TEST_MESSAGE("kind " << k << " " << p.name << "[" << i << "] = " << x);
    });
    return bad;
  }
};

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

std::string shared_dir(const std::string& name) {
  std::string d;
  if (world_rank() == 0) {
    d = (fs::temp_directory_path() / ("mpitron_ckpt_test_" + std::to_string(::getpid()) + "_" + name)).string();
    fs::remove_all(d);
    fs::create_directories(d);
  }
  int n = static_cast<int>(d.size());
  MPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD);
  d.resize(n);
  MPI_Bcast(d.data(), n, MPI_CHAR, 0, MPI_COMM_WORLD);
  return d;
}

CheckpointMeta meta_for(const ModelConfig& cfg, const GridShape& s, int zero) {
  CheckpointMeta m;
  m.step = 12;
  m.optimizer_steps = 11;
  m.sampler = {1, 6};
  m.sampler_dp = s.dp;
  m.train_seed = 42;
  m.data_seed = 7;
  m.loss = 3.25;
  m.model = cfg;
  m.layout = s;
  m.zero = zero;
  m.job_toml = "[train]\nsteps = 12\n";
  m.tokenizer_json = R"({"format": "mpitron-tokenizer", "type": "byte"})";
  return m;
}

int all_sum(int v) {
  MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  return v;
}

}  // namespace

BOOST_AUTO_TEST_CASE(reshard_every_layout_pair) {
  const ModelConfig cfg = tiny();
  const std::string dir = shared_dir("reshard");
  const int world = world_size(), rank = world_rank();
  for (const GridShape& w : layouts(world)) {
    for (int zero : {0, 1, 3}) {
      if (zero > 0 && w.dp == 1) continue;
      RankState src(cfg, w, rank, zero);
      src.fill(cfg);
      std::string path = dir + "/ckpt.h5";
      write_checkpoint_file(path, MPI_COMM_WORLD, meta_for(cfg, w, zero), src.cs);
      for (const GridShape& r : layouts(world))
        for (int rzero : {0, 1, 3}) {
          if (rzero > 0 && r.dp == 1) continue;
          RankState dst(cfg, r, rank, rzero);
          CheckpointMeta m = read_checkpoint_file(path, MPI_COMM_WORLD, cfg, dst.cs);
          int bad = all_sum(dst.mismatches(cfg));
          BOOST_TEST(bad == 0, "write tp" << w.tp << " pp" << w.pp << " dp" << w.dp << " zero" << zero
                                          << " -> read tp" << r.tp << " pp" << r.pp << " dp" << r.dp << " zero"
                                          << rzero << ": " << bad << " wrong values");
          BOOST_TEST(m.step == 12);
        }
      // One rank alone (a resume at np = 1).
      RankState one(cfg, GridShape{1, 1, 1, 1}, 0, 0);
      read_checkpoint_file(path, MPI_COMM_SELF, cfg, one.cs);
      BOOST_TEST(one.mismatches(cfg) == 0, "read at np=1 after tp" << w.tp << " pp" << w.pp << " dp" << w.dp);
      MPI_Barrier(MPI_COMM_WORLD);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) fs::remove_all(dir);
}

// The import's path: a parameters-only file written from a source a few rows at a time (blocks
// that end mid-tensor and, for vectors, mid-row count), each block's checksum at its offset.
// One process (MPI_COMM_SELF, as `mpitron import`): at np 1 only, so that no rank spins in a
// barrier while rank 0 writes (four busy ranks on two cores starved it past the time limit).
BOOST_AUTO_TEST_CASE(tensor_source_writes_in_blocks) {
  if (world_size() > 1) return;
  const ModelConfig cfg = tiny();
  const std::string dir = shared_dir("source");
  try {
    const auto table = checkpoint_shard_for(cfg, GridShape{1, 1, 1, 1}, GridCoord{}, {}, 0).table;
    auto cols = [&](const std::string& name) {
      for (const auto& p : table)
        if (p.name == name) {
          int64_t c = 1;
          for (size_t d = 1; d < p.full_shape.size(); ++d) c *= p.full_shape[d];
          return c;
        }
      BOOST_ERROR("no tensor " << name);
      return int64_t{1};
    };
    for (size_t block : {size_t{7}, size_t{100}, size_t{1} << 20}) {
      CheckpointWriteOptions opt;
      opt.source_block_floats = block;
      int calls = 0;
      opt.tensor_source = [&](const std::string& name, int64_t row0, int64_t rows, float* out) {
        const int64_t c = cols(name);
        for (int64_t j = 0; j < rows * c; ++j) out[j] = value(0, name, row0 * c + j);
        ++calls;
      };
      const std::string path = dir + "/imported.h5";
      CheckpointMeta meta = meta_for(cfg, GridShape{1, 1, 1, 1}, 0);
      write_checkpoint_file(path, MPI_COMM_SELF, meta, {}, opt);
      BOOST_TEST(calls > (block == 7 ? 200 : 0));
      int bad = 0;
      for (const auto& p : table) {
        std::vector<int64_t> shape;
        const std::vector<float> v = read_checkpoint_tensor(path, "model/" + p.name, &shape);  // checksum checked
        for (size_t i = 0; i < v.size(); ++i)
          if (v[i] != value(0, p.name, static_cast<int64_t>(i)) && bad++ < 3)
            BOOST_TEST_MESSAGE(p.name << "[" << i << "] = " << v[i]);
      }
      BOOST_TEST(bad == 0, "blocks of " << block << " floats: " << bad << " wrong values");
    }
    fs::remove_all(dir);
  } catch (const std::exception& e) {
    BOOST_ERROR(e.what());
  }
}

BOOST_AUTO_TEST_CASE(metadata_round_trip_and_sampler_conversion) {
  const ModelConfig cfg = tiny();
  const std::string dir = shared_dir("meta");
  GridShape s{1, 1, world_size(), 1};
  RankState st(cfg, s, world_rank(), 0);
  st.fill(cfg);
  write_checkpoint_file(dir + "/c.h5", MPI_COMM_WORLD, meta_for(cfg, s, 0), st.cs);
  CheckpointMeta m = read_checkpoint_meta(dir + "/c.h5");
  BOOST_TEST(m.step == 12);
  BOOST_TEST(m.optimizer_steps == 11);
  BOOST_TEST(m.sampler.epoch == 1u);
  BOOST_TEST(m.sampler.position == 6u);
  BOOST_TEST(m.sampler_dp == world_size());
  BOOST_TEST(m.train_seed == 42u);
  BOOST_TEST(m.data_seed == 7u);
  BOOST_TEST(m.loss == 3.25);
  BOOST_TEST(m.model.vocab_size == 100);
  BOOST_TEST(m.job_toml == "[train]\nsteps = 12\n");
  BOOST_TEST(m.tokenizer_json.find("mpitron-tokenizer") != std::string::npos);
  BOOST_TEST(!m.version.empty());
  // 6 samples per rank under dp = world -> 6*world global -> per rank under dp = 1, 2.
  BOOST_TEST(sampler_state_for(m, 1).position == 6u * world_size());
  BOOST_TEST(sampler_state_for(m, 1).epoch == 1u);
  if (world_size() == 1) BOOST_CHECK_THROW(sampler_state_for(m, 4), UsageError);  // 6 % 4 != 0
  std::vector<int64_t> shape;
  auto wte = read_checkpoint_tensor(dir + "/c.h5", "model/wte.weight", &shape);
  BOOST_TEST((shape == std::vector<int64_t>{100, 16}));
  BOOST_TEST(wte[17] == value(0, "wte.weight", 17));
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) fs::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(manager_latest_keep_and_errors) {
  const ModelConfig cfg = tiny();
  const std::string dir = shared_dir("manager");
  GridShape s{1, 1, world_size(), 1};
  RankState st(cfg, s, world_rank(), 0);
  st.fill(cfg);
  CheckpointManager mgr(dir + "/ckpt", 2, MPI_COMM_WORLD);
  BOOST_TEST(!resolve_resume("auto", dir + "/ckpt").has_value());
  for (int step : {5, 10, 15}) {
    CheckpointMeta m = meta_for(cfg, s, 0);
    m.step = step;
    mgr.save(m, st.cs);
  }
  auto latest = resolve_resume("auto", dir + "/ckpt");
  BOOST_TEST(latest.has_value());
  BOOST_TEST(fs::path(*latest).filename() == "step_00000015.h5");
  BOOST_TEST(!fs::exists(dir + "/ckpt/step_00000005.h5"));  // keep = 2
  BOOST_TEST(fs::exists(dir + "/ckpt/step_00000010.h5"));
  BOOST_TEST(resolve_checkpoint_path(dir + "/ckpt") == *latest);
  BOOST_TEST(!resolve_resume("never", dir + "/ckpt").has_value());
  BOOST_CHECK_THROW(resolve_resume(dir + "/nope.h5", dir + "/ckpt"), UsageError);

  // A different model: a clear UsageError naming the key.
  ModelConfig other = cfg;
  other.n_layer = 2;
  RankState o(other, s, world_rank(), 0);
  try {
    read_checkpoint_file(*latest, MPI_COMM_WORLD, other, o.cs);
    BOOST_TEST(false, "a different model loaded");
  } catch (const UsageError& e) {
    BOOST_TEST(std::string(e.what()).find("model.n_layer = 4 there, 2 in this job") != std::string::npos, e.what());
  }

  // Corrupt one value of one tensor: the checksum catches it on every rank.
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) {
    hid_t f = H5Fopen(latest->c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t ds = H5Dopen2(f, "optim/exp_avg/h.1.attn.c_attn.weight", H5P_DEFAULT);
    std::vector<float> buf(3 * 16 * 16);
    H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data());
    buf[100] += 1.0f;
    H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data());
    H5Dclose(ds);
    H5Fclose(f);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  RankState r(cfg, s, world_rank(), 0);
  try {
    read_checkpoint_file(*latest, MPI_COMM_WORLD, cfg, r.cs);
    BOOST_TEST(false, "a corrupted checkpoint loaded");
  } catch (const CorruptCheckpoint& e) {  // on every rank: the sums are all-reduced first
    BOOST_TEST(std::string(e.what()).find("optim/exp_avg/h.1.attn.c_attn.weight") != std::string::npos, e.what());
  }

  // Truncated file: a clear error at open.
  MPI_Barrier(MPI_COMM_WORLD);
  std::string older = dir + "/ckpt/step_00000010.h5";
  if (world_rank() == 0) fs::resize_file(older, fs::file_size(older) / 2);
  MPI_Barrier(MPI_COMM_WORLD);
  try {
    read_checkpoint_file(older, MPI_COMM_WORLD, cfg, r.cs);
    BOOST_TEST(false, "a truncated checkpoint loaded");
  } catch (const CorruptCheckpoint& e) {  // rank 0's verdict, broadcast before any collective read
    BOOST_TEST(std::string(e.what()).find("truncated") != std::string::npos, e.what());
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) fs::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(resume_candidates_and_partial_saves) {
  const ModelConfig cfg = tiny();
  const std::string dir = shared_dir("candidates");
  GridShape s{1, 1, world_size(), 1};
  RankState st(cfg, s, world_rank(), 0);
  st.fill(cfg);
  const std::string ck = dir + "/ckpt";
  CheckpointManager mgr(ck, 0, MPI_COMM_WORLD);
  for (int step : {2, 4, 6}) {
    CheckpointMeta m = meta_for(cfg, s, 0);
    m.step = step;
    mgr.save(m, st.cs);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) {
    auto names = [](const ResumeCandidates& c) {
      std::vector<std::string> n;
      for (const auto& f : c.files) n.push_back(fs::path(f).filename().string());
      return n;
    };
    using V = std::vector<std::string>;
    // A killed save's partial file is never a candidate, and is removed.
    { std::FILE* f = std::fopen((ck + "/.step_00000008.h5.tmp").c_str(), "w"); std::fclose(f); }
    ResumeCandidates c = resume_candidates("auto", ck);
    BOOST_TEST(c.fallback);
    BOOST_TEST(c.problem.empty());
    BOOST_TEST((names(c) == V{"step_00000006.h5", "step_00000004.h5", "step_00000002.h5"}));
    BOOST_TEST((remove_stale_checkpoint_temps(ck) == V{".step_00000008.h5.tmp"}));
    BOOST_TEST(!fs::exists(ck + "/.step_00000008.h5.tmp"));
    // `latest` rolled back by hand to step 4: only older files are fallbacks.
    fs::remove(ck + "/latest");
    fs::create_symlink("step_00000004.h5", ck + "/latest");
    BOOST_TEST((names(resume_candidates("auto", ck)) == V{"step_00000004.h5", "step_00000002.h5"}));
    // `latest` gone, or naming a deleted file: the step files, and the problem said.
    fs::remove(ck + "/latest");
    c = resume_candidates("auto", ck);
    BOOST_TEST(c.problem.find("no 'latest'") != std::string::npos, c.problem);
    BOOST_TEST(names(c).size() == 3u);
    fs::create_symlink("step_00000009.h5", ck + "/latest");
    c = resume_candidates("auto", ck);
    BOOST_TEST(c.problem.find("does not exist") != std::string::npos, c.problem);
    BOOST_TEST(names(c).size() == 3u);
    // An explicit file: only that one.
    c = resume_candidates(ck + "/step_00000002.h5", ck);
    BOOST_TEST(!c.fallback);
    BOOST_TEST((names(c) == V{"step_00000002.h5"}));
    BOOST_TEST(resume_candidates("never", ck).files.empty());
    // A structure check of a good file passes; of a truncated one names the file.
    BOOST_TEST(check_checkpoint_structure(ck + "/step_00000006.h5", &cfg).step == 6);
    fs::resize_file(ck + "/step_00000006.h5", 4000);
    try {
      check_checkpoint_structure(ck + "/step_00000006.h5", &cfg);
      BOOST_TEST(false, "a truncated file passed the structure check");
    } catch (const CorruptCheckpoint& e) {
      BOOST_TEST(std::string(e.what()).find("step_00000006.h5") != std::string::npos, e.what());
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) fs::remove_all(dir);
}
