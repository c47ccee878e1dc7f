// Reading Hugging Face model folders (hf_import.hpp).
#include "mpitron/checkpoint/hf_import.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fmt/ranges.h>

#include <cmath>
#include <fstream>
#include <optional>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <tuple>

#include "checkpoint_format.hpp"
#include "mpitron/config/job_config.hpp"
#include "mpitron/config/value_rules.hpp"
#include "mpitron/core/dtype.hpp"
#include "mpitron/core/error.hpp"
#include "mpitron/model/arch.hpp"
#include "mpitron/data/tokenizer.hpp"
#include "mpitron/model/rope_scaling.hpp"

namespace mpitron {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

json read_json(const std::string& path) {
  std::ifstream f(path);
  usage_check(f.good(), "cannot read '{}'", path);
  try {
    return json::parse(f);
  } catch (const std::exception& e) {
    usage_fail("{}: not JSON ({})", path, e.what());
  }
}

// config.json fields, checked where they enter with the rules every value from outside meets
// (config/value_rules.hpp): an integer field is a JSON integer in range (2.5 and 4294967298 are
// refused, never truncated), a float field a finite number in its bounds, a flag a JSON boolean.
std::string what(const std::string& path, const char* key) { return fmt::format("{}: \"{}\"", path, key); }

bool present(const json& j, const char* key) { return j.contains(key) && !j[key].is_null(); }

int int_field(const json& j, const char* key, const std::string& path, const Range& r) {
  usage_check(present(j, key), "{}: no \"{}\"", path, key);
  const json& v = j[key];
  if (!v.is_number_integer()) value_refused(what(path, key), v.dump(), integer_rule(r));
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{INT64_MAX})
    value_refused(what(path, key), v.dump(), integer_rule(r.within<int>()));
  return checked_int<int>(what(path, key), static_cast<double>(v.get<int64_t>()), r, v.dump());
}

int int_field(const json& j, const char* key, const std::string& path, const Range& r, int absent) {
  return present(j, key) ? int_field(j, key, path, r) : absent;
}

double float_field(const json& j, const char* key, const std::string& path, const Range& r, double absent) {
  if (!present(j, key)) return absent;
  const json& v = j[key];
  if (!v.is_number()) value_refused(what(path, key), v.dump(), r.text(false));
  return checked_float(what(path, key), v.get<double>(), r, v.dump());
}

bool bool_field(const json& j, const char* key, const std::string& path, bool absent) {
  if (!present(j, key)) return absent;
  usage_check(j[key].is_boolean(), "{}: \"{}\" must be true or false, not {}", path, key, j[key].dump());
  return j[key].get<bool>();
}

std::string string_field(const json& j, const char* key, const std::string& path, const std::string& absent) {
  if (!present(j, key)) return absent;
  usage_check(j[key].is_string(), "{}: \"{}\" must be a string, not {}", path, key, j[key].dump());
  return j[key].get<std::string>();
}

// config.json's RoPE scaling as transformers reads it: "rope_scaling" (transformers 5 writes
// "rope_parameters", rope_theta inside; either is read), null, absent or rope_type "default" for
// plain RoPE, "type" the older spelling of "rope_type". llama3 needs all four of its fields; yarn
// its factor (original_max_position_embeddings defaults to the model's context, beta_fast /
// beta_slow to 32 / 1, the attention factor to 0.1 ln(factor) + 1). Every other type, and the yarn
// options mpitron does not compute (DeepSeek's mscale, gpt-oss's truncate false), refused by name.
RopeScaling rope_scaling_field(const json& j, const std::string& path, int max_pos, double* theta) {
  const char* key = present(j, "rope_scaling") || !present(j, "rope_parameters") ? "rope_scaling" : "rope_parameters";
  RopeScaling r;
  if (!present(j, key)) return r;
  const json& o = j[key];
  const std::string at = what(path, key);
  usage_check(o.is_object(), "{} must be an object or null, not {}", at, o.dump());
  if (std::string(key) == "rope_parameters") *theta = float_field(o, "rope_theta", at, above(1), *theta);
  usage_check(float_field(o, "partial_rotary_factor", at, above(0), 1.0) == 1.0,
              "{}: partial_rotary_factor {} is not supported (RoPE over the whole head only)", at,
              o.value("partial_rotary_factor", 1.0));
  const std::string type = string_field(o, present(o, "rope_type") ? "rope_type" : "type", at, "default");
  if (type == "default") return r;
  usage_check(type == "llama3" || type == "yarn",
              "{}: rope_type '{}' is not supported (supported: llama3, yarn, default)", at, type);
  r.type = type == "llama3" ? RopeScalingType::llama3 : RopeScalingType::yarn;
  auto required = [&](const char* k) {
    usage_check(present(o, k), "{}: no \"{}\" (rope_type {} needs it)", at, k, type);
  };
  required("factor");
  r.factor = float_field(o, "factor", at, at_least(1), 0);
  const char* orig = "original_max_position_embeddings";
  if (r.type == RopeScalingType::llama3) {
    for (const char* k : {"low_freq_factor", "high_freq_factor", orig}) required(k);
    r.low_freq_factor = float_field(o, "low_freq_factor", at, above(0), 0);
    r.high_freq_factor = float_field(o, "high_freq_factor", at, above(0), 0);
    r.original_max_pos = int_field(o, orig, at, at_least(1));
  } else {
    r.original_max_pos = int_field(o, orig, at, at_least(1), max_pos);
    r.beta_fast = float_field(o, "beta_fast", at, above(0), 32.0);
    r.beta_slow = float_field(o, "beta_slow", at, above(0), 1.0);
    r.attention_factor = float_field(o, "attention_factor", at, above(0), 0.0);
    for (const char* k : {"mscale", "mscale_all_dim"})
      usage_check(!present(o, k) || (o[k].is_number() && o[k].get<double>() == 0),
                  "{}: \"{}\" is not supported (DeepSeek's YaRN attention factor; give attention_factor)", at, k);
    usage_check(bool_field(o, "truncate", at, true), "{}: \"truncate\": false is not supported", at);
  }
  check_rope_scaling(r, at);
  return r;
}

// GPT-2 checkpoints on the Hub name their tensors with or without the "transformer." prefix.
std::string strip_gpt2_prefix(const std::string& n) {
  return n.rfind("transformer.", 0) == 0 ? n.substr(12) : n;
}

bool ignored_name(const std::string& n, const ModelConfig& c) {
  if (c.arch == Arch::gpt2 && (n.ends_with(".attn.bias") || n.ends_with(".attn.masked_bias"))) return true;  // masks
  return c.tied_embeddings && n == "lm_head.weight";  // a tied head saved anyway
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::ostringstream o;
  o << "[";
  for (size_t i = 0; i < s.size(); ++i) o << (i ? ", " : "") << s[i];
  return o.str() + "]";
}

}  // namespace

ModelConfig hf_model_config(const std::string& path) {
  const json j = read_json(path);
  usage_check(j.is_object(), "{}: not a JSON object", path);
  const std::string type = string_field(j, "model_type", path, "");
  ModelConfig c;
  c.name = "hf";
  const char *k_head = "num_attention_heads", *k_hidden = "hidden_size";
  if (type == "gpt2") {
    k_head = "n_head", k_hidden = "n_embd";
    c.arch = Arch::gpt2;
    c.n_layer = int_field(j, "n_layer", path, at_least(1));
    c.n_head = int_field(j, "n_head", path, at_least(1));
    c.n_kv_head = c.n_head;
    c.d_model = int_field(j, "n_embd", path, at_least(1));
    c.d_ff = int_field(j, "n_inner", path, at_least(1), 4 * c.d_model);
    c.seq_len = int_field(j, "n_positions", path, at_least(2));
    c.vocab_size = int_field(j, "vocab_size", path, at_least(1));
    c.tied_embeddings = bool_field(j, "tie_word_embeddings", path, true);
    usage_check(c.tied_embeddings, "{}: an untied GPT-2 head is not supported (mpitron's GPT-2 ties it)", path);
    const std::string act = string_field(j, "activation_function", path, "gelu_new");
    usage_check(act == "gelu_new" || act == "gelu_pytorch_tanh",
                "{}: activation_function '{}' (mpitron's GPT-2 uses the tanh GELU: gelu_new)", path, act);
    const double eps = float_field(j, "layer_norm_epsilon", path, above(0), 1e-5);
    usage_check(std::fabs(eps - 1e-5) < 1e-12, "{}: layer_norm_epsilon {} (mpitron's GPT-2 uses 1e-5)", path, eps);
  } else if (type == "llama" || type == "mixtral" || type == "qwen2" || type == "qwen3" || type == "qwen3_moe") {
    c.arch = Arch::llama;
    c.n_layer = int_field(j, "num_hidden_layers", path, at_least(1));
    c.n_head = int_field(j, "num_attention_heads", path, at_least(1));
    c.n_kv_head = int_field(j, "num_key_value_heads", path, at_least(1), c.n_head);
    c.d_model = int_field(j, "hidden_size", path, at_least(1));
    c.d_ff = int_field(j, "intermediate_size", path, at_least(1));
    c.seq_len = int_field(j, "max_position_embeddings", path, at_least(2));
    c.vocab_size = int_field(j, "vocab_size", path, at_least(1));
    // The job keys' bounds (model.norm_eps, model.rope_theta): a theta <= 1 turns RoPE's
    // frequencies into growth or NaN, an epsilon outside (0, 1) is no RMSNorm epsilon.
    c.norm_eps = static_cast<float>(float_field(j, "rms_norm_eps", path, epsilon_range(), 1e-6));
    c.rope_theta = float_field(j, "rope_theta", path, above(1), 10000.0);
    c.tied_embeddings = bool_field(j, "tie_word_embeddings", path, false);
    c.rope_scaling = rope_scaling_field(j, path, c.seq_len, &c.rope_theta);
    // Qwen2: LLaMA with q/k/v biases; Qwen3: LLaMA with an RMSNorm over each head's q and k.
    c.qkv_bias = type == "qwen2";
    c.qk_norm = type == "qwen3" || type == "qwen3_moe";
    if (type != "qwen2")
      usage_check(!bool_field(j, "attention_bias", path, false) && !bool_field(j, "mlp_bias", path, false),
                  "{}: attention_bias / mlp_bias are not supported ({} has no biases)", path, type);
    if (type.starts_with("qwen"))
      usage_check(!bool_field(j, "use_sliding_window", path, false),
                  "{}: use_sliding_window true is not supported (full attention only)", path);

    const std::string act = string_field(j, "hidden_act", path, "silu");
    usage_check(act == "silu", "{}: hidden_act '{}' (LLaMA's is silu)", path, act);
    if (type == "mixtral") {  // LLaMA's block, the MLP a sparse mixture in every layer
      MoeConfig& m = c.moe;
      m.n_experts = int_field(j, "num_local_experts", path, at_least(1));
      m.top_k = int_field(j, "num_experts_per_tok", path, between(1, m.n_experts));
      m.d_ff = c.d_ff;  // intermediate_size: each expert's width
      m.router = MoeRouter::softmax_topk;
      usage_check(m.d_ff % 16 == 0, "{}: intermediate_size {} is not a multiple of 16 (mpitron's experts run gate and "
                  "up as one GEMM of 16-wide blocks)", path, m.d_ff);
      m.aux_loss_coef = float_field(j, "router_aux_loss_coef", path, at_least(0), 0.001);  // MixtralConfig's default
      m.z_loss_coef = float_field(j, "router_z_loss_coef", path, at_least(0), 0.0);
      const int window = int_field(j, "sliding_window", path, at_least(1), c.seq_len);
      usage_check(window >= c.seq_len,
                  "{}: sliding_window {} below max_position_embeddings {} is not supported (full attention only)",
                  path, window, c.seq_len);
    }
    if (type == "qwen3_moe") {  // Qwen3's attention, a sparse mixture in every layer
      MoeConfig& m = c.moe;
      m.n_experts = int_field(j, "num_experts", path, at_least(1));
      m.top_k = int_field(j, "num_experts_per_tok", path, between(1, m.n_experts));
      m.d_ff = int_field(j, "moe_intermediate_size", path, at_least(1));
      c.d_ff = m.d_ff;  // intermediate_size: the dense MLP's, which no layer has here
      // norm_topk_prob: the softmax's top k renormalised (Mixtral's weights), or kept as they are.
      const bool norm = bool_field(j, "norm_topk_prob", path, true);
      m.router = norm ? MoeRouter::softmax_topk : MoeRouter::topk_softmax;
      m.norm_topk_prob = false;
      usage_check(m.d_ff % 16 == 0, "{}: moe_intermediate_size {} is not a multiple of 16 (mpitron's experts run gate "
                  "and up as one GEMM of 16-wide blocks)", path, m.d_ff);
      m.aux_loss_coef = float_field(j, "router_aux_loss_coef", path, at_least(0), 0.001);  // Qwen3MoeConfig's default
      m.z_loss_coef = float_field(j, "router_z_loss_coef", path, at_least(0), 0.0);
      usage_check(int_field(j, "decoder_sparse_step", path, at_least(1), 1) == 1,
                  "{}: decoder_sparse_step other than 1 is not supported (every layer a mixture of experts)", path);
      usage_check(!present(j, "mlp_only_layers") || (j["mlp_only_layers"].is_array() && j["mlp_only_layers"].empty()),
                  "{}: mlp_only_layers must be empty (every layer a mixture of experts)", path);
    }
  } else {
    usage_fail("{}: model_type '{}' is not supported (allowed: gpt2, llama, mixtral, qwen2, qwen3, qwen3_moe)", path, type);
  }
  // The model the sizes describe: heads that divide the hidden size (or a "head_dim" of their
  // own: Qwen3-0.6B's 16 heads of 128 on a hidden size of 1024) and the query heads, and (RoPE) a
  // head size it can cut into pairs.
  if (c.arch == Arch::llama && present(j, "head_dim")) {
    const int hd = int_field(j, "head_dim", path, at_least(2));
    if (c.d_model % c.n_head != 0 || hd != c.d_model / c.n_head) c.head_size = hd;
  }
  usage_check(c.head_size > 0 || c.d_model % c.n_head == 0,
              "{}: \"{}\" {} is not a multiple of \"{}\" {} (the head size must be whole, or \"head_dim\" given)",
              path, k_hidden, c.d_model, k_head, c.n_head);
  usage_check(c.n_head % c.n_kv_head == 0,
              "{}: \"num_attention_heads\" {} is not a multiple of \"num_key_value_heads\" {} (each key/value head "
              "serves a whole group of query heads)", path, c.n_head, c.n_kv_head);
  const int head = c.head_dim();
  usage_check(c.arch != Arch::llama || head % 2 == 0,
              "{}: head size {} is odd: RoPE rotates pairs of a head's dimensions, so it must be even", path, head);
  usage_check(!c.qkv_bias || head % 16 == 0,
              "{}: a {} with head size {} (a multiple of 16 is needed for its q/k/v biases)", path, type, head);
  return c;
}

HfModel::HfModel(const std::string& dir) : dir_(dir) {
  std::error_code ec;
  usage_check(!dir.empty(), "hf:: no folder after 'hf:' (give hf:DIR, the Hugging Face model folder)");
  usage_check(fs::is_directory(dir, ec), "hf:{}: not a folder", dir);
  cfg_ = hf_model_config(dir + "/config.json");
  table_ = external_tensors(cfg_);
  // The files: an index's weight_map, or the one model.safetensors.
  std::vector<std::string> files;
  const std::string index = dir + "/model.safetensors.index.json";
  if (fs::exists(index, ec)) {
    const json j = read_json(index);
    usage_check(j.contains("weight_map") && j["weight_map"].is_object(), "{}: no \"weight_map\" object", index);
    std::set<std::string> seen;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      usage_check(it.value().is_string(), "{}: weight_map['{}'] is not a file name", index, it.key());
      const std::string f = it.value().get<std::string>();
      usage_check(f.find('/') == std::string::npos, "{}: weight_map['{}'] = '{}' is not a file in the folder", index,
                  it.key(), f);
      usage_check(fs::exists(dir + "/" + f, ec), "{}: names '{}' (for '{}'), which is not in the folder", index, f,
                  it.key());
      if (seen.insert(f).second) files.push_back(f);
    }
  } else {
    usage_check(fs::exists(dir + "/model.safetensors", ec),
                "hf:{}: neither model.safetensors nor model.safetensors.index.json is there", dir);
    files.push_back("model.safetensors");
  }
  std::map<std::string, const ExternalTensor*> by_hf;  // HF name (normalized) -> its table entry
  for (const auto& t : table_) by_hf[cfg_.arch == Arch::gpt2 ? strip_gpt2_prefix(t.hf_name) : t.hf_name] = &t;
  std::vector<std::string> unexpected;
  for (const auto& f : files) {
    const std::string path = dir + "/" + f;
    SafetensorsHeader h = read_safetensors_header(path);
    for (auto& e : h.entries) {
      const std::string key = cfg_.arch == Arch::gpt2 ? strip_gpt2_prefix(e.name) : e.name;
      auto it = by_hf.find(key);
      if (it == by_hf.end()) {
        if (!ignored_name(key, cfg_)) unexpected.push_back(e.name + " (" + f + ")");
        continue;
      }
      usage_check(!where_.count(it->second->name), "hf:{}: tensor '{}' is in two files", dir, e.name);
      usage_check(e.dtype == "F32" || e.dtype == "BF16" || e.dtype == "F16",
                  "{}: tensor '{}' is {} (allowed: F32, BF16, F16)", path, e.name, e.dtype);
      where_[it->second->name] = {path, e, h.data_start, it->second};
    }
  }
  usage_check(unexpected.empty(), "hf:{}: tensors this {} model does not have: {}", dir,
              family_name(cfg_), fmt::format("{}", fmt::join(unexpected, ", ")));
  // Every tensor present, at its HF shape.
  const auto file_shape = ckpt_format::file_shapes(cfg_);
  std::vector<std::string> missing;
  for (const auto& t : table_) {
    auto w = where_.find(t.name);
    if (w == where_.end()) {
      missing.push_back(t.hf_name);
      continue;
    }
    std::vector<int64_t> want = file_shape.at(t.name);
    if (t.hf_transpose) std::swap(want[0], want[1]);
    usage_check(w->second.entry.shape == want, "{}: tensor '{}' is {}, config.json's model needs {}", w->second.file,
                w->second.entry.name, shape_str(w->second.entry.shape), shape_str(want));
  }
  usage_check(missing.empty(), "hf:{}: tensors missing: {}", dir, fmt::format("{}", fmt::join(missing, ", ")));
}

std::string hf_tokenizer_json(const std::string& dir, int vocab_size) {
  std::error_code ec;
  std::string file;
  std::optional<Tokenizer> tok;
  if (fs::exists(dir + "/tokenizer.json", ec)) {
    file = dir + "/tokenizer.json";
    tok = Tokenizer::hf_json(file);
  } else if (fs::exists(dir + "/tokenizer.model", ec)) {
    file = dir + "/tokenizer.model";
    tok = Tokenizer::sentencepiece_file(file);
  } else {
    return {};
  }
  // Every id the tokenizer can produce needs a row of the embedding, or generation and training
  // fail later naming neither file.
  usage_check(tok->vocab_size() <= vocab_size,
              "{}: {} ids, more than {}/config.json's \"vocab_size\" {} (the embedding has a row per id)", file,
              tok->vocab_size(), dir, vocab_size);
  return tok->to_json();
}

std::string HfModel::tokenizer_json() const { return hf_tokenizer_json(dir_, cfg_.vocab_size); }

const HfModel::Where& HfModel::where(const std::string& name) const {
  auto w = where_.find(name);
  check(w != where_.end(), "hf:{}: no tensor for '{}'", dir_, name);
  return w->second;
}

void HfModel::read_file_rows(const Where& at, int64_t row0, int64_t rows, float* out) const {
  const SafetensorsEntry& e = at.entry;
  const uint64_t esize = safetensors_dtype_size(e.dtype);
  uint64_t cols = 1;
  for (size_t d = 1; d < e.shape.size(); ++d) cols *= static_cast<uint64_t>(e.shape[d]);
  const uint64_t first = static_cast<uint64_t>(row0) * cols, n = static_cast<uint64_t>(rows) * cols, bytes = n * esize;
  // F32 is read straight into `out`; 16-bit types through the scratch buffer.
  if (e.dtype != "F32" && raw_.size() < bytes) raw_.resize(bytes);
  char* into = e.dtype == "F32" ? reinterpret_cast<char*>(out) : raw_.data();
  const int fd = ::open(at.file.c_str(), O_RDONLY | O_CLOEXEC);
  usage_check(fd >= 0, "cannot open '{}': {}", at.file, std::strerror(errno));
  const uint64_t offset = at.data_start + e.begin + first * esize;
  uint64_t got = 0;
  while (got < bytes) {
    const ssize_t r = ::pread(fd, into + got, bytes - got, static_cast<off_t>(offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += static_cast<uint64_t>(r);
  }
  ::close(fd);
  usage_check(got == bytes, "{}: tensor '{}': read {} of {} bytes at element {} (truncated?)", at.file, e.name, got,
              bytes, first);
  if (e.dtype != "F32") {
    for (uint64_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, raw_.data() + 2 * i, 2);
      out[i] = e.dtype == "BF16" ? to_f32(bf16{h}) : fp16_bits_to_f32(h);
    }
  }
  // A checkpoint never holds a non-finite value (training refuses to save one): an import that
  // carried a NaN in would start every run from it.
  // (A branch-free scan, vectorised, then the search only when it found one.)
  uint32_t nonfinite = 0;
  for (uint64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, out + i, 4);
    nonfinite |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
  }
  for (uint64_t i = 0; nonfinite && i < n; ++i)
    if (!std::isfinite(out[i]))
      fail("{}: tensor '{}' holds {} at element {} ({}); mpitron never stores a non-finite value in a checkpoint",
           at.file, e.name, out[i], first + i, e.dtype);
}

size_t HfModel::parameter_count() const {
  size_t n = 0;
  for (const auto& [name, at] : where_) n += (at.entry.end - at.entry.begin) / safetensors_dtype_size(at.entry.dtype);
  return n;
}

std::vector<float> HfModel::tensor(const std::string& name) const {
  const Where& at = where(name);
  std::vector<int64_t> shape = at.entry.shape;
  const int64_t rows = shape.empty() ? 1 : shape[0];
  std::vector<float> v((at.entry.end - at.entry.begin) / safetensors_dtype_size(at.entry.dtype));
  read_file_rows(at, 0, rows, v.data());
  return from_hf_layout(*at.tensor, std::move(v), &shape);
}

void HfModel::read_rows(const std::string& name, int64_t row0, int64_t rows, float* out) const {
  const Where& at = where(name);
  const ExternalTensor& t = *at.tensor;
  const std::vector<int64_t>& shape = at.entry.shape;  // HF's: ours unless transposed
  if (t.hf_transpose) {  // our rows are the file's columns: read it whole (GPT-2's, tens of MB at most)
    if (whole_name_ != name) {
      whole_name_.clear();
      whole_ = tensor(name);
      whole_name_ = name;
    }
    const int64_t cols = shape[0];
    std::copy_n(whole_.begin() + row0 * cols, rows * cols, out);
    return;
  }
  if (t.rope_heads == 0) return read_file_rows(at, row0, rows, out);
  // q and k rows are permuted within each head: read the whole heads that hold ours.
  int64_t cols = 1;
  for (size_t d = 1; d < shape.size(); ++d) cols *= shape[d];
  const int64_t hd = shape[0] / t.rope_heads, h0 = row0 / hd * hd, h1 = (row0 + rows + hd - 1) / hd * hd;
  if (rows_.size() < static_cast<size_t>((h1 - h0) * cols)) rows_.resize(static_cast<size_t>((h1 - h0) * cols));
  read_file_rows(at, h0, h1 - h0, rows_.data());
  for (int64_t r = row0; r < row0 + rows; ++r)
    std::copy_n(rows_.begin() + (hf_rope_row(r, hd) - h0) * cols, cols, out + (r - row0) * cols);
}

namespace {

// The job's model.rope_* keys that it sets against config.json's scaling (appended to `bad`).
void compare_rope_scaling(const ModelSection& s, const RopeScaling& r, std::vector<std::string>& bad) {
  if (s.rope_scaling != "auto" && s.rope_scaling != rope_scaling_name(r.type))
    bad.push_back(fmt::format("model.rope_scaling = {} (config.json: {})", s.rope_scaling, rope_scaling_name(r.type)));
  const double attention = r.type == RopeScalingType::yarn ? yarn_attention_factor(r) : 0;
  for (auto [key, job, hf] : {std::tuple{"rope_factor", s.rope_factor, r.factor},
                              {"rope_original_max_pos", double(s.rope_original_max_pos), double(r.original_max_pos)},
                              {"rope_low_freq_factor", s.rope_low_freq_factor, r.low_freq_factor},
                              {"rope_high_freq_factor", s.rope_high_freq_factor, r.high_freq_factor},
                              {"rope_beta_fast", s.rope_beta_fast, r.beta_fast},
                              {"rope_beta_slow", s.rope_beta_slow, r.beta_slow},
                              {"rope_attention_factor", s.rope_attention_factor, attention}})
    if (job != 0 && job != hf) bad.push_back(fmt::format("model.{} = {} (config.json: {})", key, job, hf));
}

}  // namespace

ModelConfig model_for_hf_init(const ModelSection& s, const std::string& dir) {
  std::error_code ec;
  usage_check(!dir.empty() && fs::is_directory(dir, ec),
              "train.init_from = \"hf:{}\": {} (give hf:DIR, a Hugging Face model folder with config.json)", dir,
              dir.empty() ? "no folder after 'hf:'" : "not a folder");
  const std::string path = dir + "/config.json";
  ModelConfig c = hf_model_config(path);
  c.name = "hf:" + fs::path(dir).filename().string();
  std::vector<std::string> bad;
  auto same = [&](const char* key, double job, double hf, bool set) {
    if (set && job != hf) bad.push_back(fmt::format("model.{} = {} (config.json: {})", key, job, hf));
  };
  same("n_layer", s.n_layer, c.n_layer, s.n_layer != 0);
  same("n_head", s.n_head, c.n_head, s.n_head != 0);
  same("n_kv_head", s.n_kv_head, c.n_kv_head, s.n_kv_head != 0);
  same("head_dim", s.head_dim, c.head_dim(), s.head_dim != 0);
  same("d_model", s.d_model, c.d_model, s.d_model != 0);
  same("d_ff", s.d_ff, c.d_ff, s.d_ff != 0);
  same("vocab_size", s.vocab_size, c.vocab_size, s.vocab_size != 0);
  if (s.seq_len != 0 && hf_trains_at(c, s.seq_len)) c.seq_len = s.seq_len;
  else if (c.arch == Arch::llama && s.seq_len != 0)
    bad.push_back(fmt::format("model.seq_len = {} (config.json: max_position_embeddings {}, the most it may be)",
                              s.seq_len, c.seq_len));
  else same("seq_len", s.seq_len, c.seq_len, s.seq_len != 0);
  // The model holds norm_eps as float: the job's value is compared at that precision (1e-6 in the
  // job and "rms_norm_eps": 1e-06 agree), and shown as the float it becomes.
  if (s.norm_eps != 0 && c.arch == Arch::llama && static_cast<float>(s.norm_eps) != c.norm_eps)
    bad.push_back(fmt::format("model.norm_eps = {} (config.json: {})", s.norm_eps, c.norm_eps));
  same("rope_theta", s.rope_theta, c.rope_theta, s.rope_theta != 0 && c.arch == Arch::llama);
  compare_rope_scaling(s, c.rope_scaling, bad);
  const ModelSection def;
  same("moe.n_experts", s.moe_n_experts, c.moe.n_experts, s.moe_n_experts != def.moe_n_experts);
  same("moe.top_k", s.moe_top_k, c.moe.top_k, s.moe_top_k != def.moe_top_k && c.moe.enabled());
  same("moe.expert_d_ff", s.moe_expert_d_ff, c.moe.d_ff, s.moe_expert_d_ff != def.moe_expert_d_ff);
  if (s.arch != "auto" && s.arch != (c.arch == Arch::llama ? "llama" : "gpt2"))
    bad.push_back(fmt::format("model.arch = {} (config.json: {})", s.arch, c.arch == Arch::llama ? "llama" : "gpt2"));
  for (auto [key, job, hf] : {std::tuple{"qkv_bias", s.qkv_bias, c.qkv_bias}, {"qk_norm", s.qk_norm, c.qk_norm}})
    if (job != "auto" && (job == "true") != hf) bad.push_back(fmt::format("model.{} = {} (config.json: {})", key, job, hf));
  if (s.tie_embeddings != "auto" && (s.tie_embeddings == "true") != c.tied_embeddings)
    bad.push_back(fmt::format("model.tie_embeddings = {} (config.json: {})", s.tie_embeddings, c.tied_embeddings));
  if (c.moe.enabled()) {  // training-only [model.moe] keys: the job's where it sets them, else config.json's
    if (s.moe_aux_loss_coef != def.moe_aux_loss_coef) c.moe.aux_loss_coef = s.moe_aux_loss_coef;
    if (s.moe_z_loss_coef != def.moe_z_loss_coef) c.moe.z_loss_coef = s.moe_z_loss_coef;
    c.moe.capacity_factor = s.moe_capacity_factor;
  }
  usage_check(bad.empty(),
              "train.init_from = hf:{}: the job's [model] keys disagree with {}: {}. Leave them out (config.json sets "
              "the model) or make them agree",
              dir, path, fmt::format("{}", fmt::join(bad, "; ")));
  return c;
}

void load_hf_into_shards(const HfModel& hf, std::span<CheckpointShard> shards) {
  ckpt_format::fill_params_from_full(shards, hf.config(), [&](const std::string& name) { return hf.tensor(name); });
}

}  // namespace mpitron
