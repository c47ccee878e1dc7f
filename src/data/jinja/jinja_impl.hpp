// The Jinja subset's parts (jinja.hpp): tokens (lexer.cpp), the syntax tree (parser.hpp),
// values with Python's semantics (value.cpp), filters, tests and globals (builtins.cpp), methods,
// attributes and items (methods.cpp), and the evaluator (evaluator.hpp).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "mpitron/data/jinja.hpp"

namespace mpitron::jinja {

struct Pos {
  int line = 1, col = 1;
};

// Throws TemplateError "WHERE:LINE:COL: message".
[[noreturn]] void raise(TemplateError::Kind kind, const std::string& where, Pos pos, const std::string& message);

// ---- tokens (lexer.cpp) ----

enum class Tok { data, var_begin, var_end, block_begin, block_end, name, string, integer, floating, op, eof };

struct Token {
  Tok type;
  std::string text;  // data text, a name, a string's value, an operator; a number's digits
  Pos pos;
  int64_t i = 0;
  double f = 0;
};

// jinja2's lexer with trim_blocks and lstrip_blocks on.
std::vector<Token> lex(std::string_view source, const std::string& where);

// ---- values (value.cpp) ----

struct Value;
struct Dict;
struct Context;
using Kwargs = std::vector<std::pair<std::string, Value>>;
struct Function {
  std::string name;  // for messages: "raise_exception", "str.split", "macro m"
  std::function<Value(Context&, std::vector<Value>&, Kwargs&, Pos)> call;
};

struct Value {
  enum Kind : uint8_t { undefined, none, boolean, integer, floating, string, list, dict, function };
  Kind kind = undefined;
  bool tuple = false;      // a list that prints as a tuple
  bool ns = false;         // a dict that is a namespace() (attributes may be set)
  bool loop = false;       // a dict that is a for loop's `loop`
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;           // string; undefined: what was undefined (for messages)
  std::shared_ptr<std::vector<Value>> l;
  std::shared_ptr<Dict> d;
  std::shared_ptr<const Function> fn;

  static Value undef(std::string what = "") {
    Value v;
    v.s = std::move(what);
    return v;
  }
  static Value null() { Value v; v.kind = none; return v; }
  static Value of(bool x) { Value v; v.kind = boolean; v.b = x; return v; }
  static Value of(int64_t x) { Value v; v.kind = integer; v.i = x; return v; }
  static Value of(int x) { return of(static_cast<int64_t>(x)); }
  static Value of(size_t x) { return of(static_cast<int64_t>(x)); }
  static Value of(double x) { Value v; v.kind = floating; v.f = x; return v; }
  static Value str(std::string x) { Value v; v.kind = string; v.s = std::move(x); return v; }
  static Value of_list(std::vector<Value> x, bool is_tuple = false) {
    Value v;
    v.kind = list;
    v.tuple = is_tuple;
    v.l = std::make_shared<std::vector<Value>>(std::move(x));
    return v;
  }
  static Value of_dict(std::shared_ptr<Dict> x) { Value v; v.kind = dict; v.d = std::move(x); return v; }
  static Value of_function(std::string name, std::function<Value(Context&, std::vector<Value>&, Kwargs&, Pos)> f) {
    Value v;
    v.kind = function;
    v.fn = std::make_shared<Function>(Function{std::move(name), std::move(f)});
    return v;
  }
  bool is_number() const { return kind == boolean || kind == integer || kind == floating; }
};

struct Dict {
  std::vector<std::pair<std::string, Value>> items;  // insertion order, as Python's dict
  const Value* find(std::string_view key) const {
    for (auto& [k, v] : items)
      if (k == key) return &v;
    return nullptr;
  }
  void set(const std::string& key, Value v) {
    for (auto& [k, x] : items)
      if (k == key) {
        x = std::move(v);
        return;
      }
    items.emplace_back(key, std::move(v));
  }
};

Value from_json(const nlohmann::ordered_json& j);
const char* type_name(const Value& v);  // Python's: 'str', 'int', 'list', 'dict', 'NoneType', ...
bool truthy(const Value& v);
std::string to_str(const Value& v);     // Python's str() (undefined: "")
std::string repr(const Value& v);       // Python's repr()
std::string py_float_repr(double x);
bool equal(const Value& a, const Value& b);
// a < b etc. as Python; false with *why set when the types do not compare.
bool less(const Value& a, const Value& b, std::string* why);

// UTF-8 and Python string helpers.
std::vector<uint32_t> code_points(std::string_view s);
std::string utf8(const std::vector<uint32_t>& cps, size_t from = 0, size_t to = SIZE_MAX);
void append_utf8(std::string& out, uint32_t c);
size_t py_len(std::string_view s);  // code points
bool py_space(uint32_t c);           // str.isspace()
// str.strip / lstrip / rstrip; chars: nullptr for whitespace.
std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right);
std::vector<std::string> py_split(std::string_view s, const std::string* sep, int64_t maxsplit, bool from_right);
// Case mappings (Unicode simple mappings; false with *why when a code point needs special casing).
bool py_upper(std::string_view s, std::string* out, std::string* why);
bool py_lower(std::string_view s, std::string* out, std::string* why);
bool py_title(std::string_view s, std::string* out, std::string* why);       // str.title()
bool py_capitalize(std::string_view s, std::string* out, std::string* why);  // str.capitalize()
// transformers' tojson: json.dumps(x, ensure_ascii, indent, separators, sort_keys); false with
// *why for what JSON cannot hold.
struct JsonOptions {
  bool ensure_ascii = false, sort_keys = false;
  bool indent_set = false;
  std::string indent;                  // with indent_set
  std::string item_sep, key_sep;       // empty: Python's defaults
};
bool py_json(const Value& v, const JsonOptions& o, std::string* out, std::string* why);

// ---- syntax tree (parser.cpp) ----

struct Expr;
using ExprP = std::unique_ptr<Expr>;
struct Expr {
  enum Kind {
    literal, name_ref, list, tuple, dict, getattr, getitem, slice, call, filter, test, neg, plus, not_,
    and_, or_, binop, concat, compare, cond
  };
  Kind kind;
  Pos pos;
  Value value;               // literal
  std::string name;          // name, getattr's attribute, filter / test name, binop operator
  std::vector<ExprP> args;   // operands, items (dict: key, value, key, value ...), call args
  std::vector<std::pair<std::string, ExprP>> kwargs;
  std::vector<std::string> ops;  // compare: the operators between args
  bool negated = false;      // test: `is not`
  bool has[3] = {false, false, false};  // slice: start, stop, step present (args hold the ones present)
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;
struct Stmt {
  enum Kind { text_data, output, if_, for_, set, set_block, macro, brk, cont, filter_block, generation };
  Kind kind;
  Pos pos;
  std::string text;                     // text; set: a namespace attribute ("" for names)
  std::vector<std::string> targets;     // for / set: the names assigned (several: unpacking)
  bool target_tuple = false;            // for / set: `a, b` or `(a,)`: unpack
  std::vector<ExprP> exprs;             // output; if: conditions; for: iterable, [filter]; set: value;
                                        // macro: defaults (null for none); filter_block: filters
  std::vector<Body> bodies;             // if: one per condition, + else; for: body, else
  bool has_else = false;
  bool for_filter = false;
  std::vector<std::string> params;      // macro
};

struct Program {
  std::string where;
  Body body;
};

void parse(std::vector<Token> tokens, Program* out);
bool known_filter(const std::string& name);  // builtins.cpp
bool known_test(const std::string& name);
// jinja2's filters and tests that this subset does not have (an "unsupported" error rather than
// jinja2's "no filter named").
bool jinja2_filter(const std::string& name);
bool jinja2_test(const std::string& name);

// ---- evaluation (evaluator.hpp, builtins.cpp, methods.cpp) ----

struct Context {
  const Program& prog;
  std::vector<std::shared_ptr<Dict>> frames;  // innermost last; frames[0]: the variables
  std::vector<size_t> loop_floor;             // unused marker
  int depth = 0;                              // macro calls
  [[noreturn]] void fail(TemplateError::Kind kind, Pos pos, const std::string& message) const {
    raise(kind, prog.where, pos, message);
  }
  [[noreturn]] void unsupported(Pos pos, const std::string& message) const {
    fail(TemplateError::Kind::unsupported, pos, message);
  }
  [[noreturn]] void runtime(Pos pos, const std::string& message) const {
    fail(TemplateError::Kind::runtime, pos, message);
  }
};

Value lookup_global(const std::string& name);  // builtins.cpp: namespace, range, dict, raise_exception
Value apply_filter(Context& c, const std::string& name, Value v, std::vector<Value>& args, Kwargs& kw, Pos pos);
bool apply_test(Context& c, const std::string& name, const Value& v, std::vector<Value>& args, Pos pos);
// methods.cpp:
// obj.name: a method bound to obj, or nullopt-like undefined when obj has none of that name
// (*found false); errors for methods the sandbox forbids.
Value method(Context& c, const Value& obj, const std::string& name, Pos pos, bool* found);
// The item `key` of obj as jinja2's environment.getitem / getattr would return it.
Value get_item(Context& c, const Value& obj, const Value& key, Pos pos);
Value get_attr(Context& c, const Value& obj, const std::string& name, Pos pos);
// Iteration as Python's iter(): a list's items, a dict's keys, a string's characters, nothing
// for undefined; others are a runtime error.
std::vector<Value> iterate(Context& c, const Value& v, Pos pos);
// "'x' is undefined" as jinja2 words it.
std::string undefined_message(const Value& v);

}  // namespace mpitron::jinja
