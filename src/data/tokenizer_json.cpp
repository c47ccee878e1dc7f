// Tokenizer <-> JSON (format in include/mpitron/data/tokenizer.hpp and docs/data.md).
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "mpitron/core/error.hpp"
#include "mpitron/data/hf_tokenizer.hpp"
#include "mpitron/data/tokenizer.hpp"
#include "sentencepiece_model.hpp"

namespace mpitron {

namespace {

using json = nlohmann::json;

// Strict field readers: the wrong JSON type, or an integer outside int32, is an error naming the
// field (nlohmann's get<int> would truncate 1.5 to 1 and wrap 4294967296 to 0).
std::string string_field(const json& j, const char* key, std::string_view where) {
  if (!j.contains(key)) return "";
  usage_check(j[key].is_string(), "{}: \"{}\" must be a string (got {})", where, key, j[key].dump());
  return j[key].get<std::string>();
}

bool int_value(const json& v, int64_t lo, int64_t hi, int64_t* out) {
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(hi)) return false;
    *out = static_cast<int64_t>(u);
  } else if (v.is_number_integer()) {
    *out = v.get<int64_t>();
  } else {
    return false;
  }
  return *out >= lo && *out <= hi;
}

int64_t int_field(const json& j, const char* key, std::string_view where) {
  int64_t v = 0;
  usage_check(int_value(j[key], 0, INT32_MAX, &v), "{}: \"{}\" must be an integer in [0, {}] (got {})", where, key,
              INT32_MAX, j[key].dump());
  return v;
}

}  // namespace

Tokenizer Tokenizer::from_json(std::string_view text, std::string_view where) {
  json j;
  try {
    j = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    usage_fail("{}: not valid JSON ({})", where, e.what());
  }
  try {
    usage_check(j.is_object() && j.contains("format") && j["format"] == "mpitron-tokenizer",
                "{}: not an mpitron tokenizer (expected \"format\": \"mpitron-tokenizer\")", where);
    int64_t version = j.contains("version") ? int_field(j, "version", where) : 0;
    usage_check(version == 1, "{}: tokenizer format version {} is not supported (this build reads 1)", where, version);
    std::string type = string_field(j, "type", where);
    Tokenizer t;
    if (type == "byte") {
      t = Tokenizer::byte();
    } else if (type == "bpe") {
      std::string pre = string_field(j, "pretokenizer", where);
      usage_check(pre == "mpitron-v1" || pre == "gpt2", "{}: unknown pretokenizer '{}' (this build has mpitron-v1, gpt2)",
                  where, pre);
      std::array<int32_t, 256> byte_ids{};
      for (int b = 0; b < 256; ++b) byte_ids[b] = b;
      if (j.contains("byte_ids")) {
        usage_check(j["byte_ids"].is_array() && j["byte_ids"].size() == 256, "{}: \"byte_ids\" must list 256 ids", where);
        for (int b = 0; b < 256; ++b) {
          int64_t v = -1;
          usage_check(int_value(j["byte_ids"][b], 0, 255, &v), "{}: byte_ids[{}] is not an id in [0, 255]", where, b);
          byte_ids[b] = static_cast<int32_t>(v);
        }
      }
      usage_check(j.contains("merges") && j["merges"].is_array(), "{}: a bpe tokenizer needs a \"merges\" list", where);
      std::vector<std::pair<int32_t, int32_t>> merges;
      merges.reserve(j["merges"].size());
      for (const auto& m : j["merges"]) {
        int64_t a = -1, b = -1;
        usage_check(m.is_array() && m.size() == 2 && int_value(m[0], 0, INT32_MAX, &a) && int_value(m[1], 0, INT32_MAX, &b),
                    "{}: merge {} is not a [left, right] pair of token ids (got {})", where, merges.size(), m.dump());
        merges.emplace_back(static_cast<int32_t>(a), static_cast<int32_t>(b));
      }
      try {
        t = Tokenizer::bpe(std::move(merges), byte_ids, pre);
      } catch (const Error& e) {
        usage_fail("{}: {}", where, e.what());
      }
    } else if (type == "sentencepiece") {
      std::string model;
      usage_check(j.contains("model") && j["model"].is_string() && base64_decode(j["model"].get<std::string>(), &model),
                  "{}: a sentencepiece tokenizer needs \"model\": the .model file in base64", where);
      t = Tokenizer::sentencepiece(model, where);
    } else if (type == "hf") {
      usage_check(j.contains("tokenizer_json_zlib") && j["tokenizer_json_zlib"].is_string(),
                  "{}: an hf tokenizer needs \"tokenizer_json_zlib\": the zlib-compressed tokenizer.json in base64", where);
      usage_check(j.contains("eot"), "{}: an hf tokenizer needs \"eot\"", where);
      const std::string packed = j["tokenizer_json_zlib"].get<std::string>();
      hf::LoadOptions lo;
      lo.eot_id = static_cast<int>(int_field(j, "eot", where));
      t.type_ = "hf";
      t.hf_ = hf::load(hf::unpack_json(packed, where), std::string(where) + " (embedded tokenizer.json)", lo);
      hf::set_packed(*t.hf_, packed);
    } else {
      usage_fail("{}: unknown tokenizer type '{}' (allowed: byte, bpe, sentencepiece, hf)", where, type);
    }
    if (j.contains("vocab_size")) {
      int64_t v = int_field(j, "vocab_size", where);
      usage_check(v == t.vocab_size(), "{}: vocab_size {} disagrees with the tokenizer's {}", where, v,
                  t.vocab_size());
    }
    if (j.contains("eot")) {
      int64_t e = int_field(j, "eot", where);
      usage_check(e == t.eot(), "{}: eot {} is not the tokenizer's end-of-text id {}", where, e, t.eot());
    }
    return t;
  } catch (const json::exception& e) {
    usage_fail("{}: malformed tokenizer JSON ({})", where, e.what());
  }
}

Tokenizer Tokenizer::load(const std::string& spec) {
  if (spec.empty() || spec == "byte") return Tokenizer::byte();
  if (spec.rfind("gpt2:", 0) == 0) return gpt2_files(spec.substr(5));
  if (spec.rfind("hf:", 0) == 0) {
    // A Hugging Face model folder: its tokenizer.json, else its SentencePiece tokenizer.model.
    const std::string p = spec.substr(3);
    std::error_code ec;
    if (!std::filesystem::is_directory(p, ec)) return hf_json(p);
    if (std::filesystem::exists(p + "/tokenizer.json", ec)) return hf_json(p + "/tokenizer.json");
    if (std::filesystem::exists(p + "/tokenizer.model", ec)) return sentencepiece_file(p + "/tokenizer.model");
    usage_fail("hf:{}: the folder has neither tokenizer.json nor tokenizer.model", p);
  }
  if (spec.rfind("sp:", 0) == 0) return sentencepiece_file(spec.substr(3));
  std::ifstream in(spec, std::ios::binary);
  usage_check(static_cast<bool>(in),
              "cannot open tokenizer file '{}' (use 'byte', gpt2:DIR with encoder.json + vocab.bpe, hf:tokenizer.json or hf:DIR, "
              "sp:FILE.model, or a JSON file from `mpitron tokenizer train`)",
              spec);
  std::stringstream ss;
  ss << in.rdbuf();
  return from_json(ss.str(), spec);
}

std::string Tokenizer::to_json(bool pretty) const {
  std::string s = fmt::format(R"({{"format": "mpitron-tokenizer", "version": 1, "type": "{}", "vocab_size": {}, "eot": {})",
                              type_, vocab_size(), eot());
  if (sp_) s += fmt::format(R"(, "model": "{}")", base64_encode(sp_model_bytes(*sp_)));
  if (hf_) s += fmt::format(R"(, "tokenizer_json_zlib": "{}")", hf::packed_json(*hf_));
  if (type_ == "bpe") {
    s += fmt::format(R"(, "pretokenizer": "{}")", pretok_);
    if (!identity_bytes_) {
      s += R"(, "byte_ids": [)";
      for (int b = 0; b < 256; ++b) s += fmt::format("{}{}", b ? "," : "", byte_ids_[b]);
      s += "]";
    }
    s += R"(, "merges": [)";
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
