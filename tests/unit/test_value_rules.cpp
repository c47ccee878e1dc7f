// The one set of rules for numeric values from outside (config/value_rules.hpp): the kind, the
// range, and the words of the refusal, for text (command-line options, TOML text) and for typed
// values (JSON, TOML nodes).
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <functional>
#include <string>

#include "mpitron/config/value_rules.hpp"
#include "mpitron/core/error.hpp"

using namespace mpitron;

namespace {

std::string refusal(const std::function<void()>& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

BOOST_AUTO_TEST_SUITE(value_rules)

BOOST_AUTO_TEST_CASE(integers_are_whole_and_fit_their_type) {
  BOOST_TEST(checked_int<int>("option --n", "7", at_least(1)) == 7);
  BOOST_TEST(checked_int<int>("option --n", "+7", at_least(1)) == 7);
  // Never truncated or wrapped: a fraction, an exponent, a value past the type, a unit.
  BOOST_TEST(refusal([] { checked_int<int>("option --n", "2.5", at_least(1)); }) ==
             "option --n: '2.5' is not allowed (allowed: an integer, >= 1)");
  BOOST_TEST(refusal([] { checked_int<int>("option --n", "1e3", at_least(1)); }) ==
             "option --n: '1e3' is not allowed (allowed: an integer, >= 1)");
  BOOST_TEST(refusal([] { checked_int<int>("option --n", "4294967298", at_least(1)); }) ==
             "option --n: '4294967298' is not allowed (allowed: an integer, 1 <= v <= 2147483647)");
  BOOST_TEST(refusal([] { checked_int<int>("option --n", "", at_least(1)); }) != "");
  BOOST_TEST(refusal([] { checked_int<int>("option --n", " 3", at_least(1)); }) != "");
  BOOST_TEST(refusal([] { checked_int<int>("option --n", "3MB", at_least(1)); }) != "");
  // Typed values: 2.0 from JSON is whole; 2.5 and 2^32 + 2 are not ints.
  BOOST_TEST(checked_int<int>("f: \"k\"", 2.0, at_least(1), "2.0") == 2);
  BOOST_TEST(refusal([] { checked_int<int>("f: \"k\"", 2.5, at_least(1), "2.5"); }) ==
             "f: \"k\": '2.5' is not allowed (allowed: an integer, >= 1)");
  BOOST_TEST(refusal([] { checked_int<int>("f: \"k\"", 4294967298.0, at_least(1), "4294967298"); }) != "");
  // 0 with its meaning.
  BOOST_TEST(checked_int<int>("option --pack", "0", at_least(2, "off")) == 0);
  BOOST_TEST(refusal([] { checked_int<int>("option --pack", "1", at_least(2, "off")); }) ==
             "option --pack: '1' is not allowed (allowed: an integer, 0 (off) or >= 2)");
}

BOOST_AUTO_TEST_CASE(floats_are_finite_and_in_range) {
  BOOST_TEST(checked_float("option --mfu", "0.4", above_between(0, 1)) == 0.4);
  BOOST_TEST(checked_float("option --mfu", "1", above_between(0, 1)) == 1.0);
  for (const char* bad : {"0", "2", "nan", "inf", "-inf", "0.4x", "", "1e999"})
    BOOST_TEST(refusal([&] { checked_float("option --mfu", bad, above_between(0, 1)); }) ==
                   fmt::format("option --mfu: '{}' is not allowed (allowed: 0 < v <= 1)", bad),
               bad);
  BOOST_TEST(refusal([] { checked_float("x", INFINITY, above(0), "inf"); }) ==
             "x: 'inf' is not allowed (allowed: finite, > 0)");
  BOOST_TEST(refusal([] { checked_float("x", -10000.0, above(1), "-10000.0"); }) ==
             "x: '-10000.0' is not allowed (allowed: finite, > 1)");
}

BOOST_AUTO_TEST_SUITE_END()
