// The step line's MFU (train/step_reporter.cpp, StepLogger): a measured peak below what a step
// achieves is raised to it, so MFU never reads above 100%; a peak the job sets is kept.
#include <boost/test/unit_test.hpp>

#include <cstdio>
#include <fstream>
#include <string>

#include "mpitron/train/step_reporter.hpp"

using namespace mpitron;

namespace {
// The "mfu" values of a metrics.jsonl, in order.
std::vector<double> mfus(const std::string& path) {
  std::ifstream in(path);
  std::vector<double> out;
  for (std::string line; std::getline(in, line);)
    if (auto at = line.find("\"mfu\":"); at != std::string::npos) out.push_back(std::stod(line.substr(at + 6)));
  return out;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(step_logger)

BOOST_AUTO_TEST_CASE(mfu_never_above_100_percent_of_a_measured_peak) {
  const std::string path = "/tmp/mpitron_step_logger_" + std::to_string(::getpid()) + ".jsonl";
  for (double user_peak : {0.0, 1e9}) {
    JobConfig cfg;
    cfg.train.steps = 3;
    cfg.train.peak_flops = user_peak;
    {
      MetricsWriter metrics(path, false);
      // 1e6 FLOP per step per rank: 1 GFLOP/s at 1 ms, 2 GFLOP/s at 0.5 ms.
      StepLogger logger(cfg, metrics, /*tokens_per_step=*/1000, /*flops_per_token=*/1000, /*world=*/1,
                        /*peak_flops=*/1e9);
      logger.log(1, 5.0, 1e-3, 1.0, /*step_ms=*/2.0, 0, 0, 0, MemStats{});  // 0.5 GFLOP/s: 50%
      logger.log(2, 5.0, 1e-3, 1.0, /*step_ms=*/0.5, 0, 0, 0, MemStats{});  // 2 GFLOP/s
      logger.log(3, 5.0, 1e-3, 1.0, /*step_ms=*/1.0, 0, 0, 0, MemStats{});  // 1 GFLOP/s
    }
    const std::vector<double> m = mfus(path);
    BOOST_REQUIRE(m.size() == 3u);
    BOOST_TEST(m[0] == 0.5, boost::test_tools::tolerance(1e-9));
    if (user_peak > 0) {  // the job's peak stays, and MFU says so (the note explains)
      BOOST_TEST(m[1] == 2.0, boost::test_tools::tolerance(1e-9));
    } else {  // raised to the fastest step's rate
      BOOST_TEST(m[1] == 1.0, boost::test_tools::tolerance(1e-9));
      BOOST_TEST(m[2] == 0.5, boost::test_tools::tolerance(1e-9));
    }
  }
  std::remove(path.c_str());
}

BOOST_AUTO_TEST_SUITE_END()
