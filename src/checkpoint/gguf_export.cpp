// Export to one GGUF file for llama.cpp (export.hpp; names and layouts in external_layout.hpp).
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <fmt/ranges.h>
#include <unordered_set>

#include "checkpoint_format.hpp"
#include "mpitron/checkpoint/export.hpp"
#include "mpitron/checkpoint/external_layout.hpp"
#include "mpitron/checkpoint/gguf.hpp"
#include "mpitron/core/error.hpp"
#include "mpitron/model/arch.hpp"
#include "mpitron/data/tokenizer.hpp"
#include "mpitron/model/rope_scaling.hpp"
#include "mpitron/checkpoint/checkpoint.hpp"

namespace mpitron {
namespace {

using Meta = std::vector<std::pair<std::string, GgufValue>>;
using json = nlohmann::json;

struct GgufDtype {
  GgmlType matrix;     // 2-D tensors (1-D ones, norms and biases, stay f32 as llama.cpp expects)
  uint32_t file_type;  // general.file_type (llama_ftype)
};

GgufDtype gguf_dtype(const std::string& d) {
  if (d == "f32") return {GgmlType::f32, 0};
  if (d == "f16") return {GgmlType::f16, 1};
  if (d == "q8_0") return {GgmlType::q8_0, 7};
  if (d == "bf16") return {GgmlType::bf16, 32};
  usage_fail("export: unknown --dtype '{}' for gguf (allowed: f32, f16, bf16, q8_0)", d);
}

// llama.cpp's architecture: "llama" (Mixtral's MoE included), "qwen2" (q/k/v biases), "qwen3"
// (q/k norms), "qwen3moe" (q/k norms with a MoE), "gpt2". llama.cpp runs the qwen archs with
// rotate-half RoPE (NEOX): their q and k rows are written in Hugging Face's order
// (to_rotate_half_layout).
std::string gguf_arch(const ModelConfig& c) {
  if (c.arch == Arch::gpt2) return "gpt2";
  return c.qkv_bias ? "qwen2" : c.qk_norm ? (c.moe.enabled() ? "qwen3moe" : "qwen3") : "llama";
}

void model_metadata(Meta& m, const ModelConfig& c, const std::string& name, uint32_t file_type) {
  const std::string a = gguf_arch(c);
  m.push_back({"general.architecture", {a}});
  m.push_back({"general.name", {name}});
  m.push_back({"general.file_type", {file_type}});
  m.push_back({"general.alignment", {uint32_t{32}}});
  m.push_back({a + ".context_length", {static_cast<uint32_t>(c.seq_len)}});
  m.push_back({a + ".embedding_length", {static_cast<uint32_t>(c.d_model)}});
  m.push_back({a + ".block_count", {static_cast<uint32_t>(c.n_layer)}});
  // A MoE model (every layer, check_moe_exportable): llama.cpp reads the experts' width here.
  m.push_back({a + ".feed_forward_length", {static_cast<uint32_t>(c.moe.enabled() ? c.moe.d_ff : c.d_ff)}});
  m.push_back({a + ".attention.head_count", {static_cast<uint32_t>(c.n_head)}});
  if (c.arch == Arch::llama) {
    m.push_back({a + ".attention.head_count_kv", {static_cast<uint32_t>(c.n_kv_head)}});
    m.push_back({a + ".attention.layer_norm_rms_epsilon", {c.norm_eps}});
    m.push_back({a + ".rope.dimension_count", {static_cast<uint32_t>(c.head_dim())}});
    if (c.qk_norm || c.head_size > 0) {  // the head size, where it may differ from hidden / heads
      m.push_back({a + ".attention.key_length", {static_cast<uint32_t>(c.head_dim())}});
      m.push_back({a + ".attention.value_length", {static_cast<uint32_t>(c.head_dim())}});
    }
    m.push_back({a + ".rope.freq_base", {static_cast<float>(c.rope_theta)}});
    m.push_back({a + ".vocab_size", {static_cast<uint32_t>(c.vocab_size)}});
    if (c.moe.enabled()) {
      m.push_back({a + ".expert_count", {static_cast<uint32_t>(c.moe.n_experts)}});
      m.push_back({a + ".expert_used_count", {static_cast<uint32_t>(c.moe.top_k)}});
      if (c.qk_norm) m.push_back({a + ".expert_feed_forward_length", {static_cast<uint32_t>(c.moe.d_ff)}});  // qwen3moe
    }
  } else {
    m.push_back({a + ".attention.layer_norm_epsilon", {1e-5f}});
  }
}

// RoPE scaling as llama.cpp (the version node-llama-cpp 3.21.1 runs) reads it for arch llama, as
// its convert_hf_to_gguf.py writes it. LLaMA 3.1's llama3 scaling has no key at all: it is only the
// rope_freqs tensor (rope_freq_factors), and a rope.scaling.type "llama3" would abort the
// loader (an unknown type), "linear" with the factor would scale a second time. YaRN is
// rope.scaling.type "yarn" with the factor and the original context; llama.cpp's llama arch
// reads no beta_fast / beta_slow (it runs 32 / 1) and derives the attention factor as
// 0.1 ln(factor) + 1, so a YaRN with other values is refused rather than written to run otherwise.
void rope_scaling_metadata(Meta& m, const std::string& a, const RopeScaling& r, const std::string& ckpt) {
  if (r.type != RopeScalingType::yarn) return;
  std::vector<std::string> bad;
  if (r.beta_fast != 32.0) bad.push_back(fmt::format("model.rope_beta_fast = {} (must be 32)", r.beta_fast));
  if (r.beta_slow != 1.0) bad.push_back(fmt::format("model.rope_beta_slow = {} (must be 1)", r.beta_slow));
  if (r.attention_factor != 0.0)
    bad.push_back(fmt::format("model.rope_attention_factor = {} (must be 0: 0.1 ln(factor) + 1)", r.attention_factor));
  usage_check(bad.empty(), "export: GGUF: '{}' has a YaRN scaling llama.cpp's llama architecture cannot express: {}",
              ckpt, fmt::format("{}", fmt::join(bad, "; ")));
  m.push_back({a + ".rope.scaling.type", {std::string("yarn")}});
  m.push_back({a + ".rope.scaling.factor", {static_cast<float>(r.factor)}});
  m.push_back({a + ".rope.scaling.original_context_length", {static_cast<uint32_t>(r.original_max_pos)}});
}

// llama3 scaling's rope_freqs.weight: per pair, the divisor llama.cpp applies to its own frequency
// freq_base^(-2i/hd) (convert_hf_to_gguf.py's rope_factors: 1, factor, or the smooth mix's inverse),
// here the quotient of plain RoPE's frequency and the scaled one mpitron trains with. Empty for
// other scalings.
std::vector<float> rope_freq_factors(const ModelConfig& c) {
  if (c.arch != Arch::llama || c.rope_scaling.type != RopeScalingType::llama3) return {};
  const RopeFreqs plain = rope_freqs_plain(c.rope_theta, c.head_dim()), scaled = rope_frequencies(c);
  std::vector<float> f;
  for (size_t i = 0; i < plain.inv_freq.size(); ++i)
    f.push_back(static_cast<float>(plain.inv_freq[i] / scaled.inv_freq[i]));
  return f;
}

// Reads a JSON boolean that may be absent or null.
bool jbool(const json& o, const char* key, bool dflt) {
  return o.is_object() && o.contains(key) && o[key].is_boolean() ? o[key].get<bool>() : dflt;
}
std::string jstr(const json& o, const char* key) {
  return o.is_object() && o.contains(key) && o[key].is_string() ? o[key].get<std::string>() : std::string();
}
std::string short_dump(const json& j) {
  std::string s = j.dump();
  return s.size() > 240 ? s.substr(0, 240) + "..." : s;
}

// llama.cpp's pre-types for byte-level BPE, by the Split regex of a tokenizer.json's
// Sequence[Split(REGEX, Isolated), ByteLevel(use_regex false)] (the patterns llama-vocab.cpp
// names as each pre-type's "original regex from tokenizer.json"; convert_hf_to_gguf.py gives these
// names to LLaMA-3 and Qwen2/Qwen3 files), and whether llama.cpp then ignores merges (LLaMA-3).
struct PreType {
  const char* name;
  const char* regex;
  bool ignore_merges;
};
constexpr PreType kPreTypes[] = {
    {"llama-bpe",
     R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re",
     true},
    {"qwen2",
     R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re",
     false},
    {"qwen35",
     R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re",
     false},
};

// The pre-type of a byte-level tokenizer.json, or a refusal naming what llama.cpp cannot run.
PreType byte_level_pre_type(const json& j, const std::string& where) {
  const json& pre = j.contains("pre_tokenizer") ? j["pre_tokenizer"] : json();
  auto byte_level_ok = [](const json& b, bool use_regex) {
    return jstr(b, "type") == "ByteLevel" && !jbool(b, "add_prefix_space", true) &&
           jbool(b, "use_regex", true) == use_regex;
  };
  if (byte_level_ok(pre, true)) return {"gpt-2", "", false};  // ByteLevel alone: GPT-2's regex
  if (jstr(pre, "type") == "Sequence" && pre.contains("pretokenizers") && pre["pretokenizers"].is_array() &&
      pre["pretokenizers"].size() == 2) {
    const json& sp = pre["pretokenizers"][0];
    const json& bl = pre["pretokenizers"][1];
    if (jstr(sp, "type") == "Split" && jstr(sp, "behavior") == "Isolated" && !jbool(sp, "invert", false) &&
        sp.contains("pattern") && sp["pattern"].is_object() && byte_level_ok(bl, false)) {
      const std::string re = jstr(sp["pattern"], "Regex");
      for (const PreType& t : kPreTypes)
        if (re == t.regex) return t;
      if (!re.empty())
        usage_fail("export: GGUF: {}: the tokenizer.json's Split regex '{}' is none llama.cpp has a pre-type for "
                   "(known: LLaMA-3's as llama-bpe, Qwen2/Qwen3's as qwen2, Qwen3.5's as qwen35, GPT-2's ByteLevel "
                   "as gpt-2); not written rather than written with another pre-tokenizer",
                   where, re);
    }
  }
  usage_fail("export: GGUF: {}: the tokenizer.json's pre-tokenizer {} has no llama.cpp pre-type (supported: "
             "ByteLevel with GPT-2's regex and no prefix space, or Sequence[Split(LLaMA-3's or Qwen's regex, "
             "Isolated), ByteLevel(use_regex false, no prefix space)])",
             where, short_dump(pre));
}

// A byte-level BPE tokenizer.json (type hf) as llama.cpp's "gpt2" model: the file's token strings
// (GPT-2's byte characters; added tokens as written), ids without a token as convert_hf_to_gguf.py
// fills them ([PADid], unused), special added tokens control (3), the others user-defined (4, which
// llama.cpp matches in text as Hugging Face matches non-special added tokens), the merges in rank
// order, and the pre-type recognised from the Split regex.
void hf_byte_level_metadata(Meta& m, const Tokenizer& tok, const json& j, int vocab_size, const std::string& where,
                            bool quiet) {
  const PreType pt = byte_level_pre_type(j, where);
  const json& model = j["model"];
  if (jbool(model, "ignore_merges", false) != pt.ignore_merges)
    usage_fail("export: GGUF: {}: the tokenizer.json's BPE has ignore_merges {}, but llama.cpp's pre-type {} runs "
               "with ignore_merges {}: ids would differ",
               where, !pt.ignore_merges, pt.name, pt.ignore_merges);
  const json& norm = j.contains("normalizer") ? j["normalizer"] : json();
  if (!norm.is_null()) {
    usage_check(jstr(norm, "type") == "NFC",
                "export: GGUF: {}: the tokenizer.json's normalizer {} has no llama.cpp equivalent (llama.cpp's BPE "
                "runs none; only NFC is written, with a warning)",
                where, short_dump(norm));
    if (!quiet)
      std::fprintf(stderr, "export: warning: llama.cpp runs no NFC normalizer (as for every Qwen GGUF): texts not "
                           "in NFC may get other ids there\n");
  }
  const json& dec = j.contains("decoder") ? j["decoder"] : json();
  usage_check(dec.is_null() || jstr(dec, "type") == "ByteLevel",
              "export: GGUF: {}: the tokenizer.json's decoder {} is not ByteLevel (llama.cpp decodes byte-level BPE "
              "as ByteLevel does)",
              where, short_dump(dec));

  const int n_tok = tok.vocab_size();
  usage_check(n_tok <= vocab_size, "export: GGUF: {}: the tokenizer has {} tokens, the model {} embedding rows", where,
              n_tok, vocab_size);
  std::vector<std::string> tokens(static_cast<size_t>(vocab_size));
  std::vector<int32_t> types(static_cast<size_t>(vocab_size), 1);  // normal
  for (auto it = model["vocab"].begin(); it != model["vocab"].end(); ++it) tokens[it.value().get<size_t>()] = it.key();
  if (j.contains("added_tokens") && j["added_tokens"].is_array())
    for (const json& a : j["added_tokens"]) {
      const auto id = a["id"].get<size_t>();
      const std::string content = a["content"].get<std::string>();
      const bool special = jbool(a, "special", false);
      if (!special)
        usage_check(!jbool(a, "lstrip", false) && !jbool(a, "rstrip", false) && !jbool(a, "single_word", false),
                    "export: GGUF: {}: added token '{}' (not special) has lstrip, rstrip or single_word, which "
                    "llama.cpp does not read (it would match the token elsewhere)",
                    where, content);
      tokens[id] = content;
      types[id] = special ? 3 : 4;  // control : user-defined
    }
  for (int id = 0; id < vocab_size; ++id)
    if (tokens[id].empty()) {
      tokens[id] = fmt::format("[PAD{}]", id);
      types[id] = 5;  // unused
    }
  // Merges in rank order as "LEFT RIGHT" (llama.cpp splits at the first space after the first
  // character; tokenizers gives a pair listed twice its later rank, llama.cpp its first).
  std::vector<std::string> merges;
  const json& ms = model["merges"];
  merges.reserve(ms.size());
  std::unordered_set<std::string> seen;
  seen.reserve(ms.size() * 2);
  for (size_t i = 0; i < ms.size(); ++i) {
    std::string a, b;
    if (ms[i].is_string()) {
      const std::string s = ms[i].get<std::string>();
      const size_t sp = s.find(' ');
      a = s.substr(0, sp), b = s.substr(sp + 1);
    } else {
      a = ms[i][0].get<std::string>(), b = ms[i][1].get<std::string>();
    }
    usage_check(a.find(' ', 1) == std::string::npos,
                "export: GGUF: {}: merges[{}] ['{}', '{}'] has a space inside its left token: llama.cpp would cut it "
                "elsewhere",
                where, i, a, b);
    std::string merge = a + " " + b;
    usage_check(seen.insert(merge).second,
                "export: GGUF: {}: merges[{}] '{}' is listed twice (tokenizers keeps the later rank, llama.cpp the "
                "first)",
                where, i, merge);
    merges.push_back(std::move(merge));
  }
  const int bos = tok.bos();
  m.push_back({"tokenizer.ggml.model", {std::string("gpt2")}});
  m.push_back({"tokenizer.ggml.pre", {std::string(pt.name)}});
  m.push_back({"tokenizer.ggml.tokens", {tokens}});
  m.push_back({"tokenizer.ggml.token_type", {types}});
  m.push_back({"tokenizer.ggml.merges", {merges}});
  m.push_back({"tokenizer.ggml.bos_token_id", {static_cast<uint32_t>(bos >= 0 ? bos : tok.eot())}});
  m.push_back({"tokenizer.ggml.eos_token_id", {static_cast<uint32_t>(tok.eot())}});
  m.push_back({"tokenizer.ggml.add_bos_token", {bos >= 0}});
  m.push_back({"tokenizer.ggml.add_eos_token", {false}});
}

// tokenizer.ggml.*: one token per embedding row (llama.cpp requires it): a model.vocab_size above
// the tokenizer's is padded with unused tokens. mpitron's BPE and GPT-2's as llama.cpp's "gpt2"
// model with GPT-2's pre-type; a tokenizer.json (type hf) by hf_byte_level_metadata.
void tokenizer_metadata(Meta& m, const std::string& tokenizer_json, int vocab_size, const std::string& ckpt,
                        bool quiet) {
  usage_check(!tokenizer_json.empty(), "export: checkpoint '{}' stores no tokenizer; GGUF needs one", ckpt);
  const Tokenizer tok = Tokenizer::from_json(tokenizer_json, ckpt + ": tokenizer_json");
  if (tok.type() == "hf") {
    const json j = json::parse(tok.to_hf_json());
    const json& pre = j.contains("pre_tokenizer") ? j["pre_tokenizer"] : json();
    bool byte_level = jstr(pre, "type") == "ByteLevel";
    if (jstr(pre, "type") == "Sequence" && pre.contains("pretokenizers") && pre["pretokenizers"].is_array())
      for (const json& p : pre["pretokenizers"]) byte_level = byte_level || jstr(p, "type") == "ByteLevel";
    usage_check(byte_level,
                "export: GGUF: {}: the tokenizer.json is not byte-level BPE (a ByteLevel pre-tokenizer); "
                "SentencePiece-style files (Metaspace, byte_fallback, as LLaMA-2's) are not written to GGUF yet "
                "(export --format hf writes the tokenizer.json)",
                ckpt);
    return hf_byte_level_metadata(m, tok, j, vocab_size, ckpt, quiet);
  }
  usage_check(tok.type() != "sentencepiece",
              "export: GGUF with a SentencePiece tokenizer is not written yet (export --format hf writes it)");
  if (tok.pretokenizer() != "gpt2" && !tok.merges().empty() && !quiet)
    std::fprintf(stderr,
                 "export: warning: the tokenizer's pre-tokenizer (mpitron-v1) has no llama.cpp equivalent; written "
                 "as GPT-2's: token ids are mpitron's, but llama.cpp may split some texts differently\n");
  std::vector<std::string> tokens = tok.byte_level_tokens(), merges;
  for (const auto& [l, r] : tok.merges()) merges.push_back(tokens[l] + " " + tokens[r]);
  std::vector<int32_t> types(tokens.size(), 1);  // normal
  types[tok.eot()] = 3;                          // control
  check(static_cast<int>(tokens.size()) <= vocab_size, "{}: the tokenizer has {} tokens, the model {} rows", ckpt,
        tokens.size(), vocab_size);
  for (int id = static_cast<int>(tokens.size()); id < vocab_size; ++id) {
    tokens.push_back(fmt::format("<|unused_{}|>", id));
    types.push_back(5);  // unused
  }
  m.push_back({"tokenizer.ggml.model", {std::string("gpt2")}});
  m.push_back({"tokenizer.ggml.pre", {std::string("gpt-2")}});
  m.push_back({"tokenizer.ggml.tokens", {tokens}});
  m.push_back({"tokenizer.ggml.token_type", {types}});
  m.push_back({"tokenizer.ggml.merges", {merges}});
  m.push_back({"tokenizer.ggml.bos_token_id", {static_cast<uint32_t>(tok.eot())}});
  m.push_back({"tokenizer.ggml.eos_token_id", {static_cast<uint32_t>(tok.eot())}});
  m.push_back({"tokenizer.ggml.add_bos_token", {false}});
}

}  // namespace

ExportSummary export_gguf(const std::string& ckpt, const std::string& out_file, const HfExportOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  const GgufDtype d = gguf_dtype(opt.dtype == "fp32" ? "f32" : opt.dtype);
  const CheckpointMeta meta = read_checkpoint_meta(ckpt);
  const ModelConfig& cfg = meta.model;
  const std::string arch = gguf_arch(cfg);
  check_moe_exportable(cfg, ckpt, fmt::format("llama.cpp (GGUF arch {})", arch), opt.quiet);
  std::error_code ec;
  usage_check(!std::filesystem::is_directory(out_file, ec), "export: --out '{}' is a folder; gguf writes one file",
              out_file);
  Meta md;
  model_metadata(md, cfg, cfg.name, d.file_type);
  check_family_exportable(cfg, ckpt, "llama.cpp (GGUF)");
  usage_check(arch == "llama" || cfg.rope_scaling.type != RopeScalingType::llama3,
              "export: GGUF: '{}' is a {} with LLaMA 3.1's RoPE scaling (model.rope_scaling = \"llama3\"): llama.cpp's "
              "{} architecture reads no rope_freqs tensor, so it would run plain RoPE", ckpt, family_name(cfg), arch);
  if (cfg.arch == Arch::llama) rope_scaling_metadata(md, arch, cfg.rope_scaling, ckpt);
  tokenizer_metadata(md, meta.tokenizer_json, cfg.vocab_size, ckpt, opt.quiet);

  // The tensors: the table's, plus output.weight from the embedding when the head is tied. A
  // block's experts (gguf_expert >= 0) are slices of one 3-D tensor: one GGUF tensor lists its
  // sources in expert order.
  std::vector<ExternalTensor> table = external_tensors(cfg);
  if (cfg.tied_embeddings || cfg.arch == Arch::gpt2) {
    ExternalTensor out = table.front();
    out.gguf_name = "output.weight";
    table.push_back(out);
  }
  std::vector<std::vector<const ExternalTensor*>> sources;
  std::map<std::string, size_t> index;
  for (const ExternalTensor& t : table) {
    auto [it, fresh] = index.try_emplace(t.gguf_name, sources.size());
    if (fresh) sources.emplace_back();
    check(t.gguf_expert == static_cast<int>(sources[it->second].size()) || (fresh && t.gguf_expert < 0),
          "export: GGUF tensor '{}' gets '{}' out of expert order", t.gguf_name, t.name);
    sources[it->second].push_back(&t);
  }
  const auto shapes = ckpt_format::file_shapes(cfg);
  std::vector<GgufTensorInfo> infos;
  for (const auto& src : sources) {
    const std::vector<int64_t>& s = shapes.at(src.front()->name);
    std::vector<uint64_t> ne(s.rbegin(), s.rend());  // innermost first
    if (src.front()->gguf_expert >= 0) ne.push_back(src.size());  // [experts][rows][cols]
    GgmlType type = ne.size() >= 2 ? d.matrix : GgmlType::f32;
    if (type == GgmlType::q8_0 && ne[0] % 32 != 0) type = GgmlType::f16;  // rows not whole q8_0 blocks
    infos.push_back({src.front()->gguf_name, ne, type});
  }
  const std::vector<float> rope_factors = rope_freq_factors(cfg);  // last, after the checkpoint's tensors
  if (!rope_factors.empty()) infos.push_back({"rope_freqs.weight", {rope_factors.size()}, GgmlType::f32});
  GgufWriter w(out_file, md, infos);
  ExportSummary sum;
  for (size_t i = 0; i < sources.size(); ++i) {
    std::vector<float> v;
    for (const ExternalTensor* t : sources[i]) {
      std::vector<int64_t> shape;
      std::vector<float> part = read_checkpoint_tensor(ckpt, "model/" + t->name, &shape);
      if (arch.starts_with("qwen")) part = to_rotate_half_layout(*t, std::move(part), shape);
      v.insert(v.end(), part.begin(), part.end());
    }
    w.write_next(ggml_encode(w.tensors()[i].type, v.data(), v.size()));
    ++sum.tensors;
  }
  if (!rope_factors.empty()) {
    w.write_next(ggml_encode(GgmlType::f32, rope_factors.data(), rope_factors.size()));
    ++sum.tensors;
  }
  w.finish();
  sum.files = 1;
  sum.bytes = w.bytes();
  sum.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return sum;
}

}  // namespace mpitron
