// What the builtins (builtins.cpp: filters, tests, globals; methods.cpp: str and dict methods,
// attributes and items) share: their arguments, read as Python reads them.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "jinja_impl.hpp"

namespace mpitron::jinja {

// Positional-or-keyword arguments: the value of parameter `k` named `name`, or `def`.
struct Args {
  Context& c;
  const std::string& what;
  std::vector<Value>& pos;
  Kwargs& kw;
  Pos p;
  std::vector<std::string> names;  // every parameter, in order (for unknown-keyword checks)

  Value get(size_t k, const std::string& name, Value def = Value::undef("")) {
    Value v = def;
    bool set = false;
    if (k < pos.size()) {
      v = pos[k];
      set = true;
    }
    for (auto& [n, x] : kw)
      if (n == name) {
        if (set) c.runtime(p, fmt::format("{}() got multiple values for argument '{}'", what, name));
        v = x;
        set = true;
      }
    return v;
  }
  bool given(size_t k, const std::string& name) const {
    if (k < pos.size()) return true;
    for (auto& kv : kw)
      if (kv.first == name) return true;
    return false;
  }
  void done(size_t max_pos, std::vector<std::string> params) {
    if (pos.size() > max_pos)
      c.runtime(p, fmt::format("{}() takes at most {} argument(s) ({} given)", what, max_pos, pos.size()));
    for (auto& [n, x] : kw)
      if (std::find(params.begin(), params.end(), n) == params.end())
        c.runtime(p, fmt::format("{}() got an unexpected keyword argument '{}'", what, n));
  }
};

inline std::string str_arg(Context& c, const Value& v, const std::string& what, Pos p) {
  if (v.kind != Value::string)
    c.runtime(p, fmt::format("{} must be str, not {}", what, type_name(v)));
  return v.s;
}

inline int64_t int_arg(Context& c, const Value& v, const std::string& what, Pos p) {
  if (v.kind != Value::integer && v.kind != Value::boolean)
    c.runtime(p, fmt::format("{} must be an integer, not {}", what, type_name(v)));
  return v.kind == Value::boolean ? v.b : v.i;
}

inline std::string cased(Context& c, bool ok, const std::string& why, std::string out, Pos p) {
  if (!ok) c.unsupported(p, why);
  return out;
}

// Python's str.replace over code points (an empty `old` inserts `new` around every character).
inline std::string py_replace(const std::string& s, const std::string& old, const std::string& neu, int64_t count) {
  std::string out;
  if (old.empty()) {
    const auto cps = code_points(s);
    int64_t done = 0;
    for (size_t k = 0; k <= cps.size(); ++k) {
      if (count < 0 || done < count) {
        out += neu;
        ++done;
      }
      if (k < cps.size()) append_utf8(out, cps[k]);
    }
    return out;
  }
  size_t at = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t k = s.find(old, at);
    if (k == std::string::npos) break;
    out.append(s, at, k - at);
    out += neu;
    at = k + old.size();
    ++done;
  }
  out.append(s, at, std::string::npos);
  return out;
}

inline Value bound(const std::string& name, std::function<Value(Context&, std::vector<Value>&, Kwargs&, Pos)> f) {
  return Value::of_function(name, std::move(f));
}

}  // namespace mpitron::jinja
