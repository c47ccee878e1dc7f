// jinja2's parser (jinja2/parser.py) as one struct: the token helpers here, the statements in
// parser.cpp, the expression grammar in parse_expression.cpp.
#pragma once
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "jinja_impl.hpp"

namespace mpitron::jinja {

inline const char* tok_name(const Token& t) {
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

inline std::string describe(const Token& t) {
  if (const char* n = tok_name(t)) return n;
  if (t.type == Tok::string) return "string";
  if (t.type == Tok::integer) return "integer";
  if (t.type == Tok::floating) return "float";
  return "'" + t.text + "'";
}

// The tokens of one template and the position in them; raises TemplateError at the first error.
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

  // ---- expressions (parse_expression.cpp) ----

  ExprP expression(bool with_cond = true) { return with_cond ? condexpr() : or_expr(); }

  ExprP condexpr();
  ExprP or_expr();
  ExprP and_expr();
  ExprP not_expr();
  ExprP compare();
  ExprP binop(ExprP a, const std::string& o, ExprP b, Pos p);
  ExprP math1();
  ExprP concat();
  ExprP math2();
  ExprP pow();
  ExprP unary(bool with_filter = true);
  ExprP primary();
  ExprP tuple(bool simplified, bool with_cond, const std::vector<std::string>& extra_end, bool explicit_parens);
  ExprP postfix(ExprP e);
  ExprP filter_expr(ExprP e);
  ExprP subscript(ExprP obj);
  ExprP subscribed();
  void call_args(Expr& e);
  ExprP call(ExprP fn);
  std::string dotted_name();
  ExprP filter(ExprP obj);
  ExprP test(ExprP obj);

  // ---- statements (parser.cpp) ----

  Body subparse(const std::vector<std::string>& ends);
  void assign_target(Stmt& s, const std::vector<std::string>& extra_end);
  std::unique_ptr<Stmt> statement();
  ExprP filter_chain();
};

}  // namespace mpitron::jinja
