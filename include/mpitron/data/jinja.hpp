// A Jinja2 subset: enough of the language to render the chat templates models ship in their
// tokenizer_config.json ("chat_template"), giving the text python3-jinja2 gives in the
// environment transformers' apply_chat_template uses:
//   ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
//   + raise_exception(msg), + transformers' tojson (json.dumps, ensure_ascii=False, keys unsorted),
//   + the {% generation %} tag (its body is rendered; transformers uses it for assistant masks).
// strftime_now is not defined (templates that test `strftime_now is defined` take their fixed
// date: a data set's text must not depend on the day prep runs).
//
// Supported (docs/data.md lists it for users):
//   text, {{ expr }}, {# comments #}, {% raw %}; whitespace control {%- -%} {{- -}} {%+ +%} with
//   trim_blocks and lstrip_blocks, the template's trailing newline dropped, \r\n and \r read as \n;
//   {% if/elif/else %}, {% for x in xs [if cond] %} ... {% else %} with loop.index, index0,
//   revindex, revindex0, first, last, length, previtem, nextitem, cycle(); {% break %},
//   {% continue %}; {% set x = e %}, {% set a, b = e %}, {% set ns.attr = e %}, {% set x %}..
//   {% endset %}; {% macro m(a, b=1) %} (no caller/varargs); {% filter f %}; {% generation %};
//   expressions: literals (strings with Python escapes, ints, floats, true/false/none, lists,
//   tuples, dicts), names, x.attr, x[i], slices x[a:b:c], calls, `a if c else b`, and/or/not,
//   in/not in, == != < <= > >= (chained), + - * / // % ** ~, unary - +, filters and `is` tests;
//   filters abs, capitalize, count, d/default, first, float, int, items, join, last, length,
//   list, lower, map (a filter name or attribute=), reject, rejectattr, replace, reverse, safe,
//   select, selectattr, string, title, tojson, trim, upper; tests boolean, callable, defined,
//   divisibleby, eq/equalto/==, even, false, float, ge, gt, in, integer, iterable, le, lt,
//   mapping, ne, none, number, odd, sameas (none, true, false), sequence, string, true, undefined;
//   globals dict, namespace, range, raise_exception; str methods capitalize, count, endswith,
//   find, join, lower, lstrip, removeprefix, removesuffix, replace, rfind, rsplit, rstrip, split,
//   startswith, strip, title, upper; dict methods get, items, keys, values.
// Python semantics throughout: str is code points (len, slices, indexes), floats print as repr,
// lists and dicts print as Python's repr, None prints "None", undefined prints "", dicts keep
// insertion order, ints are 64-bit (overflow is an error, not a bignum).
//
// Anything else (extends, include, import, call blocks, recursive loops, % string formatting,
// other filters, methods or tests, case mappings that need Unicode's special casing such as
// 'ß'.upper()) is an error naming the template, the construct and its line:column, never an
// approximation. Unknown filter and test names are found when the template is parsed (as jinja2
// does); the rest when the construct runs.
#pragma once
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "mpitron/core/error.hpp"

namespace mpitron::jinja {

// Every error is a UsageError whose message starts with "WHERE:LINE:COL: ".
//   syntax       the template is not valid Jinja (what jinja2 also rejects when compiling)
//   unsupported  valid Jinja outside this subset
//   runtime      what jinja2 raises while rendering these values (an undefined value used, a
//                type error, an index into a non-list): depends on the data
//   refusal      the template called raise_exception(msg): message() holds msg
class TemplateError : public UsageError {
 public:
  enum class Kind { syntax, unsupported, runtime, refusal };
  TemplateError(Kind kind, const std::string& what, std::string message)
      : UsageError(what), kind_(kind), message_(std::move(message)) {}
  Kind kind() const { return kind_; }
  const std::string& message() const { return message_; }  // without the position

 private:
  Kind kind_;
  std::string message_;
};

struct Program;  // the parsed template (src/data/jinja/jinja_impl.hpp)

class Template {
 public:
  // Parses `source`; `where` names it in every error (a file and key: "DIR/tokenizer_config.json
  // chat_template"). Throws TemplateError (syntax, unsupported).
  Template(std::string_view source, std::string where);
  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;

  // Renders with the variables of `vars` (a JSON object; its objects keep their key order).
  // Thread-safe: a parsed template is read only.
  std::string render(const nlohmann::ordered_json& vars) const;
  const std::string& where() const;

 private:
  std::unique_ptr<Program> p_;
};

}  // namespace mpitron::jinja
