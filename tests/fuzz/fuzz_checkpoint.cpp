// Fuzz target: a checkpoint file, read the three ways the product reads one:
//   - read_checkpoint_meta + the stored tokenizer (`mpitron inspect`, `mpitron generate`);
//   - read_checkpoint_tensor of parameters the stored config names (`generate`);
//   - read_checkpoint_file, collective over MPI_COMM_SELF (a resume at np = 1), with or without
//     the optimizer state, expecting the seed's model.
// MPI is initialised once (singleton, no mpirun) in LLVMFuzzerInitialize.
//
// Seeds: MPITRON_FUZZ_WRITE_SEEDS=DIR fuzz_checkpoint writes checkpoints of a ~300-parameter
// model with the product's writer (write_checkpoint_file) to DIR and exits (`make fuzz-seeds`).
#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <sanitizer/common_interface_defs.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "fuzz_common.hpp"
#include "mpitron/data/tokenizer.hpp"
#include "mpitron/model/param_tables.hpp"
#include "mpitron/checkpoint/checkpoint.hpp"

using namespace mpitron;

namespace {

// Small enough that a checkpoint is ~20 KB, so libFuzzer mutates metadata as often as data.
ModelConfig seed_model() {
  ModelConfig c;
  c.name = "fuzz";
  c.n_layer = 1;
  c.n_head = 1;
  c.n_kv_head = 1;
  c.d_model = 4;
  c.d_ff = 16;
  c.vocab_size = 8;
  c.seq_len = 2;
  return c;
}

// This rank's buffers for the whole model (np = 1, no ZeRO) and the checkpoint's view of them.
struct State {
  CheckpointShard cs;
  std::vector<float> p, m, v;
  explicit State(bool optimizer) {
    cs = checkpoint_shard_for(seed_model(), GridShape{1, 1, 1, 1}, GridCoord{}, {}, 0);
    size_t n = 0;
    for (const auto& t : cs.table) n = std::max(n, t.offset + t.numel);
    p.assign(n, 0.f);
    m.assign(n, 0.f);
    v.assign(n, 0.f);
    cs.has_optimizer = optimizer;
    cs.params = {p.data(), 0, n, true};
    cs.exp_avg = {m.data(), 0, n, true};
    cs.exp_avg_sq = {v.data(), 0, n, true};
  }
};

void write_seeds(const std::string& dir, bool quiet = false) {
  fuzz::fs::create_directories(dir);
  CheckpointMeta meta;
  meta.step = 3;
  meta.optimizer_steps = 3;
  meta.sampler = {0, 6};
  meta.train_seed = 42;
  meta.data_seed = 1234;
  meta.loss = 2.5;
  meta.model = seed_model();
  meta.layout = GridShape{1, 1, 1, 1};
  meta.job_toml = "[model]\npreset = \"tiny\"\nn_layer = 1\n";
  meta.tokenizer_json = Tokenizer::byte().to_json();
  meta.version = "fuzz-seed";  // fixed, so regenerated seeds only change when the format does
  meta.created = "2000-01-01T00:00:00Z";
  for (bool optimizer : {true, false}) {
    State s(optimizer);
    for (size_t i = 0; i < s.p.size(); ++i) {
      s.p[i] = 0.01f * static_cast<float>(i % 97) - 0.4f;
      s.m[i] = 1e-3f * static_cast<float>(i % 13);
      s.v[i] = 1e-6f * static_cast<float>(i % 7);
    }
    std::string path = dir + (optimizer ? "/full.h5" : "/params_only.h5");
    write_checkpoint_file(path, MPI_COMM_SELF, meta, s.cs);
    if (!quiet) std::fprintf(stderr, "wrote %s\n", path.c_str());
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  // A reader may check a file in a forked child first, so that HDF5 crashing or hanging on it is
  // an error instead (the checkpoint verifier of branch ckpt). Such a child must die as the
  // product's would: without libFuzzer's death callback and crash handlers (which would record the
  // parent's input as a crash), and within 0.15 s, well inside -timeout: HDF5 1.10.8 loops forever
  // on some damaged global heaps (about one mutated input in ten), and each such input costs that
  // long (checking a good 20 KB seed takes milliseconds).
  pthread_atfork(nullptr, nullptr, [] {
    __sanitizer_set_death_callback(nullptr);
    for (int sig : {SIGSEGV, SIGBUS, SIGABRT, SIGILL, SIGFPE}) signal(sig, SIG_DFL);
  });
  // The warm-up below reads the two good seeds with the product's limit: the first checks of a
  // process pay the one-time costs (a fork of the whole sanitized process, HDF5's and MPI-IO's
  // first opens in the child), and on the CI's loaded 2 cores, at nice 19 beside the stress
  // tests, the first check of full.h5 took longer than 0.15 s; the warm-up is outside the per-input
  // handler, so that verdict aborted the target. A limit the caller set holds throughout.
  const bool caller_limit = std::getenv("MPITRON_CKPT_CHECK_TIMEOUT_S") != nullptr;
  int provided = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
  std::atexit([] {
    int done = 0;
    MPI_Finalized(&done);
    if (!done) MPI_Finalize();
  });
  if (const char* dir = std::getenv("MPITRON_FUZZ_WRITE_SEEDS")) {
    write_seeds(dir);
    std::exit(0);
  }
  fuzz::init("checkpoint");
  // Warm-up: OpenMPI and HDF5 allocate one-time state (MPI-IO components, caches) on their first
  // collective read, which libFuzzer's per-input leak check would take for a leak of that input.
  const std::string warm = fuzz::scratch("warmup");
  write_seeds(warm, true);
  for (const char* f : {"/full.h5", "/params_only.h5"}) {
    State s(true);
    read_checkpoint_meta(warm + f);
    try {
      read_checkpoint_file(warm + f, MPI_COMM_SELF, seed_model(), s.cs);
    } catch (const Error&) {  // params_only.h5 has no optimizer state
    }
  }
  if (!caller_limit) setenv("MPITRON_CKPT_CHECK_TIMEOUT_S", "0.15", 1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::begin_input();
  static const std::string path = fuzz::scratch("ckpt.h5");
  fuzz::write_file(path, data, size);
  fuzz::run_one(
      [&] {
        CheckpointMeta meta = read_checkpoint_meta(path);
        if (!meta.tokenizer_json.empty()) Tokenizer::from_json(meta.tokenizer_json, path + ": tokenizer_json");
        // As generate does, but three tensors (2-D first, one in the middle, 1-D last), not all:
        // every read_checkpoint_tensor opens the file again, and they share one code path.
        std::vector<ParamInfo> table = model_param_table(meta.model, ModelShard{});
        for (size_t i : {size_t{0}, table.size() / 2, table.size() - 1}) {
          std::vector<int64_t> shape;
          std::vector<float> v = read_checkpoint_tensor(path, "model/" + table[i].name, &shape);
          if (v.size() > table[i].numel)
            fuzz::bug("read_checkpoint_tensor returned " + std::to_string(v.size()) + " values for " + table[i].name);
        }
        // With or without the optimizer state, by a bit of the input (half the cost of both).
        State s(size > 0 && (data[size / 2] & 1));
        read_checkpoint_file(path, MPI_COMM_SELF, seed_model(), s.cs);
      },
      path);
  return 0;
}
