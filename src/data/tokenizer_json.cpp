// Tokenizer <-> JSON (format in include/mpitron/data/tokenizer.hpp and docs/data.md).
#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "mpitron/core/error.hpp"
#include "mpitron/data/tokenizer.hpp"

namespace mpitron {

Tokenizer Tokenizer::from_json(std::string_view text, std::string_view where) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    usage_fail("{}: not valid JSON ({})", where, e.what());
  }
  try {
    usage_check(j.is_object() && j.value("format", "") == "mpitron-tokenizer",
                "{}: not an mpitron tokenizer (expected \"format\": \"mpitron-tokenizer\")", where);
    int version = j.value("version", 0);
    usage_check(version == 1, "{}: tokenizer format version {} is not supported (this build reads 1)", where, version);
    std::string type = j.value("type", "");
    Tokenizer t;
    if (type == "byte") {
      t = Tokenizer::byte();
    } else if (type == "bpe") {
      std::string pre = j.value("pretokenizer", "");
      usage_check(pre == "mpitron-v1", "{}: unknown pretokenizer '{}' (this build has mpitron-v1)", where, pre);
      std::vector<std::pair<int32_t, int32_t>> merges;
      for (const auto& m : j.at("merges")) {
        usage_check(m.is_array() && m.size() == 2, "{}: merge {} is not a [left, right] pair", where, merges.size());
        merges.emplace_back(m[0].get<int32_t>(), m[1].get<int32_t>());
      }
      try {
        t = Tokenizer::bpe(std::move(merges));
      } catch (const Error& e) {
        usage_fail("{}: {}", where, e.what());
      }
    } else {
      usage_fail("{}: unknown tokenizer type '{}' (allowed: byte, bpe)", where, type);
    }
    if (j.contains("vocab_size"))
      usage_check(j["vocab_size"].get<int>() == t.vocab_size(), "{}: vocab_size {} disagrees with the {} merges (expected {})",
                  where, j["vocab_size"].get<int>(), t.merges().size(), t.vocab_size());
    if (j.contains("eot"))
      usage_check(j["eot"].get<int>() == t.eot(), "{}: eot {} must be the last id {}", where, j["eot"].get<int>(), t.eot());
    return t;
  } catch (const nlohmann::json::exception& e) {
    usage_fail("{}: malformed tokenizer JSON ({})", where, e.what());
  }
}

Tokenizer Tokenizer::load(const std::string& spec) {
  if (spec.empty() || spec == "byte") return Tokenizer::byte();
  std::ifstream in(spec, std::ios::binary);
  usage_check(static_cast<bool>(in), "cannot open tokenizer file '{}' (use 'byte' or a JSON file from `mpitron tokenizer train`)",
              spec);
  std::stringstream ss;
  ss << in.rdbuf();
  return from_json(ss.str(), spec);
}

std::string Tokenizer::to_json(bool pretty) const {
  std::string s = fmt::format(R"({{"format": "mpitron-tokenizer", "version": 1, "type": "{}", "vocab_size": {}, "eot": {})",
                              type_, vocab_size(), eot());
  if (type_ == "bpe") {
    s += R"(, "pretokenizer": "mpitron-v1", "merges": [)";
    for (size_t i = 0; i < merges_.size(); ++i) {
      if (i) s += ",";
      if (pretty) s += "\n  ";
      s += fmt::format("[{}, {}]", merges_[i].first, merges_[i].second);
    }
    s += pretty ? "\n]" : "]";
  }
  s += pretty ? "}\n" : "}";
  return s;
}

}  // namespace mpitron
