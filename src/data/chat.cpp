// Chat records -> rendered pieces -> token ids and loss mask (chat.hpp).
#include "mpitron/data/chat.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "mpitron/core/error.hpp"

namespace mpitron {

namespace {

// Python's str.isspace() code points (what jinja2's trim filter and str.strip() remove).
bool py_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

// The code point starting at s[i] and its length in bytes (invalid UTF-8: the byte itself, 1).
std::pair<uint32_t, size_t> utf8_at(std::string_view s, size_t i) {
  const auto b = static_cast<unsigned char>(s[i]);
  const size_t n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 1;
  if (n == 1 || i + n > s.size()) return {b, 1};
  uint32_t c = b & (0x7f >> n);
  for (size_t k = 1; k < n; ++k) c = c << 6 | (static_cast<unsigned char>(s[i + k]) & 0x3f);
  return {c, n};
}

// str.strip(): Python whitespace off both ends.
std::string py_strip(std::string_view s) {
  size_t b = 0;
  while (b < s.size()) {
    auto [c, n] = utf8_at(s, b);
    if (!py_space(c)) break;
    b += n;
  }
  size_t e = s.size();
  while (e > b) {  // step back to the last code point's first byte
    size_t k = e - 1;
    while (k > b && (static_cast<unsigned char>(s[k]) & 0xc0) == 0x80) --k;
    auto [c, n] = utf8_at(s, k);
    if (k + n != e || !py_space(c)) break;
    e = k;
  }
  return std::string(s.substr(b, e - b));
}

struct Render {
  std::vector<ChatPiece>& out;
  void text(std::string t, bool trained = false) {
    if (!t.empty()) out.push_back({std::move(t), trained, false});
  }
  void special(std::string t, bool trained = false) { out.push_back({std::move(t), trained, true}); }
};

// The llama2 / mistral rule: after an optional system message, user at even turns and assistant
// at odd ones (the templates' raise_exception otherwise).
bool alternating(const std::vector<ChatMessage>& m, size_t from, const std::string& name, std::string* why) {
  for (size_t i = from; i < m.size(); ++i) {
    const std::string want = (i - from) % 2 == 0 ? "user" : "assistant";
    if (m[i].role == "system" && (name == "mistral" || i > 0)) {
      *why = name == "mistral" ? fmt::format("message {} is a system message: template mistral has none", i + 1)
                               : fmt::format("message {} is a system message: template {} takes one only first", i + 1,
                                             name);
      return false;
    }
    if (m[i].role != want) {
      *why = fmt::format("message {} is '{}' where template {} needs '{}' (the roles alternate user, assistant, "
                         "user, ...{})",
                         i + 1, m[i].role, name, want, from ? " after the system message" : "");
      return false;
    }
  }
  return true;
}

}  // namespace

const std::vector<std::string>& chat_template_names() {
  static const std::vector<std::string> names = {"chatml", "llama3", "llama2", "mistral"};
  return names;
}

bool parse_chat_record(std::string_view line, std::vector<ChatMessage>* messages, std::string* why, bool any_message) {
  messages->clear();
  // ordered: an hf template sees each message's fields in the record's order (tojson prints them so)
  const nlohmann::ordered_json j = nlohmann::ordered_json::parse(line.begin(), line.end(), nullptr, false);
  if (j.is_discarded()) {
    *why = "not valid JSON";
    return false;
  }
  if (!j.is_object()) {
    *why = fmt::format("a JSON {}, not an object with \"messages\"", j.type_name());
    return false;
  }
  const auto it = j.find("messages");
  if (it == j.end() || !it->is_array()) {
    *why = it == j.end() ? "no \"messages\" field" : fmt::format("\"messages\" is a {}, not a list", it->type_name());
    return false;
  }
  if (it->empty()) {
    *why = "\"messages\" is empty";
    return false;
  }
  for (size_t i = 0; i < it->size(); ++i) {
    const auto& m = (*it)[i];
    const auto role = m.is_object() ? m.find("role") : m.end();
    const auto content = m.is_object() ? m.find("content") : m.end();
    if (!m.is_object()) {
      *why = fmt::format("message {} is a {}, not an object", i + 1, m.type_name());
    } else if (role == m.end() || !role->is_string()) {
      *why = fmt::format("message {} has no \"role\" string", i + 1);
    } else if (any_message) {
      messages->push_back({role->get<std::string>(), content != m.end() && content->is_string() ? content->get<std::string>() : "",
                           m.dump()});
      continue;
    } else if (content == m.end() || !content->is_string()) {
      *why = fmt::format("message {} has no \"content\" string", i + 1);
    } else if (const std::string r = role->get<std::string>(); r != "system" && r != "user" && r != "assistant") {
      *why = fmt::format("message {} has the unknown role '{}' (allowed: system, user, assistant)", i + 1, r);
    } else {
      messages->push_back({r, content->get<std::string>(), ""});
      continue;
    }
    return false;
  }
  return true;
}

std::string chat_end_marker(const std::string& name) {
  return name == "chatml" ? "<|im_end|>" : name == "llama3" ? "<|eot_id|>" : "</s>";
}

bool render_chat(const std::string& name, const std::vector<ChatMessage>& m, std::vector<ChatPiece>* pieces,
                 std::string* why, bool generation_prompt) {
  pieces->clear();
  Render r{*pieces};
  if (name == "chatml") {
    for (const auto& x : m) {
      const bool a = x.role == "assistant";
      r.special("<|im_start|>");
      r.text(x.role + "\n");
      r.text(x.content, a);
      r.special("<|im_end|>", a);
      r.text("\n");
    }
    if (generation_prompt) {
      r.special("<|im_start|>");
      r.text("assistant\n");
    }
    return true;
  }
  if (name == "llama3") {
    r.special("<|begin_of_text|>");
    for (const auto& x : m) {
      const bool a = x.role == "assistant";
      r.special("<|start_header_id|>");
      r.text(x.role);
      r.special("<|end_header_id|>");
      r.text("\n\n");
      r.text(py_strip(x.content), a);
      r.special("<|eot_id|>", a);
    }
    if (generation_prompt) {
      r.special("<|start_header_id|>");
      r.text("assistant");
      r.special("<|end_header_id|>");
      r.text("\n\n");
    }
    return true;
  }
  if (name == "llama2") {
    const bool sys = m.front().role == "system";
    if (!alternating(m, sys ? 1 : 0, name, why)) return false;
    for (size_t i = sys ? 1 : 0; i < m.size(); ++i) {
      std::string content = m[i].content;
      if (sys && i == 1) content = "<<SYS>>\n" + m[0].content + "\n<</SYS>>\n\n" + content;
      if (m[i].role == "user") {
        r.special("<s>");
        r.text("[INST] " + py_strip(content) + " [/INST]");
      } else {
        r.text(" " + py_strip(content) + " ", true);
        r.special("</s>", true);
      }
    }
    return true;
  }
  if (name == "mistral") {
    if (!alternating(m, 0, name, why)) return false;
    r.special("<s>");
    for (const auto& x : m) {
      if (x.role == "user") {
        r.text("[INST] " + x.content + " [/INST]");
      } else {
        r.text(x.content, true);
        r.special("</s>", true);
      }
    }
    return true;
  }
  usage_fail("unknown chat template '{}' (allowed: chatml, llama3, llama2, mistral)", name);
}

std::string chat_text(const std::vector<ChatPiece>& pieces) {
  std::string s;
  for (const auto& p : pieces) s += p.text;
  return s;
}

void tokenize_chat(const Tokenizer& tok, const std::vector<ChatPiece>& pieces, bool loss_on_all,
                   std::vector<int32_t>* ids, std::vector<uint8_t>* mask) {
  ids->clear();
  mask->clear();
  // A run of text between the markers the tokenizer holds as ids: encoded at once, each token
  // trained when any of its bytes is.
  std::string run;
  std::vector<uint8_t> trained;  // per byte of run
  auto flush = [&] {
    if (run.empty()) return;
    const std::vector<int32_t> t = tok.encode(run);
    // Where each token starts in run: its decoded prefix (byte-exact for byte and BPE tokens;
    // SentencePiece and tokenizer.json decoders such as LLaMA-2's drop the dummy-prefix space in
    // decode, so prefixes line up with the text).
    size_t start = 0;
    for (size_t k = 0; k < t.size(); ++k) {
      const size_t end = !tok.streams_bytes()
                             ? tok.decode(std::vector<int32_t>(t.begin(), t.begin() + static_cast<ptrdiff_t>(k) + 1)).size()
                             : start + tok.decode_one(t[k]).size();
      const size_t b = std::min(start, run.size()), e = std::clamp(end, b + 1, run.size());
      const bool any = std::any_of(trained.begin() + static_cast<ptrdiff_t>(b), trained.begin() + static_cast<ptrdiff_t>(e),
                                   [](uint8_t x) { return x != 0; });
      ids->push_back(t[k]);
      mask->push_back(loss_on_all || any);
      start = end;
    }
    run.clear();
    trained.clear();
  };
  for (const auto& p : pieces) {
    const int id = p.special ? tok.special_id(p.text) : -1;
    if (id >= 0) {
      flush();
      ids->push_back(id);
      mask->push_back(loss_on_all || p.trained);
      continue;
    }
    run += p.text;
    trained.insert(trained.end(), p.text.size(), p.trained ? 1 : 0);
  }
  flush();
}

}  // namespace mpitron
