// Renders a parsed template: statements into text, expressions into values (Python's operators;
// jinja2's default Undefined: printing it gives "", testing it is false, iterating it gives
// nothing, and any other use is an error).
#include <nlohmann/json.hpp>

#include "evaluator.hpp"

namespace mpitron::jinja {

std::string undefined_message(const Value& v) {
  return v.s.empty() ? "an undefined value is used" : v.s;
}

void Evaluator::assign(const Stmt& s, Value v) {
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

Flow Evaluator::exec(const Body& body, std::string& out) {
  for (const auto& st : body) {
    const Flow f = exec(*st, out);
    if (f != Flow::normal) return f;
  }
  return Flow::normal;
}

Flow Evaluator::exec(const Stmt& s, std::string& out) {
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
void Evaluator::exec_scoped(const Body& b, std::string& out) {
  c.frames.push_back(std::make_shared<Dict>());
  try {
    exec(b, out);
  } catch (...) {
    c.frames.pop_back();
    throw;
  }
  c.frames.pop_back();
}

Value Evaluator::apply_block_filters(const Expr& e, Value input) {
  if (!e.args[0]) return filter(e, std::move(input));
  return filter(e, apply_block_filters(*e.args[0], std::move(input)));
}

Flow Evaluator::exec_for(const Stmt& s, std::string& out) {
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

Value Evaluator::make_macro(const Stmt& s) {
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
