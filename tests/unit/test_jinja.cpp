// The Jinja subset (jinja.hpp): every construct against the text python3-jinja2 3.1 renders in
// transformers' environment (ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
// loopcontrols), its tojson and raise_exception; the expected strings below were rendered by it),
// whitespace control, and the errors: syntax, unsupported (named, with line:column), runtime, and
// raise_exception's refusal.
#include <boost/test/unit_test.hpp>
#include <nlohmann/json.hpp>

#include "mpitron/data/jinja.hpp"

using namespace mpitron;

namespace {

struct Case {
  const char* tmpl;
  const char* want;
};

const char* kVars = R"J({"x": "val", "n": 3, "m": {"role": "user", "content": " hi "}, "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}]})J";
const Case kCases[] = {
    {R"J(line1
{% if true %}
  inside
{% endif %}
line3
)J",
     R"J(line1
  inside
line3)J"},
    {R"J(  {% if true %}x{% endif %}  
  {%- if true -%}  y  {%- endif -%}  
z)J",
     R"J(xyz)J"},
    {R"J(a  {{- 1 -}}  b  {{ 2 }}  c
)J",
     R"J(a1b  2  c)J"},
    {R"J({%+ if true %}x{% endif +%}
y)J",
     R"J(x
y)J"},
    {R"J(  {# c #}
{#- c -#}  a  {# c +#}
b)J",
     R"J(a  
b)J"},
    {R"J(  {% raw %}
  {{ x }}{% if %}
  {% endraw %}
after)J",
     R"J(
  {{ x }}{% if %}
after)J"},
    {"a\015\nb\015c\n\n",
     R"J(a
b
c
)J"},
    {R"J({%- for m in messages %}
    {{- m.role }}
{%- endfor %}
)J",
     R"J(systemuserassistant)J"},
    {R"J({{ none }} {{ true }} {{ 1.0 }} {{ 1e20 }} {{ 1.5e-7 }} {{ 0.1 + 0.2 }} {{ 1/3 }} {{ 0.0001 }} {{ 1e16 }})J",
     R"J(None True 1.0 1e+20 1.5e-07 0.30000000000000004 0.3333333333333333 0.0001 1e+16)J"},
    {R"J({{ [1, 'a', none, true, 1.5, {'k': "it's"}] }} {{ (1,) }} {{ () }} {{ ['\n', '\x00', '\u200b', 'é'] }})J",
     R"J([1, 'a', None, True, 1.5, {'k': "it's"}] (1,) () ['\n', '\x00', '\u200b', 'é'])J"},
    {R"J({{ 'a\nb\t\x41\u00e9\U0001F600\\' }}{{ 'a' 'b' }}{{ 1_000 }})J",
     "a\nb\011Aé😀\\ab1000"},
    {R"J({{ 7 // 2 }} {{ -7 // 2 }} {{ 7 / 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 2 ** -1 }} {{ -2 ** 2 }})J",
     R"J(3 -4 3.5 2 -2 1024 3.0 0.5 0.5 4)J"},
    {R"J({{ 'ab' * 3 }}{{ [1] * 2 }}{{ 1 == 1.0 }}{{ 1 == true }}{{ 'a' < 'b' }}{{ [1,2] < [1,3] }}{{ 1 < 2 < 3 }}{{ 3 > 2 > 5 }})J",
     R"J(ababab[1, 1]TrueTrueTrueTrueTrueFalse)J"},
    {R"J({{ 'a' ~ 1 ~ none ~ y ~ [1] }} {{ 'b' in 'abc' }}{{ 'z' not in 'abc' }}{{ 2 in [1,2] }}{{ 'a' in {'a': 1} }}{{ 'a' in y }})J",
     R"J(a1None[1] TrueTrueTrueTrueFalse)J"},
    {R"J({{ y and 1 }}{{ 0 or 'd' }}{{ not 0 }}{{ 1 if 0 else 2 }}[{{ 1 if 0 }}]{{ 'x' if true else 'y' | upper }})J",
     R"J(dTrue2[]x)J"},
    {R"J({% if y %}a{% elif n > 2 %}b{% else %}c{% endif %})J",
     R"J(b)J"},
    {R"J({% for i in [1,2,3] %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.previtem }}{{ loop.nextitem }}{{ loop.cycle('a','b') }}|{% endfor %})J",
     R"J(10TrueFalse3322a|21FalseFalse32113b|32FalseTrue3102a|)J"},
    {R"J({% for i in [] %}x{% else %}empty{% endfor %}{% for i in range(6) if i is odd %}{{ i }}/{{ loop.length }} {% endfor %})J",
     R"J(empty1/3 3/3 5/3 )J"},
    {R"J({% for i in range(10) %}{% if i == 3 %}{% continue %}{% endif %}{% if i == 6 %}{% break %}{% endif %}{{ i }}{% endfor %})J",
     R"J(01245)J"},
    {R"J({% for k, v in {'b': 1, 'a': 2}.items() %}{{ k }}={{ v }};{% endfor %}{% for c in 'hé' %}[{{ c }}]{% endfor %})J",
     R"J(b=1;a=2;[h][é])J"},
    {R"J({% set x = 5 %}{% for i in [1,2] %}{{ x }}{% set x = i %}{{ x }}{% endfor %}{{ x }}{% if true %}{% set z = 3 %}{% endif %}{{ z }})J",
     R"J(515253)J"},
    {R"J({% set ns = namespace(a=1, b='x') %}{% for i in [1,2,3] %}{% set ns.a = ns.a + i %}{% endfor %}{{ ns.a }}{{ ns.b }})J",
     R"J(7x)J"},
    {R"J({% set a, b = 1, 2 %}{{ a }}{{ b }}{% set blk %}block {{ 1 + 1 }}{% endset %}[{{ blk }}])J",
     R"J(12[block 2])J"},
    {R"J({% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('a') }}{{ greet('b', '?') }}{{ greet(name='c', punct='.') }})J",
     R"J(Hi a!Hi b?Hi c.)J"},
    {R"J({% filter upper %}hello {{ 'x' }}{% endfilter %})J",
     R"J(HELLO X)J"},
    {R"J({% for message in messages[::-1] %}{% set index = (messages|length - 1) - loop.index0 %}{{ index }}{{ message.role }}{% endfor %})J",
     R"J(2assistant1user0system)J"},
    {R"J({{ y | default('d') }}{{ none | default('d') }}{{ '' | default('d', true) }}{{ [1,2,3] | length }}{{ 'héllo' | length }}{{ y | length }})J",
     R"J(dNoned350)J"},
    {R"J([{{ '  a b  ' | trim }}|{{ 'xxaxx' | trim('x') }}|{{ 5 | trim }}|{{ m.content | trim }}])J",
     R"J([a b|a|5|hi])J"},
    {R"J({{ ['a','b'] | join(', ') }}{{ [1,2] | join }}{{ [{'n':'a'},{'n':'b'}] | join('-', attribute='n') }})J",
     R"J(a, b12a-b)J"},
    {R"J({{ 'Hello' | upper }}{{ 'Hello' | lower }}{{ 'hello world' | capitalize }}{{ 'hello wORLD-foo (bar' | title }})J",
     R"J(HELLOhelloHello worldHello World-Foo (Bar)J"},
    {R"J({{ {'a': 1, 'b': [1, 2]} | items | list }}{{ [3,1,2] | first }}{{ [3,1,2] | last }}{{ 'abc' | list }}{{ 42 | string }})J",
     R"J([('a', 1), ('b', [1, 2])]32['a', 'b', 'c']42)J"},
    {R"J({{ '42' | int + 1 }}{{ '4.7' | int }}{{ 'x' | int }}{{ 'x' | int(7) }}{{ '1.5' | float }}{{ -3 | abs }}{{ 'aXbXc' | replace('X', '-', 1) }}{{ 'abc' | reverse }})J",
     R"J(434071.53a-bXccba)J"},
    {R"J({{ messages | map(attribute='role') | join(',') }} {{ messages | selectattr('role', 'equalto', 'user') | list }} {{ messages | rejectattr('role', 'ne', 'system') | map(attribute='content') | list }} {{ [1,2,3,4] | select('even') | list }})J",
     R"J(system,user,assistant [{'role': 'user', 'content': 'u'}] ['s'] [2, 4])J"},
    {R"J({{ {'b': 1, 'a': [1, 'é<>&\'"\n'], 'c': none, 'd': true, 'e': 1.5} | tojson }}|{{ {'a': [1, {'b': 2}], 'c': {}} | tojson(indent=2) }}|{{ {'a': 'é'} | tojson(ensure_ascii=true) }}{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }})J",
     R"J({"b": 1, "a": [1, "é<>&'\"\n"], "c": null, "d": true, "e": 1.5}|{
  "a": [
    1,
    {
      "b": 2
    }
  ],
  "c": {}
}|{"a": "\u00e9"}{"a": 2, "b": 1})J"},
    {R"J({{ y is defined }}{{ y is undefined }}{{ none is none }}{{ 1 is number }}{{ true is number }}{{ 1 is integer }}{{ 1.0 is float }}{{ 'a' is string }}{{ {} is mapping }}{{ [] is sequence }}{{ m.x is defined }}{{ m.role is not none }})J",
     R"J(FalseTrueTrueTrueTrueTrueTrueTrueTrueTrueFalseTrue)J"},
    {R"J({{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 1 is eq 1 }}{{ 1 is lt 2 }}{{ 'a' is in 'abc' }}{{ none is sameas none }}{{ 1 is true }})J",
     R"J(TrueTrueTrueTrueTrueTrueTrueFalse)J"},
    {R"J([{{ '  a  '.strip() }}|{{ '  a  '.lstrip() }}|{{ '  a  '.rstrip() }}|{{ 'xxaxx'.strip('x') }}|{{ '\n\na\n'.strip('\n') }}|{{ ' \u3000a\u00a0 '.strip() }}])J",
     R"J([a|a  |  a|a|a|a])J"},
    {R"J({{ 'a,b,,c'.split(',') }}{{ ' a  b '.split() }}{{ 'a b c'.split(' ', 1) }}{{ 'a b c'.rsplit(' ', 1) }}{{ 'a  b c '.split(none, 1) }}{{ ''.split(',') }})J",
     R"J(['a', 'b', '', 'c']['a', 'b']['a', 'b c']['a b', 'c']['a', 'b c '][''])J"},
    {R"J({{ 'abc'.startswith('ab') }}{{ 'abc'.endswith('bc') }}{{ 'abc'.startswith(('x', 'a')) }}{{ "hello wORLD it's".title() }}{{ 'hELLO'.capitalize() }}{{ 'Ab'.upper() }}{{ 'Ab'.lower() }})J",
     R"J(TrueTrueTrueHello World It'SHelloABab)J"},
    {R"J({{ 'aaa'.replace('a', 'b', 2) }}{{ 'abc'.replace('', '-') }}{{ 'héllo'.find('l') }}{{ 'hello'.rfind('l') }}{{ 'hello'.count('l') }}{{ '-'.join(['a', 'b']) }})J",
     R"J(bba-a-b-c-232a-b)J"},
    {R"J({{ [1,2,3][::-1] }}{{ 'héllo'[1:3] }}{{ 'abc'[-1] }}{{ [1,2,3,4,5][1::2] }}{{ [1,2,3][5] }}{{ [1,2,3][-5:10] }}{{ 'abcdef'[::-2] }}{{ messages[0].content }}{{ messages[-1]['role'] }})J",
     R"J([3, 2, 1]élc[2, 4][1, 2, 3]fdbsassistant)J"},
    {R"J({{ {'a': 1}.get('a') }}{{ {'a': 1}.get('b') }}{{ {'a': 1}.get('b', 2) }}{{ {'a': 1}.keys() }}{{ {'a': 1}.items() }}{{ m.missing }}{{ dict(a=1) }}{{ range(1, 10, 3) | list }})J",
     R"J(1None2dict_keys(['a'])dict_items([('a', 1)]){'a': 1}[1, 4, 7])J"},
    {R"J({{ '<think>' in 'a</think>b' }}{{ 'r</think>\n\nb'.split('</think>')[-1].lstrip('\n') }}{{ 1 if n is defined and n is false else 2 }})J",
     R"J(Falseb2)J"},
};

std::string render(const std::string& t, const std::string& vars = "{}") {
  return jinja::Template(t, "T").render(nlohmann::ordered_json::parse(vars));
}

// The error a template gives (parsing or rendering): its kind and message.
jinja::TemplateError::Kind error_of(const std::string& t, std::string* what, const std::string& vars = "{}") {
  try {
    render(t, vars);
  } catch (const jinja::TemplateError& e) {
    *what = e.what();
    return e.kind();
  }
  BOOST_FAIL("no error from " << t);
  return jinja::TemplateError::Kind::syntax;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(jinja_subset)

BOOST_AUTO_TEST_CASE(renders_as_jinja2) {
  int n = 0;
  for (const Case& c : kCases) {
    BOOST_TEST_CONTEXT("template " << c.tmpl) { BOOST_TEST(render(c.tmpl, kVars) == std::string(c.want)); }
    ++n;
  }
  BOOST_TEST(n >= 40);
}

BOOST_AUTO_TEST_CASE(whitespace_control) {
  // trim_blocks: the newline after a block tag goes; lstrip_blocks: the indent before it.
  BOOST_TEST(render("a\n  {% if true %}\n  b\n  {% endif %}\nc") == "a\n  b\nc");
  // Not after a variable tag; {%+ and +%} keep what they touch; - strips all whitespace.
  BOOST_TEST(render("{{ 1 }}\n{{ 2 }}") == "1\n2");
  BOOST_TEST(render("  {%+ if true %}x{% endif +%}\ny") == "  x\ny");
  BOOST_TEST(render("a \n\t {%- if true -%} \n b {{- ' c ' -}} \n d{% endif %}") == "ab c d");
  BOOST_TEST(render("x\n") == "x");      // the template's trailing newline is dropped
  BOOST_TEST(render("x\n\n") == "x\n");  // only one
  BOOST_TEST(render("a\r\nb\rc") == "a\nb\nc");
  BOOST_TEST(render("  {# note #}\nz") == "z");
}

BOOST_AUTO_TEST_CASE(scoping_and_namespaces) {
  // A for loop's assignments stay in it (each iteration starts from the outer values); an if's do not.
  BOOST_TEST(render("{% set x = 1 %}{% for i in [5, 6] %}{{ x }}{% set x = i %}{% endfor %}{{ x }}") == "111");
  BOOST_TEST(render("{% if true %}{% set y = 2 %}{% endif %}{{ y }}") == "2");
  BOOST_TEST(render("{% set ns = namespace(n=0) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}") ==
             "6");
  // x.name looks for an attribute (a dict's methods) first, then the item; x['name'] the other way.
  BOOST_TEST(render("{{ v.k }}{{ v['items'] }}{{ v.items() | list }}", R"({"v": {"k": "a", "items": "b"}})") ==
             "ab[('k', 'a'), ('items', 'b')]");
}

BOOST_AUTO_TEST_CASE(raise_exception_refuses) {
  std::string what;
  BOOST_TEST((error_of("{% if true %}{{ raise_exception('Roles must alternate ' ~ 2) }}{% endif %}", &what) ==
              jinja::TemplateError::Kind::refusal));
  BOOST_TEST(what == "T:1:17: Roles must alternate 2");
  try {
    render("{{ raise_exception('no') }}");
  } catch (const jinja::TemplateError& e) {
    BOOST_TEST(e.message() == "no");
  }
}

BOOST_AUTO_TEST_CASE(errors_name_construct_and_position) {
  using K = jinja::TemplateError::Kind;
  struct E {
    const char* tmpl;
    K kind;
    const char* what;
  };
  const E cases[] = {
      {"{{ foo( }}", K::syntax, "T:1:9: unexpected '}', expected ')'"},
      {"a\n{% for x in y %}", K::syntax, "T:2:17: unexpected end of template: Jinja was looking for the following tags: 'endfor' or 'else'"},
      {"{% endfor %}", K::syntax, "T:1:4: encountered unknown tag 'endfor'"},
      {"{{ x | nosuch }}", K::syntax, "T:1:8: no filter named 'nosuch'"},
      {"{{ x is nosuch }}", K::syntax, "T:1:9: no test named 'nosuch'"},
      {"{% break %}", K::syntax, "T:1:4: 'break' outside a for loop"},
      {"{{ 'a' | wordcount }}", K::unsupported, "T:1:10: filter 'wordcount' is not supported"},
      {"\n  {% include 'x' %}", K::unsupported, "T:2:6: the {% include %} tag is not supported"},
      {"{% for i in x recursive %}{% endfor %}", K::unsupported, "T:1:15: recursive for loops are not supported"},
      {"{{ '%s' % 1 }}", K::unsupported, "T:1:9: % string formatting is not supported"},
      {"{{ 'ß'.upper() }}", K::unsupported, "T:1:7: the case mapping of U+00DF needs Unicode's special casing, which is not supported"},
      {"{{ 'a'.zfill(3) }}", K::unsupported, "T:1:7: the str method 'zfill' is not supported"},
      {"{{ {1: 2} }}", K::unsupported, "T:1:5: dict keys other than strings are not supported"},
      {"{{ x.y }}", K::runtime, "T:1:5: 'x' is undefined"},
      {"{{ x + 'a' }}", K::runtime, "T:1:6: 'x' is undefined"},
      {"{{ 1 + 'a' }}", K::runtime, "T:1:6: unsupported operand type(s) for +: 'int' and 'str'"},
      {"{{ 'a' + 1 }}", K::runtime, "T:1:8: can only concatenate str (not \"int\") to str"},
      {"{{ [1][0].x.y }}", K::runtime, "T:1:12: 'int object' has no attribute 'x'"},
      {"{% for i in 5 %}{% endfor %}", K::runtime, "T:1:13: 'int' object is not iterable"},
      {"{{ 1 // 0 }}", K::runtime, "T:1:6: integer division or modulo by zero"},
  };
  for (const E& e : cases) {
    std::string what;
    BOOST_TEST_CONTEXT("template " << e.tmpl) {
      BOOST_TEST((error_of(e.tmpl, &what) == e.kind));
      BOOST_TEST(what == std::string(e.what));
    }
  }
}

BOOST_AUTO_TEST_CASE(undefined_values) {
  // Printing, testing, iterating and measuring an undefined value is fine; jinja2's default Undefined.
  BOOST_TEST(render("[{{ u }}]{{ u is defined }}{% if u %}x{% endif %}{% for i in u %}i{% endfor %}{{ u | length }}"
                    "{{ u == u }}{{ 'a' in u }}{{ m.none is defined }}",
                    R"({"m": {}})") == "[]False0TrueFalseFalse");
}

BOOST_AUTO_TEST_CASE(dict_order_and_values_from_json) {
  // Objects keep their key order (Python dicts); numbers and nulls print as Python's.
  BOOST_TEST(render("{{ d }}|{{ d | tojson }}", R"({"d": {"z": 1, "a": [2.5, null, true, "x"]}})") ==
             "{'z': 1, 'a': [2.5, None, True, 'x']}|{\"z\": 1, \"a\": [2.5, null, true, \"x\"]}");
}

BOOST_AUTO_TEST_SUITE_END()
