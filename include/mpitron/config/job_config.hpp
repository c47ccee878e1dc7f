// The job file: typed sections (docs/jobs.md lists every key). Only config
// (this module: the job file) and cli (the command line, the environment) read outside input;
// every other module takes these structs (or narrower ones).
//
// Every key is registered once in src/config/job_config.cpp with its default and a one-line help;
// the same table drives TOML parsing, `--section.key=value` overrides (cli/job_args.hpp),
// `train --dry-run`, docs/jobs.md and the "unknown key" errors (which list the allowed keys).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace mpitron {

struct JobSection {
  std::string name = "run";
  std::string run_dir;  // empty -> "runs/<name>"
};

struct ModelSection {
  std::string preset = "tiny";
  // 0 means "take it from the preset".
  int n_layer = 0;
  int n_head = 0;
  int d_model = 0;
  int vocab_size = 0;
  int seq_len = 0;
  // The architecture and its LLaMA-only keys ("auto" / 0: from the preset).
  std::string arch = "auto";            // auto | gpt2 | llama
  int n_kv_head = 0;                    // grouped-query attention: key/value heads
  int head_dim = 0;                     // the head size (0: d_model / n_head)
  int d_ff = 0;                         // MLP width (else LLaMA's rule from the two below)
  double ffn_multiplier = 0;            // LLaMA hidden-size rule
  int multiple_of = 0;
  double norm_eps = 0;                  // RMSNorm epsilon
  double rope_theta = 0;                // RoPE base
  // RoPE scaling (model/config.hpp: RopeScaling; "auto" / 0: the preset's, or the type's default).
  std::string rope_scaling = "auto";    // auto | none | llama3 | yarn
  double rope_factor = 0;
  int rope_original_max_pos = 0;
  double rope_low_freq_factor = 0;      // llama3
  double rope_high_freq_factor = 0;
  double rope_beta_fast = 0;            // yarn
  double rope_beta_slow = 0;
  double rope_attention_factor = 0;
  std::string tie_embeddings = "auto";  // auto (gpt2 tied, llama untied) | true | false
  std::string qkv_bias = "auto";        // llama: biases on q, k, v (Qwen2): auto (the preset's) | true | false
  std::string qk_norm = "auto";         // llama: per-head RMSNorm of q and k (Qwen3): auto | true | false
  std::string attention = "cudnn";  // CUDA backend only: "cudnn" | "naive"
  // [model.moe]: mixture-of-experts MLPs (llama only; moe_n_experts 0: dense). "moe.KEY" in the
  // job file's [model] table, or its own [model.moe] table.
  int moe_n_experts = 0;
  int moe_top_k = 2;
  int moe_expert_d_ff = 0;      // 0: model.d_ff
  int moe_n_shared_experts = 0;
  int moe_layer_freq = 1;       // block l is MoE when l % layer_freq == 0
  std::string moe_router = "softmax_topk";  // softmax_topk | topk_softmax
  bool moe_norm_topk_prob = false;          // topk_softmax: renormalise the k probabilities
  double moe_aux_loss_coef = 0.01;
  double moe_z_loss_coef = 0.0;
  double moe_capacity_factor = 0.0;  // 0: dropless
};

struct ParallelSection {
  int dp = 0;  // 0: inferred as world / (tp*pp*cp)
  int tp = 1;
  int pp = 1;
  int cp = 1;
  int ep = 1;  // expert parallel: splits the experts over ep of the dp ranks
  int zero = 0;
  bool sp = false;
  std::string schedule = "1f1b";  // gpipe | 1f1b | interleaved
  int microbatches = 0;           // 0: global_batch / (micro_batch*dp)
  int virtual_stages = 1;
  std::vector<int> pp_layers;  // empty: balanced
  double bucket_mb = 0;  // 0: automatic (grad_bucket_floats)
  std::string dp_progress = "thread";  // thread | poll | none: who drives non-blocking DP collectives
};

// One corpus of a blend: a prep output folder and its weight (normalised over the blend).
struct DataBlendEntry {
  std::string path;
  double weight = 1.0;
  bool operator==(const DataBlendEntry&) const = default;
};

struct DataSection {
  std::string path = "data/demo";
  // Several corpora sampled by weight (replaces path when not empty): TOML
  // [{ path = "data/web", weight = 0.7 }, { path = "data/code", weight = 0.3 }] or Megatron's
  // flat [0.7, "data/web", 0.3, "data/code"].
  std::vector<DataBlendEntry> paths;
  uint64_t seed = 1234;
  int prefetch = 4;  // batches kept ready by the loader thread
  bool drop_last = true;
  bool document_mask = false;  // attention block-causal over the documents of a window (loader.hpp)
};

struct TrainSection {
  int steps = 100;
  int micro_batch = 4;
  int global_batch = 0;  // sequences per optimizer step; 0: micro_batch * dp
  uint64_t seed = 42;
  std::string recompute = "none";  // none | full
  std::string precision = "auto";  // CPU GEMMs: fp32 | bf16 | auto (bf16 when its probe is >= 1.3x fp32's) | fp8
  std::vector<int> trace_steps;    // [first, last]: a Chrome / Perfetto timeline of those steps (core/trace.hpp)
  std::string backend = "cpu";     // cpu | nccl
  double peak_flops = 0;           // 0: measured by a GEMM probe at start-up
  int threads = 0;                 // OpenMP threads per rank; 0: cores per node / ranks per node
  std::string resume = "auto";     // auto | never | <checkpoint path>
  std::string init_from;           // a fresh run's weights: a checkpoint file or hf:DIR ("" = init)
  bool check_ledger = false;
  // A (re)start on another number of ranks keeps tp x cp x pp x ep and the global batch: dp is what
  // the ranks allow, whatever parallel.dp says, the accumulation follows (docs/slurm.md).
  bool elastic = false;
  // Losses, gradient norms and weights the same bits at any dp, ZeRO stage and accumulation
  // (parallel/fixed_point_grads.hpp; docs/reproducible.md). CPU backend.
  bool reproducible = false;
  std::string profile;              // a machine profile (`mpitron calibrate`, or h100 | h200 | a100)
  bool check_prediction = false;    // print predicted vs measured step time (needs profile)
  std::string nan_policy = "stop";  // stop | skip
  int nan_skip_limit = 10;          // skip: consecutive non-finite steps before the run stops
  std::string dump_params;          // after the last step, rank 0 writes full parameters here (HDF5)
};

struct OptimSection {
  double lr = 6e-4;
  double min_lr = 6e-5;
  int warmup_steps = 10;
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double grad_clip = 1.0;  // 0: no clipping
};

struct CheckpointSection {
  int every = 0;  // 0: only at the end
  int keep = 3;
  double timeout_s = 1800;  // a save or load (collective parallel-HDF5 I/O) longer than this is a hang
  bool async = false;       // periodic saves written by a background thread from a host snapshot
};

struct LogSection {
  int every = 1;
};

struct EvalSection {
  int every = 0;  // 0: never during training
  int batches = 4;
};

struct CommSection {
  double timeout_s = 300;
};

struct JobConfig {
  JobSection job;
  ModelSection model;
  ParallelSection parallel;
  DataSection data;
  TrainSection train;
  OptimSection optim;
  CheckpointSection checkpoint;
  LogSection log;
  EvalSection eval;
  CommSection comm;
  // [env]: variables applied before NCCL/OpenMP start. Keys are variable names.
  std::map<std::string, std::string> env;
  bool env_override = false;

  std::string run_dir() const { return job.run_dir.empty() ? "runs/" + job.name : job.run_dir; }
};

// Set one key from its text form ("parallel.tp", "2"). Throws UsageError naming the key and the
// allowed ones (for an unknown key) or the expected type (for a bad value).
void set_job_key(JobConfig& cfg, const std::string& dotted_key, const std::string& value);

// A value resolved after the job's keys were read (a preset's, or one derived from several keys)
// against `key`'s registered range, where 0 means nothing special: UsageError "bad value for
// 'KEY': VALUE (allowed: RANGE)", the same form as a job file's or a flag's bad value.
void check_job_value(const std::string& key, double value);

// Parse a TOML job file into cfg (keys it sets override cfg's current values).
void load_job_file(JobConfig& cfg, const std::string& path);

// True when dotted_key is a registered key of type bool (a command-line `--key` without a value
// means true for those).
bool is_bool_job_key(const std::string& dotted_key);

// The resolved config as TOML text (for --dry-run and for the checkpoint).
std::string job_to_toml(const JobConfig& cfg);

// Markdown table of every key, its type, allowed values, default and help (docs/jobs.md is generated from this).
std::string job_keys_markdown();

// All registered keys, "section.key".
std::vector<std::string> job_key_names();

}  // namespace mpitron
