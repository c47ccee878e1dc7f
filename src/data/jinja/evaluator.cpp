// Renders a parsed template: statements into text, expressions into values (Python's operators;
// jinja2's default Undefined: printing it gives "", testing it is false, iterating it gives
// nothing, and any other use is an error).
#include <cmath>
#include <nlohmann/json.hpp>

#include "jinja_impl.hpp"

namespace mpitron::jinja {

std::string undefined_message(const Value& v) {
  return v.s.empty() ? "an undefined value is used" : v.s;
}

namespace {

using Kind = TemplateError::Kind;

enum class Flow { normal, brk, cont };

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

struct Evaluator {
  Context& c;

  [[noreturn]] void type_error(Pos p, const std::string& m) { c.runtime(p, m); }

  void need_defined(const Value& v, Pos p) {
    if (v.kind == Value::undefined) c.runtime(p, undefined_message(v));
  }

  Value lookup(const std::string& name, Pos p) {
    for (size_t k = c.frames.size(); k-- > 0;)
      if (const Value* v = c.frames[k]->find(name)) return *v;
    if (name == "cycler" || name == "joiner" || name == "lipsum")
      c.unsupported(p, fmt::format("the global '{}' is not supported", name));
    Value g = lookup_global(name);
    if (g.kind != Value::undefined) return g;
    return Value::undef(fmt::format("'{}' is undefined", name));
  }

  Value binop(const std::string& o, const Value& a, const Value& b, Pos p) {
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

  bool contains(const Value& seq, const Value& x, Pos p) {
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

  bool compare(const std::string& o, const Value& a, const Value& b, Pos p) {
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

  Value slice(const Value& obj, const Expr& e, std::vector<Value>& parts) {
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

  Value call(const Value& fn, std::vector<Value>& args, Kwargs& kw, Pos p) {
    if (fn.kind == Value::undefined) c.runtime(p, undefined_message(fn));
    if (fn.kind != Value::function) type_error(p, fmt::format("'{}' object is not callable", type_name(fn)));
    return fn.fn->call(c, args, kw, p);
  }

  Value eval(const Expr& e) {
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

  Value filter(const Expr& e, Value v) {
    std::vector<Value> args;
    for (size_t k = 1; k < e.args.size(); ++k) args.push_back(eval(*e.args[k]));
    Kwargs kw;
    for (const auto& [n, x] : e.kwargs) kw.emplace_back(n, eval(*x));
    return apply_filter(c, e.name, std::move(v), args, kw, e.pos);
  }

  // ---- statements ----

  void assign(const Stmt& s, Value v) {
    Dict& frame = *c.frames.back();
    if (!s.text.empty()) {  // ns.attr
      Value ns;
      bool found = false;
      for (size_t k = c.frames.size(); k-- > 0 && !found;)
        if (const Value* x = c.frames[k]->find(s.targets[0])) {
          ns = *x;
          found = true;
        }
      if (!found || ns.kind != Value::dict || !ns.ns)
        c.runtime(s.pos, "cannot assign attribute on non-namespace object");
      ns.d->set(s.text, std::move(v));
      return;
    }
    if (!s.target_tuple) {
      frame.set(s.targets[0], std::move(v));
      return;
    }
    std::vector<Value> items = iterate(c, v, s.pos);
    if (items.size() != s.targets.size())
      c.runtime(s.pos, items.size() > s.targets.size()
                           ? fmt::format("too many values to unpack (expected {})", s.targets.size())
                           : fmt::format("not enough values to unpack (expected {}, got {})", s.targets.size(),
                                         items.size()));
    for (size_t k = 0; k < items.size(); ++k) frame.set(s.targets[k], std::move(items[k]));
  }

  Flow exec(const Body& body, std::string& out) {
    for (const auto& st : body) {
      const Flow f = exec(*st, out);
      if (f != Flow::normal) return f;
    }
    return Flow::normal;
  }

  Flow exec(const Stmt& s, std::string& out) {
    switch (s.kind) {
      case Stmt::text_data: out += s.text; return Flow::normal;
      case Stmt::output: {
        const Value v = eval(*s.exprs[0]);
        if (v.kind == Value::function || (v.kind == Value::list && v.s == "generator"))
          c.unsupported(s.exprs[0]->pos, fmt::format("printing a {} is not supported", v.kind == Value::function ? "function" : "generator"));
        out += to_str(v);
        return Flow::normal;
      }
      case Stmt::if_:
        for (size_t k = 0; k < s.exprs.size(); ++k)
          if (truthy(eval(*s.exprs[k]))) return exec(s.bodies[k], out);
        if (s.has_else) return exec(s.bodies.back(), out);
        return Flow::normal;
      case Stmt::for_: return exec_for(s, out);
      case Stmt::set: assign(s, eval(*s.exprs[0])); return Flow::normal;
      case Stmt::set_block: {
        std::string body;
        exec_scoped(s.bodies[0], body);
        assign(s, Value::str(std::move(body)));
        return Flow::normal;
      }
      case Stmt::macro: c.frames.back()->set(s.text, make_macro(s)); return Flow::normal;
      case Stmt::brk: return Flow::brk;
      case Stmt::cont: return Flow::cont;
      case Stmt::filter_block: {
        std::string body;
        exec_scoped(s.bodies[0], body);
        out += to_str(apply_block_filters(*s.exprs[0], Value::str(std::move(body))));
        return Flow::normal;
      }
      case Stmt::generation: return exec(s.bodies[0], out);
    }
    return Flow::normal;
  }

  // A body in a scope of its own ({% set %} blocks, {% filter %}): assignments stay inside.
  void exec_scoped(const Body& b, std::string& out) {
    c.frames.push_back(std::make_shared<Dict>());
    try {
      exec(b, out);
    } catch (...) {
      c.frames.pop_back();
      throw;
    }
    c.frames.pop_back();
  }

  Value apply_block_filters(const Expr& e, Value input) {
    if (!e.args[0]) return filter(e, std::move(input));
    return filter(e, apply_block_filters(*e.args[0], std::move(input)));
  }

  Flow exec_for(const Stmt& s, std::string& out) {
    std::vector<Value> items = iterate(c, eval(*s.exprs[0]), s.exprs[0]->pos);
    // The loop filter sees each item bound to the targets (in a scope of its own).
    auto bind = [&](Dict& frame, const Value& item) {
      if (!s.target_tuple) {
        frame.set(s.targets[0], item);
        return;
      }
      std::vector<Value> parts = iterate(c, item, s.pos);
      if (parts.size() != s.targets.size())
        c.runtime(s.pos, parts.size() > s.targets.size()
                             ? fmt::format("too many values to unpack (expected {})", s.targets.size())
                             : fmt::format("not enough values to unpack (expected {}, got {})", s.targets.size(),
                                           parts.size()));
      for (size_t k = 0; k < parts.size(); ++k) frame.set(s.targets[k], parts[k]);
    };
    if (s.for_filter) {
      std::vector<Value> kept;
      for (auto& item : items) {
        c.frames.push_back(std::make_shared<Dict>());
        bool keep;
        try {
          bind(*c.frames.back(), item);
          keep = truthy(eval(*s.exprs[1]));
        } catch (...) {
          c.frames.pop_back();
          throw;
        }
        c.frames.pop_back();
        if (keep) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    const size_t n = items.size();
    if (n == 0) {
      if (s.has_else) exec_scoped(s.bodies[1], out);
      return Flow::normal;
    }
    for (size_t k = 0; k < n; ++k) {
      auto frame = std::make_shared<Dict>();
      auto loop = std::make_shared<Dict>();
      const auto len = static_cast<int64_t>(n), i = static_cast<int64_t>(k);
      loop->set("index", Value::of(i + 1));
      loop->set("index0", Value::of(i));
      loop->set("revindex", Value::of(len - i));
      loop->set("revindex0", Value::of(len - i - 1));
      loop->set("first", Value::of(k == 0));
      loop->set("last", Value::of(k + 1 == n));
      loop->set("length", Value::of(len));
      loop->set("depth", Value::of(int64_t{1}));
      loop->set("depth0", Value::of(int64_t{0}));
      loop->set("previtem", k > 0 ? items[k - 1] : Value::undef("there is no previous item"));
      loop->set("nextitem", k + 1 < n ? items[k + 1] : Value::undef("there is no next item"));
      loop->set("cycle", Value::of_function("loop.cycle", [k](Context& cx, std::vector<Value>& a, Kwargs& kw, Pos p) {
                  if (a.empty()) cx.runtime(p, "no items for cycling given");
                  if (!kw.empty()) cx.unsupported(p, "keyword arguments to loop.cycle are not supported");
                  return a[k % a.size()];
                }));
      Value lv = Value::of_dict(loop);
      lv.loop = true;
      frame->set("loop", lv);
      bind(*frame, items[k]);
      c.frames.push_back(frame);
      Flow f;
      try {
        f = exec(s.bodies[0], out);
      } catch (...) {
        c.frames.pop_back();
        throw;
      }
      c.frames.pop_back();
      if (f == Flow::brk) break;
    }
    return Flow::normal;
  }

  Value make_macro(const Stmt& s) {
    const Stmt* def = &s;
    // The frames it was defined in, held weakly: the innermost of them holds the macro, so owning
    // them would make a cycle that is never freed (LeakSanitizer: test_jinja's macros).
    std::vector<std::weak_ptr<Dict>> closure(c.frames.begin(), c.frames.end());
    return Value::of_function("macro " + s.text, [def, closure](Context& cx, std::vector<Value>& args, Kwargs& kw, Pos p) {
      if (args.size() > def->params.size())
        cx.runtime(p, fmt::format("macro '{}' takes not more than {} argument(s)", def->text, def->params.size()));
      if (++cx.depth > 64) cx.unsupported(p, "macro calls nested deeper than 64 are not supported");
      auto frame = std::make_shared<Dict>();
      std::vector<std::shared_ptr<Dict>> saved = cx.frames;
      cx.frames.clear();
      for (const auto& w : closure) {
        std::shared_ptr<Dict> f = w.lock();
        if (!f) {
          cx.frames = saved;
          cx.unsupported(p, fmt::format("macro '{}' called after the block that defined it ended", def->text));
        }
        cx.frames.push_back(std::move(f));
      }
      cx.frames.push_back(frame);
      std::string out;
      try {
        Evaluator ev{cx};
        for (size_t k = 0; k < def->params.size(); ++k) {
          const std::string& name = def->params[k];
          Value v;
          bool set = false;
          if (k < args.size()) {
            v = args[k];
            set = true;
          }
          for (auto& [kn, kv] : kw)
            if (kn == name) {
              if (set) cx.runtime(p, fmt::format("macro '{}' got multiple values for argument '{}'", def->text, name));
              v = kv;
              set = true;
            }
          if (!set) v = def->exprs[k] ? ev.eval(*def->exprs[k]) : Value::undef(fmt::format("'{}' is undefined", name));
          frame->set(name, v);
        }
        for (auto& [kn, kv] : kw) {
          bool known = false;
          for (const auto& n : def->params) known = known || n == kn;
          if (!known) cx.unsupported(p, fmt::format("macro '{}' has no argument '{}' (**kwargs in macros are not supported)", def->text, kn));
        }
        ev.exec(def->bodies[0], out);
      } catch (...) {
        cx.frames = saved;
        --cx.depth;
        throw;
      }
      cx.frames = saved;
      --cx.depth;
      return Value::str(std::move(out));
    });
  }
};

}  // namespace

Template::Template(std::string_view source, std::string where) : p_(std::make_unique<Program>()) {
  p_->where = std::move(where);
  parse(lex(source, p_->where), p_.get());
}
Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;
const std::string& Template::where() const { return p_->where; }

std::string Template::render(const nlohmann::ordered_json& vars) const {
  Context c{*p_, {}, {}, 0};
  auto root = std::make_shared<Dict>();
  if (vars.is_object())
    for (auto it = vars.begin(); it != vars.end(); ++it) root->set(it.key(), from_json(it.value()));
  c.frames.push_back(root);
  // Top-level assignments go to a frame above the variables (they shadow them, as jinja2's).
  c.frames.push_back(std::make_shared<Dict>());
  std::string out;
  Evaluator{c}.exec(p_->body, out);
  return out;
}

}  // namespace mpitron::jinja
