// Regression tests for what fuzzing the checkpoint readers found (tests/fuzz/fuzz_checkpoint.cpp):
// values and shapes read from a checkpoint file are checked before they are used. A good
// checkpoint is written, one thing in it is damaged with plain HDF5, and every reader must
// answer with an Error naming the file (not divide by zero, allocate 2^62 bytes or overflow).
// np: 1
#include <hdf5.h>
#include <mpi.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <filesystem>
#include <functional>
#include <string>

#include "mpitron/core/error.hpp"
#include "mpitron/model/param_tables.hpp"
#include "mpitron/checkpoint/checkpoint.hpp"

using namespace mpitron;
namespace fs = std::filesystem;

namespace {

ModelConfig small() {
  ModelConfig c;
  c.name = "fuzz-regression";
  c.n_layer = 1;
  c.n_head = 2;
  c.n_kv_head = 2;
  c.d_model = 8;
  c.d_ff = 32;
  c.vocab_size = 20;
  c.seq_len = 4;
  return c;
}

std::string write_good(const std::string& path) {
  CheckpointShard cs = checkpoint_shard_for(small(), GridShape{1, 1, 1, 1}, GridCoord{}, {}, 0);
  size_t n = 0;
  for (const auto& p : cs.table) n = std::max(n, p.offset + p.numel);
  std::vector<float> p(n, 0.5f), m(n, 0.f), v(n, 0.f);
  cs.params = {p.data(), 0, n, true};
  cs.exp_avg = {m.data(), 0, n, true};
  cs.exp_avg_sq = {v.data(), 0, n, true};
  CheckpointMeta meta;
  meta.model = small();
  meta.layout = GridShape{1, 1, 1, 1};
  meta.job_toml = "[train]\nsteps = 1\n";
  meta.tokenizer_json = R"({"format": "mpitron-tokenizer", "version": 1, "type": "byte"})";
  write_checkpoint_file(path, MPI_COMM_SELF, meta, cs);
  return path;
}

void set_i64(hid_t obj, const char* name, int64_t v) {
  hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
  BOOST_REQUIRE(a >= 0);
  H5Awrite(a, H5T_NATIVE_INT64, &v);
  H5Aclose(a);
}

// A copy of a good checkpoint with `edit` applied to it (serial HDF5, read-write).
std::string damaged(const std::string& dir, const std::string& name, const std::function<void(hid_t)>& edit) {
  std::string path = dir + "/" + name + ".h5";
  write_good(path);
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  BOOST_REQUIRE(f >= 0);
  edit(f);
  H5Fclose(f);
  return path;
}

// Every reader of `path` fails with an Error that names it.
void all_readers_reject(const std::string& path, const std::string& what) {
  auto named_error = [&](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what()).find(path) != std::string::npos;
    }
    return false;
  };
  BOOST_TEST(named_error([&] {
               CheckpointMeta m = read_checkpoint_meta(path);
               for (const auto& p : model_param_table(m.model, ModelShard{}))
                 read_checkpoint_tensor(path, "model/" + p.name, nullptr);
             }),
             what << ": read_checkpoint_meta / read_checkpoint_tensor");
  BOOST_TEST(named_error([&] {
               CheckpointShard cs = checkpoint_shard_for(small(), GridShape{1, 1, 1, 1}, GridCoord{}, {}, 0);
               size_t n = 0;
               for (const auto& p : cs.table) n = std::max(n, p.offset + p.numel);
               std::vector<float> p(n), m(n), v(n);
               cs.params = {p.data(), 0, n, true};
               cs.exp_avg = {m.data(), 0, n, true};
               cs.exp_avg_sq = {v.data(), 0, n, true};
               read_checkpoint_file(path, MPI_COMM_SELF, small(), cs);
             }),
             what << ": read_checkpoint_file");
}

}  // namespace

BOOST_AUTO_TEST_CASE(checkpoint_values_from_the_file_are_checked) {
  const std::string dir = (fs::temp_directory_path() / ("mpitron_ckpt_fuzz_" + std::to_string(getpid()))).string();
  fs::create_directories(dir);
  {
    std::string good = write_good(dir + "/good.h5");
    CheckpointMeta m = read_checkpoint_meta(good);
    BOOST_TEST(m.model.n_head == 2);
  }
  auto config = [](const char* key, int64_t v) {
    return [key, v](hid_t f) {
      hid_t g = H5Gopen2(f, "config", H5P_DEFAULT);
      set_i64(g, key, v);
      H5Gclose(g);
    };
  };
  all_readers_reject(damaged(dir, "n_head0", config("n_head", 0)), "n_head = 0");
  all_readers_reject(damaged(dir, "n_layer_wraps", config("n_layer", (int64_t{1} << 32) + 1)), "n_layer = 2^32 + 1");
  all_readers_reject(damaged(dir, "d_model_huge", config("d_model", int64_t{1} << 40)), "d_model = 2^40");
  all_readers_reject(damaged(dir, "kv_heads", config("n_kv_head", 3)), "n_kv_head = 3");
  // A text dataset of two strings: H5Dread wrote both into a one-string buffer.
  all_readers_reject(damaged(dir, "two_texts",
                             [](hid_t f) {
                               hid_t g = H5Gopen2(f, "config", H5P_DEFAULT);
                               H5Ldelete(g, "job_toml", H5P_DEFAULT);
                               hid_t t = H5Tcopy(H5T_C_S1);
                               H5Tset_size(t, 16);
                               hsize_t n = 2;
                               hid_t sp = H5Screate_simple(1, &n, nullptr);
                               hid_t ds = H5Dcreate2(g, "job_toml", t, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
                               char buf[32] = "[train]";
                               H5Dwrite(ds, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf);
                               H5Dclose(ds);
                               H5Sclose(sp);
                               H5Tclose(t);
                               H5Gclose(g);
                             }),
                     "job_toml of two strings");
  // A tensor whose shape asks for 2^62 floats (no storage allocated, so the file stays small).
  all_readers_reject(damaged(dir, "huge_tensor",
                             [](hid_t f) {
                               hid_t g = H5Gopen2(f, "model", H5P_DEFAULT);
                               H5Ldelete(g, "wpe.weight", H5P_DEFAULT);
                               hsize_t d[2] = {hsize_t{1} << 31, hsize_t{1} << 31};
                               hid_t sp = H5Screate_simple(2, d, nullptr);
                               hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
                               hsize_t chunk[2] = {64, 64};
                               H5Pset_chunk(dcpl, 2, chunk);
                               hid_t ds = H5Dcreate2(g, "wpe.weight", H5T_IEEE_F32LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
                               H5Dclose(ds);
                               H5Pclose(dcpl);
                               H5Sclose(sp);
                               H5Gclose(g);
                             }),
                     "wpe.weight of 2^62 floats");
  fs::remove_all(dir);
}
