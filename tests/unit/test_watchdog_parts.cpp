// The parts of the hang watchdog that need no MPI: wait registration (nesting, what the watchdog
// reads, the per-thread wait time behind the straggler report) and MPITRON_FAULT parsing.
#include <boost/test/unit_test.hpp>
#include <chrono>
#include <thread>

#include "mpitron/core/error.hpp"
#include "mpitron/distributed/wait_registry.hpp"
#include "mpitron/distributed/fault_inject.hpp"

using namespace mpitron;

BOOST_AUTO_TEST_SUITE(watchdog_parts)

BOOST_AUTO_TEST_CASE(waits_nest_and_are_seen_by_another_thread) {
  CommGroupInfo g("dp_test", {0, 2, 4});
  BOOST_TEST(find_comm_group("dp_test") == &g);
  const double before = thread_comm_wait_seconds();
  std::vector<WaitInProgress> seen_outer, seen_inner, seen_after;
  {
    CommOpTag outer{&g, "MPI_Allreduce", g.next_collective(), -1, 8, DType::f32};
    CommWait w1(outer);
    std::thread([&] { seen_outer = waits_in_progress(); }).join();
    {
      CommOpTag inner{&g, "MPI_Recv", 0, 4, 16, DType::bf16};
      CommWait w2(inner);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      std::thread([&] { seen_inner = waits_in_progress(); }).join();
    }
    std::thread([&] { seen_after = waits_in_progress(); }).join();
  }
  BOOST_REQUIRE(seen_outer.size() == 1u);
  BOOST_TEST(describe_wait(seen_outer[0]) == "MPI_Allreduce on group 'dp_test' (world ranks 0,2,4; collective #1; 8 x f32)");
  BOOST_REQUIRE(seen_inner.size() == 1u);  // the inner wait is the one reported ...
  BOOST_TEST(describe_wait(seen_inner[0]) == "MPI_Recv on group 'dp_test' (world ranks 0,2,4; peer world rank 4; 16 x bf16)");
  BOOST_TEST(seen_inner[0].waited_s >= 0.015);
  BOOST_REQUIRE(seen_after.size() == 1u);  // ... and the outer one again once it ends
  BOOST_TEST(seen_after[0].tag.op == std::string("MPI_Allreduce"));
  BOOST_TEST(waits_in_progress().empty());
  // Nested waits count once: at least the 20 ms slept, less than twice that plus slack.
  const double waited = thread_comm_wait_seconds() - before;
  BOOST_TEST(waited >= 0.019);
  BOOST_TEST(waited < 1.0);
  BOOST_TEST(g.collectives_started() == 1u);
}

BOOST_AUTO_TEST_CASE(free_form_waits_have_their_own_limit) {
  CommOpTag t;
  t.what = "collective parallel-HDF5 write of a checkpoint";
  t.limit_s = 42;
  CommWait w(t);
  std::vector<WaitInProgress> seen;
  std::thread([&] { seen = waits_in_progress(); }).join();
  BOOST_REQUIRE(seen.size() == 1u);
  BOOST_TEST(describe_wait(seen[0]) == "collective parallel-HDF5 write of a checkpoint");
  BOOST_TEST(seen[0].tag.limit_s == 42.0);
}

BOOST_AUTO_TEST_CASE(fault_specs_are_checked) {
  BOOST_CHECK_NO_THROW(fault_inject_configure("hang@forward,rank=1,step=3;usr1@eval,after=2", 0));
  BOOST_CHECK_THROW(fault_inject_configure("explode@forward", 0), UsageError);
  BOOST_CHECK_THROW(fault_inject_configure("hang@nowhere", 0), UsageError);
  BOOST_CHECK_THROW(fault_inject_configure("hang@forward,colour=3", 0), UsageError);
  BOOST_CHECK_THROW(fault_inject_configure("hang@forward,rank=x", 0), UsageError);
  BOOST_CHECK_THROW(fault_inject_configure("hangforward", 0), UsageError);
  fault_inject_configure("exit@forward,rank=5", 0);  // another rank's fault: nothing happens here
  fault_point("forward");
  fault_inject_configure("", 0);  // off again
  fault_point("forward");
}

BOOST_AUTO_TEST_SUITE_END()
