// jinja2's parser (jinja2/parser.py), the expression grammar with its precedence
//   cond (a if c else b) < or < and < not < compare/in < + - < ~ < * / // % < ** < unary - +
//   < postfix (.a [i] (args)) then filters (|f) and tests (is t), which bind tighter than any
//   operator ('a' + b | trim applies trim to b).
#include "parser.hpp"

namespace mpitron::jinja {

ExprP Parser::condexpr() {
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

ExprP Parser::or_expr() {
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

ExprP Parser::and_expr() {
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

ExprP Parser::not_expr() {
  if (name("not")) {
    auto n = make(Expr::not_, cur().pos);
    next();
    n->args.push_back(not_expr());
    return n;
  }
  return compare();
}

ExprP Parser::compare() {
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

ExprP Parser::binop(ExprP a, const std::string& o, ExprP b, Pos p) {
  auto e = make(Expr::binop, p);
  e->name = o;
  e->args.push_back(std::move(a));
  e->args.push_back(std::move(b));
  return e;
}

ExprP Parser::math1() {
  ExprP e = concat();
  while (op("+") || op("-")) {
    const std::string o = cur().text;
    const Pos p = cur().pos;
    next();
    e = binop(std::move(e), o, concat(), p);
  }
  return e;
}

ExprP Parser::concat() {
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

ExprP Parser::math2() {
  ExprP e = pow();
  while (op("*") || op("/") || op("//") || op("%")) {
    const std::string o = cur().text;
    const Pos p = cur().pos;
    next();
    e = binop(std::move(e), o, pow(), p);
  }
  return e;
}

ExprP Parser::pow() {
  ExprP e = unary();
  while (op("**")) {
    const Pos p = cur().pos;
    next();
    e = binop(std::move(e), "**", unary(), p);
  }
  return e;
}

ExprP Parser::unary(bool with_filter) {
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

ExprP Parser::primary() {
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
ExprP Parser::tuple(bool simplified, bool with_cond, const std::vector<std::string>& extra_end, bool explicit_parens) {
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

ExprP Parser::postfix(ExprP e) {
  while (true) {
    if (op(".") || op("[")) e = subscript(std::move(e));
    else if (op("(")) e = call(std::move(e));
    else return e;
  }
}

ExprP Parser::filter_expr(ExprP e) {
  while (true) {
    if (op("|")) e = filter(std::move(e));
    else if (name("is")) e = test(std::move(e));
    else if (op("(")) e = call(std::move(e));
    else return e;
  }
}

ExprP Parser::subscript(ExprP obj) {
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

ExprP Parser::subscribed() {
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
void Parser::call_args(Expr& e) {
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

ExprP Parser::call(ExprP fn) {
  auto e = make(Expr::call, fn->pos);  // errors point at what is called
  e->args.push_back(std::move(fn));
  call_args(*e);
  return e;
}

std::string Parser::dotted_name() {
  std::string n = expect_name();
  while (op(".")) {
    next();
    n += '.';
    n += expect_name();
  }
  return n;
}

// | name[(args)]; obj may be null (a {% filter %} block's filters).
ExprP Parser::filter(ExprP obj) {
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

ExprP Parser::test(ExprP obj) {
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

}  // namespace mpitron::jinja
