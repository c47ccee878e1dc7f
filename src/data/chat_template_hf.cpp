// Chat templates by name (chat.hpp): the built-in ones and hf:DIR, a model's own Jinja template
// (tokenizer_config.json) rendered by the Jinja subset, its special markers turned into pieces
// and its assistant replies found by rendering each prefix with the generation prompt.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "mpitron/core/error.hpp"
#include "mpitron/data/chat.hpp"
#include "mpitron/data/jinja.hpp"

namespace fs = std::filesystem;

namespace mpitron {

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  usage_check(static_cast<bool>(in), "cannot read '{}'", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A special token as tokenizer_config.json writes it: "text" or {"content": "text", ...}.
template <class J>
std::string token_content(const J& j) {
  if (j.is_string()) return j.template get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string()) return j["content"].template get<std::string>();
  return "";
}

bool py_isspace_at(std::string_view s, size_t i, size_t* len);

}  // namespace

struct SpecialMarker {
  std::string text;
  bool lstrip = false, rstrip = false;
};

struct HfChatTemplate {
  std::string dir, where;
  std::unique_ptr<jinja::Template> tmpl;
  nlohmann::ordered_json specials = nlohmann::ordered_json::object();  // the named special tokens
  std::vector<std::string> end_markers;                               // in the order of preference
  std::vector<SpecialMarker> markers;                                 // longest first
  std::vector<std::vector<size_t>> by_first_byte = std::vector<std::vector<size_t>>(256);

  std::string render(const std::vector<ChatMessage>& m, size_t count, bool generation_prompt) const {
    nlohmann::ordered_json vars = nlohmann::ordered_json::object();
    nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
    for (size_t i = 0; i < count; ++i) {
      if (!m[i].json.empty()) msgs.push_back(nlohmann::ordered_json::parse(m[i].json));
      else msgs.push_back({{"role", m[i].role}, {"content", m[i].content}});
    }
    vars["messages"] = std::move(msgs);
    vars["tools"] = nullptr;
    vars["documents"] = nullptr;
    vars["add_generation_prompt"] = generation_prompt;
    for (auto it = specials.begin(); it != specials.end(); ++it) vars[it.key()] = it.value();
    return tmpl->render(vars);
  }
};

namespace {

bool py_isspace_at(std::string_view s, size_t i, size_t* len) {
  const auto b = static_cast<unsigned char>(s[i]);
  const size_t n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 1;
  uint32_t c = b;
  if (n > 1 && i + n <= s.size()) {
    c = b & (0x7f >> n);
    for (size_t k = 1; k < n; ++k) c = c << 6 | (static_cast<unsigned char>(s[i + k]) & 0x3f);
  }
  *len = n;
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

// The folder's special tokens by content: tokenizer_config.json's added_tokens_decoder entries
// marked special (else tokenizer.json's added tokens marked special) and its named tokens.
std::vector<std::string> dir_specials(const std::string& dir, const nlohmann::ordered_json& cfg,
                                      const nlohmann::ordered_json& named) {
  std::vector<std::string> out;
  auto add = [&](const std::string& s) {
    if (!s.empty() && std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
  };
  if (cfg.contains("added_tokens_decoder") && cfg["added_tokens_decoder"].is_object())
    for (const auto& t : cfg["added_tokens_decoder"])
      if (t.is_object() && t.value("special", false)) add(token_content(t));
  for (auto it = named.begin(); it != named.end(); ++it) {
    if (it.value().is_array())
      for (const auto& x : it.value()) add(token_content(x));
    else
      add(token_content(it.value()));
  }
  const std::string tj = dir + "/tokenizer.json";
  std::error_code ec;
  if (!cfg.contains("added_tokens_decoder") && fs::is_regular_file(tj, ec)) {
    // Only the "added_tokens" list is needed: a SAX-free parse of the whole file is fine (once).
    // (unordered json: an ordered_json object inserts in linear time, a vocabulary of 150k is quadratic)
    const nlohmann::json j = nlohmann::json::parse(read_file(tj), nullptr, false);
    if (j.is_object() && j.contains("added_tokens") && j["added_tokens"].is_array())
      for (const auto& t : j["added_tokens"])
        if (t.is_object() && t.value("special", false)) add(token_content(t));
  }
  return out;
}

}  // namespace

bool chat_template_known(const std::string& spec) {
  const auto& names = chat_template_names();
  return spec.rfind("hf:", 0) == 0 || std::find(names.begin(), names.end(), spec) != names.end();
}

ChatTemplate::ChatTemplate(const std::string& spec, const Tokenizer& tok) : spec_(spec) {
  if (spec.rfind("hf:", 0) != 0) {
    usage_check(chat_template_known(spec), "unknown chat template '{}' (allowed: chatml, llama3, llama2, mistral, hf:DIR)",
                spec);
    return;
  }
  auto h = std::make_shared<HfChatTemplate>();
  std::string path = spec.substr(3);
  std::error_code ec;
  usage_check(!path.empty(), "--chat-template hf:DIR: the folder is missing");
  std::string cfg_path = fs::is_directory(path, ec) ? path + "/tokenizer_config.json" : path;
  h->dir = fs::path(cfg_path).parent_path().string();
  if (h->dir.empty()) h->dir = ".";
  usage_check(fs::is_regular_file(cfg_path, ec), "{}: no tokenizer_config.json (hf:DIR names a Hugging Face model folder)",
              path);
  const nlohmann::ordered_json cfg = nlohmann::ordered_json::parse(read_file(cfg_path), nullptr, false);
  usage_check(cfg.is_object(), "{}: not a JSON object", cfg_path);
  std::string source;
  h->where = cfg_path + " chat_template";
  if (cfg.contains("chat_template") && !cfg["chat_template"].is_null()) {
    const auto& ct = cfg["chat_template"];
    if (ct.is_string()) {
      source = ct.get<std::string>();
    } else if (ct.is_array()) {
      std::vector<std::string> names;
      for (const auto& t : ct) {
        const std::string n = t.is_object() && t.contains("name") && t["name"].is_string() ? t["name"].get<std::string>() : "";
        names.push_back(n);
        if (n == "default" && t.contains("template") && t["template"].is_string()) source = t["template"].get<std::string>();
      }
      usage_check(!source.empty(), "{}: chat_template is a list without a \"default\" template (names: {})", cfg_path,
                  fmt::join(names, ", "));
      h->where = cfg_path + " chat_template \"default\"";
    } else {
      usage_fail("{}: chat_template is a JSON {}, not a string or a list of {{name, template}}", cfg_path, ct.type_name());
    }
  } else if (fs::is_regular_file(h->dir + "/chat_template.jinja", ec)) {
    source = read_file(h->dir + "/chat_template.jinja");
    h->where = h->dir + "/chat_template.jinja";
  } else {
    usage_fail("{}: no chat_template (and no chat_template.jinja beside it): this model ships no chat template; use a "
               "built-in one (chatml, llama3, llama2, mistral)",
               cfg_path);
  }
  h->tmpl = std::make_unique<jinja::Template>(source, h->where);
  // The named special tokens, as transformers passes special_tokens_map to the template.
  for (const char* k : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    if (!cfg.contains(k)) continue;
    const std::string v = token_content(cfg[k]);
    if (!v.empty()) h->specials[k] = v;
  }
  if (cfg.contains("additional_special_tokens") && cfg["additional_special_tokens"].is_array()) {
    nlohmann::ordered_json extra = nlohmann::ordered_json::array();
    for (const auto& x : cfg["additional_special_tokens"])
      if (!token_content(x).empty()) extra.push_back(token_content(x));
    if (!extra.empty()) h->specials["additional_special_tokens"] = extra;
  }
  const std::vector<std::string> dir_sp = dir_specials(h->dir, cfg, h->specials);
  auto has = [&](const std::string& s) { return std::find(dir_sp.begin(), dir_sp.end(), s) != dir_sp.end(); };
  if (h->specials.contains("eos_token")) h->end_markers.push_back(h->specials["eos_token"].get<std::string>());
  for (const char* e : {"<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>"})
    if (has(e) && std::find(h->end_markers.begin(), h->end_markers.end(), e) == h->end_markers.end())
      h->end_markers.push_back(e);
  // The markers: the tokenizer's special tokens.
  if (tok.type() == "hf") {
    const nlohmann::json tj = nlohmann::json::parse(tok.to_hf_json(), nullptr, false);
    if (tj.is_object() && tj.contains("added_tokens") && tj["added_tokens"].is_array())
      for (const auto& t : tj["added_tokens"])
        if (t.is_object() && t.value("special", false) && !token_content(t).empty())
          h->markers.push_back({token_content(t), t.value("lstrip", false), t.value("rstrip", false)});
  } else {
    for (const auto& s : dir_sp)
      if (tok.special_id(s) >= 0) h->markers.push_back({s, false, false});
  }
  std::stable_sort(h->markers.begin(), h->markers.end(),
                   [](const SpecialMarker& a, const SpecialMarker& b) { return a.text.size() > b.text.size(); });
  for (size_t k = 0; k < h->markers.size(); ++k)
    h->by_first_byte[static_cast<unsigned char>(h->markers[k].text[0])].push_back(k);
  hf_ = std::move(h);
}

ChatTemplate::~ChatTemplate() = default;

std::vector<std::string> ChatTemplate::end_markers() const {
  if (!hf_) return {chat_end_marker(spec_)};
  return hf_->end_markers;
}

std::vector<std::string> ChatTemplate::special_markers() const {
  std::vector<std::string> out;
  if (hf_)
    for (const auto& m : hf_->markers) out.push_back(m.text);
  return out;
}

bool ChatTemplate::render(const std::vector<ChatMessage>& m, std::vector<ChatPiece>* pieces, std::string* why,
                          bool generation_prompt, bool mask) const {
  if (!hf_) return render_chat(spec_, m, pieces, why, generation_prompt);
  pieces->clear();
  const HfChatTemplate& h = *hf_;
  // A template's refusal (raise_exception) or an error its values cause (an undefined field
  // used, a type error) refuses this conversation; what the subset does not support stops prep.
  // what: which rendering ("" for the whole conversation).
  auto run = [&](size_t count, bool gen, const std::string& what, std::string* out) {
    try {
      *out = h.render(m, count, gen);
      return true;
    } catch (const jinja::TemplateError& e) {
      if (e.kind() == jinja::TemplateError::Kind::refusal)
        *why = fmt::format("the chat template refuses it{}: {}", what, e.message());
      else if (e.kind() == jinja::TemplateError::Kind::runtime)
        *why = fmt::format("the chat template fails on it{}: {}", what, e.what());
      else
        throw;
      return false;
    }
  };
  std::string text;
  if (!run(m.size(), generation_prompt, "", &text)) return false;
  std::vector<uint8_t> trained(text.size(), 0);
  if (mask) {
    for (size_t i = 0; i < m.size(); ++i) {
      if (m[i].role != "assistant") continue;
      std::string prefix;
      if (!run(i, true,
               fmt::format(" (rendering the {} message{} before assistant message {} with the generation prompt, to find "
                           "where the reply starts; --loss-on all does not need it)",
                           i, i == 1 ? "" : "s", i + 1),
               &prefix))
        return false;
      if (text.compare(0, prefix.size(), prefix) != 0) {
        *why = fmt::format("the chat template is not prefix-stable at message {}: messages 1..{} rendered with the "
                           "generation prompt are not where the whole conversation's rendering starts, so the "
                           "assistant reply cannot be located (use --loss-on all)",
                           i + 1, i);
        return false;
      }
      size_t end = std::string::npos;
      std::string which;
      for (const auto& e : h.end_markers) {
        const size_t k = text.find(e, prefix.size());
        if (k != std::string::npos && (end == std::string::npos || k + e.size() < end)) {
          end = k + e.size();
          which = e;
        }
      }
      if (end == std::string::npos) {
        *why = fmt::format("no end-of-turn marker ({}) after assistant message {} in the rendering",
                           h.end_markers.empty() ? std::string("none known: tokenizer_config.json has no eos_token")
                                                 : fmt::format("{}", fmt::join(h.end_markers, ", ")),
                           i + 1);
        return false;
      }
      std::fill(trained.begin() + static_cast<ptrdiff_t>(prefix.size()), trained.begin() + static_cast<ptrdiff_t>(end), 1);
    }
  }
  // Split at the special markers (longest first at each position); text runs split where the
  // mask changes.
  auto emit_text = [&](size_t b, size_t e) {
    while (b < e) {
      size_t k = b;
      while (k < e && trained[k] == trained[b]) ++k;
      pieces->push_back({text.substr(b, k - b), trained[b] != 0, false});
      b = k;
    }
  };
  size_t run_start = 0, i = 0;
  while (i < text.size()) {
    const SpecialMarker* hit = nullptr;
    for (size_t k : h.by_first_byte[static_cast<unsigned char>(text[i])]) {
      const auto& mk = h.markers[k];
      if (text.compare(i, mk.text.size(), mk.text) == 0) {
        hit = &mk;
        break;
      }
    }
    if (!hit) {
      ++i;
      continue;
    }
    size_t text_end = i;
    if (hit->lstrip) {  // the token takes the whitespace before it (Hugging Face's lstrip)
      while (text_end > run_start) {
        size_t b = text_end - 1;
        while (b > run_start && (static_cast<unsigned char>(text[b]) & 0xc0) == 0x80) --b;
        size_t len;
        if (!py_isspace_at(text, b, &len) || b + len != text_end) break;
        text_end = b;
      }
    }
    emit_text(run_start, text_end);
    size_t after = i + hit->text.size();
    pieces->push_back({hit->text, std::any_of(trained.begin() + static_cast<ptrdiff_t>(i),
                                               trained.begin() + static_cast<ptrdiff_t>(after), [](uint8_t x) { return x != 0; }),
                       true});
    if (hit->rstrip) {
      size_t len;
      while (after < text.size() && py_isspace_at(text, after, &len)) after += len;
    }
    run_start = i = after;
  }
  emit_text(run_start, text.size());
  return true;
}

}  // namespace mpitron
