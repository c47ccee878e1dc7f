// The job part of a command line (cli/job_args.hpp).
#include "mpitron/cli/job_args.hpp"

#include <algorithm>

#include "mpitron/core/error.hpp"

namespace mpitron {

std::vector<std::string> apply_job_overrides(JobConfig& cfg, const std::vector<std::string>& args) {
  std::vector<std::string> rest;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("--", 0) != 0 || a.size() < 3) {
      rest.push_back(a);
      continue;
    }
    std::string body = a.substr(2);
    std::string key = body, value;
    bool has_value = false;
    if (auto eq = body.find('='); eq != std::string::npos) {
      key = body.substr(0, eq);
      value = body.substr(eq + 1);
      has_value = true;
    }
    if (key.find('.') == std::string::npos && key != "env_override") {
      rest.push_back(a);
      continue;
    }
    if (!has_value) {
      if (is_bool_job_key(key) && (i + 1 >= args.size() || args[i + 1].rfind("--", 0) == 0)) {
        value = "true";
      } else {
        usage_check(i + 1 < args.size(), "option --{} needs a value", key);
        value = args[++i];
      }
    }
    set_job_key(cfg, key, value);
  }
  return rest;
}

std::vector<std::string> load_job_args(JobConfig& cfg, const std::vector<std::string>& args,
                                       std::string* job_path) {
  std::vector<std::string> rest = args;
  std::string path;
  if (!rest.empty() && rest[0].rfind("-", 0) != 0) {
    path = rest[0];
    load_job_file(cfg, path);
    rest.erase(rest.begin());
  }
  if (job_path) *job_path = path;
  return apply_job_overrides(cfg, rest);
}

bool wants_help(const std::vector<std::string>& args) {
  return std::find(args.begin(), args.end(), "--help") != args.end() ||
         std::find(args.begin(), args.end(), "-h") != args.end();
}

}  // namespace mpitron
