// [env] application (src/cli/env_vars.cpp), the example job files under jobs/, and docs/jobs.md
// staying in sync with the key registry.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "../../src/cli/env_vars.hpp"
#include "mpitron/config/job_config.hpp"
#include "mpitron/model/config.hpp"

using namespace mpitron;

namespace {
bool any_has(const std::vector<std::string>& lines, const std::string& needle) {
  return std::any_of(lines.begin(), lines.end(), [&](const std::string& l) { return l.find(needle) != std::string::npos; });
}
std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
}  // namespace

BOOST_AUTO_TEST_SUITE(env_vars)

BOOST_AUTO_TEST_CASE(sets_unset_variables_and_environment_wins) {
  unsetenv("MPITRON_T_A");
  setenv("MPITRON_T_B", "from-env", 1);
  auto w = apply_job_env({{"MPITRON_T_A", "job-a"}, {"MPITRON_T_B", "job-b"}}, false);
  BOOST_TEST(std::string(std::getenv("MPITRON_T_A")) == "job-a");
  BOOST_TEST(std::string(std::getenv("MPITRON_T_B")) == "from-env");
  BOOST_TEST(any_has(w, "MPITRON_T_B=from-env from the environment wins"));
  BOOST_TEST(any_has(w, "env_override = true"));
  auto lines = effective_env_lines({{"MPITRON_T_A", "job-a"}, {"MPITRON_T_B", "job-b"}});
  BOOST_TEST(any_has(lines, "MPITRON_T_A=job-a (job)"));
  BOOST_TEST(any_has(lines, "MPITRON_T_B=from-env (environment)"));
  // env_override: the job wins, no warning.
  w = apply_job_env({{"MPITRON_T_B", "job-b"}}, true);
  BOOST_TEST(std::string(std::getenv("MPITRON_T_B")) == "job-b");
  BOOST_TEST(w.empty());
  // Same value in both: nothing to say.
  BOOST_TEST(apply_job_env({{"MPITRON_T_B", "job-b"}}, false).empty());
  unsetenv("MPITRON_T_A");
  unsetenv("MPITRON_T_B");
}

BOOST_AUTO_TEST_CASE(nccl_typo_guard) {
  for (const char* n : {"NCCL_DEBUG", "NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE",
                        "NCCL_ALGO", "NCCL_PROTO", "NCCL_NET_GDR_LEVEL", "NCCL_DEBUG_SUBSYS", "NCCL_IB_DISABLE"})
    BOOST_TEST(std::binary_search(known_nccl_vars().begin(), known_nccl_vars().end(), n), n);
  unsetenv("NCCL_SOCKET_IFACE");
  unsetenv("NCCL_P2P_DISABLED");
  unsetenv("NCCL_ALGO");
  auto w = apply_job_env({{"NCCL_SOCKET_IFACE", "eth0"}, {"NCCL_P2P_DISABLED", "1"}, {"NCCL_ALGO", "Ring"},
                          {"NCCL_ASYNC_ERROR_HANDLING", "1"}, {"NCCL_ZZZ_QQQ_WWW", "1"}},
                         false);
  BOOST_TEST(any_has(w, "NCCL_SOCKET_IFACE is not an NCCL variable; did you mean NCCL_SOCKET_IFNAME?"));
  BOOST_TEST(any_has(w, "NCCL_P2P_DISABLED is not an NCCL variable; did you mean NCCL_P2P_DISABLE?"));
  BOOST_TEST(any_has(w, "NCCL_ASYNC_ERROR_HANDLING is read by PyTorch"));
  BOOST_TEST(any_has(w, "NCCL_ZZZ_QQQ_WWW"));
  BOOST_TEST(!any_has(w, "NCCL_ALGO"));
  // Unknown names are still set (the user may know a newer NCCL than this list).
  BOOST_TEST(std::getenv("NCCL_SOCKET_IFACE") != nullptr);
  for (const char* n : {"NCCL_SOCKET_IFACE", "NCCL_P2P_DISABLED", "NCCL_ALGO", "NCCL_ASYNC_ERROR_HANDLING",
                        "NCCL_ZZZ_QQQ_WWW"})
    unsetenv(n);
}

BOOST_AUTO_TEST_CASE(bad_names_and_debug_levels) {
  unsetenv("NCCL_DEBUG");
  auto w = apply_job_env({{"BAD-NAME", "1"}, {"NCCL_DEBUG", "LOUD"}}, false);
  BOOST_TEST(any_has(w, "'BAD-NAME' is not a valid environment variable name"));
  BOOST_TEST(any_has(w, "NCCL_DEBUG=LOUD"));
  BOOST_TEST(apply_job_env({{"NCCL_DEBUG", "info"}}, true).empty());
  unsetenv("NCCL_DEBUG");
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(job_files)

// Every example job parses with the real key registry and names a model the presets know; an
// explicit layout keeps TP groups inside an 8-GPU node and splits the heads evenly.
BOOST_AUTO_TEST_CASE(example_jobs_parse) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("jobs")) {
    if (e.path().extension() != ".toml") continue;
    BOOST_TEST_CONTEXT(e.path().string()) {
      JobConfig cfg;
      BOOST_CHECK_NO_THROW(load_job_file(cfg, e.path().string()));
      ModelConfig m;
      BOOST_CHECK_NO_THROW(m = resolve_model_config(cfg.model));
      BOOST_TEST(cfg.parallel.tp >= 1);
      BOOST_TEST(8 % cfg.parallel.tp == 0);
      BOOST_TEST(m.n_head % cfg.parallel.tp == 0);
      BOOST_TEST(m.n_layer % (cfg.parallel.pp * cfg.parallel.virtual_stages) == 0);
      for (const auto& [k, v] : cfg.env)
        if (k.rfind("NCCL_", 0) == 0)
          BOOST_TEST(std::binary_search(known_nccl_vars().begin(), known_nccl_vars().end(), k), k);
      ++n;
    }
  }
  BOOST_TEST(n >= 5);
}

// docs/jobs.md carries the registry's table between two markers. After adding or changing a key:
//   MPITRON_REGEN_DOCS=1 build/tests/unit_tests --run_test=job_files/jobs_doc_matches_registry
BOOST_AUTO_TEST_CASE(jobs_doc_matches_registry) {
  const std::string path = "docs/jobs.md", begin = "<!-- keys:begin -->\n", end = "<!-- keys:end -->";
  std::string doc = slurp(path);
  auto b = doc.find(begin), e = doc.find(end);
  BOOST_REQUIRE_MESSAGE(b != std::string::npos && e != std::string::npos && b < e,
                        path << " lacks the <!-- keys:begin --> / <!-- keys:end --> markers");
  std::string table = job_keys_markdown();
  std::string have = doc.substr(b + begin.size(), e - b - begin.size());
  if (have != table && std::getenv("MPITRON_REGEN_DOCS")) {
    doc.replace(b + begin.size(), e - b - begin.size(), table);
    std::ofstream(path) << doc;
    BOOST_TEST_MESSAGE("rewrote the key table in " << path);
    have = table;
  }
  BOOST_TEST(have == table, path << " is out of date with the job key registry; regenerate it with "
                                    "MPITRON_REGEN_DOCS=1 build/tests/unit_tests "
                                    "--run_test=job_files/jobs_doc_matches_registry");
}

BOOST_AUTO_TEST_SUITE_END()
