// The job part of a command line: an optional job file, then `--section.key=value` overrides
// (keys and their parsing: config/job_config.hpp).
#pragma once
#include <string>
#include <vector>

#include "mpitron/config/job_config.hpp"

namespace mpitron {
// Apply "--section.key=value" / "--section.key value" arguments; returns the arguments that are
// not job keys (so a subcommand can parse its own options from them).
std::vector<std::string> apply_job_overrides(JobConfig& cfg, const std::vector<std::string>& args);

// The usual command line of a command that takes a job: an optional job file first (any first
// argument that is not an option), then `--section.key=value` overrides. Loads both into cfg and
// returns the remaining arguments; *job_path (if given) receives the file name or "".
std::vector<std::string> load_job_args(JobConfig& cfg, const std::vector<std::string>& args,
                                       std::string* job_path = nullptr);

// True when args hold --help or -h.
bool wants_help(const std::vector<std::string>& args);

}  // namespace mpitron
