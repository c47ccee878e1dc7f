// Fuzz target: a job file plus `--section.key=value` overrides, as `mpitron train job.toml ...`
// reads them (load_job_args -> toml++ and the key registry), then the model section resolved.
//
// Input: the TOML file's bytes, optionally followed by a line "%%args" and then one command-line
// argument per line (e.g. "--parallel.tp=2", or "--train.steps" and "7" on two lines).
//
// Besides "accept or reject with a clear message", an accepted job must survive
// job_to_toml -> load_job_file unchanged: that text is what `train --dry-run` prints and what
// every checkpoint stores as config/job_toml.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_common.hpp"
#include "mpitron/cli/job_args.hpp"
#include "mpitron/config/job_config.hpp"
#include "mpitron/model/config.hpp"

using namespace mpitron;

namespace {

constexpr std::string_view kArgsMarker = "\n%%args\n";

void check_round_trip(const JobConfig& cfg) {
  const std::string text = job_to_toml(cfg);
  const std::string path = fuzz::scratch("roundtrip.toml");
  fuzz::write_file(path, reinterpret_cast<const uint8_t*>(text.data()), text.size());
  JobConfig again;
  try {
    load_job_file(again, path);
  } catch (const Error& e) {
    fuzz::bug("job_to_toml wrote a job file that does not load: " + std::string(e.what()) + "\n---\n" + text);
  }
  if (job_to_toml(again) != text)
    fuzz::bug("job_to_toml -> load_job_file changed the job:\n---\n" + text + "---\n" + job_to_toml(again));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::init("job_config");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::begin_input();
  std::string_view in(reinterpret_cast<const char*>(data), size);
  size_t cut = in.find(kArgsMarker);
  std::string_view toml = in.substr(0, cut);
  const std::string path = fuzz::scratch("job.toml");
  fuzz::write_file(path, reinterpret_cast<const uint8_t*>(toml.data()), toml.size());

  std::vector<std::string> args{path};
  if (cut != std::string_view::npos) {
    std::string_view rest = in.substr(cut + kArgsMarker.size());
    while (!rest.empty()) {
      size_t nl = rest.find('\n');
      std::string_view arg = rest.substr(0, nl);
      // A command line cannot carry NUL bytes: cut the argument there, as argv would.
      args.emplace_back(arg.substr(0, arg.find('\0')));
      rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    }
  }
  fuzz::run_one([&] {
    JobConfig cfg;
    load_job_args(cfg, args);
    check_round_trip(cfg);
    resolve_model_config(cfg.model);
  });
  return 0;
}
