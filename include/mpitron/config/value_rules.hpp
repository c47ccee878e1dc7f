// The rules numeric values from outside must meet, in one place: job keys (config/job_config.cpp),
// command-line options (cli/option_values.hpp), Hugging Face config.json fields (checkpoint/
// hf_import.cpp) and machine profiles (plan/profile.cpp) all check with a Range and report with
// its text, so the same value is refused with the same words wherever it enters.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

namespace mpitron {

// The values a numeric field allows: [lo, hi] with open or closed ends (an infinite end is no
// bound), always finite, plus 0 where 0 means something else (`zero`: "from the preset", "off").
struct Range {
  double lo = -INFINITY, hi = INFINITY;
  bool lo_open = false, hi_open = false;
  std::string zero;  // non-empty: 0 is allowed too, and means this

  bool allows(double v, bool with_zero = true) const;
  // "finite, > 0", "0 <= v < 1", "0 (off) or > 0"; `integer` drops "finite" (ints always are).
  std::string text(bool integer, bool with_zero = true) const;
  // This range cut to what an integer type holds (an int field never takes 4294967298).
  template <class T>
  Range within() const {
    Range r = *this;
    if (!(r.hi <= static_cast<double>(std::numeric_limits<T>::max())))
      r.hi = static_cast<double>(std::numeric_limits<T>::max()), r.hi_open = false;
    if (!(r.lo >= static_cast<double>(std::numeric_limits<T>::lowest())))
      r.lo = static_cast<double>(std::numeric_limits<T>::lowest()), r.lo_open = false;
    return r;
  }
};

Range at_least(double lo, std::string zero = {});
Range above(double lo, std::string zero = {});
Range between(double lo, double hi, bool hi_open = false);
Range above_between(double lo, double hi);  // lo < v <= hi (a fraction such as MFU)
Range any_finite();
// A normalisation epsilon (model.norm_eps, config.json's rms_norm_eps): the model keeps it as a
// float, in which 1e-60 is 0; 1e-30 <= v < 1 (with `zero` as the job key's "from the preset").
Range epsilon_range(std::string zero = {});

// The whole text as an integer (decimal, optional sign; no fraction, exponent or unit) or as a
// finite-or-not floating-point number; nullopt when it is not one.
std::optional<int64_t> int_from_text(std::string_view text);
std::optional<double> float_from_text(std::string_view text);

// "an integer, >= 1": the rule of an integer field.
std::string integer_rule(const Range& r);

// A value of the wrong kind or outside its range: UsageError "WHAT: VALUE (allowed: RULE)".
[[noreturn]] void value_refused(const std::string& what, const std::string& value, const std::string& allowed);

// The value checked against its range (after the kind): returns it, or value_refused. `what`
// names where it came from ("option --mfu", "config.json: \"rope_theta\"", "profile.toml: [machine] nodes").
// The rule an integer field states: its own range, and the type's limit only for a value that
// is inside the first but does not fit the type (4294967298 for an int: "1 <= v <= 2147483647").
template <class T>
std::string integer_rule_for(const Range& r, double v) {
  return integer_rule(r.allows(v) ? r.within<T>() : r);
}
template <class T = int64_t>
T checked_int(const std::string& what, std::string_view text, const Range& r) {
  const auto v = int_from_text(text);
  if (!v || !r.within<T>().allows(static_cast<double>(*v)))
    value_refused(what, std::string(text), integer_rule_for<T>(r, v ? static_cast<double>(*v) : NAN));
  return static_cast<T>(*v);
}
double checked_float(const std::string& what, std::string_view text, const Range& r);
// An already typed value (JSON, TOML): must be integral for an integer field.
template <class T = int64_t>
T checked_int(const std::string& what, double v, const Range& r, const std::string& shown) {
  if (!(v == std::floor(v)) || !r.within<T>().allows(v))
    value_refused(what, shown, integer_rule_for<T>(r, v == std::floor(v) ? v : NAN));
  return static_cast<T>(v);
}
double checked_float(const std::string& what, double v, const Range& r, const std::string& shown);

}  // namespace mpitron
