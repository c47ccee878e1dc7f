// Values with Python's semantics: str() and repr(), ==, <, truthiness, json.dumps, and the str
// methods' whitespace, splitting and case rules over code points.
#include <utf8proc.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <nlohmann/json.hpp>

#include "jinja_impl.hpp"

namespace mpitron::jinja {

Value from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::null();
    case nlohmann::ordered_json::value_t::boolean: return Value::of(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value::of(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const auto u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value::of(static_cast<double>(u));
      return Value::of(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value::of(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value::str(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> v;
      for (const auto& x : j) v.push_back(from_json(x));
      return Value::of_list(std::move(v));
    }
    case nlohmann::ordered_json::value_t::object: {
      auto d = std::make_shared<Dict>();
      for (auto it = j.begin(); it != j.end(); ++it) d->set(it.key(), from_json(it.value()));
      return Value::of_dict(std::move(d));
    }
    default: return Value::undef("a JSON value of type " + std::string(j.type_name()));
  }
}

const char* type_name(const Value& v) {
  switch (v.kind) {
    case Value::undefined: return "Undefined";
    case Value::none: return "NoneType";
    case Value::boolean: return "bool";
    case Value::integer: return "int";
    case Value::floating: return "float";
    case Value::string: return "str";
    case Value::list: return v.tuple ? "tuple" : "list";
    case Value::dict: return v.ns ? "Namespace" : v.loop ? "LoopContext" : "dict";
    case Value::function: return "function";
  }
  return "?";
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Value::undefined:
    case Value::none: return false;
    case Value::boolean: return v.b;
    case Value::integer: return v.i != 0;
    case Value::floating: return v.f != 0;
    case Value::string: return !v.s.empty();
    case Value::list: return !v.l->empty();
    case Value::dict: return v.ns || v.loop || !v.d->items.empty();
    case Value::function: return true;
  }
  return false;
}

std::string py_float_repr(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  if (x == 0) return std::signbit(x) ? "-0.0" : "0.0";
  // The shortest round-trip digits, then Python's layout: positional for exponents -4..15,
  // scientific otherwise (repr's 'r' format).
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  const size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  const int exp = std::stoi(sci.substr(e + 1));
  const bool neg = mant[0] == '-';
  if (neg) mant.erase(0, 1);
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  std::string out;
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    } else if (static_cast<size_t>(exp) + 1 >= digits.size()) {
      out = digits + std::string(static_cast<size_t>(exp) + 1 - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, static_cast<size_t>(exp) + 1) + "." + digits.substr(static_cast<size_t>(exp) + 1);
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    out += fmt::format("e{}{:02d}", exp < 0 ? '-' : '+', std::abs(exp));
  }
  return neg ? "-" + out : out;
}

// ---- UTF-8 ----

std::vector<uint32_t> code_points(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    const size_t n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 1;
    if (n == 1 || i + n > s.size()) {
      out.push_back(b);
      ++i;
      continue;
    }
    uint32_t c = b & (0x7f >> n);
    for (size_t k = 1; k < n; ++k) c = c << 6 | (static_cast<unsigned char>(s[i + k]) & 0x3f);
    out.push_back(c);
    i += n;
  }
  return out;
}

void append_utf8(std::string& out, uint32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xc0 | c >> 6);
    out += static_cast<char>(0x80 | (c & 0x3f));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xe0 | c >> 12);
    out += static_cast<char>(0x80 | (c >> 6 & 0x3f));
    out += static_cast<char>(0x80 | (c & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | c >> 18);
    out += static_cast<char>(0x80 | (c >> 12 & 0x3f));
    out += static_cast<char>(0x80 | (c >> 6 & 0x3f));
    out += static_cast<char>(0x80 | (c & 0x3f));
  }
}

std::string utf8(const std::vector<uint32_t>& cps, size_t from, size_t to) {
  std::string s;
  for (size_t i = from; i < std::min(to, cps.size()); ++i) append_utf8(s, cps[i]);
  return s;
}

size_t py_len(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xc0) != 0x80;
  return n;
}

bool py_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right) {
  const auto cps = code_points(s);
  std::vector<uint32_t> set;
  if (chars) set = code_points(*chars);
  auto strip_it = [&](uint32_t c) {
    return chars ? std::find(set.begin(), set.end(), c) != set.end() : py_space(c);
  };
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && strip_it(cps[b])) ++b;
  if (right)
    while (e > b && strip_it(cps[e - 1])) --e;
  return utf8(cps, b, e);
}

std::vector<std::string> py_split(std::string_view s, const std::string* sep, int64_t maxsplit, bool from_right) {
  std::vector<std::string> out;
  if (sep) {
    if (!from_right) {
      size_t at = 0;
      while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
        const size_t k = s.find(*sep, at);
        if (k == std::string_view::npos) break;
        out.emplace_back(s.substr(at, k - at));
        at = k + sep->size();
      }
      out.emplace_back(s.substr(at));
    } else {
      size_t end = s.size();
      std::vector<std::string> rev;
      while (maxsplit < 0 || static_cast<int64_t>(rev.size()) < maxsplit) {
        if (end < sep->size()) break;
        const size_t k = s.rfind(*sep, end - sep->size());
        if (k == std::string_view::npos) break;
        rev.emplace_back(s.substr(k + sep->size(), end - k - sep->size()));
        end = k;
      }
      rev.emplace_back(s.substr(0, end));
      out.assign(rev.rbegin(), rev.rend());
    }
    return out;
  }
  // Runs of whitespace; no empty strings.
  const auto cps = code_points(s);
  if (!from_right) {
    size_t i = 0;
    while (i < cps.size()) {
      while (i < cps.size() && py_space(cps[i])) ++i;
      if (i == cps.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        size_t e = cps.size();
        out.push_back(utf8(cps, i, e));  // the rest, trailing whitespace kept
        return out;
      }
      size_t j = i;
      while (j < cps.size() && !py_space(cps[j])) ++j;
      out.push_back(utf8(cps, i, j));
      i = j;
    }
    return out;
  }
  size_t i = cps.size();
  std::vector<std::string> rev;
  while (i > 0) {
    while (i > 0 && py_space(cps[i - 1])) --i;
    if (i == 0) break;
    if (maxsplit >= 0 && static_cast<int64_t>(rev.size()) == maxsplit) {
      rev.push_back(utf8(cps, 0, i));
      break;
    }
    size_t j = i;
    while (j > 0 && !py_space(cps[j - 1])) --j;
    rev.push_back(utf8(cps, j, i));
    i = j;
  }
  out.assign(rev.rbegin(), rev.rend());
  return out;
}

namespace {

// Code points whose Python case mapping is not the simple one (SpecialCasing.txt's
// unconditional mappings, final sigma): refused rather than mapped differently.
bool special_casing(uint32_t c) {
  return c == 0xdf || c == 0x130 || c == 0x149 || c == 0x1f0 || c == 0x390 || c == 0x3a3 || c == 0x3b0 ||
         c == 0x587 || (c >= 0x1e96 && c <= 0x1e9a) || (c >= 0x1f50 && c <= 0x1f56) || (c >= 0x1f80 && c <= 0x1fff) ||
         (c >= 0xfb00 && c <= 0xfb06) || (c >= 0xfb13 && c <= 0xfb17);
}

bool check_casing(const std::vector<uint32_t>& cps, std::string* why) {
  for (uint32_t c : cps)
    if (special_casing(c)) {
      *why = fmt::format("the case mapping of U+{:04X} needs Unicode's special casing, which is not supported", c);
      return false;
    }
  return true;
}

bool cased(uint32_t c) {
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
}

uint32_t up(uint32_t c) { return static_cast<uint32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c))); }
uint32_t low(uint32_t c) { return static_cast<uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))); }
uint32_t title(uint32_t c) { return static_cast<uint32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(c))); }

}  // namespace

bool py_upper(std::string_view s, std::string* out, std::string* why) {
  auto cps = code_points(s);
  if (!check_casing(cps, why)) return false;
  for (auto& c : cps) c = up(c);
  *out = utf8(cps);
  return true;
}

bool py_lower(std::string_view s, std::string* out, std::string* why) {
  auto cps = code_points(s);
  if (!check_casing(cps, why)) return false;
  for (auto& c : cps) c = low(c);
  *out = utf8(cps);
  return true;
}

bool py_title(std::string_view s, std::string* out, std::string* why) {
  auto cps = code_points(s);
  if (!check_casing(cps, why)) return false;
  bool prev_cased = false;
  for (auto& c : cps) {
    const bool is_cased = cased(c);
    c = prev_cased ? low(c) : title(c);
    prev_cased = is_cased;
  }
  *out = utf8(cps);
  return true;
}

bool py_capitalize(std::string_view s, std::string* out, std::string* why) {
  auto cps = code_points(s);
  if (!check_casing(cps, why)) return false;
  for (size_t i = 0; i < cps.size(); ++i) cps[i] = i == 0 ? title(cps[i]) : low(cps[i]);
  *out = utf8(cps);
  return true;
}

// ---- str(), repr() ----

namespace {

bool printable(uint32_t c) {
  if (c == ' ') return true;
  if (c < 0x20 || c == 0x7f) return false;
  if (c < 0x7f) return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS: return false;
    default: return true;
  }
}

std::string repr_str(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos, has_double = s.find('"') != std::string_view::npos;
  const char q = has_single && !has_double ? '"' : '\'';
  std::string out(1, q);
  for (uint32_t c : code_points(s)) {
    if (c == static_cast<uint32_t>(q) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (printable(c)) {
      append_utf8(out, c);
    } else {
      out += c < 0x100 ? fmt::format("\\x{:02x}", c) : c < 0x10000 ? fmt::format("\\u{:04x}", c)
                                                                     : fmt::format("\\U{:08x}", c);
    }
  }
  return out + q;
}

}  // namespace

std::string repr(const Value& v) {
  switch (v.kind) {
    case Value::undefined: return "Undefined";
    case Value::none: return "None";
    case Value::boolean: return v.b ? "True" : "False";
    case Value::integer: return std::to_string(v.i);
    case Value::floating: return py_float_repr(v.f);
    case Value::string: return repr_str(v.s);
    case Value::list: {
      std::string s(1, v.tuple ? '(' : '[');
      for (size_t k = 0; k < v.l->size(); ++k) s += (k ? ", " : "") + repr((*v.l)[k]);
      if (v.tuple && v.l->size() == 1) s += ',';
      s += v.tuple ? ')' : ']';
      return v.s.empty() ? s : v.s + "(" + s + ")";  // a dict view: dict_items([...])
    }
    case Value::dict: {
      std::string s = v.ns ? "<Namespace {" : "{";
      for (size_t k = 0; k < v.d->items.size(); ++k)
        s += (k ? ", " : "") + repr_str(v.d->items[k].first) + ": " + repr(v.d->items[k].second);
      return s + (v.ns ? "}>" : "}");
    }
    case Value::function: return "<function " + v.fn->name + ">";
  }
  return "";
}

std::string to_str(const Value& v) {
  if (v.kind == Value::undefined) return "";
  if (v.kind == Value::string) return v.s;
  return repr(v);
}

// ---- comparisons ----

bool equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind == Value::floating || b.kind == Value::floating) {
      const double x = a.kind == Value::floating ? a.f : static_cast<double>(a.kind == Value::boolean ? a.b : a.i);
      const double y = b.kind == Value::floating ? b.f : static_cast<double>(b.kind == Value::boolean ? b.b : b.i);
      return x == y;
    }
    return (a.kind == Value::boolean ? a.b : a.i) == (b.kind == Value::boolean ? b.b : b.i);
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::undefined:
    case Value::none: return true;
    case Value::string: return a.s == b.s;
    case Value::list:
      if (a.tuple != b.tuple || a.l->size() != b.l->size()) return false;
      for (size_t k = 0; k < a.l->size(); ++k)
        if (!equal((*a.l)[k], (*b.l)[k])) return false;
      return true;
    case Value::dict:
      if (a.ns || b.ns || a.loop || b.loop) return a.d == b.d;
      if (a.d->items.size() != b.d->items.size()) return false;
      for (const auto& [k, x] : a.d->items) {
        const Value* y = b.d->find(k);
        if (!y || !equal(x, *y)) return false;
      }
      return true;
    case Value::function: return a.fn == b.fn;
    default: return false;
  }
}

bool less(const Value& a, const Value& b, std::string* why) {
  why->clear();
  if (a.is_number() && b.is_number()) {
    if (a.kind == Value::floating || b.kind == Value::floating) {
      const double x = a.kind == Value::floating ? a.f : static_cast<double>(a.kind == Value::boolean ? a.b : a.i);
      const double y = b.kind == Value::floating ? b.f : static_cast<double>(b.kind == Value::boolean ? b.b : b.i);
      return x < y;
    }
    return (a.kind == Value::boolean ? a.b : a.i) < (b.kind == Value::boolean ? b.b : b.i);
  }
  if (a.kind == Value::string && b.kind == Value::string) return a.s < b.s;  // UTF-8 order = code point order
  if (a.kind == Value::list && b.kind == Value::list && a.tuple == b.tuple) {
    for (size_t k = 0; k < std::min(a.l->size(), b.l->size()); ++k) {
      if (equal((*a.l)[k], (*b.l)[k])) continue;
      return less((*a.l)[k], (*b.l)[k], why);
    }
    return a.l->size() < b.l->size();
  }
  *why = fmt::format("'<' not supported between instances of '{}' and '{}'", type_name(a), type_name(b));
  return false;
}

// ---- json.dumps ----

namespace {

void json_str(std::string_view s, bool ensure_ascii, std::string& out) {
  out += '"';
  for (uint32_t c : code_points(s)) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20 || (ensure_ascii && c > 0x7e)) {
          if (c >= 0x10000) {
            const uint32_t v = c - 0x10000;
            out += fmt::format("\\u{:04x}\\u{:04x}", 0xd800 + (v >> 10), 0xdc00 + (v & 0x3ff));
          } else {
            out += fmt::format("\\u{:04x}", c);
          }
        } else {
          append_utf8(out, c);
        }
    }
  }
  out += '"';
}

bool json_value(const Value& v, const JsonOptions& o, int level, std::string& out, std::string* why) {
  const std::string item_sep = !o.item_sep.empty() ? o.item_sep : o.indent_set ? "," : ", ";
  const std::string key_sep = !o.key_sep.empty() ? o.key_sep : ": ";
  auto newline = [&](int lv) {
    if (!o.indent_set) return;
    out += '\n';
    for (int k = 0; k < lv; ++k) out += o.indent;
  };
  switch (v.kind) {
    case Value::none: out += "null"; return true;
    case Value::boolean: out += v.b ? "true" : "false"; return true;
    case Value::integer: out += std::to_string(v.i); return true;
    case Value::floating:
      out += std::isnan(v.f) ? "NaN" : std::isinf(v.f) ? (v.f > 0 ? "Infinity" : "-Infinity") : py_float_repr(v.f);
      return true;
    case Value::string: json_str(v.s, o.ensure_ascii, out); return true;
    case Value::list: {
      if (!v.s.empty()) break;  // a dict view or a generator
      if (v.l->empty()) {
        out += "[]";
        return true;
      }
      out += '[';
      for (size_t k = 0; k < v.l->size(); ++k) {
        if (k) out += item_sep;
        newline(level + 1);
        if (!json_value((*v.l)[k], o, level + 1, out, why)) return false;
      }
      newline(level);
      out += ']';
      return true;
    }
    case Value::dict: {
      if (v.ns || v.loop) break;
      if (v.d->items.empty()) {
        out += "{}";
        return true;
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.d->items) items.push_back(&kv);
      if (o.sort_keys)
        std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
      out += '{';
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) out += item_sep;
        newline(level + 1);
        json_str(items[k]->first, o.ensure_ascii, out);
        out += key_sep;
        if (!json_value(items[k]->second, o, level + 1, out, why)) return false;
      }
      newline(level);
      out += '}';
      return true;
    }
    default: break;
  }
  *why = fmt::format("Object of type {} is not JSON serializable", v.kind == Value::list && !v.s.empty() ? v.s : type_name(v));
  return false;
}

}  // namespace

bool py_json(const Value& v, const JsonOptions& o, std::string* out, std::string* why) {
  out->clear();
  return json_value(v, o, 0, *out, why);
}

}  // namespace mpitron::jinja
