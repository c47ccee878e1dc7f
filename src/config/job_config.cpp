#include "mpitron/config/job_config.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <charconv>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "mpitron/core/error.hpp"
#include "mpitron/config/toml_parse.hpp"
#include "mpitron/config/value_rules.hpp"
#include "toml_text.hpp"

namespace mpitron {
namespace {

struct Key {
  std::string name;  // "section.key"
  std::string type;  // int | float | bool | string | int-list
  std::string help;
  std::function<void(JobConfig&, const std::string&)> set;
  std::function<std::string(const JobConfig&)> get;  // TOML literal
  std::optional<Range> range;  // numeric keys (and int lists, per item)
};


[[noreturn]] void bad_value(const std::string& key, const std::string& type, const std::string& v) {
  usage_fail("bad value for '{}': '{}' is not a valid {}", key, v, type);
}

[[noreturn]] void out_of_range(const std::string& key, const std::string& value, const std::string& allowed) {
  usage_fail("bad value for '{}': {} (allowed: {})", key, value, allowed);
}

template <class T>
T parse_number(const std::string& key, const std::string& type, const std::string& text) {
  std::string v = trim(text);
  T out{};
  if constexpr (std::is_floating_point_v<T>) {
    try {
      size_t used = 0;
      out = static_cast<T>(std::stod(v, &used));
      if (used != v.size()) bad_value(key, type, text);
    } catch (const std::logic_error&) {
      bad_value(key, type, text);
    }
  } else {
    // Accept "50M"-style suffixes nowhere: job keys are plain numbers. Allow "1e3"? No: exact ints.
    auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
    if (ec != std::errc() || p != v.data() + v.size()) bad_value(key, type, text);
    // TOML integers are signed 64-bit: a larger unsigned value could not be written back.
    if constexpr (std::is_unsigned_v<T> && sizeof(T) == 8)
      usage_check(out <= static_cast<T>(INT64_MAX), "bad value for '{}': {} is larger than {} (the largest TOML integer)",
                  key, v, INT64_MAX);
  }
  return out;
}

bool parse_bool(const std::string& key, const std::string& text) {
  std::string v = trim(text);
  if (v == "true" || v == "1" || v == "yes" || v == "on") return true;
  if (v == "false" || v == "0" || v == "no" || v == "off") return false;
  bad_value(key, "bool (true|false)", text);
}

void check_text(const std::string& key, const std::string& v) {
  if (!valid_utf8(v)) usage_fail("bad value for '{}': not valid UTF-8 text", key);
}

template <class S, class T>
Key make_key(std::string name, std::string help, S JobConfig::*sec, T S::*field,
             std::vector<std::string> choices = {}, std::optional<Range> range = {}) {
  Key k;
  k.name = name;
  k.help = std::move(help);
  k.range = range;
  if constexpr (std::is_same_v<T, bool>) {
    k.type = "bool";
  } else if constexpr (std::is_integral_v<T>) {
    k.type = "int";
  } else if constexpr (std::is_floating_point_v<T>) {
    k.type = "float";
  } else if constexpr (std::is_same_v<T, std::string>) {
    k.type = choices.empty() ? "string" : fmt::format("{}", fmt::join(choices, "|"));
  } else {
    k.type = "int list";
  }
  std::string type = k.type;
  k.set = [name, type, sec, field, choices, range](JobConfig& c, const std::string& text) {
    T& dst = (c.*sec).*field;
    if constexpr (std::is_same_v<T, bool>) {
      dst = parse_bool(name, text);
    } else if constexpr (std::is_integral_v<T> || std::is_floating_point_v<T>) {
      const T v = parse_number<T>(name, type, text);
      if (range && !range->allows(static_cast<double>(v), true))
        out_of_range(name, trim(text), range->text(std::is_integral_v<T>, true));
      dst = v;
    } else if constexpr (std::is_same_v<T, std::string>) {
      std::string v = unquote(text);
      check_text(name, v);
      if (!choices.empty() && std::find(choices.begin(), choices.end(), v) == choices.end())
        usage_fail("bad value for '{}': '{}' (allowed: {})", name, v, fmt::join(choices, ", "));
      dst = v;
    } else {
      std::string v = trim(text);
      if (!v.empty() && v.front() == '[') v = v.substr(1);
      if (!v.empty() && v.back() == ']') v.pop_back();
      T items;
      std::stringstream ss(v);
      std::string item;
      while (std::getline(ss, item, ',')) {
        if (trim(item).empty()) continue;
        items.push_back(parse_number<int>(name, "int list", item));
        if (range && !range->allows(items.back(), true))
          out_of_range(name, fmt::format("item {} = {}", items.size() - 1, trim(item)),
                       "each item " + range->text(true, true));
      }
      dst = std::move(items);
    }
  };
  k.get = [sec, field](const JobConfig& c) -> std::string {
    const T& v = (c.*sec).*field;
    if constexpr (std::is_same_v<T, bool>) {
      return v ? "true" : "false";
    } else if constexpr (std::is_floating_point_v<T>) {
      std::string s = fmt::format("{}", v);
      if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
      return s;
    } else if constexpr (std::is_integral_v<T>) {
      return fmt::format("{}", v);
    } else if constexpr (std::is_same_v<T, std::string>) {
      return quote(v);
    } else {
      return fmt::format("[{}]", fmt::join(v, ", "));
    }
  };
  return k;
}

template <class S, class T>
Key make_key(std::string name, std::string help, S JobConfig::*sec, T S::*field, Range range) {
  return make_key(std::move(name), std::move(help), sec, field, {}, std::move(range));
}

// data.paths: a blend of corpora. The value's text is TOML (a job file's array, rendered by
// toml_value_text, or a command-line value) and is parsed as such.
Key blend_key() {
  Key k;
  k.name = "data.paths";
  k.type = "blend";
  k.help = "several corpora sampled by weight, replacing data.path: [{ path = \"data/web\", weight = 0.7 }, "
           "{ path = \"data/code\", weight = 0.3 }] or Megatron's flat [0.7, \"data/web\", 0.3, \"data/code\"] "
           "(weights normalised; every corpus must have the same tokenizer)";
  k.set = [](JobConfig& c, const std::string& text) {
    const std::string doc = "v = " + trim(text);
    toml::table t;
    try {
      t = parse_toml(doc, "data.paths");
    } catch (const std::exception&) {
      usage_fail("bad value for 'data.paths': '{}' is not a TOML array", text);
    }
    const toml::array* a = t["v"].as_array();
    usage_check(a != nullptr, "bad value for 'data.paths': '{}' is not an array", text);
    std::vector<DataBlendEntry> out;
    auto weight_of = [&](const toml::node& n) {
      if (auto f = n.as_floating_point()) return f->get();
      if (auto i = n.as_integer()) return static_cast<double>(i->get());
      (void)n;
      usage_fail("bad value for 'data.paths': a weight is not a number");
    };
    const bool flat = !a->empty() && !(*a)[0].is_table();
    if (flat) {  // [w, "path", w, "path", ...]
      usage_check(a->size() % 2 == 0, "bad value for 'data.paths': the flat form needs weight, path pairs (got {} items)",
                  a->size());
      for (size_t i = 0; i < a->size(); i += 2) {
        const auto* p = (*a)[i + 1].as_string();
        usage_check(p != nullptr, "bad value for 'data.paths': item {} must be a path string", i + 1);
        out.push_back({p->get(), weight_of((*a)[i])});
      }
    } else {
      for (const auto& e : *a) {
        const toml::table* et = e.as_table();
        usage_check(et != nullptr, "bad value for 'data.paths': every entry must be {{ path = \"...\", weight = W }}");
        for (const auto& [key, v] : *et)
          usage_check(key.str() == "path" || key.str() == "weight",
                      "bad value for 'data.paths': unknown field '{}' (allowed: path, weight)", key.str());
        const auto* p = (*et)["path"].as_string();
        usage_check(p != nullptr, "bad value for 'data.paths': an entry has no path string");
        // No default weight: a forgotten one would silently weigh the corpus as 1 against the others.
        usage_check((*et)["weight"].node() != nullptr,
                    "bad value for 'data.paths': the entry for '{}' has no weight (give {{ path = \"{}\", weight = W }}; "
                    "weights are normalised over the blend)",
                    p->get(), p->get());
        out.push_back({p->get(), weight_of(*(*et)["weight"].node())});
      }
    }
    for (const auto& e : out) {
      check_text("data.paths", e.path);
      usage_check(!e.path.empty(), "bad value for 'data.paths': an empty path");
      usage_check(std::isfinite(e.weight) && e.weight > 0,
                  "bad value for 'data.paths': weight {} of '{}' (allowed: finite, > 0)", e.weight, e.path);
    }
    c.data.paths = std::move(out);
  };
  k.get = [](const JobConfig& c) {
    std::vector<std::string> items;
    for (const auto& e : c.data.paths) {
      std::string w = fmt::format("{}", e.weight);
      if (w.find_first_of(".eEn") == std::string::npos) w += ".0";
      items.push_back(fmt::format("{{ path = {}, weight = {} }}", quote(e.path), w));
    }
    return fmt::format("[{}]", fmt::join(items, ", "));
  };
  return k;
}

const std::vector<Key>& registry() {
  using C = JobConfig;
  static const std::vector<Key> keys = {
      make_key("job.name", "run name; also names the default run directory", &C::job, &JobSection::name),
      make_key("job.run_dir", "where metrics, logs and checkpoints go (default runs/<job.name>)", &C::job,
               &JobSection::run_dir),
      make_key("model.preset", "tiny | gpt2-124m | gpt2-350m | gpt2-774m | gpt2-1.5b | llama-tiny | llama-small | llama-1b | llama2-7b/13b/70b | llama3-8b/70b/405b | llama3.1-8b/70b | llama3.2-1b/3b | llama-moe-tiny | mixtral-8x7b | olmoe-1b-7b",
               &C::model, &ModelSection::preset),
      make_key("model.n_layer", "transformer blocks (0: from the preset)", &C::model, &ModelSection::n_layer, at_least(1, "from the preset")),
      make_key("model.n_head", "attention heads (0: from the preset)", &C::model, &ModelSection::n_head, at_least(1, "from the preset")),
      make_key("model.d_model", "hidden size (0: from the preset)", &C::model, &ModelSection::d_model, at_least(1, "from the preset")),
      make_key("model.vocab_size", "vocabulary size before padding (0: from the data's tokenizer or preset)",
               &C::model, &ModelSection::vocab_size, at_least(1, "from the data's tokenizer or the preset")),
      make_key("model.seq_len", "context length in tokens (0: from the preset)", &C::model, &ModelSection::seq_len, at_least(2, "from the preset")),
      make_key("model.arch", "block architecture: auto (the preset's) | gpt2 (LayerNorm, learned positions, GELU, tied) | llama (RMSNorm, RoPE, SwiGLU, GQA, untied)",
               &C::model, &ModelSection::arch, {"auto", "gpt2", "llama"}),
      make_key("model.n_kv_head", "llama: key/value heads, dividing n_head (n_head: MHA, 1: MQA; 0: from the preset)",
               &C::model, &ModelSection::n_kv_head, at_least(1, "from the preset")),
      make_key("model.head_dim", "llama: the head size, where it is not d_model / n_head (Qwen3-0.6B: 128 with d_model 1024, 16 heads; 0: d_model / n_head)",
               &C::model, &ModelSection::head_dim, at_least(2, "d_model / n_head")),
      make_key("model.d_ff", "llama: MLP width (0: LLaMA's rule, 2/3 of 4*d_model x ffn_multiplier rounded up to multiple_of)",
               &C::model, &ModelSection::d_ff, at_least(1, "LLaMA's rule")),
      make_key("model.ffn_multiplier", "llama: the MLP rule's multiplier (0: from the preset; 1.3 for LLaMA 3)", &C::model,
               &ModelSection::ffn_multiplier, above(0, "from the preset")),
      make_key("model.multiple_of", "llama: the MLP width is rounded up to a multiple of this (0: from the preset)",
               &C::model, &ModelSection::multiple_of, at_least(1, "from the preset")),
      make_key("model.norm_eps", "llama: RMSNorm epsilon (0: from the preset, 1e-5)", &C::model, &ModelSection::norm_eps, epsilon_range("from the preset")),
      make_key("model.rope_theta", "llama: RoPE base (0: from the preset; 10000 LLaMA 2, 500000 LLaMA 3)", &C::model,
               &ModelSection::rope_theta, above(1, "from the preset")),
      make_key("model.rope_scaling", "llama: RoPE scaling: auto (the preset's: llama3 for llama3.1-*/llama3.2-*, else none) | none | llama3 (LLaMA 3.1/3.2) | yarn (Qwen's long context)",
               &C::model, &ModelSection::rope_scaling, {"auto", "none", "llama3", "yarn"}),
      make_key("model.rope_factor", "llama3 / yarn: context extension factor (8 LLaMA 3.1, 32 LLaMA 3.2, 4 Qwen; 0: from the preset)",
               &C::model, &ModelSection::rope_factor, at_least(1, "from the preset")),
      make_key("model.rope_original_max_pos", "llama3 / yarn: the pretraining context the scaling extends (8192 LLaMA 3.1; 0: from the preset)",
               &C::model, &ModelSection::rope_original_max_pos, at_least(1, "from the preset")),
      make_key("model.rope_low_freq_factor", "llama3: wavelengths above original_max_pos / this are divided by the factor (0: 1)",
               &C::model, &ModelSection::rope_low_freq_factor, above(0, "LLaMA 3.1's 1")),
      make_key("model.rope_high_freq_factor", "llama3: wavelengths below original_max_pos / this are kept (0: 4)",
               &C::model, &ModelSection::rope_high_freq_factor, above(0, "LLaMA 3.1's 4")),
      make_key("model.rope_beta_fast", "yarn: rotations in original_max_pos above which a pair is kept (0: 32)",
               &C::model, &ModelSection::rope_beta_fast, above(0, "YaRN's 32")),
      make_key("model.rope_beta_slow", "yarn: rotations below which a pair is divided by the factor (0: 1)",
               &C::model, &ModelSection::rope_beta_slow, above(0, "YaRN's 1")),
      make_key("model.rope_attention_factor", "yarn: multiplies RoPE's cos and sin (0: 0.1 ln(factor) + 1)",
               &C::model, &ModelSection::rope_attention_factor, above(0, "0.1 ln(factor) + 1")),
      make_key("model.tie_embeddings", "LM head reads the token embedding: auto (gpt2 yes, llama no) | true | false",
               &C::model, &ModelSection::tie_embeddings, {"auto", "true", "false"}),
      make_key("model.qkv_bias", "llama: biases on the q, k and v projections, as Qwen2: auto (the preset's) | true | false",
               &C::model, &ModelSection::qkv_bias, {"auto", "true", "false"}),
      make_key("model.qk_norm", "llama: an RMSNorm over each head's q and k before RoPE, as Qwen3: auto (the preset's) | true | false",
               &C::model, &ModelSection::qk_norm, {"auto", "true", "false"}),
      make_key("model.attention", "CUDA attention path", &C::model, &ModelSection::attention, {"cudnn", "naive"}),
      make_key("model.moe.n_experts", "llama: routed experts per MoE block (0: the preset's, none for a dense preset)", &C::model,
               &ModelSection::moe_n_experts, at_least(1, "dense")),
      make_key("model.moe.top_k", "experts each token is routed to (<= n_experts)", &C::model, &ModelSection::moe_top_k,
               at_least(1)),
      make_key("model.moe.expert_d_ff", "each expert's SwiGLU width (0: model.d_ff)", &C::model,
               &ModelSection::moe_expert_d_ff, at_least(1, "model.d_ff")),
      make_key("model.moe.n_shared_experts", "always-on experts of width expert_d_ff each (Qwen-MoE, DeepSeek)",
               &C::model, &ModelSection::moe_n_shared_experts, at_least(0)),
      make_key("model.moe.layer_freq", "block l is MoE when l % layer_freq == 0 (1: every block)", &C::model,
               &ModelSection::moe_layer_freq, at_least(1)),
      make_key("model.moe.router", "softmax_topk (Mixtral: softmax over the top-k logits) | topk_softmax (softmax over all, then top-k)",
               &C::model, &ModelSection::moe_router, {"softmax_topk", "topk_softmax"}),
      make_key("model.moe.norm_topk_prob", "topk_softmax: renormalise the k routing weights to sum 1", &C::model,
               &ModelSection::moe_norm_topk_prob),
      make_key("model.moe.aux_loss_coef", "load-balancing loss coefficient (E * sum_i f_i P_i)", &C::model,
               &ModelSection::moe_aux_loss_coef, at_least(0)),
      make_key("model.moe.z_loss_coef", "router z-loss coefficient (mean logsumexp(logits)^2)", &C::model,
               &ModelSection::moe_z_loss_coef, at_least(0)),
      make_key("model.moe.capacity_factor", "expert capacity = factor * tokens * top_k / n_experts, later tokens dropped (0: dropless)",
               &C::model, &ModelSection::moe_capacity_factor, at_least(0)),
      make_key("parallel.dp", "data-parallel size (0: world / (tp*pp*cp))", &C::parallel, &ParallelSection::dp, at_least(1, "world / (tp*pp*cp)")),
      make_key("parallel.tp", "tensor-parallel size (ranks inside a node)", &C::parallel, &ParallelSection::tp, at_least(1)),
      make_key("parallel.pp", "pipeline-parallel stages", &C::parallel, &ParallelSection::pp, at_least(1)),
      make_key("parallel.cp", "context-parallel size", &C::parallel, &ParallelSection::cp, at_least(1)),
      make_key("parallel.ep", "expert-parallel size: the experts split over ep of the dp x cp ranks (divides dp x cp)", &C::parallel,
               &ParallelSection::ep, at_least(1)),
      make_key("parallel.zero", "ZeRO stage 0|1|2|3 over the DP group", &C::parallel, &ParallelSection::zero, between(0, 3)),
      make_key("parallel.sp", "sequence parallel (needs tp > 1)", &C::parallel, &ParallelSection::sp),
      make_key("parallel.schedule", "pipeline schedule", &C::parallel, &ParallelSection::schedule,
               {"gpipe", "1f1b", "interleaved"}),
      make_key("parallel.microbatches", "micro-batches per step per DP rank (0: global_batch/(micro_batch*dp))",
               &C::parallel, &ParallelSection::microbatches, at_least(1, "from the batch sizes")),
      make_key("parallel.virtual_stages", "model chunks per pipeline rank (interleaved)", &C::parallel,
               &ParallelSection::virtual_stages, at_least(1)),
      make_key("parallel.pp_layers", "blocks per pipeline stage, e.g. [3, 5] (empty: balanced; interleaved: one entry per virtual stage, pp x virtual_stages)", &C::parallel,
               &ParallelSection::pp_layers, at_least(1)),
      make_key("parallel.bucket_mb", "DP gradient bucket cap in MiB (0: a quarter of the model, at most 25 MiB)", &C::parallel, &ParallelSection::bucket_mb, above(0, "automatic")),
      make_key("parallel.dp_progress", "who progresses DP collectives during compute: thread | poll | none",
               &C::parallel, &ParallelSection::dp_progress, {"thread", "poll", "none"}),
      make_key("data.path", "folder with train_*.h5 / val_*.h5 shards (mpitron prep)", &C::data, &DataSection::path),
      blend_key(),
      make_key("data.seed", "sampler shuffle seed", &C::data, &DataSection::seed, at_least(0)),
      make_key("data.prefetch", "batches the loader thread keeps ready", &C::data, &DataSection::prefetch, at_least(1, "no loader thread: read when needed")),
      make_key("data.drop_last", "drop the tail that does not fill every DP rank (else pad)", &C::data,
               &DataSection::drop_last),
      make_key("data.document_mask", "attention only within each document of a window, positions restarting per document",
               &C::data, &DataSection::document_mask),
      make_key("train.steps", "optimizer steps", &C::train, &TrainSection::steps, at_least(1)),
      make_key("train.micro_batch", "sequences per micro-batch per rank", &C::train, &TrainSection::micro_batch, at_least(1)),
      make_key("train.global_batch", "sequences per optimizer step, all ranks (0: micro_batch*dp)", &C::train,
               &TrainSection::global_batch, at_least(1, "micro_batch*dp")),
      make_key("train.seed", "model initialisation seed", &C::train, &TrainSection::seed, at_least(0)),
      make_key("train.recompute", "activation recompute", &C::train, &TrainSection::recompute, {"none", "full"}),
      make_key("train.backend", "compute + communication backend", &C::train, &TrainSection::backend,
               {"cpu", "nccl"}),
      make_key("train.peak_flops", "peak FLOP/s per rank for MFU (0: the hardware peak of this rank's cores, or the start-up GEMM probe where faster; GPU: datasheet)", &C::train,
               &TrainSection::peak_flops, above(0, "measured")),
      make_key("train.threads", "OpenMP threads per rank (0: cores per node / ranks per node)", &C::train,
               &TrainSection::threads, at_least(1, "cores per node / ranks per node")),
      make_key("train.resume", "auto (continue from ckpt/latest) | never | a checkpoint path", &C::train,
               &TrainSection::resume),
      make_key("train.init_from",
               "a fresh run's initial weights: a checkpoint (its parameters; optimizer and step start anew) or hf:DIR "
               "(a Hugging Face folder, whose config.json sets the model); not used when the run resumes",
               &C::train, &TrainSection::init_from),
      make_key("train.check_ledger", "compare tracked memory with `mpitron plan` at start and after step 1",
               &C::train, &TrainSection::check_ledger),
      make_key("train.elastic",
               "restart on the ranks there are: dp = world / (tp x cp x pp) whatever parallel.dp says, tp, cp, pp and "
               "ep kept, train.global_batch (required) kept by accumulation, the change logged; slurm/train.sbatch "
               "with MPITRON_ELASTIC=1 sets it and requeues a failed job too (docs/slurm.md)",
               &C::train, &TrainSection::elastic),
      make_key("train.reproducible",
               "the same losses, grad norms and weights, bit for bit, at any dp, ZeRO stage and split of the global "
               "batch into micro-batches x accumulation x dp (fixed micro_batch and threads): gradients summed exactly "
               "in fixed point, micro-batches drawn per micro-batch (docs/reproducible.md); the GPU: with model.attention = "
               "naive",
               &C::train, &TrainSection::reproducible),
      make_key("train.profile",
               "a machine profile for the step-time prediction: a file from `mpitron calibrate`, or h100 | h200 | a100 "
               "(datasheet figures)",
               &C::train, &TrainSection::profile),
      make_key("train.check_prediction",
               "print each of the first steps' measured time beside `mpitron plan --predict`'s for this job on train.profile, "
               "and the median's error at the end",
               &C::train, &TrainSection::check_prediction),
      make_key("train.nan_policy", "on a NaN/Inf loss or grad norm", &C::train, &TrainSection::nan_policy,
               {"stop", "skip"}),
      make_key("train.nan_skip_limit",
               "nan_policy = skip: this many non-finite steps in a row stop the run with an error (it is not recovering)",
               &C::train, &TrainSection::nan_skip_limit, at_least(1)),
      make_key("train.precision",
               "CPU backend GEMMs: fp32 | bf16 (inputs rounded to bf16, fp32 accumulation, as on the GPU) | auto (bf16 when "
               "its start-up probe is >= 1.3x fp32's) | fp8 (the blocks' linear layers in FP8 with current scaling, "
               "E4M3 weights and activations, E5M2 gradients; on the CPU emulated, the codes through the bf16 GEMMs; "
               "docs/fp8.md); the GPU backend: bf16, or fp8 (cuBLASLt's FP8 GEMMs, compute capability >= 8.9)",
               &C::train, &TrainSection::precision, {"auto", "fp32", "bf16", "fp8"}),
      make_key("train.trace_steps",
               "[first, last]: write a Chrome / Perfetto timeline of those steps per rank to <run_dir>/trace/rank_<r>.json (empty: off)",
               &C::train, &TrainSection::trace_steps, at_least(1)),
      make_key("train.dump_params",
               "after the last step, write every parameter at full logical shape to this HDF5 file (rank 0)",
               &C::train, &TrainSection::dump_params),
      make_key("optim.lr", "peak learning rate", &C::optim, &OptimSection::lr, at_least(0)),
      make_key("optim.min_lr", "floor of the cosine decay", &C::optim, &OptimSection::min_lr, at_least(0)),
      make_key("optim.warmup_steps", "linear warmup steps", &C::optim, &OptimSection::warmup_steps, at_least(0)),
      make_key("optim.weight_decay", "AdamW decoupled weight decay (2-D weights only)", &C::optim,
               &OptimSection::weight_decay, at_least(0)),
      make_key("optim.beta1", "Adam beta1", &C::optim, &OptimSection::beta1, between(0, 1, true)),
      make_key("optim.beta2", "Adam beta2", &C::optim, &OptimSection::beta2, between(0, 1, true)),
      make_key("optim.eps", "Adam epsilon", &C::optim, &OptimSection::eps, above(0)),
      make_key("optim.grad_clip", "global grad-norm clip (0: off)", &C::optim, &OptimSection::grad_clip, above(0, "off")),
      make_key("checkpoint.every", "save every N steps (0: only at the end)", &C::checkpoint,
               &CheckpointSection::every, at_least(1, "only at the end")),
      make_key("checkpoint.keep", "complete checkpoints to keep", &C::checkpoint, &CheckpointSection::keep, at_least(1, "keep all")),
      make_key("checkpoint.timeout_s",
               "seconds a checkpoint save or load may take before the hang watchdog aborts the job",
               &C::checkpoint, &CheckpointSection::timeout_s, above(0, "comm.timeout_s")),
      make_key("checkpoint.async",
               "periodic saves copy the state into a host snapshot and a background thread writes the file while "
               "training goes on (the last step's and a preemption's save wait for it and write in the foreground)",
               &C::checkpoint, &CheckpointSection::async),
      make_key("log.every", "print and record metrics every N steps", &C::log, &LogSection::every, at_least(1)),
      make_key("eval.every", "validation loss every N steps (0: only at the end)", &C::eval, &EvalSection::every, at_least(1, "only at the end")),
      make_key("eval.batches", "validation batches (of train.global_batch sequences) per evaluation (0: no validation)", &C::eval, &EvalSection::batches, at_least(1, "no validation")),
      make_key("comm.timeout_s", "seconds a collective or point-to-point operation may wait before the hang watchdog names it and the ranks that did not arrive, and aborts the job (every backend; 0: off)", &C::comm, &CommSection::timeout_s, above(0, "off")),
  };
  return keys;
}

const Key* find_key(const std::string& name) {
  for (const auto& k : registry())
    if (k.name == name) return &k;
  return nullptr;
}

std::string section_of(const std::string& dotted) { return dotted.substr(0, dotted.find('.')); }

[[noreturn]] void unknown_key(const std::string& name, const std::string& where) {
  std::string sec = section_of(name);
  std::vector<std::string> allowed;
  for (const auto& k : registry())
    if (section_of(k.name) == sec) allowed.push_back(k.name);
  if (allowed.empty()) {
    std::vector<std::string> sections;
    for (const auto& k : registry())
      if (sections.empty() || sections.back() != section_of(k.name)) sections.push_back(section_of(k.name));
    sections.push_back("env");
    usage_fail("unknown job key '{}'{}: no section [{}] (allowed sections: {})", name, where, sec,
               fmt::join(sections, ", "));
  }
  usage_fail("unknown job key '{}'{} (allowed in [{}]: {})", name, where, sec, fmt::join(allowed, ", "));
}

std::string toml_value_text(const toml::node& n, const std::string& key, const std::string& path) {
  if (auto s = n.as_string()) return quote(s->get());
  if (auto i = n.as_integer()) return std::to_string(i->get());
  if (auto f = n.as_floating_point()) return fmt::format("{}", f->get());
  if (auto b = n.as_boolean()) return b->get() ? "true" : "false";
  if (auto a = n.as_array()) {
    std::vector<std::string> items;
    for (const auto& e : *a) items.push_back(toml_value_text(e, key, path));
    return "[" + fmt::format("{}", fmt::join(items, ",")) + "]";
  }
  if (auto t = n.as_table()) {  // an inline table inside an array (data.paths)
    std::vector<std::string> items;
    for (const auto& [k, v] : *t) items.push_back(toml_key(std::string(k.str())) + " = " + toml_value_text(v, key, path));
    return "{ " + fmt::format("{}", fmt::join(items, ", ")) + " }";
  }
  usage_fail("{}: key '{}' has an unsupported TOML type", path, key);
}

}  // namespace

void set_job_key(JobConfig& cfg, const std::string& dotted_key, const std::string& value) {
  if (dotted_key == "env_override" || dotted_key == "env.env_override") {
    cfg.env_override = parse_bool(dotted_key, value);
    return;
  }
  if (dotted_key.rfind("env.", 0) == 0) {
    std::string name = dotted_key.substr(4), v = unquote(value);
    check_text(dotted_key, name);
    check_text(dotted_key, v);
    cfg.env[name] = v;
    return;
  }
  const Key* k = find_key(dotted_key);
  if (!k) unknown_key(dotted_key, "");
  k->set(cfg, value);
}

void load_job_file(JobConfig& cfg, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  usage_check(static_cast<bool>(in), "cannot read job file '{}'", path);
  std::stringstream ss;
  ss << in.rdbuf();
  usage_check(!in.bad(), "cannot read job file '{}'", path);
  const std::string text = ss.str();
  const toml::table tbl = parse_toml(text, path);
  for (const auto& [sec_key, node] : tbl) {
    std::string sec(sec_key.str());
    if (sec == "env_override") {
      set_job_key(cfg, sec, toml_value_text(node, sec, path));
      continue;
    }
    const toml::table* t = node.as_table();
    if (!t) usage_fail("{}: top-level key '{}' must be a [section]", path, sec);
    for (const auto& [k, v] : *t) {
      std::string dotted = sec + "." + std::string(k.str());
      if (sec == "env") {
        if (std::string(k.str()) == "env_override") set_job_key(cfg, dotted, toml_value_text(v, dotted, path));
        else if (auto s = v.as_string()) cfg.env[std::string(k.str())] = s->get();
        else cfg.env[std::string(k.str())] = unquote(toml_value_text(v, dotted, path));
        continue;
      }
      if (const toml::table* sub = v.as_table(); sub && sec == "model" && std::string(k.str()) == "moe") {
        for (const auto& [k2, v2] : *sub) {  // [model.moe]
          const std::string d2 = dotted + "." + std::string(k2.str());
          if (!find_key(d2)) unknown_key(d2, " in " + path);
          set_job_key(cfg, d2, toml_value_text(v2, d2, path));
        }
        continue;
      }
      if (!find_key(dotted)) unknown_key(dotted, " in " + path);
      set_job_key(cfg, dotted, toml_value_text(v, dotted, path));
    }
  }
}

bool is_bool_job_key(const std::string& dotted_key) {
  const Key* k = find_key(dotted_key);
  return k && k->type == "bool";
}

std::string job_to_toml(const JobConfig& cfg) {
  std::string out, cur;
  for (const auto& k : registry()) {
    std::string sec = section_of(k.name);
    if (sec != cur) {
      out += (cur.empty() ? "" : "\n") + fmt::format("[{}]\n", sec);
      cur = sec;
    }
    out += fmt::format("{} = {}\n", k.name.substr(sec.size() + 1), k.get(cfg));
  }
  out += "\n[env]\n";
  if (cfg.env_override) out += "env_override = true\n";
  for (const auto& [k, v] : cfg.env) out += fmt::format("{} = {}\n", toml_key(k), quote(v));
  return out;
}

void check_job_value(const std::string& key, double value) {
  const Key* k = find_key(key);
  check(k && k->range, "internal: check_job_value: '{}' is not a numeric job key", key);
  if (!k->range->allows(value, false))
    out_of_range(key, fmt::format("{}", value), k->range->text(k->type == "int", false));
}

// A Markdown table cell: a '|' (a choice type such as gpipe|1f1b, or in help text) would split it.
static std::string md_cell(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

std::string job_keys_markdown() {
  JobConfig defaults;
  std::string out = "| key | type | allowed | default | meaning |\n|---|---|---|---|---|\n";
  for (const auto& k : registry()) {
    std::string allowed = k.range ? k.range->text(k.type != "float", true) : "";
    if (k.range && k.type == "int list") allowed = "each " + allowed;
    out += fmt::format("| `{}` | {} | {} | `{}` | {} |\n", k.name, md_cell(k.type), allowed, md_cell(k.get(defaults)),
                       md_cell(k.help));
  }
  out += "| `env.NAME` | string | | | environment variable set on every rank before NCCL/OpenMP start |\n";
  out += "| `env.env_override` | bool | | `false` | let [env] win over variables already set |\n";
  return out;
}

std::vector<std::string> job_key_names() {
  std::vector<std::string> out;
  for (const auto& k : registry()) out.push_back(k.name);
  return out;
}

}  // namespace mpitron
