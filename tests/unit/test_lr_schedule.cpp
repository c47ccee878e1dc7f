// LrSchedule at its edges (lr_schedule.hpp): step 1, the end of warmup, the first decay step,
// the middle, the last step, past the end, warmup 0, warmup longer than the run. The expected
// values are written out from the header's definition (linear warmup to lr over `warmup` steps
// counted from 1, then cosine to min_lr at `total`), not computed by the code under test: an
// off-by-one anywhere moves at least one of them by a whole step's worth.
#include <boost/test/unit_test.hpp>

#include <cmath>

#include "mpitron/train/lr_schedule.hpp"

using namespace mpitron;

namespace {
constexpr double kTol = 1e-12;
}

BOOST_AUTO_TEST_SUITE(lr_schedule)

// lr 1, min_lr 0.1, 4 warmup steps, 12 steps: warmup 0.25, 0.5, 0.75, 1; decay over steps 5..12,
// progress (s - 4) / 8: step 5 at 0.1 + 0.45 (1 + cos(pi/8)), step 8 at the midpoint 0.55.
BOOST_AUTO_TEST_CASE(worked_example) {
  const LrSchedule s{1.0, 0.1, 4, 12};
  BOOST_TEST(s.at(1) == 0.25, boost::test_tools::tolerance(kTol));  // step 1 trains: lr / warmup, never 0
  BOOST_TEST(s.at(2) == 0.5, boost::test_tools::tolerance(kTol));
  BOOST_TEST(s.at(3) == 0.75, boost::test_tools::tolerance(kTol));
  BOOST_TEST(s.at(4) == 1.0, boost::test_tools::tolerance(kTol));  // the end of warmup is the peak
  BOOST_TEST(s.at(5) == 0.1 + 0.45 * (1 + 0.92387953251128674), boost::test_tools::tolerance(kTol));
  BOOST_TEST(s.at(8) == 0.55, boost::test_tools::tolerance(kTol));
  BOOST_TEST(s.at(11) == 0.1 + 0.45 * (1 - 0.92387953251128674), boost::test_tools::tolerance(kTol));
  BOOST_TEST(s.at(12) == 0.1, boost::test_tools::tolerance(kTol));  // the last step is at min_lr
  BOOST_TEST(s.at(13) == 0.1, boost::test_tools::tolerance(kTol));  // and it stays there
  BOOST_TEST(s.at(1000) == 0.1, boost::test_tools::tolerance(kTol));
}

// Rises strictly through warmup, falls strictly from the peak to the last step, never leaves
// [min_lr, lr] once training starts.
BOOST_AUTO_TEST_CASE(shape) {
  const LrSchedule s{3e-3, 3e-4, 2, 10};  // jobs/tiny.toml
  BOOST_TEST(s.at(1) == 1.5e-3, boost::test_tools::tolerance(kTol));
  BOOST_TEST(s.at(2) == 3e-3, boost::test_tools::tolerance(kTol));
  for (int k = 3; k <= 10; ++k) {
    BOOST_TEST(s.at(k) < s.at(k - 1), "step " << k);
    BOOST_TEST(s.at(k) >= 3e-4);
  }
  BOOST_TEST(s.at(10) == 3e-4, boost::test_tools::tolerance(kTol));
}

// No warmup: the cosine starts at step 1 with progress 1/total (step 0 would be the peak).
BOOST_AUTO_TEST_CASE(no_warmup) {
  const LrSchedule s{2.0, 0.0, 0, 4};
  BOOST_TEST(s.at(1) == 1.0 + std::cos(M_PI / 4), boost::test_tools::tolerance(kTol));
  BOOST_TEST(s.at(2) == 1.0, boost::test_tools::tolerance(kTol));
  BOOST_TEST(s.at(3) == 1.0 - std::cos(M_PI / 4), boost::test_tools::tolerance(kTol));
  BOOST_TEST(s.at(4) == 0.0, boost::test_tools::tolerance(kTol));
  const LrSchedule one{2.0, 0.5, 0, 1};  // a one-step run is its own last step
  BOOST_TEST(one.at(1) == 0.5, boost::test_tools::tolerance(kTol));
}

// min_lr equal to lr: constant after warmup (a common way to ask for no decay).
BOOST_AUTO_TEST_CASE(min_lr_equal_to_lr_is_constant) {
  const LrSchedule s{1e-3, 1e-3, 3, 9};
  BOOST_TEST(s.at(1) == 1e-3 / 3, boost::test_tools::tolerance(kTol));
  for (int k = 3; k <= 12; ++k) BOOST_TEST(s.at(k) == 1e-3, boost::test_tools::tolerance(kTol));
}

// Warmup longer than the run: the run never leaves warmup.
BOOST_AUTO_TEST_CASE(warmup_covers_the_run) {
  const LrSchedule s{1.0, 0.1, 10, 5};
  for (int k = 1; k <= 5; ++k) BOOST_TEST(s.at(k) == k / 10.0, boost::test_tools::tolerance(kTol));
}

BOOST_AUTO_TEST_SUITE_END()
