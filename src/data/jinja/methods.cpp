// The methods of str and dict, attribute and item lookup, and iteration, as Python (and jinja2
// 3.1's sandbox-free environment) define them.
#include <algorithm>
#include <set>

#include "builtin_args.hpp"

namespace mpitron::jinja {

namespace {

Value str_method(const Value& obj, const std::string& name, bool* found) {
  *found = true;
  const std::string s = obj.s;
  const std::string what = "str." + name;
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    return bound(what, [s, name, what](Context& c, std::vector<Value>& a, Kwargs& kw, Pos p) {
      if (!kw.empty()) c.runtime(p, fmt::format("{}() takes no keyword arguments", what));
      if (a.size() > 1) c.runtime(p, fmt::format("{} expected at most 1 argument, got {}", name, a.size()));
      std::string chars;
      const bool have = !a.empty() && a[0].kind != Value::none;
      if (have) chars = str_arg(c, a[0], fmt::format("{} arg", name), p);
      return Value::str(py_strip(s, have ? &chars : nullptr, name != "rstrip", name != "lstrip"));
    });
  }
  if (name == "split" || name == "rsplit") {
    return bound(what, [s, name, what](Context& c, std::vector<Value>& a, Kwargs& kw, Pos p) {
      Args args{c, what, a, kw, p, {}};
      Value sep = args.get(0, "sep", Value::null()), maxs = args.get(1, "maxsplit", Value::of(int64_t{-1}));
      args.done(2, {"sep", "maxsplit"});
      std::string sp;
      if (sep.kind != Value::none) {
        sp = str_arg(c, sep, "must be str or None, not", p);
        if (sp.empty()) c.runtime(p, "empty separator");
      }
      std::vector<Value> out;
      for (auto& x : py_split(s, sep.kind == Value::none ? nullptr : &sp, int_arg(c, maxs, "maxsplit", p), name == "rsplit"))
        out.push_back(Value::str(std::move(x)));
      return Value::of_list(std::move(out));
    });
  }
  if (name == "startswith" || name == "endswith") {
    return bound(what, [s, name, what](Context& c, std::vector<Value>& a, Kwargs& kw, Pos p) {
      if (!kw.empty()) c.runtime(p, fmt::format("{}() takes no keyword arguments", what));
      if (a.size() != 1) {
        if (a.size() > 1) c.unsupported(p, fmt::format("{}'s start and end arguments are not supported", what));
        c.runtime(p, fmt::format("{}() takes at least 1 argument (0 given)", name));
      }
      std::vector<std::string> cands;
      if (a[0].kind == Value::list && a[0].tuple) {
        for (auto& x : *a[0].l) cands.push_back(str_arg(c, x, "tuple for " + name + " must only contain str, not", p));
      } else if (a[0].kind == Value::string) {
        cands.push_back(a[0].s);
      } else {
        c.runtime(p, fmt::format("{} first arg must be str or a tuple of str, not {}", name, type_name(a[0])));
      }
      for (auto& x : cands) {
        if (name == "startswith" ? s.compare(0, x.size(), x) == 0
                                 : s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0)
          return Value::of(true);
      }
      return Value::of(false);
    });
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    return bound(what, [s, name, what](Context& c, std::vector<Value>& a, Kwargs& kw, Pos p) {
      if (!a.empty() || !kw.empty()) c.runtime(p, fmt::format("{}() takes no arguments", what));
      std::string out, why;
      const bool ok = name == "upper" ? py_upper(s, &out, &why)
                      : name == "lower" ? py_lower(s, &out, &why)
                      : name == "title" ? py_title(s, &out, &why)
                                        : py_capitalize(s, &out, &why);
      return Value::str(cased(c, ok, why, out, p));
    });
  }
  if (name == "replace") {
    return bound(what, [s, what](Context& c, std::vector<Value>& a, Kwargs& kw, Pos p) {
      Args args{c, what, a, kw, p, {}};
      Value o = args.get(0, "old"), n = args.get(1, "new"), cnt = args.get(2, "count", Value::of(int64_t{-1}));
      args.done(3, {"old", "new", "count"});
      if (o.kind == Value::undefined || n.kind == Value::undefined)
        c.runtime(p, "replace expected at least 2 arguments");
      return Value::str(py_replace(s, str_arg(c, o, "replace() argument 1", p), str_arg(c, n, "replace() argument 2", p),
                                   int_arg(c, cnt, "count", p)));
    });
  }
  if (name == "removeprefix" || name == "removesuffix") {
    return bound(what, [s, name, what](Context& c, std::vector<Value>& a, Kwargs& kw, Pos p) {
      if (a.size() != 1 || !kw.empty()) c.runtime(p, fmt::format("{}() takes exactly one argument", what));
      const std::string x = str_arg(c, a[0], name + "() argument", p);
      if (name == "removeprefix") return Value::str(s.compare(0, x.size(), x) == 0 ? s.substr(x.size()) : s);
      const bool ends = s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
      return Value::str(ends ? s.substr(0, s.size() - x.size()) : s);
    });
  }
  if (name == "find" || name == "rfind" || name == "count") {
    return bound(what, [s, name, what](Context& c, std::vector<Value>& a, Kwargs& kw, Pos p) {
      if (!kw.empty()) c.runtime(p, fmt::format("{}() takes no keyword arguments", what));
      if (a.size() != 1) {
        if (a.size() > 1) c.unsupported(p, fmt::format("{}'s start and end arguments are not supported", what));
        c.runtime(p, fmt::format("{}() takes at least 1 argument (0 given)", name));
      }
      const std::string x = str_arg(c, a[0], "must be str, not", p);
      if (name == "count") {
        if (x.empty()) return Value::of(py_len(s) + 1);
        int64_t n = 0;
        for (size_t at = s.find(x); at != std::string::npos; at = s.find(x, at + x.size())) ++n;
        return Value::of(n);
      }
      const size_t k = name == "find" ? s.find(x) : s.rfind(x);
      if (k == std::string::npos) return Value::of(int64_t{-1});
      return Value::of(py_len(std::string_view(s).substr(0, k)));
    });
  }
  if (name == "join") {
    return bound(what, [s, what](Context& c, std::vector<Value>& a, Kwargs& kw, Pos p) {
      if (a.size() != 1 || !kw.empty()) c.runtime(p, fmt::format("{}() takes exactly one argument", what));
      std::string out;
      size_t k = 0;
      for (auto& x : iterate(c, a[0], p)) {
        if (x.kind != Value::string)
          c.runtime(p, fmt::format("sequence item {}: expected str instance, {} found", k, type_name(x)));
        if (k++) out += s;
        out += x.s;
      }
      return Value::str(std::move(out));
    });
  }
  *found = false;
  return Value::undef();
}

bool python_str_method(const std::string& n) {
  static const std::set<std::string> s = {
      "casefold", "center", "encode", "expandtabs", "format", "format_map", "index", "isalnum", "isalpha", "isascii",
      "isdecimal", "isdigit", "isidentifier", "islower", "isnumeric", "isprintable", "isspace", "istitle", "isupper",
      "ljust", "maketrans", "partition", "rindex", "rjust", "rpartition", "splitlines", "swapcase", "translate",
      "zfill"};
  return s.count(n) > 0;
}
}  // namespace

std::vector<Value> iterate(Context& c, const Value& v, Pos p) {
  switch (v.kind) {
    case Value::undefined: return {};
    case Value::list: return *v.l;
    case Value::string: {
      std::vector<Value> out;
      for (uint32_t cp : code_points(v.s)) {
        std::string s;
        append_utf8(s, cp);
        out.push_back(Value::str(std::move(s)));
      }
      return out;
    }
    case Value::dict:
      if (!v.ns && !v.loop) {
        std::vector<Value> out;
        for (auto& kv : v.d->items) out.push_back(Value::str(kv.first));
        return out;
      }
      break;
    default: break;
  }
  c.runtime(p, fmt::format("'{}' object is not iterable", type_name(v)));
}

Value method(Context& c, const Value& obj, const std::string& name, Pos p, bool* found) {
  *found = false;
  if (obj.kind == Value::string) {
    Value m = str_method(obj, name, found);
    if (*found) return m;
    if (python_str_method(name)) c.unsupported(p, fmt::format("the str method '{}' is not supported", name));
    return Value::undef();
  }
  if (obj.kind == Value::dict && !obj.ns && !obj.loop) {
    auto d = obj.d;
    *found = true;
    if (name == "get") {
      return bound("dict.get", [d](Context& cx, std::vector<Value>& a, Kwargs& kw, Pos pp) {
        if (!kw.empty()) cx.runtime(pp, "dict.get() takes no keyword arguments");
        if (a.empty() || a.size() > 2) cx.runtime(pp, fmt::format("get expected 1 or 2 arguments, got {}", a.size()));
        const Value* v = a[0].kind == Value::string ? d->find(a[0].s) : nullptr;
        return v ? *v : a.size() > 1 ? a[1] : Value::null();
      });
    }
    if (name == "items" || name == "keys" || name == "values") {
      return bound("dict." + name, [d, name](Context& cx, std::vector<Value>& a, Kwargs& kw, Pos pp) {
        if (!a.empty() || !kw.empty()) cx.runtime(pp, fmt::format("dict.{}() takes no arguments", name));
        std::vector<Value> out;
        for (auto& [k, v] : d->items) {
          if (name == "items") out.push_back(Value::of_list({Value::str(k), v}, true));
          else out.push_back(name == "keys" ? Value::str(k) : v);
        }
        Value r = Value::of_list(std::move(out));
        r.s = "dict_" + name;  // prints as dict_items([...])
        return r;
      });
    }
    *found = false;
    // The sandbox hides the methods that modify (an undefined value); the others are refused.
    static const std::set<std::string> modify = {"clear", "pop", "popitem", "setdefault", "update"};
    if (modify.count(name)) {
      *found = true;
      return Value::undef(fmt::format("access to attribute '{}' of 'dict' object is unsafe.", name));
    }
    if (name == "copy" || name == "fromkeys") c.unsupported(p, fmt::format("the dict method '{}' is not supported", name));
    return Value::undef();
  }
  if (obj.kind == Value::list) {
    static const std::set<std::string> modify = {"append", "clear", "extend", "insert", "pop", "remove", "reverse",
                                                 "sort"};
    if (modify.count(name)) {
      *found = true;
      return Value::undef(fmt::format("access to attribute '{}' of '{}' object is unsafe.", name, type_name(obj)));
    }
    if (name == "copy" || name == "count" || name == "index")
      c.unsupported(p, fmt::format("the list method '{}' is not supported", name));
    return Value::undef();
  }
  if (obj.kind == Value::integer || obj.kind == Value::floating || obj.kind == Value::boolean) {
    static const std::set<std::string> ms = {"real", "imag", "numerator", "denominator", "conjugate", "bit_length",
                                             "bit_count", "to_bytes", "as_integer_ratio", "is_integer", "hex"};
    if (ms.count(name)) c.unsupported(p, fmt::format("the number attribute '{}' is not supported", name));
  }
  return Value::undef();
}

namespace {

std::string object_name(const Value& obj) { return std::string(type_name(obj)) + " object"; }

}  // namespace

Value get_attr(Context& c, const Value& obj, const std::string& name, Pos p) {
  if (obj.kind == Value::undefined) c.runtime(p, undefined_message(obj));
  if (obj.kind == Value::dict && (obj.ns || obj.loop)) {
    if (const Value* v = obj.d->find(name)) return *v;
    return Value::undef(fmt::format("'{}' has no attribute '{}'", object_name(obj), name));
  }
  bool found = false;
  Value m = method(c, obj, name, p, &found);
  if (found) return m;
  if (obj.kind == Value::dict)
    if (const Value* v = obj.d->find(name)) return *v;
  return Value::undef(fmt::format("'{}' has no attribute '{}'", object_name(obj), name));
}

Value get_item(Context& c, const Value& obj, const Value& key, Pos p) {
  if (obj.kind == Value::undefined) c.runtime(p, undefined_message(obj));
  const bool int_key = key.kind == Value::integer || key.kind == Value::boolean;
  if (obj.kind == Value::list || obj.kind == Value::string) {
    if (int_key) {
      int64_t i = key.kind == Value::boolean ? key.b : key.i;
      if (obj.kind == Value::list) {
        const auto n = static_cast<int64_t>(obj.l->size());
        if (i < 0) i += n;
        if (i >= 0 && i < n) return (*obj.l)[static_cast<size_t>(i)];
      } else {
        const auto cps = code_points(obj.s);
        const auto n = static_cast<int64_t>(cps.size());
        if (i < 0) i += n;
        if (i >= 0 && i < n) {
          std::string s;
          append_utf8(s, cps[static_cast<size_t>(i)]);
          return Value::str(std::move(s));
        }
      }
      return Value::undef(fmt::format("{} has no element {}", object_name(obj), repr(key)));
    }
  } else if (obj.kind == Value::dict && !obj.ns && !obj.loop && key.kind == Value::string) {
    if (const Value* v = obj.d->find(key.s)) return *v;
  }
  if (key.kind == Value::string) return get_attr(c, obj, key.s, p);
  return Value::undef(fmt::format("{} has no element {}", object_name(obj), repr(key)));
}

}  // namespace mpitron::jinja
