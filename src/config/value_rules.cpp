// Ranges and number parsing for every value from outside (config/value_rules.hpp).
#include "mpitron/config/value_rules.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cstdlib>

#include "mpitron/core/error.hpp"

namespace mpitron {

bool Range::allows(double v, bool with_zero) const {
  if (with_zero && !zero.empty() && v == 0) return true;
  if (!std::isfinite(v)) return false;
  if (std::isfinite(lo) && (lo_open ? v <= lo : v < lo)) return false;
  if (std::isfinite(hi) && (hi_open ? v >= hi : v > hi)) return false;
  return true;
}

std::string Range::text(bool integer, bool with_zero) const {
  std::string b;
  if (std::isfinite(lo) && std::isfinite(hi))
    b = fmt::format("{} {} v {} {}", lo, lo_open ? "<" : "<=", hi_open ? "<" : "<=", hi);
  else if (std::isfinite(lo))
    b = fmt::format("{} {}", lo_open ? ">" : ">=", lo);
  else if (std::isfinite(hi))
    b = fmt::format("{} {}", hi_open ? "<" : "<=", hi);
  if (!integer && !(std::isfinite(lo) && std::isfinite(hi)))
    b = b.empty() ? "finite" : "finite, " + b;
  if (with_zero && !zero.empty()) b = fmt::format("0 ({}) or {}", zero, b);
  return b;
}

Range at_least(double lo, std::string zero) { return {lo, INFINITY, false, false, std::move(zero)}; }
Range above(double lo, std::string zero) { return {lo, INFINITY, true, false, std::move(zero)}; }
Range between(double lo, double hi, bool hi_open) { return {lo, hi, false, hi_open, {}}; }
Range above_between(double lo, double hi) { return {lo, hi, true, false, {}}; }
Range any_finite() { return {}; }
Range epsilon_range(std::string zero) { return {1e-30, 1, false, true, std::move(zero)}; }

std::optional<int64_t> int_from_text(std::string_view text) {
  std::string_view v = text;
  if (!v.empty() && v.front() == '+') v.remove_prefix(1);
  if (v.empty()) return std::nullopt;
  int64_t out = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || p != v.data() + v.size()) return std::nullopt;
  return out;
}

std::optional<double> float_from_text(std::string_view text) {
  // strtod, not from_chars: it takes "inf", "nan" and hex as well, which the range then refuses
  // by name instead of "not a number".
  const std::string s(text);
  if (s.empty() || std::isspace(static_cast<unsigned char>(s.front()))) return std::nullopt;
  char* end = nullptr;
  const double x = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size()) return std::nullopt;
  return x;
}

std::string integer_rule(const Range& r) {
  const std::string t = r.text(true);
  return t.empty() ? "an integer" : "an integer, " + t;
}

void value_refused(const std::string& what, const std::string& value, const std::string& allowed) {
  usage_fail("{}: '{}' is not allowed (allowed: {})", what, value, allowed);
}

double checked_float(const std::string& what, std::string_view text, const Range& r) {
  const auto v = float_from_text(text);
  if (!v || !r.allows(*v)) value_refused(what, std::string(text), r.text(false));
  return *v;
}

double checked_float(const std::string& what, double v, const Range& r, const std::string& shown) {
  if (!r.allows(v)) value_refused(what, shown, r.text(false));
  return v;
}

}  // namespace mpitron
