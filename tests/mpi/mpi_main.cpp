// Linked into every tests/mpi/test_* executable: the Boost.Test module with MPI started and
// finished around it. Each test file says at which rank counts it runs ("// np: 1 2 4 8").
#define BOOST_TEST_MODULE mpitron_mpi
#include <mpi.h>

#include <boost/test/unit_test.hpp>

struct MpiGlobalFixture {
  MpiGlobalFixture() {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
  }
  ~MpiGlobalFixture() {
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) MPI_Finalize();
  }
};
BOOST_TEST_GLOBAL_FIXTURE(MpiGlobalFixture);
