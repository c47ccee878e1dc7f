// The memory ledger and the advisor (src/plan): the seed's worked example, DeepSpeed's ZeRO
// formulas (arXiv:1910.02054 table 1: stage 1 = 2P + 2P + 12P/N, stage 2 = 2P + (2P+12P)/N,
// stage 3 = 16P/N), the ledger against what the model and optimizer really allocate, the
// advisor's choices and the error messages for bad inputs.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>

#include "mpitron/config/job_config.hpp"
#include "mpitron/core/error.hpp"
#include "mpitron/core/memory.hpp"
#include "mpitron/model/config.hpp"
#include "mpitron/model/gpu_activations.hpp"
#include "mpitron/model/param_tables.hpp"
#include "mpitron/model/transformer_model.hpp"
#include "mpitron/ops/ops.hpp"
#include "mpitron/parallel/adamw.hpp"
#include "mpitron/plan/advisor.hpp"
#include "mpitron/plan/ledger.hpp"

using namespace mpitron;

namespace {

PlanInput input(const std::string& preset, int gpus, int dp, int tp = 1, int pp = 1, int zero = 0) {
  PlanInput in;
  in.model = model_preset(preset);
  in.layout.dp = dp;
  in.layout.tp = tp;
  in.layout.pp = pp;
  in.layout.zero = zero;
  in.layout.microbatches = pp > 1 ? 4 * pp : 1;
  in.cluster.gpus = gpus;
  return in;
}

bool message_has(const UsageError& e, const std::string& what) {
  return std::string(e.what()).find(what) != std::string::npos;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(plan_ledger)

BOOST_AUTO_TEST_CASE(seed_worked_example_7b) {
  // 16 bytes per parameter in bf16 mixed precision with Adam: 7B -> 112 GB before activations.
  BOOST_TEST(static_bytes_per_param(Precision::bf16) == 16);
  BOOST_TEST(static_bytes_per_param(Precision::fp32) == 16);
  BOOST_TEST(7e9 * static_bytes_per_param(Precision::bf16) == 112e9);
  // The real LLaMA-2 7B: 6,738,415,616 parameters (Hugging Face's count), all on one GPU.
  PlanInput in = input("llama2-7b", 1, 1);
  in.model.seq_len = 2048;
  Ledger led = compute_ledger(in);
  BOOST_TEST(led.total_params == 6738415616LL);
  const RankLedger& r = led.stages.at(0);
  BOOST_TEST(r.params == 2 * r.local_params);
  BOOST_TEST(r.grads == 2 * r.local_params);
  BOOST_TEST(r.optim_master == 4 * r.local_params);
  BOOST_TEST(r.optim_moments == 8 * r.local_params);
  BOOST_TEST(r.params + r.grads + r.optim() == 16 * r.local_params);
  BOOST_TEST(r.local_params - led.total_params < 16 * 1000);  // only the 16-element rounding per tensor
  {  // What mpitron's GPU trainer allocates: bf16 copy + fp32 master (params), fp32 grads, m + v.
    PlanInput g = in;
    g.precision = Precision::bf16_fp32_grads;
    const RankLedger q = compute_ledger(g).stages.at(0);
    BOOST_TEST(static_bytes_per_param(Precision::bf16_fp32_grads) == 18);
    BOOST_TEST(q.params == 6 * q.local_params);
    BOOST_TEST(q.grads == 4 * q.local_params);
    BOOST_TEST(q.optim_master == 0);
    BOOST_TEST(q.params + q.grads + q.optim() == 18 * q.local_params);
    BOOST_TEST(q.activations == r.activations);  // the same bf16 activations
  }
  // Its activations at seq 2048, micro-batch 1: Korthikanti's s*b*h*(34 + 5*a*s/h) bytes per layer.
  BOOST_TEST(r.korthikanti_per_layer == 2048.0 * 4096 * (34 + 5.0 * 32 * 2048 / 4096));
  BOOST_TEST(r.korthikanti_per_layer == 956301312.0);
  BOOST_TEST(32 * r.korthikanti_per_layer / 1e9 == 30.6, boost::test_tools::tolerance(0.01));
  // mpitron's own count keeps no s*s softmax (fused attention): below the estimate, above its
  // 34*s*b*h non-attention part's 3/4.
  BOOST_TEST(r.act_per_layer < r.korthikanti_per_layer);
  BOOST_TEST(r.act_per_layer > 0.75 * 34 * 2048 * 4096);
}

// The LLaMA parameter table (model/param_tables.hpp), which the ledger counts: the published
// sizes, the TP split by whole heads, the tied variant.
BOOST_AUTO_TEST_CASE(llama_param_table_sizes) {
  auto total = [](const ModelConfig& c) {
    ModelShard all;
    int64_t n = 0;
    for (const auto& p : llama_param_table(c, all)) n += static_cast<int64_t>(p.numel);
    return n;
  };
  BOOST_TEST(total(model_preset("llama2-7b")) == 6738415616LL);   // Hugging Face's counts
  BOOST_TEST(total(model_preset("llama3-8b")) == 8030261248LL);
  BOOST_TEST(total(model_preset("llama3-70b")) == 70553706496LL);
  // tp 4 of llama3-8b (32 query heads, 8 kv heads): every tensor's slices add up to the full
  // tensor, q/k/v and gate/up adjacent in the flat buffer (one GEMM each).
  ModelConfig c = model_preset("llama3-8b");
  c.n_layer = 2;
  ModelShard whole;
  const auto full = llama_param_table(c, whole);
  std::vector<size_t> sum(full.size(), 0);
  for (int r = 0; r < 4; ++r) {
    ModelShard s;
    s.tp_rank = r, s.tp_size = 4;
    const auto t = llama_param_table(c, s);
    BOOST_REQUIRE(t.size() == full.size());
    for (size_t i = 0; i < t.size(); ++i) sum[i] += t[i].numel;
    for (size_t i = 0; i + 1 < t.size(); ++i) {
      const bool fused = t[i].name.ends_with("q_proj.weight") || t[i].name.ends_with("k_proj.weight") ||
                         t[i].name.ends_with("gate_proj.weight");
      if (fused) BOOST_TEST(t[i + 1].offset == t[i].offset + t[i].numel);  // no padding between them
    }
  }
  for (size_t i = 0; i < full.size(); ++i)  // the norms are replicated: every rank holds all of them
    BOOST_TEST(sum[i] == (full[i].name.ends_with("norm.weight") ? 4 : 1) * full[i].numel, full[i].name);
  ModelShard tp16;
  tp16.tp_size = 16;  // 8 kv heads cannot be split 16 ways
  BOOST_CHECK_THROW(llama_param_table(c, tp16), UsageError);
  // Untied: lm_head on the last stage only; tied: the last stage holds embed_tokens instead.
  ModelShard last;
  last.has_embedding = false, last.layer_begin = 1;
  auto names = [](const std::vector<ParamInfo>& t) {
    std::vector<std::string> v;
    for (const auto& p : t) v.push_back(p.name);
    return v;
  };
  auto u = names(llama_param_table(c, last));
  BOOST_TEST(u.back() == "lm_head.weight");
  BOOST_TEST(std::count(u.begin(), u.end(), "embed_tokens.weight") == 0);
  c.tied_embeddings = true;
  auto t = names(llama_param_table(c, last));
  BOOST_TEST(t.front() == "embed_tokens.weight");
  BOOST_TEST(std::count(t.begin(), t.end(), "lm_head.weight") == 0);
}

BOOST_AUTO_TEST_CASE(korthikanti_variants) {
  const double sbh = 2048.0 * 4096;
  BOOST_TEST(korthikanti_layer_bytes(2048, 1, 4096, 32, 8, false, false) == sbh * (10 + 24 / 8.0 + 5.0 * 32 * 2048 / (4096 * 8)));
  BOOST_TEST(korthikanti_layer_bytes(2048, 1, 4096, 32, 8, true, false) == sbh * (34 + 5.0 * 32 * 2048 / 4096) / 8);
  BOOST_TEST(korthikanti_layer_bytes(2048, 1, 4096, 32, 1, false, true) == 2 * sbh);
  BOOST_TEST(korthikanti_layer_bytes(2048, 1, 4096, 32, 8, true, true) == 2 * sbh / 8);
}

BOOST_AUTO_TEST_CASE(deepspeed_zero_formulas) {
  const int N = 8;
  for (int stage = 0; stage <= 3; ++stage) {
    RankLedger r = compute_ledger(input("llama2-7b", N, N, 1, 1, stage)).stages.at(0);
    // Shards are 16-element aligned (the trainer's rule, grad_buckets.hpp): rank 0's is P/N
    // rounded up to 16 elements, never more than 16 above it.
    const double P = static_cast<double>(r.local_params);
    auto near = [](double got, double want, double per_elem) { return got >= want && got < want + 16 * per_elem; };
    BOOST_TEST(near(r.optim(), stage >= 1 ? 12 * P / N : 12 * P, 12));
    BOOST_TEST(near(r.grads, stage >= 2 ? 2 * P / N : 2 * P, 2));
    BOOST_TEST(near(r.params, stage >= 3 ? 2 * P / N : 2 * P, 2));
  }
  // Stage 3 in fp32 (the CPU trainer): (4 + 4 + 8) P / N.
  PlanInput in = input("llama2-7b", N, N, 1, 1, 3);
  in.precision = Precision::fp32;
  RankLedger r = compute_ledger(in).stages.at(0);
  BOOST_TEST(r.params + r.grads + r.optim() >= 16 * r.local_params / N);
  BOOST_TEST(r.params + r.grads + r.optim() < 16 * (r.local_params / N + 16));
  // When 16 N divides P the shard is exactly P / N: 12P/N optimizer bytes in mixed precision.
  PlanInput even = input("tiny", 4, 4, 1, 1, 3);
  RankLedger e = compute_ledger(even).stages.at(0);
  BOOST_REQUIRE(e.local_params % 64 == 0);
  BOOST_TEST(e.optim() == 12 * e.local_params / 4);
}

BOOST_AUTO_TEST_CASE(pipeline_stages_and_tp) {
  // 1F1B keeps pp - stage micro-batches on a stage; the first stage holds the embedding, the last
  // the untied head: stage 0 is the heaviest.
  PlanInput in = input("llama3-70b", 64, 2, 8, 4, 1);
  in.layout.sp = true;
  in.layout.recompute = true;
  Ledger led = compute_ledger(in);
  BOOST_TEST(led.stages.size() == 4u);
  BOOST_TEST(led.stages[0].act_in_flight == 4);
  BOOST_TEST(led.stages[3].act_in_flight == 1);
  BOOST_TEST(led.heaviest == 0);
  BOOST_TEST(led.stages[1].params < led.stages[0].params);
  BOOST_TEST(led.stages[1].params == led.stages[2].params);
  // TP shards the layers: 8x fewer parameters per rank than tp 1 (up to replicated norms).
  RankLedger t1 = compute_ledger(input("llama3-70b", 4, 1, 1, 4)).stages[1];
  RankLedger t8 = compute_ledger(input("llama3-70b", 32, 1, 8, 4)).stages[1];
  BOOST_TEST(static_cast<double>(t1.local_params) / t8.local_params == 8.0, boost::test_tools::tolerance(0.001));
}

// The ledger of mpitron's GPT-2 against the tracked allocator: build the model and the optimizer
// for a rank's shard and compare the bytes they allocate (the trainer's check_ledger does this
// at run time over MPI; here one process plays each rank).
BOOST_AUTO_TEST_CASE(gpu_ledger_uses_the_gpu_models_activation_layout) {
  // bf16 plans what TransformerModelCuda allocates (model/gpu_activations.hpp). Per block and
  // micro-batch: bf16 ln1, qkv (3C), attention output, res2, ln2, fc and its GELU (4C each), res3 =
  // 16 C per row; fp32 LayerNorm mean + rstd, twice = 16 B per row; the fused attention's
  // log-sum-exp 4*B*H*T bytes; no [B, H, T, T] matrix. tiny (C 64, H 4, T 64), micro-batch 2: BT =
  // 128 rows, every buffer a multiple of the 256-byte alignment.
  PlanInput in = input("tiny", 1, 1);
  in.precision = Precision::bf16;
  in.layout.micro_batch = 2;
  const RankLedger r = rank_ledger(in, 0);
  const int64_t B = 2, T = 64, BT = B * T, C = 64, H = 4;
  BOOST_TEST(r.act_per_layer == 2 * BT * 16 * C + 16 * BT + 4 * B * H * T);
  BOOST_TEST(r.source.find("plan_gpu_activations") != std::string::npos);
  // The whole model: the plan of one chunk with the trainer's slots and logits chunk.
  BOOST_TEST(r.activations == gpu_activation_bytes(in.model, gpu_act_layout(in.model, r.shard, 2, 1, false,
                                                                            gpu_logits_chunk_rows(in.model, 2))));
}

BOOST_AUTO_TEST_CASE(gpt2_ledger_matches_the_allocator) {
  auto ops = make_cpu_ops();
  struct Case {
    int pp, micro, microbatches;
    bool recompute;
    const char* schedule;
  };
  for (Case c : {Case{1, 2, 1, false, "1f1b"}, Case{1, 3, 2, true, "1f1b"}, Case{2, 2, 4, false, "1f1b"},
                 Case{3, 1, 3, true, "1f1b"}, Case{2, 1, 2, false, "gpipe"}}) {
    PlanInput in = input("tiny", c.pp, 1, 1, c.pp);
    in.model.n_layer = 3;
    in.precision = Precision::fp32;
    in.layout.micro_batch = c.micro;
    in.layout.microbatches = c.microbatches;
    in.layout.recompute = c.recompute;
    in.layout.schedule = c.schedule;
    for (int rank = 0; rank < c.pp; ++rank) {
      RankLedger r = rank_ledger(in, rank);
      const MemStats before = MemTracker::host().stats();
      {
        TransformerModel model(in.model, r.shard, *ops, c.micro, {r.act_in_flight, c.recompute});
        AdamW opt({}, *ops, model.params(), 0, model.num_params());
        const MemStats s = MemTracker::host().stats();
        BOOST_TEST(s.of(Mem::params) - before.of(Mem::params) == r.params);
        BOOST_TEST(s.of(Mem::grads) - before.of(Mem::grads) == r.grads);
        BOOST_TEST(s.of(Mem::optim) - before.of(Mem::optim) == r.optim());
        BOOST_TEST(s.of(Mem::activations) - before.of(Mem::activations) == r.activations);
        BOOST_TEST(model.activation_bytes() + static_cast<int64_t>(r.shard.has_head ? 4 * c.micro * in.model.padded_vocab() : 0) == r.activations);
      }
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()

// The MoE presets against their published sizes: Mixtral 8x7B 46.7B parameters, 12.9B active per
// token (Mistral AI, "Mixtral of Experts", 2024); OLMoE-1B-7B 6.9B, 1.3B active (Muennighoff et al.,
// 2024; its QK-norm weights, 2 x 2048 per layer, are the one part mpitron's LLaMA block lacks).
BOOST_AUTO_TEST_CASE(moe_presets_match_published_sizes) {
  struct Case {
    const char* name;
    double total, active;
  };
  for (const Case& c : {Case{"mixtral-8x7b", 46.7e9, 12.9e9}, Case{"olmoe-1b-7b", 6.9e9, 1.3e9}}) {
    const ModelConfig m = model_preset(c.name);
    int64_t total = 0;
    for (const auto& p : model_param_table(m, ModelShard{})) total += static_cast<int64_t>(p.numel);
    const double active = double(total - moe_inactive_params(m));
    BOOST_TEST_MESSAGE(c.name << ": " << total << " parameters, " << active << " active");
    BOOST_TEST(std::abs(total - c.total) / c.total < 0.005, c.name << " total " << total);
    BOOST_TEST(std::abs(active - c.active) / c.active < 0.02, c.name << " active " << active);
  }
  // 6 x active parameters per token (+ attention) is what the MFU counts, not the total.
  const ModelConfig mix = model_preset("mixtral-8x7b");
  BOOST_TEST(gpt_flops_per_token(mix) < 6 * 14e9 + 12.0 * mix.n_layer * mix.seq_len * mix.d_model);
}

BOOST_AUTO_TEST_SUITE(plan_advisor)

BOOST_AUTO_TEST_CASE(picks_ddp_when_the_model_fits) {
  PlanInput in = input("gpt2-124m", 8, 8);
  Advice a = advise(in);
  const PlanLayout& l = a.ranked.front().in.layout;
  BOOST_TEST(l.dp == 8);
  BOOST_TEST(l.tp == 1);
  BOOST_TEST(l.pp == 1);
  BOOST_TEST(l.zero == 0);
  BOOST_TEST(a.tree.at(0).find("DDP") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(picks_zero_when_the_state_does_not_fit) {
  // 7B: 108 GB of state does not fit one 80 GB GPU; sharded over 8 GPUs it does.
  PlanInput in = input("llama2-7b", 8, 8);
  in.model.seq_len = 2048;
  Advice a = advise(in);
  BOOST_TEST(a.tree.at(1).find("ZeRO") != std::string::npos);
  const PlanLayout& l = a.ranked.front().in.layout;
  BOOST_TEST(l.zero >= 1);
  BOOST_TEST(l.pp == 1);
  for (const auto& c : a.ranked) BOOST_TEST((c.in.layout.zero > 0 || c.in.layout.tp > 1 || c.in.layout.pp > 1));
}

// --emit-job writes a job `train` builds the planned model from: a LLaMA with its own GQA, widths,
// norm epsilon and RoPE (YaRN), and LLaMA 3.1's preset (llama3 scaling), read back through the
// job loader, give the model they were planned for, parameter count and all.
BOOST_AUTO_TEST_CASE(emitted_job_rebuilds_the_planned_model) {
  const std::vector<std::vector<std::pair<std::string, std::string>>> models = {
      {{"model.preset", "llama-tiny"}, {"model.n_kv_head", "2"}, {"model.d_ff", "688"}, {"model.head_dim", "32"},
       {"model.norm_eps", "1e-6"}, {"model.rope_theta", "500000"}, {"model.qk_norm", "true"},
       {"model.rope_scaling", "yarn"}, {"model.rope_factor", "4"}, {"model.rope_original_max_pos", "64"},
       {"model.tie_embeddings", "false"}},
      {{"model.preset", "llama3.1-8b"}}};
  // The job --emit-job writes for `in`, read back through the job loader.
  auto emitted = [](const PlanInput& in) {
    const std::string path = "emitted_job_test.toml";
    std::ofstream(path) << layout_job_toml(in);
    JobConfig back;
    load_job_file(back, path);
    std::remove(path.c_str());
    return back;
  };
  for (const auto& keys : models) {
    JobConfig job;
    for (const auto& [k, v] : keys) set_job_key(job, k, v);
    PlanInput in = input("tiny", 1, 1);
    in.model = resolve_model_config(job.model);
    const ModelConfig a = in.model, b = resolve_model_config(emitted(in).model);
    BOOST_TEST_CONTEXT(keys.front().second) {
      BOOST_TEST((a.arch == b.arch && a.n_layer == b.n_layer && a.n_head == b.n_head && a.d_model == b.d_model));
      BOOST_TEST(a.n_kv_head == b.n_kv_head);
      BOOST_TEST(a.d_ff == b.d_ff);
      BOOST_TEST(a.head_dim() == b.head_dim());
      BOOST_TEST(a.norm_eps == b.norm_eps);
      BOOST_TEST(a.rope_theta == b.rope_theta);
      BOOST_TEST((a.rope_scaling == b.rope_scaling));
      BOOST_TEST((a.tied_embeddings == b.tied_embeddings && a.qkv_bias == b.qkv_bias && a.qk_norm == b.qk_norm));
      PlanInput again = in;
      again.model = b;
      BOOST_TEST(compute_ledger(again).total_params == compute_ledger(in).total_params);
    }
  }
  // The CPU trainer's GEMMs as planned (its default, "auto", would probe): fp32, bf16, fp8.
  for (const char* precision : {"fp32", "bf16", "fp8"}) {
    JobConfig job;
    set_job_key(job, "model.preset", "llama-tiny");
    set_job_key(job, "train.backend", "cpu");
    set_job_key(job, "train.precision", precision);
    const JobConfig back = emitted(plan_input_from_job(job, resolve_model_config(job.model), 1));
    BOOST_TEST(back.train.precision == precision);
    BOOST_TEST(back.train.backend == "cpu");
  }
  // train.threads, priced per thread count (step_time), comes back as planned.
  JobConfig job;
  set_job_key(job, "model.preset", "llama-tiny");
  set_job_key(job, "train.backend", "cpu");
  set_job_key(job, "train.threads", "3");
  const PlanInput threaded = plan_input_from_job(job, resolve_model_config(job.model), 1);
  BOOST_TEST(threaded.cpu_threads == 3);
  BOOST_TEST(emitted(threaded).train.threads == 3);
}

BOOST_AUTO_TEST_CASE(tp_stays_inside_an_8_gpu_node_for_70b) {
  PlanInput in = input("llama3-70b", 64, 64);
  in.model.seq_len = 4096;
  in.cluster.gpus_per_node = 8;
  Advice a = advise(in);
  const PlanLayout& best = a.ranked.front().in.layout;
  BOOST_TEST(best.tp > 1);
  BOOST_TEST(best.tp <= 8);
  for (const auto& c : a.ranked) BOOST_TEST(c.in.layout.tp <= 8);
  const std::string job = layout_job_toml(a.ranked.front().in);
  BOOST_TEST(job.find("preset = \"llama3-70b\"") != std::string::npos);
  BOOST_TEST(job.find("tp = " + std::to_string(best.tp)) != std::string::npos);
  BOOST_TEST(explain_strategies(in).find("all-reduce") != std::string::npos);
}

// Context parallel: per-rank activations fall ~1/cp at a fixed sequence (the model's own sizes:
// fp32 = the CPU model, bf16 = the GPU layout), the ring's traffic is counted, and for a 32k-token
// LLaMA-3 8B on 16 GPUs the advisor splits the sequence.
BOOST_AUTO_TEST_CASE(context_parallel_activations_and_advice) {
  for (Precision p : {Precision::fp32, Precision::bf16}) {
    PlanInput one = input("llama-tiny", 1, 1), four = input("llama-tiny", 4, 1);
    one.model.seq_len = four.model.seq_len = 1024;
    one.precision = four.precision = p;
    four.layout.cp = 4;
    const auto a1 = compute_ledger(one).stages.at(0).activations, a4 = compute_ledger(four).stages.at(0).activations;
    BOOST_TEST_MESSAGE("activations cp 1 " << a1 << " B, cp 4 " << a4 << " B");
    BOOST_TEST(a4 < a1 / 3);
  }
  PlanInput in = input("llama3-8b", 16, 16);
  in.model.seq_len = 32768;
  in.cluster.gpus_per_node = 8;
  Advice a = advise(in);
  const Candidate& best = a.ranked.front();
  BOOST_TEST(best.in.layout.cp > 1);
  BOOST_TEST(best.est.cp_bytes > 0);
  BOOST_TEST(layout_job_toml(best.in).find("cp = " + std::to_string(best.in.layout.cp)) != std::string::npos);
  PlanInput short_seq = input("llama3-8b", 16, 16);
  short_seq.model.seq_len = 4096;  // short sequences never get cp
  for (const auto& c : advise(short_seq).ranked) BOOST_TEST(c.in.layout.cp == 1);
}

BOOST_AUTO_TEST_CASE(bad_inputs_give_clear_errors) {
  try {
    model_preset("llama9-1t");
    BOOST_FAIL("no error");
  } catch (const UsageError& e) {
    BOOST_TEST(message_has(e, "unknown model preset 'llama9-1t'"));
    BOOST_TEST(message_has(e, "llama3-70b"));
  }
  try {
    compute_ledger(input("llama2-7b", 3, 1, 3));
    BOOST_FAIL("no error");
  } catch (const UsageError& e) {
    BOOST_TEST(message_has(e, "model.n_head (32) must be divisible by parallel.tp (3)"));  // train's own words
  }
  try {
    compute_ledger(input("llama2-7b", 8, 4, 4));
    BOOST_FAIL("no error");
  } catch (const UsageError& e) {
    BOOST_TEST(message_has(e, "layout needs 16 GPUs"));
    BOOST_TEST(message_has(e, "only 8 were given"));
  }
  BOOST_CHECK_THROW(parse_precision("fp8"), UsageError);
  PlanInput big = input("llama3-405b", 8, 8);
  BOOST_CHECK_THROW(advise(big), UsageError);  // 405B does not fit 8 x 80 GB
}

BOOST_AUTO_TEST_SUITE_END()
