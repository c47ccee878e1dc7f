// Expressions into values: Python's operators on jinja's values, variable lookup, slices, calls
// and filters (jinja2's default Undefined: any use but printing, testing and iterating is an error).
#include <cmath>

#include "evaluator.hpp"

namespace mpitron::jinja {

namespace {

bool add_overflow(int64_t a, int64_t b, int64_t* r) { return __builtin_add_overflow(a, b, r); }
bool sub_overflow(int64_t a, int64_t b, int64_t* r) { return __builtin_sub_overflow(a, b, r); }
bool mul_overflow(int64_t a, int64_t b, int64_t* r) { return __builtin_mul_overflow(a, b, r); }

double as_double(const Value& v) {
  return v.kind == Value::floating ? v.f : static_cast<double>(v.kind == Value::boolean ? v.b : v.i);
}
int64_t as_int(const Value& v) { return v.kind == Value::boolean ? v.b : v.i; }

// CPython's float divmod.
void float_divmod(double vx, double wx, double* div_out, double* mod_out) {
  double mod = std::fmod(vx, wx);
  double div = (vx - mod) / wx;
  if (mod != 0) {
    if ((wx < 0) != (mod < 0)) {
      mod += wx;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, wx);
  }
  double floordiv;
  if (div != 0) {
    floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
  } else {
    floordiv = std::copysign(0.0, vx / wx);
  }
  *div_out = floordiv;
  *mod_out = mod;
}

}  // namespace

Value Evaluator::lookup(const std::string& name, Pos p) {
  for (size_t k = c.frames.size(); k-- > 0;)
    if (const Value* v = c.frames[k]->find(name)) return *v;
  if (name == "cycler" || name == "joiner" || name == "lipsum")
    c.unsupported(p, fmt::format("the global '{}' is not supported", name));
  Value g = lookup_global(name);
  if (g.kind != Value::undefined) return g;
  return Value::undef(fmt::format("'{}' is undefined", name));
}

Value Evaluator::binop(const std::string& o, const Value& a, const Value& b, Pos p) {
  need_defined(a, p);
  need_defined(b, p);
  const bool nums = a.is_number() && b.is_number();
  const bool ints = nums && a.kind != Value::floating && b.kind != Value::floating;
  auto bad = [&]() -> Value {
    type_error(p, fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", o, type_name(a), type_name(b)));
  };
  int64_t r = 0;
  if (o == "+") {
    if (ints) {
      if (add_overflow(as_int(a), as_int(b), &r)) c.unsupported(p, "integers beyond 64 bits are not supported");
      return Value::of(r);
    }
    if (nums) return Value::of(as_double(a) + as_double(b));
    if (a.kind == Value::string && b.kind == Value::string) return Value::str(a.s + b.s);
    if (a.kind == Value::list && b.kind == Value::list && a.tuple == b.tuple && a.s.empty() && b.s.empty()) {
      std::vector<Value> v = *a.l;
      v.insert(v.end(), b.l->begin(), b.l->end());
      return Value::of_list(std::move(v), a.tuple);
    }
    if (a.kind == Value::string)
      type_error(p, fmt::format("can only concatenate str (not \"{}\") to str", type_name(b)));
    return bad();
  }
  if (o == "-") {
    if (ints) {
      if (sub_overflow(as_int(a), as_int(b), &r)) c.unsupported(p, "integers beyond 64 bits are not supported");
      return Value::of(r);
    }
    if (nums) return Value::of(as_double(a) - as_double(b));
    return bad();
  }
  if (o == "*") {
    if (ints) {
      if (mul_overflow(as_int(a), as_int(b), &r)) c.unsupported(p, "integers beyond 64 bits are not supported");
      return Value::of(r);
    }
    if (nums) return Value::of(as_double(a) * as_double(b));
    const Value* seq = a.kind == Value::string || a.kind == Value::list ? &a : &b;
    const Value* n = seq == &a ? &b : &a;
    if ((seq->kind == Value::string || seq->kind == Value::list) && n->is_number() && n->kind != Value::floating) {
      const int64_t times = std::max<int64_t>(0, as_int(*n));
      if (seq->kind == Value::string) {
        if (times * static_cast<int64_t>(seq->s.size()) > (int64_t{1} << 30))
          c.unsupported(p, "a string repeated beyond 1 GiB is not supported");
        std::string s;
        for (int64_t k = 0; k < times; ++k) s += seq->s;
        return Value::str(std::move(s));
      }
      if (!seq->s.empty()) return bad();
      if (times * static_cast<int64_t>(seq->l->size()) > (int64_t{1} << 24))
        c.unsupported(p, "a list repeated beyond 16M items is not supported");
      std::vector<Value> v;
      for (int64_t k = 0; k < times; ++k) v.insert(v.end(), seq->l->begin(), seq->l->end());
      return Value::of_list(std::move(v), seq->tuple);
    }
    return bad();
  }
  if (o == "/") {
    if (!nums) return bad();
    if (as_double(b) == 0) type_error(p, "division by zero");
    return Value::of(as_double(a) / as_double(b));
  }
  if (o == "//" || o == "%") {
    if (!nums) {
      if (o == "%" && a.kind == Value::string) c.unsupported(p, "% string formatting is not supported");
      return bad();
    }
    if (as_double(b) == 0) type_error(p, o == "%" ? "integer modulo by zero" : "integer division or modulo by zero");
    if (ints) {
      const int64_t x = as_int(a), y = as_int(b);
      if (x == INT64_MIN && y == -1) c.unsupported(p, "integers beyond 64 bits are not supported");
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        m += y;
        q -= 1;
      }
      return Value::of(o == "//" ? q : m);
    }
    double dv, md;
    float_divmod(as_double(a), as_double(b), &dv, &md);
    return Value::of(o == "//" ? dv : md);
  }
  if (o == "**") {
    if (!nums) return bad();
    if (ints && as_int(b) >= 0) {
      int64_t base = as_int(a), e = as_int(b), acc = 1;
      while (e > 0) {
        if (e & 1)
          if (mul_overflow(acc, base, &acc)) c.unsupported(p, "integers beyond 64 bits are not supported");
        e >>= 1;
        if (e > 0 && mul_overflow(base, base, &base)) c.unsupported(p, "integers beyond 64 bits are not supported");
      }
      return Value::of(acc);
    }
    if (as_double(a) == 0 && as_double(b) < 0) type_error(p, "0.0 cannot be raised to a negative power");
    return Value::of(std::pow(as_double(a), as_double(b)));
  }
  c.unsupported(p, fmt::format("operator '{}' is not supported", o));
}

bool Evaluator::contains(const Value& seq, const Value& x, Pos p) {
  switch (seq.kind) {
    case Value::undefined: return false;
    case Value::string:
      if (x.kind != Value::string)
        type_error(p, fmt::format("'in <string>' requires string as left operand, not {}", type_name(x)));
      return seq.s.find(x.s) != std::string::npos;
    case Value::list:
      for (const auto& v : *seq.l)
        if (equal(v, x)) return true;
      return false;
    case Value::dict:
      if (seq.ns || seq.loop) break;
      return x.kind == Value::string && seq.d->find(x.s) != nullptr;
    default: break;
  }
  type_error(p, fmt::format("argument of type '{}' is not iterable", type_name(seq)));
}

bool Evaluator::compare(const std::string& o, const Value& a, const Value& b, Pos p) {
  if (o == "==") return equal(a, b);
  if (o == "!=") return !equal(a, b);
  if (o == "in") return contains(b, a, p);
  if (o == "notin") return !contains(b, a, p);
  need_defined(a, p);
  need_defined(b, p);
  std::string why;
  bool r;
  if (o == "<") r = less(a, b, &why);
  else if (o == ">") r = less(b, a, &why);
  else if (o == "<=") r = less(a, b, &why) || (why.empty() && equal(a, b));
  else r = less(b, a, &why) || (why.empty() && equal(a, b));
  if (!why.empty()) {
    const size_t q = why.find("'<'");
    if (q != std::string::npos) why.replace(q, 3, "'" + o + "'");
    type_error(p, why);
  }
  return r;
}

Value Evaluator::slice(const Value& obj, const Expr& e, std::vector<Value>& parts) {
  need_defined(obj, e.pos);
  int64_t idx[3] = {0, 0, 1};
  bool given[3] = {false, false, false};
  size_t a = 0;
  for (int k = 0; k < 3; ++k) {
    if (!e.has[k]) continue;
    const Value& v = parts[a++];
    if (v.kind == Value::none) continue;
    if (v.kind != Value::integer && v.kind != Value::boolean)
      type_error(e.pos, "slice indices must be integers or None");
    idx[k] = as_int(v);
    given[k] = true;
  }
  if (idx[2] == 0) type_error(e.pos, "slice step cannot be zero");
  std::vector<uint32_t> cps;
  int64_t n;
  if (obj.kind == Value::string) {
    cps = code_points(obj.s);
    n = static_cast<int64_t>(cps.size());
  } else if (obj.kind == Value::list) {
    n = static_cast<int64_t>(obj.l->size());
  } else {
    type_error(e.pos, fmt::format("'{}' object is not subscriptable", type_name(obj)));
  }
  // Python's PySlice_AdjustIndices.
  const int64_t step = idx[2];
  auto adjust = [&](int64_t v, bool has, bool is_start) {
    if (!has) return step > 0 ? (is_start ? 0 : n) : (is_start ? n - 1 : -1);
    if (v < 0) {
      v += n;
      if (v < 0) v = step < 0 ? -1 : 0;
    } else if (v >= n) {
      v = step < 0 ? n - 1 : n;
    }
    return v;
  };
  const int64_t start = adjust(idx[0], given[0], true), stop = adjust(idx[1], given[1], false);
  std::vector<int64_t> pick;
  if (step > 0)
    for (int64_t k = start; k < stop; k += step) pick.push_back(k);
  else
    for (int64_t k = start; k > stop; k += step) pick.push_back(k);
  if (obj.kind == Value::string) {
    std::string s;
    for (int64_t k : pick) append_utf8(s, cps[static_cast<size_t>(k)]);
    return Value::str(std::move(s));
  }
  std::vector<Value> v;
  for (int64_t k : pick) v.push_back((*obj.l)[static_cast<size_t>(k)]);
  return Value::of_list(std::move(v), obj.tuple);
}

Value Evaluator::call(const Value& fn, std::vector<Value>& args, Kwargs& kw, Pos p) {
  if (fn.kind == Value::undefined) c.runtime(p, undefined_message(fn));
  if (fn.kind != Value::function) type_error(p, fmt::format("'{}' object is not callable", type_name(fn)));
  return fn.fn->call(c, args, kw, p);
}

Value Evaluator::eval(const Expr& e) {
  switch (e.kind) {
    case Expr::literal: return e.value;
    case Expr::name_ref: return lookup(e.name, e.pos);
    case Expr::list:
    case Expr::tuple: {
      std::vector<Value> v;
      for (const auto& x : e.args) v.push_back(eval(*x));
      return Value::of_list(std::move(v), e.kind == Expr::tuple);
    }
    case Expr::dict: {
      auto d = std::make_shared<Dict>();
      for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
        Value key = eval(*e.args[k]);
        if (key.kind != Value::string) c.unsupported(e.args[k]->pos, "dict keys other than strings are not supported");
        d->set(key.s, eval(*e.args[k + 1]));
      }
      return Value::of_dict(std::move(d));
    }
    case Expr::getattr: return get_attr(c, eval(*e.args[0]), e.name, e.pos);
    case Expr::getitem: {
      Value obj = eval(*e.args[0]);
      return get_item(c, obj, eval(*e.args[1]), e.pos);
    }
    case Expr::slice: {
      Value obj = eval(*e.args[0]);
      std::vector<Value> parts;
      for (size_t k = 1; k < e.args.size(); ++k) parts.push_back(eval(*e.args[k]));
      return slice(obj, e, parts);
    }
    case Expr::call: {
      Value fn = eval(*e.args[0]);
      std::vector<Value> args;
      for (size_t k = 1; k < e.args.size(); ++k) args.push_back(eval(*e.args[k]));
      Kwargs kw;
      for (const auto& [n, x] : e.kwargs) kw.emplace_back(n, eval(*x));
      return call(fn, args, kw, e.pos);
    }
    case Expr::filter: {
      Value v = e.args[0] ? eval(*e.args[0]) : Value::str("");
      return filter(e, std::move(v));
    }
    case Expr::test: {
      Value v = eval(*e.args[0]);
      std::vector<Value> args;
      for (size_t k = 1; k < e.args.size(); ++k) args.push_back(eval(*e.args[k]));
      if (!e.kwargs.empty()) c.unsupported(e.pos, "keyword arguments to tests are not supported");
      const bool r = apply_test(c, e.name, v, args, e.pos);
      return Value::of(e.negated ? !r : r);
    }
    case Expr::neg:
    case Expr::plus: {
      Value v = eval(*e.args[0]);
      need_defined(v, e.pos);
      if (!v.is_number())
        type_error(e.pos, fmt::format("bad operand type for unary {}: '{}'", e.kind == Expr::neg ? '-' : '+', type_name(v)));
      if (e.kind == Expr::plus) return v.kind == Value::boolean ? Value::of(as_int(v)) : v;
      if (v.kind == Value::floating) return Value::of(-v.f);
      if (as_int(v) == INT64_MIN) c.unsupported(e.pos, "integers beyond 64 bits are not supported");
      return Value::of(-as_int(v));
    }
    case Expr::not_: return Value::of(!truthy(eval(*e.args[0])));
    case Expr::and_: {
      Value a = eval(*e.args[0]);
      return truthy(a) ? eval(*e.args[1]) : a;
    }
    case Expr::or_: {
      Value a = eval(*e.args[0]);
      return truthy(a) ? a : eval(*e.args[1]);
    }
    case Expr::binop: {
      Value a = eval(*e.args[0]);
      Value b = eval(*e.args[1]);
      return binop(e.name, a, b, e.pos);
    }
    case Expr::concat: {
      std::string s;
      for (const auto& x : e.args) s += to_str(eval(*x));
      return Value::str(std::move(s));
    }
    case Expr::compare: {
      Value a = eval(*e.args[0]);
      for (size_t k = 0; k < e.ops.size(); ++k) {
        Value b = eval(*e.args[k + 1]);
        if (!compare(e.ops[k], a, b, e.pos)) return Value::of(false);
        a = std::move(b);
      }
      return Value::of(true);
    }
    case Expr::cond: {
      if (truthy(eval(*e.args[0]))) return eval(*e.args[1]);
      return e.args[2] ? eval(*e.args[2]) : Value::undef("the else branch of an inline if is undefined");
    }
  }
  c.unsupported(e.pos, "unknown expression");
}

Value Evaluator::filter(const Expr& e, Value v) {
  std::vector<Value> args;
  for (size_t k = 1; k < e.args.size(); ++k) args.push_back(eval(*e.args[k]));
  Kwargs kw;
  for (const auto& [n, x] : e.kwargs) kw.emplace_back(n, eval(*x));
  return apply_filter(c, e.name, std::move(v), args, kw, e.pos);
}

}  // namespace mpitron::jinja
