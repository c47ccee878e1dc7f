// Tokenizer type "hf": a Hugging Face tokenizer.json run as a pipeline (hf_tokenizer.hpp).
#include <nlohmann/json.hpp>

#include "mpitron/data/hf_tokenizer.hpp"
#include "mpitron/data/tokenizer.hpp"

namespace mpitron {

Tokenizer Tokenizer::hf_json_text(std::string_view json, std::string_view where, const std::string& eos_token) {
  hf::LoadOptions o;
  o.eos_token = eos_token;
  Tokenizer t;
  t.type_ = "hf";
  t.hf_ = hf::load(json, where, o);
  return t;
}

Tokenizer Tokenizer::hf_json_parsed(nlohmann::json&& json, std::string_view where, const std::string& eos_token) {
  hf::LoadOptions o;
  o.eos_token = eos_token;
  Tokenizer t;
  t.type_ = "hf";
  t.hf_ = hf::load_parsed(std::move(json), where, o);
  return t;
}

}  // namespace mpitron
