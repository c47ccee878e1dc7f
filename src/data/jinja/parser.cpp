// jinja2's parser (jinja2/parser.py): statements and the expression grammar with its precedence
//   cond (a if c else b) < or < and < not < compare/in < + - < ~ < * / // % < ** < unary - +
//   < postfix (.a [i] (args)) then filters (|f) and tests (is t), which bind tighter than any
//   operator ('a' + b | trim applies trim to b).
#include <algorithm>

#include "jinja_impl.hpp"

namespace mpitron::jinja {

namespace {

const char* tok_name(const Token& t) {
  switch (t.type) {
    case Tok::data: return "template data";
    case Tok::var_begin: return "begin of print statement";
    case Tok::var_end: return "end of print statement";
    case Tok::block_begin: return "begin of statement block";
    case Tok::block_end: return "end of statement block";
    case Tok::eof: return "end of template";
    default: return nullptr;
  }
}

std::string describe(const Token& t) {
  if (const char* n = tok_name(t)) return n;
  if (t.type == Tok::string) return "string";
  if (t.type == Tok::integer) return "integer";
  if (t.type == Tok::floating) return "float";
  return "'" + t.text + "'";
}

struct Parser {
  std::vector<Token> t;
  size_t k = 0;
  const std::string& where;
  int loops = 0;  // for loops around the statement being parsed (break / continue)

  const Token& cur() const { return t[k]; }
  const Token& look(size_t n = 1) const { return t[std::min(k + n, t.size() - 1)]; }
  void next() {
    if (k + 1 < t.size()) ++k;
  }
  bool op(const char* o) const { return cur().type == Tok::op && cur().text == o; }
  bool name(const char* n) const { return cur().type == Tok::name && cur().text == n; }
  [[noreturn]] void syntax(Pos p, const std::string& m) const { raise(TemplateError::Kind::syntax, where, p, m); }
  [[noreturn]] void unsupported(Pos p, const std::string& m) const {
    raise(TemplateError::Kind::unsupported, where, p, m);
  }
  void expect_op(const char* o) {
    if (!op(o)) syntax(cur().pos, fmt::format("expected token '{}', got {}", o, describe(cur())));
    next();
  }
  void expect(Tok type) {
    if (cur().type != type) {
      Token want{type, "", {}};
      syntax(cur().pos, fmt::format("expected token '{}', got {}", describe(want), describe(cur())));
    }
    next();
  }
  std::string expect_name() {
    if (cur().type != Tok::name) syntax(cur().pos, fmt::format("expected a name, got {}", describe(cur())));
    std::string n = cur().text;
    next();
    return n;
  }

  static ExprP make(Expr::Kind kind, Pos pos) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->pos = pos;
    return e;
  }

  // ---- expressions ----

  ExprP expression(bool with_cond = true) { return with_cond ? condexpr() : or_expr(); }

  ExprP condexpr() {
    ExprP e = or_expr();
    while (name("if")) {
      const Pos p = cur().pos;
      next();
      ExprP test = or_expr();
      ExprP other;
      if (name("else")) {
        next();
        other = condexpr();
      }
      auto c = make(Expr::cond, p);
      c->args.push_back(std::move(test));
      c->args.push_back(std::move(e));
      c->args.push_back(std::move(other));  // may be null: undefined
      e = std::move(c);
    }
    return e;
  }

  ExprP or_expr() {
    ExprP e = and_expr();
    while (name("or")) {
      auto o = make(Expr::or_, cur().pos);
      next();
      o->args.push_back(std::move(e));
      o->args.push_back(and_expr());
      e = std::move(o);
    }
    return e;
  }

  ExprP and_expr() {
    ExprP e = not_expr();
    while (name("and")) {
      auto o = make(Expr::and_, cur().pos);
      next();
      o->args.push_back(std::move(e));
      o->args.push_back(not_expr());
      e = std::move(o);
    }
    return e;
  }

  ExprP not_expr() {
    if (name("not")) {
      auto n = make(Expr::not_, cur().pos);
      next();
      n->args.push_back(not_expr());
      return n;
    }
    return compare();
  }

  ExprP compare() {
    const Pos p = cur().pos;
    ExprP e = math1();
    ExprP c;
    while (true) {
      std::string o;
      if (cur().type == Tok::op &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == "<=" || cur().text == ">" ||
           cur().text == ">=")) {
        o = cur().text;
        next();
      } else if (name("in")) {
        o = "in";
        next();
      } else if (name("not") && look().type == Tok::name && look().text == "in") {
        o = "notin";
        next();
        next();
      } else {
        break;
      }
      if (!c) {
        c = make(Expr::compare, p);
        c->args.push_back(std::move(e));
      }
      c->ops.push_back(o);
      c->args.push_back(math1());
    }
    return c ? std::move(c) : std::move(e);
  }

  ExprP binop(ExprP a, const std::string& o, ExprP b, Pos p) {
    auto e = make(Expr::binop, p);
    e->name = o;
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }

  ExprP math1() {
    ExprP e = concat();
    while (op("+") || op("-")) {
      const std::string o = cur().text;
      const Pos p = cur().pos;
      next();
      e = binop(std::move(e), o, concat(), p);
    }
    return e;
  }

  ExprP concat() {
    const Pos p = cur().pos;
    ExprP e = math2();
    if (!op("~")) return e;
    auto c = make(Expr::concat, p);
    c->args.push_back(std::move(e));
    while (op("~")) {
      next();
      c->args.push_back(math2());
    }
    return c;
  }

  ExprP math2() {
    ExprP e = pow();
    while (op("*") || op("/") || op("//") || op("%")) {
      const std::string o = cur().text;
      const Pos p = cur().pos;
      next();
      e = binop(std::move(e), o, pow(), p);
    }
    return e;
  }

  ExprP pow() {
    ExprP e = unary();
    while (op("**")) {
      const Pos p = cur().pos;
      next();
      e = binop(std::move(e), "**", unary(), p);
    }
    return e;
  }

  ExprP unary(bool with_filter = true) {
    ExprP e;
    if (op("-") || op("+")) {
      e = make(op("-") ? Expr::neg : Expr::plus, cur().pos);
      next();
      e->args.push_back(unary(false));
    } else {
      e = primary();
    }
    e = postfix(std::move(e));
    if (with_filter) e = filter_expr(std::move(e));
    return e;
  }

  ExprP primary() {
    const Token& tk = cur();
    const Pos p = tk.pos;
    if (tk.type == Tok::name) {
      const std::string n = tk.text;
      next();
      auto e = make(Expr::literal, p);
      if (n == "true" || n == "True") e->value = Value::of(true);
      else if (n == "false" || n == "False") e->value = Value::of(false);
      else if (n == "none" || n == "None") e->value = Value::null();
      else {
        e->kind = Expr::name_ref;
        e->name = n;
      }
      return e;
    }
    if (tk.type == Tok::string) {
      std::string s;
      while (cur().type == Tok::string) {
        s += cur().text;
        next();
      }
      auto e = make(Expr::literal, p);
      e->value = Value::str(std::move(s));
      return e;
    }
    if (tk.type == Tok::integer || tk.type == Tok::floating) {
      auto e = make(Expr::literal, p);
      e->value = tk.type == Tok::integer ? Value::of(tk.i) : Value::of(tk.f);
      next();
      return e;
    }
    if (op("(")) {
      next();
      ExprP e = tuple(false, true, {}, true);
      expect_op(")");
      return e;
    }
    if (op("[")) {
      next();
      auto e = make(Expr::list, p);
      while (!op("]")) {
        if (!e->args.empty()) expect_op(",");
        if (op("]")) break;
        e->args.push_back(expression());
      }
      expect_op("]");
      return e;
    }
    if (op("{")) {
      next();
      auto e = make(Expr::dict, p);
      while (!op("}")) {
        if (!e->args.empty()) expect_op(",");
        if (op("}")) break;
        e->args.push_back(expression());
        expect_op(":");
        e->args.push_back(expression());
      }
      expect_op("}");
      return e;
    }
    syntax(p, fmt::format("unexpected {}", describe(tk)));
  }

  // Comma-separated expressions: a tuple when there is a comma (or `()`).
  ExprP tuple(bool simplified, bool with_cond, const std::vector<std::string>& extra_end, bool explicit_parens) {
    const Pos p = cur().pos;
    std::vector<ExprP> args;
    bool is_tuple = false;
    while (true) {
      if (!args.empty()) expect_op(",");
      const bool end = cur().type == Tok::var_end || cur().type == Tok::block_end || op(")") ||
                       (cur().type == Tok::name &&
                        std::find(extra_end.begin(), extra_end.end(), cur().text) != extra_end.end());
      if (end) break;
      if (simplified) args.push_back(primary());
      else args.push_back(expression(with_cond));
      if (op(",")) is_tuple = true;
      else break;
    }
    if (!is_tuple) {
      if (!args.empty()) return std::move(args[0]);
      if (!explicit_parens) syntax(cur().pos, fmt::format("expected an expression, got {}", describe(cur())));
    }
    auto e = make(Expr::tuple, p);
    e->args = std::move(args);
    return e;
  }

  ExprP postfix(ExprP e) {
    while (true) {
      if (op(".") || op("[")) e = subscript(std::move(e));
      else if (op("(")) e = call(std::move(e));
      else return e;
    }
  }

  ExprP filter_expr(ExprP e) {
    while (true) {
      if (op("|")) e = filter(std::move(e));
      else if (name("is")) e = test(std::move(e));
      else if (op("(")) e = call(std::move(e));
      else return e;
    }
  }

  ExprP subscript(ExprP obj) {
    const Pos p = cur().pos;
    if (op(".")) {
      next();
      if (cur().type == Tok::name) {
        auto e = make(Expr::getattr, p);
        e->name = cur().text;
        next();
        e->args.push_back(std::move(obj));
        return e;
      }
      if (cur().type != Tok::integer) syntax(cur().pos, fmt::format("expected name or number, got {}", describe(cur())));
      auto e = make(Expr::getitem, p);
      auto idx = make(Expr::literal, cur().pos);
      idx->value = Value::of(cur().i);
      next();
      e->args.push_back(std::move(obj));
      e->args.push_back(std::move(idx));
      return e;
    }
    expect_op("[");
    std::vector<ExprP> items;
    while (!op("]")) {
      if (!items.empty()) expect_op(",");
      items.push_back(subscribed());
    }
    expect_op("]");
    if (items.size() != 1) unsupported(p, "subscripts with several indexes (x[a, b]) are not supported");
    if (items[0]->kind == Expr::slice) {
      items[0]->args.insert(items[0]->args.begin(), std::move(obj));
      return std::move(items[0]);
    }
    auto e = make(Expr::getitem, p);
    e->args.push_back(std::move(obj));
    e->args.push_back(std::move(items[0]));
    return e;
  }

  ExprP subscribed() {
    const Pos p = cur().pos;
    auto s = make(Expr::slice, p);
    if (op(":")) {
      next();
    } else {
      ExprP node = expression();
      if (!op(":")) return node;
      next();
      s->has[0] = true;
      s->args.push_back(std::move(node));
    }
    if (!op(":") && !op("]") && !op(",")) {
      s->has[1] = true;
      s->args.push_back(expression());
    }
    if (op(":")) {
      next();
      if (!op("]") && !op(",")) {
        s->has[2] = true;
        s->args.push_back(expression());
      }
    }
    return s;
  }

  // (args, name=value): into e->args (after what is there) and e->kwargs.
  void call_args(Expr& e) {
    expect_op("(");
    bool first = true;
    while (!op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (op(")")) break;
      if (op("*") || op("**")) unsupported(cur().pos, "*args and **kwargs in calls are not supported");
      if (cur().type == Tok::name && look().type == Tok::op && look().text == "=") {
        std::string key = cur().text;
        next();
        next();
        e.kwargs.emplace_back(std::move(key), expression());
      } else {
        if (!e.kwargs.empty()) syntax(cur().pos, "invalid syntax for function call expression (a positional argument after a keyword argument)");
        e.args.push_back(expression());
      }
    }
    expect_op(")");
  }

  ExprP call(ExprP fn) {
    auto e = make(Expr::call, fn->pos);  // errors point at what is called
    e->args.push_back(std::move(fn));
    call_args(*e);
    return e;
  }

  std::string dotted_name() {
    std::string n = expect_name();
    while (op(".")) {
      next();
      n += '.';
      n += expect_name();
    }
    return n;
  }

  // | name[(args)]; obj may be null (a {% filter %} block's filters).
  ExprP filter(ExprP obj) {
    expect_op("|");
    const Pos p = cur().pos;
    auto e = make(Expr::filter, p);
    e->name = dotted_name();
    if (!known_filter(e->name)) {
      if (jinja2_filter(e->name)) unsupported(p, fmt::format("filter '{}' is not supported", e->name));
      syntax(p, fmt::format("no filter named '{}'", e->name));
    }
    e->args.push_back(std::move(obj));
    if (op("(")) call_args(*e);
    return e;
  }

  ExprP test(ExprP obj) {
    const Pos p = cur().pos;
    next();  // is
    auto e = make(Expr::test, p);
    if (name("not")) {
      e->negated = true;
      next();
    }
    const Pos np = cur().pos;
    e->name = dotted_name();
    if (!known_test(e->name)) {
      if (jinja2_test(e->name)) unsupported(np, fmt::format("test '{}' is not supported", e->name));
      syntax(np, fmt::format("no test named '{}'", e->name));
    }
    e->args.push_back(std::move(obj));
    if (op("(")) {
      call_args(*e);
    } else if ((cur().type == Tok::name || cur().type == Tok::string || cur().type == Tok::integer ||
                cur().type == Tok::floating || op("(") || op("[") || op("{")) &&
               !(name("else") || name("or") || name("and"))) {
      e->args.push_back(postfix(primary()));
    }
    return e;
  }

  // ---- statements ----

  // Statements until a block tag whose name is one of `ends` (that name is then the current
  // token). At the end of the template: an error unless ends is empty.
  Body subparse(const std::vector<std::string>& ends) {
    Body body;
    while (true) {
      const Token& tk = cur();
      if (tk.type == Tok::eof) {
        if (ends.empty()) return body;
        std::string want;
        for (size_t i = 0; i < ends.size(); ++i) want += (i ? i + 1 == ends.size() ? " or '" : ", '" : "'") + ends[i] + "'";
        syntax(tk.pos, fmt::format("unexpected end of template: Jinja was looking for the following tags: {}", want));
      }
      if (tk.type == Tok::data) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::text_data;
        s->pos = tk.pos;
        s->text = tk.text;
        body.push_back(std::move(s));
        next();
      } else if (tk.type == Tok::var_begin) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::output;
        s->pos = tk.pos;
        next();
        s->exprs.push_back(tuple(false, true, {}, false));
        expect(Tok::var_end);
        body.push_back(std::move(s));
      } else if (tk.type == Tok::block_begin) {
        next();
        if (cur().type == Tok::name && std::find(ends.begin(), ends.end(), cur().text) != ends.end()) return body;
        body.push_back(statement());
        expect(Tok::block_end);
      } else {
        syntax(tk.pos, fmt::format("unexpected {}", describe(tk)));
      }
    }
  }

  // The names a for / set assigns: `x`, `a, b`, `(a, b)`.
  void assign_target(Stmt& s, const std::vector<std::string>& extra_end) {
    const Pos p = cur().pos;
    ExprP e = tuple(true, true, extra_end, false);
    if (e->kind == Expr::name_ref) {
      s.targets.push_back(e->name);
      return;
    }
    if (e->kind == Expr::tuple) {
      s.target_tuple = true;
      for (auto& x : e->args) {
        if (x->kind != Expr::name_ref) unsupported(x->pos, "only names can be unpacked into");
        s.targets.push_back(x->name);
      }
      return;
    }
    syntax(p, "can't assign to this expression");
  }

  std::unique_ptr<Stmt> statement() {
    const Token tk = cur();
    if (tk.type != Tok::name) syntax(tk.pos, "tag name expected");
    const std::string& n = tk.text;
    auto s = std::make_unique<Stmt>();
    s->pos = tk.pos;
    next();
    if (n == "if") {
      s->kind = Stmt::if_;
      s->exprs.push_back(tuple(false, false, {}, false));
      expect(Tok::block_end);
      s->bodies.push_back(subparse({"elif", "else", "endif"}));
      while (true) {
        if (name("elif")) {
          next();
          s->exprs.push_back(tuple(false, false, {}, false));
          expect(Tok::block_end);
          s->bodies.push_back(subparse({"elif", "else", "endif"}));
        } else if (name("else")) {
          next();
          expect(Tok::block_end);
          s->has_else = true;
          s->bodies.push_back(subparse({"endif"}));
          next();
          break;
        } else {
          next();  // endif
          break;
        }
      }
      return s;
    }
    if (n == "for") {
      s->kind = Stmt::for_;
      assign_target(*s, {"in"});
      if (!name("in")) syntax(cur().pos, fmt::format("expected token 'in', got {}", describe(cur())));
      next();
      s->exprs.push_back(tuple(false, false, {"recursive"}, false));
      if (name("if")) {
        next();
        s->for_filter = true;
        s->exprs.push_back(expression());
      }
      if (name("recursive")) unsupported(cur().pos, "recursive for loops are not supported");
      expect(Tok::block_end);
      ++loops;
      s->bodies.push_back(subparse({"endfor", "else"}));
      --loops;
      if (name("else")) {
        next();
        expect(Tok::block_end);
        s->has_else = true;
        s->bodies.push_back(subparse({"endfor"}));
      }
      next();  // endfor
      return s;
    }
    if (n == "set") {
      if (cur().type == Tok::name && look().type == Tok::op && look().text == "." && look(2).type == Tok::name) {
        s->targets.push_back(cur().text);
        s->text = look(2).text;
        next();
        next();
        next();
      } else {
        assign_target(*s, {});
      }
      if (op("=")) {
        next();
        s->kind = Stmt::set;
        s->exprs.push_back(tuple(false, true, {}, false));
        return s;
      }
      if (op("|")) unsupported(cur().pos, "filters on a {% set %} block are not supported");
      s->kind = Stmt::set_block;
      expect(Tok::block_end);
      s->bodies.push_back(subparse({"endset"}));
      next();
      return s;
    }
    if (n == "macro") {
      s->kind = Stmt::macro;
      s->text = expect_name();
      expect_op("(");
      bool defaults = false;
      while (!op(")")) {
        if (!s->params.empty()) expect_op(",");
        if (op(")")) break;
        const Pos pp = cur().pos;
        s->params.push_back(expect_name());
        if (op("=")) {
          next();
          s->exprs.push_back(expression());
          defaults = true;
        } else {
          if (defaults) syntax(pp, "non-default argument follows default argument");
          s->exprs.push_back(nullptr);
        }
      }
      expect_op(")");
      expect(Tok::block_end);
      const int outer = loops;
      loops = 0;
      s->bodies.push_back(subparse({"endmacro"}));
      loops = outer;
      next();
      return s;
    }
    if (n == "break" || n == "continue") {
      if (loops == 0) syntax(tk.pos, fmt::format("'{}' outside a for loop", n));
      s->kind = n == "break" ? Stmt::brk : Stmt::cont;
      return s;
    }
    if (n == "filter") {
      s->kind = Stmt::filter_block;
      s->exprs.push_back(filter_chain());
      expect(Tok::block_end);
      s->bodies.push_back(subparse({"endfilter"}));
      next();
      return s;
    }
    if (n == "generation") {
      s->kind = Stmt::generation;
      expect(Tok::block_end);
      s->bodies.push_back(subparse({"endgeneration"}));
      next();
      return s;
    }
    static const char* jinja2_tags[] = {"block", "extends", "include", "import", "from", "call", "with",
                                        "autoescape", "do", "trans", "print", "pluralize", "endblock"};
    for (const char* j : jinja2_tags)
      if (n == j) unsupported(tk.pos, fmt::format("the {{% {} %}} tag is not supported", n));
    syntax(tk.pos, fmt::format("encountered unknown tag '{}'", n));
  }

  // {% filter a(x) | b %}: a filter expression over a null input, the last filter outermost.
  ExprP filter_chain() {
    auto e = make(Expr::filter, cur().pos);
    e->name = dotted_name();
    if (!known_filter(e->name)) {
      if (jinja2_filter(e->name)) unsupported(e->pos, fmt::format("filter '{}' is not supported", e->name));
      syntax(e->pos, fmt::format("no filter named '{}'", e->name));
    }
    e->args.push_back(nullptr);
    if (op("(")) call_args(*e);
    ExprP out = std::move(e);
    while (op("|")) out = filter(std::move(out));
    return out;
  }
};

}  // namespace

void parse(std::vector<Token> tokens, Program* out) {
  Parser p{std::move(tokens), 0, out->where};
  out->body = p.subparse({});
}

}  // namespace mpitron::jinja
