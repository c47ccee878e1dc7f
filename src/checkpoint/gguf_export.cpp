// Export to one GGUF file for llama.cpp (export.hpp; names and layouts in external_layout.hpp).
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>

#include "checkpoint_format.hpp"
#include "mpitron/checkpoint/export.hpp"
#include "mpitron/checkpoint/external_layout.hpp"
#include "mpitron/checkpoint/gguf.hpp"
#include "mpitron/core/error.hpp"
#include "mpitron/data/tokenizer.hpp"
#include "mpitron/checkpoint/checkpoint.hpp"

namespace mpitron {
namespace {

using Meta = std::vector<std::pair<std::string, GgufValue>>;

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

void model_metadata(Meta& m, const ModelConfig& c, const std::string& name, uint32_t file_type) {
  const std::string a = c.arch == Arch::llama ? "llama" : "gpt2";
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
    m.push_back({a + ".rope.freq_base", {static_cast<float>(c.rope_theta)}});
    m.push_back({a + ".vocab_size", {static_cast<uint32_t>(c.vocab_size)}});
    if (c.moe.enabled()) {
      m.push_back({a + ".expert_count", {static_cast<uint32_t>(c.moe.n_experts)}});
      m.push_back({a + ".expert_used_count", {static_cast<uint32_t>(c.moe.top_k)}});
    }
  } else {
    m.push_back({a + ".attention.layer_norm_epsilon", {1e-5f}});
  }
}

// tokenizer.ggml.*: byte-level BPE as llama.cpp's "gpt2" tokenizer model, one token per
// embedding row (llama.cpp requires it): a model.vocab_size above the tokenizer's is padded with
// unused tokens.
void tokenizer_metadata(Meta& m, const std::string& tokenizer_json, int vocab_size, const std::string& ckpt,
                        bool quiet) {
  usage_check(!tokenizer_json.empty(), "export: checkpoint '{}' stores no tokenizer; GGUF needs one", ckpt);
  const Tokenizer tok = Tokenizer::from_json(tokenizer_json, ckpt + ": tokenizer_json");
  usage_check(tok.type() != "hf", "export: GGUF with a Hugging Face tokenizer.json pipeline (type hf) is not written yet "
              "(export --format hf writes the tokenizer.json)");
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
  check_moe_exportable(cfg, ckpt, "llama.cpp (GGUF arch llama)", opt.quiet);
  std::error_code ec;
  usage_check(!std::filesystem::is_directory(out_file, ec), "export: --out '{}' is a folder; gguf writes one file",
              out_file);
  Meta md;
  model_metadata(md, cfg, cfg.name, d.file_type);
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
  GgufWriter w(out_file, md, infos);
  ExportSummary sum;
  for (size_t i = 0; i < sources.size(); ++i) {
    std::vector<float> v;
    for (const ExternalTensor* t : sources[i]) {
      std::vector<int64_t> shape;
      const std::vector<float> part = read_checkpoint_tensor(ckpt, "model/" + t->name, &shape);
      v.insert(v.end(), part.begin(), part.end());
    }
    w.write_next(ggml_encode(w.tensors()[i].type, v.data(), v.size()));
    ++sum.tensors;
  }
  w.finish();
  sum.files = 1;
  sum.bytes = w.bytes();
  sum.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return sum;
}

}  // namespace mpitron
