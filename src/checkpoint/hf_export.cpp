// Export to a Hugging Face model directory (export.hpp; the layout rules in external_layout.hpp).
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>

#include "checkpoint_format.hpp"
#include "mpitron/checkpoint/checkpoint.hpp"
#include "mpitron/checkpoint/export.hpp"
#include "mpitron/checkpoint/external_layout.hpp"
#include "mpitron/checkpoint/safetensors.hpp"
#include "mpitron/core/dtype.hpp"
#include "mpitron/core/error.hpp"
#include "mpitron/data/tokenizer.hpp"
#include "mpitron/model/rope_scaling.hpp"
#include "tmp_file.hpp"

namespace mpitron {
namespace {

using ordered_json = nlohmann::ordered_json;
namespace fs = std::filesystem;

struct OutDtype {
  const char* st;     // safetensors dtype
  const char* torch;  // config.json torch_dtype
  size_t size;
};

OutDtype out_dtype(const std::string& d) {
  if (d == "fp32") return {"F32", "float32", 4};
  if (d == "bf16") return {"BF16", "bfloat16", 2};
  if (d == "fp16") return {"F16", "float16", 2};
  usage_fail("export: unknown --dtype '{}' (allowed: fp32, bf16, fp16)", d);
}

// Little-endian bytes of v in the output dtype (x86-64 and aarch64 are little-endian).
std::vector<char> encode(const std::vector<float>& v, const OutDtype& d) {
  std::vector<char> out(v.size() * d.size);
  if (d.size == 4) {
    std::memcpy(out.data(), v.data(), out.size());
  } else {
    auto* p = reinterpret_cast<uint16_t*>(out.data());
    const bool bf = std::string(d.st) == "BF16";
    for (size_t i = 0; i < v.size(); ++i) p[i] = bf ? to_bf16(v[i]).bits : to_fp16_bits(v[i]);
  }
  return out;
}

void write_text(const fs::path& path, const std::string& text) {
  TmpFile f(path.string());
  f.write(text.data(), text.size());
  f.commit();
}

// RoPE scaling as transformers (and Meta's LLaMA 3.1 / Qwen's YaRN configs) write it: llama3 with
// its four fields, yarn with the factor and the original context, plus beta_fast, beta_slow and the
// attention factor only where they are not transformers' defaults (so a Qwen config comes back as
// it went in); null for plain RoPE.
ordered_json rope_scaling_json(const RopeScaling& r) {
  if (!r.enabled()) return nullptr;
  ordered_json j;
  j["factor"] = r.factor;
  if (r.type == RopeScalingType::llama3) {
    j["low_freq_factor"] = r.low_freq_factor;
    j["high_freq_factor"] = r.high_freq_factor;
  }
  j["original_max_position_embeddings"] = r.original_max_pos;
  if (r.type == RopeScalingType::yarn) {
    if (r.beta_fast != 32.0) j["beta_fast"] = r.beta_fast;
    if (r.beta_slow != 1.0) j["beta_slow"] = r.beta_slow;
    if (r.attention_factor != 0.0) j["attention_factor"] = r.attention_factor;
  }
  j["rope_type"] = rope_scaling_name(r.type);
  return j;
}

// Qwen2 (q/k/v biases) and Qwen3 (per-head q/k RMSNorm) as transformers' Qwen2Config and
// Qwen3Config (and Qwen3MoeConfig) write them: LLaMA's fields, full attention (no sliding window).
// check_family_exportable has refused a model that is neither.
void qwen_config(ordered_json& j, const ModelConfig& c) {
  const bool qwen3 = c.qk_norm;
  j["architectures"] = {qwen3 ? "Qwen3ForCausalLM" : "Qwen2ForCausalLM"};
  j["model_type"] = qwen3 ? "qwen3" : "qwen2";
  if (c.moe.enabled()) {  // Qwen3-MoE: every layer sparse (decoder_sparse_step 1), no shared expert
    const MoeConfig& m = c.moe;
    j["architectures"] = {"Qwen3MoeForCausalLM"};
    j["model_type"] = "qwen3_moe";
    for (const char* mixtral : {"num_local_experts", "router_jitter_noise"}) j.erase(mixtral);
    j["num_experts"] = m.n_experts;
    j["num_experts_per_tok"] = m.top_k;
    j["moe_intermediate_size"] = m.d_ff;
    j["norm_topk_prob"] = m.router == MoeRouter::softmax_topk || m.norm_topk_prob;
    j["decoder_sparse_step"] = 1;
    j["mlp_only_layers"] = ordered_json::array();
  }
  j.erase("mlp_bias");
  j.erase("pretraining_tp");
  if (qwen3) j["attention_bias"] = false;
  else j.erase("attention_bias"), j.erase("head_dim");  // Qwen2Config has neither: the biases are the architecture's
  j["use_sliding_window"] = false;
  j["sliding_window"] = c.seq_len;
  j["max_window_layers"] = c.n_layer;
}

ordered_json hf_config(const ModelConfig& c, const OutDtype& d, int bos, int eot) {
  ordered_json j;
  if (c.arch == Arch::llama) {
    j["architectures"] = {"LlamaForCausalLM"};
    j["model_type"] = "llama";
    j["vocab_size"] = c.vocab_size;
    j["hidden_size"] = c.d_model;
    j["intermediate_size"] = c.d_ff;
    j["num_hidden_layers"] = c.n_layer;
    j["num_attention_heads"] = c.n_head;
    j["num_key_value_heads"] = c.n_kv_head;
    j["head_dim"] = c.head_dim();
    j["max_position_embeddings"] = c.seq_len;
    j["rms_norm_eps"] = std::stod(fmt::format("{}", c.norm_eps));  // the float's shortest decimal (1e-05)
    j["rope_theta"] = c.rope_theta;
    j["rope_scaling"] = rope_scaling_json(c.rope_scaling);
    j["hidden_act"] = "silu";
    j["attention_bias"] = false;
    j["mlp_bias"] = false;
    j["attention_dropout"] = 0.0;
    j["pretraining_tp"] = 1;
    j["initializer_range"] = 0.02;
    if (c.moe.enabled()) {  // Mixtral: LLaMA's block with a sparse MLP in every layer
      j["architectures"] = {"MixtralForCausalLM"};
      j["model_type"] = "mixtral";
      j["intermediate_size"] = c.moe.d_ff;  // each expert's width
      j["num_local_experts"] = c.moe.n_experts;
      j["num_experts_per_tok"] = c.moe.top_k;
      j["router_aux_loss_coef"] = c.moe.aux_loss_coef;
      j["router_z_loss_coef"] = c.moe.z_loss_coef;  // not Mixtral's (Switch's name): kept for fine-tuning
      j["output_router_logits"] = false;
      j["router_jitter_noise"] = 0.0;
      j["sliding_window"] = nullptr;
      j.erase("mlp_bias");
      j.erase("pretraining_tp");
    }
    if (c.qkv_bias || c.qk_norm) qwen_config(j, c);
  } else {
    j["architectures"] = {"GPT2LMHeadModel"};
    j["model_type"] = "gpt2";
    j["vocab_size"] = c.vocab_size;
    j["n_positions"] = c.seq_len;
    j["n_ctx"] = c.seq_len;
    j["n_embd"] = c.d_model;
    j["n_layer"] = c.n_layer;
    j["n_head"] = c.n_head;
    j["n_inner"] = c.d_ff;
    j["activation_function"] = "gelu_new";  // the tanh approximation, as mpitron's GELU
    j["layer_norm_epsilon"] = 1e-5;
    j["resid_pdrop"] = 0.0;
    j["embd_pdrop"] = 0.0;
    j["attn_pdrop"] = 0.0;
    j["scale_attn_weights"] = true;
    j["initializer_range"] = 0.02;
  }
  j["tie_word_embeddings"] = c.tied_embeddings;
  j["bos_token_id"] = bos;
  j["eos_token_id"] = eot;
  j["use_cache"] = true;
  j["torch_dtype"] = d.torch;
  return j;
}

// A token's content in a tokenizer.json: an added token's, else the vocabulary's spelling.
std::string hf_token_content(const std::string& tokenizer_json, int id) {
  const auto j = nlohmann::json::parse(tokenizer_json);
  if (j.contains("added_tokens") && j["added_tokens"].is_array())
    for (const auto& a : j["added_tokens"])
      if (a.contains("id") && a["id"] == id) return a["content"].get<std::string>();
  for (auto it = j["model"]["vocab"].begin(); it != j["model"]["vocab"].end(); ++it)
    if (it.value() == id) return it.key();
  fail("tokenizer.json: no token with id {}", id);
}

// The tokenizer files (none without a tokenizer); returns what was written (for the summary).
std::string write_tokenizer(const fs::path& dir, const std::optional<Tokenizer>& stored, int seq_len, bool quiet) {
  if (!stored) {
    if (!quiet) std::fprintf(stderr, "export: the checkpoint stores no tokenizer: no tokenizer files written\n");
    return "none";
  }
  const Tokenizer& tok = *stored;
  ordered_json cfg;
  cfg["model_max_length"] = seq_len;
  if (tok.type() == "sentencepiece") {
    write_text(dir / "tokenizer.model", tok.sentencepiece_model());
    cfg["tokenizer_class"] = "LlamaTokenizer";
    cfg["add_bos_token"] = false;  // mpitron's documents are text + end-of-text, no BOS
    cfg["add_eos_token"] = false;
    write_text(dir / "tokenizer_config.json", cfg.dump(2) + "\n");
    return "tokenizer.model (SentencePiece)";
  }
  const std::string hf = tok.to_hf_json();
  if (hf.empty()) {
    if (!quiet)
      std::fprintf(stderr,
                   "export: warning: the checkpoint's BPE tokenizer uses mpitron's own pre-tokenizer (mpitron-v1), "
                   "which Hugging Face cannot express exactly: no tokenizer files written (ids are still mpitron's)\n");
    return "none (mpitron-v1 BPE)";
  }
  write_text(dir / "tokenizer.json", hf + "\n");
  cfg["tokenizer_class"] = "PreTrainedTokenizerFast";
  // The tokenizer's own end-of-text (and BOS, a tokenizer.json's post-processor's) by content; the
  // byte tokenizer's end-of-text has no spelling: its tokenizer.json names it <|endoftext|>.
  const std::string eos = tok.eot_token().empty() ? "<|endoftext|>" : tok.eot_token();
  cfg["bos_token"] = tok.bos() >= 0 ? hf_token_content(hf, tok.bos()) : eos;
  cfg["eos_token"] = eos;
  cfg["add_prefix_space"] = false;
  write_text(dir / "tokenizer_config.json", cfg.dump(2) + "\n");
  if (tok.type() == "hf") return "tokenizer.json (as read)";
  return tok.type() == "byte" ? "tokenizer.json (byte-level, no merges)" : "tokenizer.json (byte-level BPE)";
}

// The export's files are written into a staging folder inside the output folder and moved into it
// only once every one is complete: a failure (a corrupt checkpoint, a full disk) leaves the folder
// as it was, and a folder the export created is removed again.
class Staging {
 public:
  Staging(fs::path dir, bool created) : dir_(std::move(dir)), stage_(dir_ / ".mpitron-export.partial"), created_(created) {
    std::error_code ec;
    fs::remove_all(stage_, ec);  // an earlier export's, killed before it finished
    fs::create_directory(stage_, ec);
    usage_check(!ec, "export: cannot create '{}': {}", stage_.string(), ec.message());
  }
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;
  ~Staging() {
    std::error_code ec;
    fs::remove_all(stage_, ec);
    if (!committed_ && created_) fs::remove(dir_, ec);  // only when empty, as it was made
  }
  const fs::path& path() const { return stage_; }
  // Every staged file into the folder (renames within one file system).
  void commit() {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(stage_, ec)) {
      const fs::path to = dir_ / e.path().filename();
      fs::rename(e.path(), to, ec);
      usage_check(!ec, "export: cannot move '{}' to '{}': {}", e.path().string(), to.string(), ec.message());
    }
    usage_check(!ec, "export: cannot list '{}': {}", stage_.string(), ec.message());
    committed_ = true;
  }

 private:
  fs::path dir_, stage_;
  bool created_, committed_ = false;
};

}  // namespace

ExportSummary export_hf(const std::string& ckpt, const std::string& out_dir, const HfExportOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  const OutDtype d = out_dtype(opt.dtype);
  usage_check(opt.max_shard_bytes > 0, "export: --max-shard-size must be > 0");
  const CheckpointMeta meta = read_checkpoint_meta(ckpt);
  const ModelConfig& cfg = meta.model;
  check_moe_exportable(cfg, ckpt, cfg.qk_norm ? "Hugging Face's Qwen3MoeForCausalLM" : "Hugging Face's MixtralForCausalLM",
                       opt.quiet, /*renormalised_only=*/!cfg.qk_norm);
  check_family_exportable(cfg, ckpt, "Hugging Face");
  const fs::path dir(out_dir);
  std::error_code ec;
  usage_check(!fs::exists(dir, ec) || fs::is_directory(dir, ec), "export: --out '{}' exists and is not a folder",
              out_dir);
  const bool created = !fs::exists(dir, ec);
  fs::create_directories(dir, ec);
  usage_check(!ec, "export: cannot create '{}': {}", out_dir, ec.message());
  Staging stage(dir, created);

  // The tensors, their HF shapes and bytes, grouped into files of at most max_shard_bytes.
  const std::vector<ExternalTensor> tensors = external_tensors(cfg);
  const auto file_shape = ckpt_format::file_shapes(cfg);
  std::vector<std::vector<SafetensorsEntry>> files(1);
  uint64_t in_file = 0, total = 0;
  for (const ExternalTensor& t : tensors) {
    auto it = file_shape.find(t.name);
    check(it != file_shape.end(), "export: no tensor '{}' in the model's table", t.name);
    std::vector<int64_t> shape = it->second;
    if (t.hf_transpose) std::swap(shape[0], shape[1]);
    uint64_t bytes = d.size;
    for (int64_t x : shape) bytes *= static_cast<uint64_t>(x);
    if (in_file > 0 && in_file + bytes > opt.max_shard_bytes) files.emplace_back(), in_file = 0;
    files.back().push_back({t.hf_name, d.st, shape});
    in_file += bytes;
    total += bytes;
  }
  const size_t nf = files.size();
  auto file_name = [&](size_t i) {
    return nf == 1 ? std::string("model.safetensors") : fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, nf);
  };

  ExportSummary sum;
  size_t next = 0;
  ordered_json weight_map = ordered_json::object();
  for (size_t i = 0; i < nf; ++i) {
    SafetensorsWriter w((stage.path() / file_name(i)).string(), files[i], {{"format", "pt"}});
    for (const SafetensorsEntry& e : w.entries()) {
      const ExternalTensor& t = tensors[next++];
      std::vector<int64_t> shape;
      std::vector<float> v = read_checkpoint_tensor(ckpt, "model/" + t.name, &shape);
      v = to_hf_layout(t, std::move(v), &shape);
      check(shape == e.shape, "export: tensor '{}' read with another shape than its table's", t.name);
      const std::vector<char> bytes = encode(v, d);
      w.write_next(bytes.data(), bytes.size());
      weight_map[e.name] = file_name(i);
      ++sum.tensors;
    }
    w.finish();
    sum.bytes += w.bytes();
    ++sum.files;
    if (!opt.quiet)
      std::fprintf(stderr, "export: %s (%zu tensors, %.1f MB)\n", (dir / file_name(i)).c_str(), files[i].size(),
                   w.bytes() / 1e6);
  }
  if (nf > 1) {
    ordered_json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    write_text(stage.path() / "model.safetensors.index.json", index.dump(2) + "\n");
  }
  std::optional<Tokenizer> stored;
  if (!meta.tokenizer_json.empty()) stored = Tokenizer::from_json(meta.tokenizer_json, ckpt + ": tokenizer_json");
  // The tokenizer's end-of-text; BOS: the one a tokenizer.json's post-processor adds, else the same.
  const int eot = stored ? stored->eot() : cfg.vocab_size - 1;
  const int bos = stored && stored->bos() >= 0 ? stored->bos() : eot;
  write_text(stage.path() / "config.json", hf_config(cfg, d, bos, eot).dump(2) + "\n");
  ordered_json gen = {{"bos_token_id", bos}, {"eos_token_id", eot}, {"max_length", cfg.seq_len}};
  write_text(stage.path() / "generation_config.json", gen.dump(2) + "\n");
  const std::string tok = write_tokenizer(stage.path(), stored, cfg.seq_len, opt.quiet);
  stage.commit();
  if (nf == 1) std::remove((dir / "model.safetensors.index.json").c_str());  // a stale index would shadow the file
  // Shards of an earlier export with another file count would be loaded with this one's.
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    bool ours = false;
    for (size_t i = 0; i < nf; ++i) ours = ours || n == file_name(i);
    static const std::regex shard(R"(model-\d{5}-of-\d{5}\.safetensors)");
    if (!ours && std::regex_match(n, shard)) fs::remove(e.path(), ec);
  }
  if (!opt.quiet) std::fprintf(stderr, "export: config.json, generation_config.json; tokenizer: %s\n", tok.c_str());
  sum.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return sum;
}

}  // namespace mpitron
