// The evaluator of a parsed template as one struct: the statements in evaluator.cpp, the
// expressions (Python's operators, lookups, calls) in evaluate_expression.cpp.
#pragma once
#include <string>
#include <vector>

#include "jinja_impl.hpp"

namespace mpitron::jinja {

enum class Flow { normal, brk, cont };

// Evaluates in the context's frames; errors go through the context (TemplateError).
struct Evaluator {
  Context& c;

  [[noreturn]] void type_error(Pos p, const std::string& m) { c.runtime(p, m); }

  void need_defined(const Value& v, Pos p) {
    if (v.kind == Value::undefined) c.runtime(p, undefined_message(v));
  }

  // ---- expressions (evaluate_expression.cpp) ----

  Value lookup(const std::string& name, Pos p);
  Value binop(const std::string& o, const Value& a, const Value& b, Pos p);
  bool contains(const Value& seq, const Value& x, Pos p);
  bool compare(const std::string& o, const Value& a, const Value& b, Pos p);
  Value slice(const Value& obj, const Expr& e, std::vector<Value>& parts);
  Value call(const Value& fn, std::vector<Value>& args, Kwargs& kw, Pos p);
  Value eval(const Expr& e);
  Value filter(const Expr& e, Value v);

  // ---- statements (evaluator.cpp) ----

  void assign(const Stmt& s, Value v);
  Flow exec(const Body& body, std::string& out);
  Flow exec(const Stmt& s, std::string& out);
  void exec_scoped(const Body& b, std::string& out);
  Value apply_block_filters(const Expr& e, Value input);
  Flow exec_for(const Stmt& s, std::string& out);
  Value make_macro(const Stmt& s);
};

}  // namespace mpitron::jinja
