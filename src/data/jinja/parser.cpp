// jinja2's parser (jinja2/parser.py): the statements ({% if %}, {% for %}, {% set %}, {% macro %},
// ...) and the template's body; the expressions are parse_expression.cpp's.
#include "parser.hpp"

namespace mpitron::jinja {

// Statements until a block tag whose name is one of `ends` (that name is then the current
// token). At the end of the template: an error unless ends is empty.
Body Parser::subparse(const std::vector<std::string>& ends) {
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
void Parser::assign_target(Stmt& s, const std::vector<std::string>& extra_end) {
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

std::unique_ptr<Stmt> Parser::statement() {
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
ExprP Parser::filter_chain() {
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

void parse(std::vector<Token> tokens, Program* out) {
  Parser p{std::move(tokens), 0, out->where};
  out->body = p.subparse({});
}

}  // namespace mpitron::jinja
