// Fuzz target: a machine profile, as `mpitron plan --profile FILE` and train.profile read it
// (read_profile -> toml++ and the profile's value rules, plan/profile.cpp).
//
// Besides "accept or reject with a clear message naming the file", an accepted profile must be
// usable: the step-time model's lookups (GEMM and attention rates, elementwise bandwidth,
// concurrency factors, every collective it measured) run on it without an error or a sanitizer
// report.
//
// Seeds: MPITRON_FUZZ_WRITE_SEEDS=DIR fuzz_profile writes profile_to_toml of the built-in datasheet
// profiles (the files `calibrate` writes have the same form; tests/fuzz/corpus/profile/ also holds
// one written by `mpirun -np 2 mpitron calibrate --quick`).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "fuzz_common.hpp"
#include "mpitron/plan/profile.hpp"

using namespace mpitron;

namespace {

void write_seeds(const std::string& dir) {
  fuzz::fs::create_directories(dir);
  for (const std::string& name : builtin_profile_names()) {
    const std::string text = profile_to_toml(load_profile(name));
    const std::string path = dir + "/datasheet_" + name + ".toml";
    fuzz::write_file(path, reinterpret_cast<const uint8_t*>(text.data()), text.size());
    std::fprintf(stderr, "wrote %s\n", path.c_str());
  }
}

// Every lookup the step-time model makes, over sizes inside, between and outside the grids.
void use(const MachineProfile& p) {
  double sink = p.peak_gflops();
  for (int threads : {0, 1, 3, 64})
    for (double x : {1.0, 100.0, 4096.0, 1e7}) {
      sink += p.gemm_gflops(x, x / 2 + 1, 2 * x, false, false, threads) + p.gemm_gflops(x, 7, x, true, true, threads);
      sink += p.attention_gflops(x, false, threads) + p.attention_gflops(x, true, threads) + p.stream_gbs(threads);
    }
  for (int k : {1, 2, 5, 64, 100000}) {
    sink += p.compute_factor(k) + p.stream_factor(k) + p.overlap_factor(k) + p.threads_for(k);
    for (const char* op : {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "sendrecv", "all_to_all"})
      for (int n : {2, 3, 8, 4096})
        for (bool inter : {false, true}) {
          const bool measured = p.nearest_fit(op, n, k, inter) ||
                                (std::string(op) == "all_to_all" && p.nearest_fit("all_gather", n, k, inter));
          if (!measured) continue;  // collective_s refuses it (a check, not the input's)
          sink += p.collective_s(op, n, 1e6, k, inter);
        }
  }
  (void)sink;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::init("profile");
  if (const char* dir = std::getenv("MPITRON_FUZZ_WRITE_SEEDS")) {
    write_seeds(dir);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::begin_input();
  const std::string path = fuzz::scratch("profile.toml");
  fuzz::write_file(path, data, size);
  fuzz::run_one(
      [&] {
        use(read_profile(path));
      },
      path);
  return 0;
}
