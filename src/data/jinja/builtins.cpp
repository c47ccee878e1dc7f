// Filters, tests and globals as jinja2 (3.1) defines them; transformers' tojson. The methods of str
// and dict, attributes and items: methods.cpp.
#include <algorithm>
#include <cmath>
#include <set>

#include "builtin_args.hpp"

namespace mpitron::jinja {

namespace {

const std::set<std::string>& filters() {
  static const std::set<std::string> s = {"abs",     "capitalize", "count",     "d",      "default", "first",
                                          "float",   "int",        "items",     "join",   "last",    "length",
                                          "list",    "lower",      "map",       "reject", "rejectattr", "replace",
                                          "reverse", "safe",       "select",    "selectattr", "string", "title",
                                          "tojson",  "trim",       "upper"};
  return s;
}

const std::set<std::string>& tests() {
  static const std::set<std::string> s = {
      "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "==", "even", "false", "float", "ge", ">=",
      "gt", ">", "greaterthan", "in", "integer", "iterable", "le", "<=", "lt", "<", "lessthan", "mapping", "ne",
      "!=", "none", "number", "odd", "sequence", "string", "true", "undefined", "sameas"};
  return s;
}

using Kind = TemplateError::Kind;

}  // namespace

bool known_filter(const std::string& name) { return filters().count(name) > 0; }
bool known_test(const std::string& name) { return tests().count(name) > 0; }

bool jinja2_filter(const std::string& name) {
  static const std::set<std::string> s = {
      "attr", "batch", "center", "dictsort", "e", "escape", "filesizeformat", "forceescape", "format", "groupby",
      "indent", "max", "min", "pprint", "random", "round", "slice", "sort", "striptags", "sum", "truncate", "unique",
      "urlencode", "urlize", "wordcount", "wordwrap", "xmlattr"};
  return s.count(name) > 0;
}

bool jinja2_test(const std::string& name) {
  static const std::set<std::string> s = {"escaped", "filter", "test", "lower", "upper"};
  return s.count(name) > 0;
}

Value lookup_global(const std::string& name) {
  if (name == "raise_exception") {
    static const Value f = Value::of_function("raise_exception", [](Context& c, std::vector<Value>& a, Kwargs&, Pos p) -> Value {
      c.fail(Kind::refusal, p, a.empty() ? std::string() : to_str(a[0]));
    });
    return f;
  }
  if (name == "namespace") {
    static const Value f = Value::of_function("namespace", [](Context& c, std::vector<Value>& a, Kwargs& kw, Pos p) {
      auto d = std::make_shared<Dict>();
      if (a.size() > 1) c.runtime(p, "namespace() takes at most one positional argument");
      if (!a.empty()) {
        if (a[0].kind != Value::dict || a[0].ns || a[0].loop)
          c.unsupported(p, "namespace() with a positional argument other than a dict is not supported");
        d->items = a[0].d->items;
      }
      for (auto& [k, v] : kw) d->set(k, v);
      Value v = Value::of_dict(std::move(d));
      v.ns = true;
      return v;
    });
    return f;
  }
  if (name == "dict") {
    static const Value f = Value::of_function("dict", [](Context& c, std::vector<Value>& a, Kwargs& kw, Pos p) {
      if (!a.empty()) c.unsupported(p, "dict() with positional arguments is not supported");
      auto d = std::make_shared<Dict>();
      for (auto& [k, v] : kw) d->set(k, v);
      return Value::of_dict(std::move(d));
    });
    return f;
  }
  if (name == "range") {
    static const Value f = Value::of_function("range", [](Context& c, std::vector<Value>& a, Kwargs& kw, Pos p) {
      if (!kw.empty()) c.runtime(p, "range() takes no keyword arguments");
      if (a.empty() || a.size() > 3) c.runtime(p, fmt::format("range expected 1 to 3 arguments, got {}", a.size()));
      int64_t start = 0, stop, step = 1;
      if (a.size() == 1) {
        stop = int_arg(c, a[0], "range() argument", p);
      } else {
        start = int_arg(c, a[0], "range() argument", p);
        stop = int_arg(c, a[1], "range() argument", p);
        if (a.size() == 3) step = int_arg(c, a[2], "range() argument", p);
      }
      if (step == 0) c.runtime(p, "range() arg 3 must not be zero");
      std::vector<Value> v;
      for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) {
        if (v.size() >= 100000) c.runtime(p, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
        v.push_back(Value::of(k));
      }
      return Value::of_list(std::move(v));
    });
    return f;
  }
  return Value::undef();
}

bool apply_test(Context& c, const std::string& name, const Value& v, std::vector<Value>& a, Pos p) {
  auto arg = [&](size_t k) -> const Value& {
    if (k >= a.size()) c.runtime(p, fmt::format("test '{}' needs {} argument(s)", name, k + 1));
    return a[k];
  };
  auto cmp = [&](const char* o, const Value& x, const Value& y) {
    if (x.kind == Value::undefined || y.kind == Value::undefined)
      c.runtime(p, undefined_message(x.kind == Value::undefined ? x : y));
    std::string why;
    bool r = false;
    const std::string op = o;
    if (op == "<") r = less(x, y, &why);
    else if (op == ">") r = less(y, x, &why);
    else if (op == "<=") r = less(x, y, &why) || (why.empty() && equal(x, y));
    else r = less(y, x, &why) || (why.empty() && equal(x, y));
    if (!why.empty()) c.runtime(p, why);
    return r;
  };
  if (name == "defined") return v.kind != Value::undefined;
  if (name == "undefined") return v.kind == Value::undefined;
  if (name == "none") return v.kind == Value::none;
  if (name == "boolean") return v.kind == Value::boolean;
  if (name == "true") return v.kind == Value::boolean && v.b;
  if (name == "false") return v.kind == Value::boolean && !v.b;
  if (name == "string") return v.kind == Value::string;
  if (name == "number") return v.is_number();
  if (name == "integer") return v.kind == Value::integer;
  if (name == "float") return v.kind == Value::floating;
  if (name == "mapping") return v.kind == Value::dict && !v.ns && !v.loop;
  if (name == "sequence") return v.kind == Value::string || v.kind == Value::list || (v.kind == Value::dict && !v.ns && !v.loop);
  if (name == "iterable")
    return v.kind == Value::undefined || v.kind == Value::string || v.kind == Value::list ||
           (v.kind == Value::dict && !v.ns && !v.loop);
  if (name == "callable") return v.kind == Value::function;
  if (name == "eq" || name == "equalto" || name == "==") return equal(v, arg(0));
  if (name == "ne" || name == "!=") return !equal(v, arg(0));
  if (name == "lt" || name == "<" || name == "lessthan") return cmp("<", v, arg(0));
  if (name == "le" || name == "<=") return cmp("<=", v, arg(0));
  if (name == "gt" || name == ">" || name == "greaterthan") return cmp(">", v, arg(0));
  if (name == "ge" || name == ">=") return cmp(">=", v, arg(0));
  if (name == "in") {
    const Value& seq = arg(0);
    if (seq.kind == Value::string) {
      if (v.kind != Value::string)
        c.runtime(p, fmt::format("'in <string>' requires string as left operand, not {}", type_name(v)));
      return seq.s.find(v.s) != std::string::npos;
    }
    if (seq.kind == Value::list) {
      for (auto& x : *seq.l)
        if (equal(x, v)) return true;
      return false;
    }
    if (seq.kind == Value::dict && !seq.ns && !seq.loop) return v.kind == Value::string && seq.d->find(v.s);
    if (seq.kind == Value::undefined) return false;
    c.runtime(p, fmt::format("argument of type '{}' is not iterable", type_name(seq)));
  }
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (v.kind == Value::undefined) c.runtime(p, undefined_message(v));
    if (v.kind != Value::integer && v.kind != Value::boolean)
      c.unsupported(p, fmt::format("test '{}' of a {} is not supported", name, type_name(v)));
    const int64_t x = v.kind == Value::boolean ? v.b : v.i;
    if (name == "odd") return ((x % 2) + 2) % 2 == 1;
    if (name == "even") return x % 2 == 0;
    const int64_t d = int_arg(c, arg(0), "divisibleby's argument", p);
    if (d == 0) c.runtime(p, "integer modulo by zero");
    return x % d == 0;
  }
  if (name == "sameas") {
    const Value& o = arg(0);
    if ((v.kind == Value::none || v.kind == Value::boolean) || (o.kind == Value::none || o.kind == Value::boolean))
      return v.kind == o.kind && (v.kind == Value::none || v.b == o.b);
    c.unsupported(p, "test 'sameas' is supported for none, true and false only");
  }
  c.unsupported(p, fmt::format("test '{}' is not supported", name));
}

Value apply_filter(Context& c, const std::string& name, Value v, std::vector<Value>& a, Kwargs& kw, Pos p) {
  const std::string what = name;
  Args args{c, what, a, kw, p, {}};
  auto none_args = [&] { args.done(0, {}); };
  if (name == "length" || name == "count") {
    none_args();
    switch (v.kind) {
      case Value::undefined: return Value::of(int64_t{0});
      case Value::string: return Value::of(py_len(v.s));
      case Value::list:
        if (v.s == "generator") break;
        return Value::of(v.l->size());
      case Value::dict:
        if (!v.ns && !v.loop) return Value::of(v.d->items.size());
        break;
      default: break;
    }
    c.runtime(p, fmt::format("object of type '{}' has no len()", type_name(v)));
  }
  if (name == "trim") {
    Value chars = args.get(0, "chars", Value::null());
    args.done(1, {"chars"});
    std::string cs;
    if (chars.kind != Value::none) cs = str_arg(c, chars, "trim's chars", p);
    return Value::str(py_strip(to_str(v), chars.kind == Value::none ? nullptr : &cs, true, true));
  }
  if (name == "tojson") {
    JsonOptions o;
    Value ea = args.get(0, "ensure_ascii", Value::of(false)), ind = args.get(1, "indent", Value::null()),
          sep = args.get(2, "separators", Value::null()), sk = args.get(3, "sort_keys", Value::of(false));
    args.done(4, {"ensure_ascii", "indent", "separators", "sort_keys"});
    o.ensure_ascii = truthy(ea);
    o.sort_keys = truthy(sk);
    if (ind.kind == Value::integer) {
      o.indent_set = true;
      o.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, ind.i)), ' ');
    } else if (ind.kind == Value::string) {
      o.indent_set = true;
      o.indent = ind.s;
    } else if (ind.kind != Value::none) {
      c.unsupported(p, fmt::format("tojson's indent as a {} is not supported", type_name(ind)));
    }
    if (sep.kind == Value::list && sep.l->size() == 2 && (*sep.l)[0].kind == Value::string &&
        (*sep.l)[1].kind == Value::string) {
      o.item_sep = (*sep.l)[0].s;
      o.key_sep = (*sep.l)[1].s;
      if (o.item_sep.empty() || o.key_sep.empty()) c.unsupported(p, "empty tojson separators are not supported");
    } else if (sep.kind != Value::none) {
      c.runtime(p, "tojson's separators must be a pair of strings");
    }
    std::string out, why;
    if (!py_json(v, o, &out, &why)) c.runtime(p, why);
    return Value::str(std::move(out));
  }
  if (name == "default" || name == "d") {
    Value def = args.get(0, "default_value", Value::str("")), boolean = args.get(1, "boolean", Value::of(false));
    args.done(2, {"default_value", "boolean"});
    if (v.kind == Value::undefined || (truthy(boolean) && !truthy(v))) return def;
    return v;
  }
  if (name == "join") {
    Value d = args.get(0, "d", Value::str("")), attr = args.get(1, "attribute", Value::null());
    args.done(2, {"d", "attribute"});
    std::string out, sep = to_str(d);
    size_t k = 0;
    for (auto& x : iterate(c, v, p)) {
      if (k++) out += sep;
      out += to_str(attr.kind == Value::none ? x : get_item(c, x, attr, p));
    }
    return Value::str(std::move(out));
  }
  if (name == "upper" || name == "lower" || name == "capitalize") {
    none_args();
    std::string out, why;
    const std::string s = to_str(v);
    const bool ok = name == "upper" ? py_upper(s, &out, &why) : name == "lower" ? py_lower(s, &out, &why)
                                                                                : py_capitalize(s, &out, &why);
    return Value::str(cased(c, ok, why, out, p));
  }
  if (name == "title") {  // jinja2's: each word (split at whitespace, -, (, {, [, <) capitalized
    none_args();
    const auto cps = code_points(to_str(v));
    std::string out;
    size_t k = 0;
    auto sep = [](uint32_t x) { return py_space(x) || x == '-' || x == '(' || x == '{' || x == '[' || x == '<'; };
    while (k < cps.size()) {
      size_t e = k;
      const bool is_sep = sep(cps[k]);
      while (e < cps.size() && sep(cps[e]) == is_sep) ++e;
      const std::string part = utf8(cps, k, e);
      if (is_sep) {
        out += part;
      } else {
        std::string head, tail, why;
        const bool ok = py_upper(utf8(cps, k, k + 1), &head, &why) && py_lower(utf8(cps, k + 1, e), &tail, &why);
        out += cased(c, ok, why, head + tail, p);
      }
      k = e;
    }
    return Value::str(std::move(out));
  }
  if (name == "items") {
    none_args();
    std::vector<Value> out;
    if (v.kind != Value::undefined) {
      if (v.kind != Value::dict || v.ns || v.loop) c.runtime(p, "Can only get item pairs from a mapping.");
      for (auto& [k, x] : v.d->items) out.push_back(Value::of_list({Value::str(k), x}, true));
    }
    Value r = Value::of_list(std::move(out));
    r.s = "generator";  // jinja2 returns a generator: iterable, not printable here
    return r;
  }
  if (name == "first" || name == "last") {
    none_args();
    std::vector<Value> items = iterate(c, v, p);
    if (items.empty()) return Value::undef(fmt::format("No {} item, sequence was empty.", name));
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") {
    none_args();
    return Value::of_list(iterate(c, v, p));
  }
  if (name == "string" || name == "safe") {
    none_args();
    return Value::str(to_str(v));
  }
  if (name == "abs") {
    none_args();
    if (v.kind == Value::undefined) c.runtime(p, undefined_message(v));
    if (!v.is_number()) c.runtime(p, fmt::format("bad operand type for abs(): '{}'", type_name(v)));
    if (v.kind == Value::floating) return Value::of(std::fabs(v.f));
    const int64_t x = v.kind == Value::boolean ? v.b : v.i;
    if (x == INT64_MIN) c.unsupported(p, "integers beyond 64 bits are not supported");
    return Value::of(x < 0 ? -x : x);
  }
  if (name == "int" || name == "float") {
    Value def = args.get(0, "default", name == "int" ? Value::of(int64_t{0}) : Value::of(0.0));
    if (name == "int" && args.given(1, "base")) c.unsupported(p, "int's base argument is not supported");
    args.done(name == "int" ? 2 : 1, {"default", "base"});
    if (v.kind == Value::integer) return name == "int" ? v : Value::of(static_cast<double>(v.i));
    if (v.kind == Value::boolean) return name == "int" ? Value::of(int64_t{v.b}) : Value::of(v.b ? 1.0 : 0.0);
    if (v.kind == Value::floating) {
      if (name == "float") return v;
      if (!std::isfinite(v.f) || std::fabs(v.f) >= 9.2e18) return def;
      return Value::of(static_cast<int64_t>(v.f));
    }
    if (v.kind == Value::string) {
      const std::string s = py_strip(v.s, nullptr, true, true);
      bool digits = !s.empty();
      for (size_t k = 0; k < s.size(); ++k)
        digits = digits && (std::isdigit(static_cast<unsigned char>(s[k])) || (k == 0 && (s[k] == '-' || s[k] == '+') && s.size() > 1));
      if (digits) {
        errno = 0;
        const long long x = std::strtoll(s.c_str(), nullptr, 10);
        if (errno == ERANGE) c.unsupported(p, "integers beyond 64 bits are not supported");
        return name == "int" ? Value::of(static_cast<int64_t>(x)) : Value::of(std::strtod(s.c_str(), nullptr));
      }
      if (s.find_first_not_of("0123456789+-.eE") == std::string::npos && !s.empty()) {
        char* end = nullptr;
        const double d = std::strtod(s.c_str(), &end);
        if (end == s.c_str() + s.size()) {
          if (name == "float") return Value::of(d);
          if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return def;
          return Value::of(static_cast<int64_t>(d));
        }
      }
      if (s.find_first_not_of("0123456789+-.eE") != std::string::npos && s.find_first_of("_nNiI") != std::string::npos)
        c.unsupported(p, fmt::format("{} of '{}' is not supported", name, s));
      return def;
    }
    return def;
  }
  if (name == "replace") {
    Value o = args.get(0, "old"), n = args.get(1, "new"), cnt = args.get(2, "count", Value::null());
    args.done(3, {"old", "new", "count"});
    if (o.kind == Value::undefined || n.kind == Value::undefined) c.runtime(p, "replace needs old and new");
    const int64_t count = cnt.kind == Value::none ? -1 : int_arg(c, cnt, "replace's count", p);
    return Value::str(py_replace(to_str(v), to_str(o), to_str(n), count));
  }
  if (name == "reverse") {
    none_args();
    if (v.kind == Value::string) {
      auto cps = code_points(v.s);
      std::reverse(cps.begin(), cps.end());
      return Value::str(utf8(cps));
    }
    std::vector<Value> items = iterate(c, v, p);
    std::reverse(items.begin(), items.end());
    return Value::of_list(std::move(items));
  }
  if (name == "map") {
    std::vector<Value> items = iterate(c, v, p);
    std::vector<Value> out;
    if (!a.empty()) {  // map('filter', args...)
      if (a[0].kind != Value::string) c.runtime(p, "map's filter name must be a string");
      const std::string f = a[0].s;
      if (!known_filter(f)) c.unsupported(p, fmt::format("filter '{}' is not supported", f));
      std::vector<Value> rest(a.begin() + 1, a.end());
      for (auto& x : items) {
        std::vector<Value> r = rest;
        Kwargs k2 = kw;
        out.push_back(apply_filter(c, f, x, r, k2, p));
      }
      return Value::of_list(std::move(out));
    }
    Value attr = args.get(99, "attribute"), def = args.get(99, "default");
    args.done(0, {"attribute", "default"});
    if (attr.kind != Value::string && attr.kind != Value::integer) c.runtime(p, "map needs a filter name or attribute=");
    for (auto& x : items) {
      Value r = get_item(c, x, attr, p);
      if (r.kind == Value::undefined && def.kind != Value::undefined) r = def;
      out.push_back(r);
    }
    return Value::of_list(std::move(out));
  }
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
    if (!kw.empty()) c.runtime(p, fmt::format("{} takes no keyword arguments", name));
    const bool attr = name == "selectattr" || name == "rejectattr", keep = name == "select" || name == "selectattr";
    size_t k = 0;
    Value attr_name;
    if (attr) {
      if (a.empty()) c.runtime(p, fmt::format("{} needs an attribute name", name));
      attr_name = a[k++];
    }
    std::string test;
    if (k < a.size()) {
      if (a[k].kind != Value::string) c.runtime(p, fmt::format("{}'s test name must be a string", name));
      test = a[k++].s;
      if (!known_test(test)) c.unsupported(p, fmt::format("test '{}' is not supported", test));
    }
    std::vector<Value> targs(a.begin() + static_cast<ptrdiff_t>(k), a.end()), out;
    for (auto& x : iterate(c, v, p)) {
      const Value item = attr ? get_item(c, x, attr_name, p) : x;
      std::vector<Value> ta = targs;
      const bool r = test.empty() ? truthy(item) : apply_test(c, test, item, ta, p);
      if (r == keep) out.push_back(x);
    }
    return Value::of_list(std::move(out));
  }
  c.unsupported(p, fmt::format("filter '{}' is not supported", name));
}

}  // namespace mpitron::jinja
