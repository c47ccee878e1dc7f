// The one Boost.Test module of the unit tests; every other tests/unit/*.cpp adds test suites.
#define BOOST_TEST_MODULE mpitron_unit
#include <boost/test/unit_test.hpp>
