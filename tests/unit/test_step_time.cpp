// The step-time model (plan/step_time.hpp) and machine profiles (plan/profile.hpp) against
// references nobody tuned: the pipeline bubble against (p-1)/(v*m+p-1), TP traffic against the
// textbook ring all-reduce 2(t-1)/t * S per call, FLOPs per step against 6N + 12LTd per token
// counted from the parameter total, and the profile file's round trip and errors.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "mpitron/core/error.hpp"
#include "mpitron/model/config.hpp"
#include "mpitron/parallel/schedule.hpp"
#include "mpitron/plan/advisor.hpp"
#include "mpitron/plan/ledger.hpp"
#include "mpitron/plan/calibrate.hpp"
#include "mpitron/plan/profile.hpp"
#include "mpitron/plan/step_time.hpp"
#include "../../src/plan/calibrate_timing.hpp"

using namespace mpitron;

namespace {

// A machine where every GEMM runs at `gemm` GFLOP/s, attention at `attn`, elementwise kernels
// at `stream` GB/s, every collective at busbw `bw` GB/s with latency `alpha` s, and no contention.
MachineProfile flat_profile(double gemm = 100, double attn = 50, double stream = 1e6, double bw = 10, double alpha = 0) {
  MachineProfile p;
  p.device = "flat test machine";
  p.cores_per_node = 64;
  p.gemm_m = p.gemm_n = p.gemm_k = {64, 4096};
  p.attn_t = {64, 4096};
  MachineProfile::Rates r;
  r.threads = 1;
  r.gemm_fwd_f32 = r.gemm_bwd_f32 = std::vector<double>(8, gemm);
  r.attn_fwd = r.attn_bwd = {attn, attn};
  r.stream_gbs = stream;
  p.rates = {r};
  p.active = {1, 64};
  p.compute_scale = p.stream_scale = p.overlap_slowdown = {1.0, 1.0};
  for (const char* op : {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "sendrecv", "all_to_all"})
    p.comm.push_back({op, 2, 1, false, alpha, bw});
  return p;
}

PlanInput gpt_input(int dp, int tp, int pp, int micro, int microbatches) {
  PlanInput in;
  in.model = model_preset("gpt2-124m");
  in.model.seq_len = 256;
  in.precision = Precision::fp32;
  in.layout.dp = dp, in.layout.tp = tp, in.layout.pp = pp;
  in.layout.micro_batch = micro;
  in.layout.microbatches = microbatches;
  in.cluster.gpus = dp * tp * pp;
  in.cluster.gpus_per_node = 64;
  return in;
}

// llama-moe-tiny at seq 128 with 4 blocks (every lf-th one MoE, `shared` always-on experts),
// dp ranks of which ep split the experts, micro-batch 2 x 3.
PlanInput moe_input(int dp, int ep, int lf = 1, int shared = 0) {
  PlanInput in;
  in.model = model_preset("llama-moe-tiny");
  in.model.seq_len = 128;
  in.model.n_layer = 4;
  in.model.moe.layer_freq = lf;
  in.model.moe.n_shared = shared;
  in.precision = Precision::fp32;
  in.layout.dp = dp, in.layout.ep = ep;
  in.layout.micro_batch = 2;
  in.layout.microbatches = 3;
  in.cluster.gpus = dp;
  in.cluster.gpus_per_node = 64;
  return in;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(step_time)

BOOST_AUTO_TEST_CASE(simulated_bubble_with_any_durations_matches_theory) {
  // Uneven forward/backward costs (1.3, 2.9) do not change the bubble of uniform stages.
  for (const char* kind : {"gpipe", "1f1b", "interleaved"})
    for (int pp : {2, 4})
      for (int m : {4, 8}) {
        const int v = std::string(kind) == "interleaved" ? 2 : 1;
        const PipelineSchedule s = make_schedule(kind, pp, m, v);
        const PipelineTimeline t = simulate(s, [&](int, const PipeAction& a) { return (a.op == PipeOp::forward ? 1.3 : 2.9) / v; });
        BOOST_TEST(t.bubble() == theoretical_bubble(pp, m, v), boost::test_tools::tolerance(1e-12));
      }
}

BOOST_AUTO_TEST_CASE(p2p_time_delays_the_pipeline_by_its_hops) {
  // GPipe, pp 3, one micro-batch: forward crosses 2 boundaries, backward 2 more.
  const PipelineSchedule s = make_schedule("gpipe", 3, 1);
  const PipelineTimeline t = simulate(s, [](int, const PipeAction& a) { return a.op == PipeOp::forward ? 1.0 : 2.0; }, 0.25);
  BOOST_TEST(t.makespan == 3 * 1.0 + 3 * 2.0 + 4 * 0.25, boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(predicted_bubble_is_the_schedules) {
  // Every stage the same (no head/embedding cost to speak of: elementwise free, vocab tiny), no
  // communication cost: the predicted idle share of the critical rank is (p-1)/(m+p-1).
  PlanInput in = gpt_input(1, 1, 4, 1, 8);
  in.model.vocab_size = 64;
  in.model.n_layer = 8;
  const MachineProfile p = flat_profile(100, 50, 1e12, 1e12, 0);
  const StepPrediction r = predict_step(in, p);
  const double pipeline = r.compute_s + r.bubble_s;
  BOOST_TEST(r.bubble_s / pipeline == theoretical_bubble(4, 8), boost::test_tools::tolerance(0.01));
}

BOOST_AUTO_TEST_CASE(tp_traffic_is_the_ring_all_reduce) {
  // tp 4 without SP: 2 all-reduces of M x d activations per layer forward and 2 backward, each
  // 2(t-1)/t * S / busbw on a ring with no latency; the head's 3 loss all-reduces of M floats too.
  PlanInput in = gpt_input(1, 4, 1, 2, 3);
  const double bw = 7.0;
  const StepPrediction r = predict_step(in, flat_profile(100, 50, 1e6, bw, 0));
  const double M = 2.0 * in.model.seq_len, S = M * in.model.d_model * 4, ring = 2.0 * 3 / 4;
  const double per_mb = in.model.n_layer * 4 * ring * S / (bw * 1e9)     // the layers
                        + 2 * ring * S / (bw * 1e9)                       // the embedding's, forward and backward
                        + 2 * 3 * ring * M * 4 / (bw * 1e9);             // the vocab-parallel loss's
  BOOST_TEST(r.tp_s == 3 * per_mb, boost::test_tools::tolerance(1e-9));
  // With SP the same bytes move as all-gather + reduce-scatter pairs, (t-1)/t * S each.
  in.layout.sp = true;
  const StepPrediction s = predict_step(in, flat_profile(100, 50, 1e6, bw, 0));
  const double sp_layers = 3 * in.model.n_layer * 4 * ring * S / (bw * 1e9);
  BOOST_TEST(s.tp_s >= sp_layers);
  BOOST_TEST(s.tp_s < sp_layers * 1.1);
}

BOOST_AUTO_TEST_CASE(flops_per_step_are_6n_plus_attention) {
  // GPT-2 (tied, learned positions): 6 x (parameters - wpe) + 12 L T d per token. The parameter
  // table's wte has the padded vocabulary's rows, and the head multiplies by all of them.
  PlanInput in = gpt_input(2, 1, 1, 4, 2);
  const Ledger led = compute_ledger(in);
  const ModelConfig& m = in.model;
  const double tokens = double(in.global_batch()) * m.seq_len;
  const double n = static_cast<double>(led.total_params) - double(m.seq_len) * m.d_model;
  BOOST_TEST(step_model_flops(in) == (6 * n + 12.0 * m.n_layer * m.seq_len * m.d_model) * tokens,
             boost::test_tools::tolerance(1e-9));
}

BOOST_AUTO_TEST_CASE(compute_of_a_gemm_bound_step) {
  // Elementwise free, attention counted apart: the compute is (GEMM FLOPs)/rate + attention/rate.
  PlanInput in = gpt_input(1, 1, 1, 1, 1);
  const ModelConfig& m = in.model;
  const double R = 200, A = 80;
  const StepPrediction r = predict_step(in, flat_profile(R, A, 1e15, 10, 0));
  const double T = m.seq_len, d = m.d_model, F = m.d_ff, V = m.padded_vocab();
  const double gemm = 3 * 2 * T * (m.n_layer * (3 * d * d + d * d + 2 * d * F) + V * d);  // fwd + bwd = 3x fwd
  const double attn = 3 * m.n_layer * m.n_head * 4 * T * T * m.head_dim();
  BOOST_TEST(r.compute_s == gemm / (R * 1e9) + attn / (A * 1e9), boost::test_tools::tolerance(1e-6));
}

// train.recompute = "full" adds each block's forward up to the MLP activation (TransformerBlock::
// forward with full = false): every GEMM but the MLP's output projection, and the attention. The
// embedding and the head are not recomputed.
BOOST_AUTO_TEST_CASE(recompute_adds_the_forward_up_to_the_mlp_activation) {
  PlanInput in = gpt_input(1, 1, 1, 1, 1);
  const ModelConfig& m = in.model;
  const double R = 200, A = 80;
  const MachineProfile p = flat_profile(R, A, 1e15, 10, 0);
  const double plain = predict_step(in, p).compute_s;
  in.layout.recompute = true;
  const double rc = predict_step(in, p).compute_s;
  const double T = m.seq_len, d = m.d_model, F = m.d_ff;
  const double gemm = 2 * T * m.n_layer * (3 * d * d + d * d + d * F);  // qkv, attention out, fc
  const double attn = m.n_layer * m.n_head * 4 * T * T * m.head_dim();
  BOOST_TEST(rc - plain == gemm / (R * 1e9) + attn / (A * 1e9), boost::test_tools::tolerance(1e-6));
}

// train.threads: a rank is priced at the rates of the threads the job gives it (the profile's
// rates of that thread count), not at the cores shared out; more threads than the cores' share
// are priced at the share, and the compute line says so.
BOOST_AUTO_TEST_CASE(train_threads_price_the_rates_of_that_thread_count) {
  MachineProfile p = flat_profile(200, 1e9, 1e15, 10, 0);
  p.cores_per_node = 2;
  p.active = {1, 2};
  p.compute_scale = p.stream_scale = p.overlap_slowdown = {1.0, 1.0};
  MachineProfile::Rates one = p.rates[0];
  one.gemm_fwd_f32 = one.gemm_bwd_f32 = std::vector<double>(8, 100);
  p.rates[0].threads = 2;
  p.rates.push_back(one);  // 1 thread: half the GEMM rate
  PlanInput in = gpt_input(1, 1, 1, 1, 1);
  const StepPrediction both = predict_step(in, p);  // 2 cores, 1 rank: 2 threads
  in.cpu_threads = 1;
  const StepPrediction single = predict_step(in, p);
  BOOST_TEST(both.threads == 2);
  BOOST_TEST(single.threads == 1);
  BOOST_TEST(single.compute_s > 1.9 * both.compute_s);  // the GEMMs at half the rate (attention free)
  in.cpu_threads = 4;
  const StepPrediction over = predict_step(in, p);
  BOOST_TEST(over.compute_s == both.compute_s, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(format_prediction(in, p, over).find("train.threads = 4 x 1 rank(s) is more than the 2 cores") != std::string::npos);
}

// The CPU backend's cores compute and copy the collectives' bytes too, so nothing hides behind
// compute: ZeRO-3's all-gathers and reduce-scatters are all exposed there, partly hidden on a GPU
// (the totals alike); the CP ring's hops are all counted (cp 2, no recompute: 1 hop forward, 3
// backward per layer and micro-batch), where a GPU's attention hides them.
BOOST_AUTO_TEST_CASE(cpu_collectives_are_not_hidden) {
  const MachineProfile cpu = flat_profile(100, 50, 1e15, 10, 1e-5);
  MachineProfile gpu = cpu;
  gpu.backend = "nccl";
  PlanInput in = gpt_input(2, 1, 1, 1, 4);
  in.layout.zero = 3;
  const StepPrediction a = predict_step(in, cpu), b = predict_step(in, gpu);
  BOOST_TEST(a.dp_total_s == b.dp_total_s, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(a.dp_s == a.dp_total_s, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(b.dp_s < 0.5 * b.dp_total_s);

  PlanInput c = gpt_input(1, 1, 1, 1, 4);
  c.layout.cp = 2, c.cluster.gpus = 2;
  const ModelConfig& m = c.model;
  const double kv = (m.seq_len / 2.0) * 2 * m.n_kv_head * m.head_dim() * 4;
  const double hop = cpu.collective_s("sendrecv", 2, kv, 2, false);
  BOOST_TEST(predict_step(c, cpu).cp_s == 4 * m.n_layer * 4 * hop, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(predict_step(c, gpu).cp_s == 0.0);
}

// On the CPU ZeRO-3 always has the next unit's gather posted, so the blocks' forward and backward
// run beside the progress thread at the profile's in-flight slowdown: 1.25x adds a quarter of the
// compute to the exposed DP time; ZeRO-1 (one reduction after backward) adds none.
BOOST_AUTO_TEST_CASE(cpu_zero3_computes_at_the_in_flight_slowdown) {
  MachineProfile cpu = flat_profile(100, 50, 1e15, 10, 1e-5);
  cpu.active = {1, 2};
  cpu.overlap_slowdown = {1.0, 1.25};
  PlanInput in = gpt_input(2, 1, 1, 1, 4);
  in.layout.zero = 3;
  const StepPrediction z3 = predict_step(in, cpu);
  BOOST_TEST(z3.dp_s - z3.dp_total_s == 0.25 * z3.compute_s, boost::test_tools::tolerance(1e-9));
  in.layout.zero = 1;
  const StepPrediction z1 = predict_step(in, cpu);
  BOOST_TEST(z1.dp_s == z1.dp_total_s, boost::test_tools::tolerance(1e-9));
}

// ZeRO-2/3 (DataParallel): every micro-batch each gradient bucket gets fresh zeroed memory (the
// rank's n gradient floats written) and its reduced part, n/dp floats, is added into the shard
// (two read, one written). Three more micro-batches cost three times those bytes at the
// elementwise rate; ZeRO-1 reduces once a step and pays nothing per micro-batch.
BOOST_AUTO_TEST_CASE(zero2_buckets_cost_bytes_every_micro_batch) {
  const double gbs = 10;
  const MachineProfile p = flat_profile(100, 50, gbs, 10, 0);
  auto optimizer = [&](int zero, int microbatches) {
    PlanInput in = gpt_input(2, 1, 1, 1, microbatches);
    in.layout.zero = zero;
    return predict_step(in, p).optimizer_s;
  };
  PlanInput in = gpt_input(2, 1, 1, 1, 1);
  const double n = static_cast<double>(compute_ledger(in).stages[0].local_params);
  const double per_micro_batch = (n * 4 + (n / 2) * 4 * 3) / (gbs * 1e9);
  BOOST_TEST(optimizer(2, 4) - optimizer(2, 1) == 3 * per_micro_batch, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(optimizer(3, 4) - optimizer(3, 1) == 3 * per_micro_batch, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(optimizer(1, 4) == optimizer(1, 1), boost::test_tools::tolerance(1e-12));
}

// The optimizer at calibrate's AdamW and one-pass rates where the profile has them: AdamW 28 B a
// parameter of the shard (its 7 fp32 arrays), the gradient's zeroing and norm 8 B a parameter;
// without them (a datasheet, an older file) 32 + 8 B at the elementwise rate. The file keeps them.
// With more ranks on a node than cores, all of them run it at once: at the node's throughput.
BOOST_AUTO_TEST_CASE(optimizer_at_its_own_rates) {
  MachineProfile p = flat_profile(100, 50, 10, 10, 0);
  PlanInput in = gpt_input(1, 1, 1, 1, 1);
  const double n = static_cast<double>(compute_ledger(in).stages[0].local_params);
  BOOST_TEST(predict_step(in, p).optimizer_s == (n * 32 + n * 8) / 10e9, boost::test_tools::tolerance(1e-9));
  p.rates[0].adamw_gbs = 70, p.rates[0].flat_gbs = 40;
  BOOST_TEST(predict_step(in, p).optimizer_s == n * 28 / 70e9 + n * 8 / 40e9, boost::test_tools::tolerance(1e-9));
  const std::string path = "/tmp/mpitron_test_profile_adamw.toml";
  write_profile(p, path);
  BOOST_TEST(predict_step(in, read_profile(path)).optimizer_s == predict_step(in, p).optimizer_s,
             boost::test_tools::tolerance(1e-6));
  std::remove(path.c_str());
  // 4 ranks of dp on 2 cores, computing at 0.5x alone at 2 ranks and 0.25x at 4: twice the
  // optimizer's time of 2 ranks on 2 cores (its ZeRO-1 shard the same size).
  p.cores_per_node = 2;
  p.active = {1, 2, 4};
  p.compute_scale = p.stream_scale = {1.0, 0.5, 0.25};
  p.overlap_slowdown = {1.0, 1.0, 1.0};
  auto opt = [&](int dp, int zero) {
    PlanInput x = gpt_input(dp, 1, 1, 1, 1);
    x.layout.zero = zero;
    x.cluster.gpus_per_node = 4;
    return predict_step(x, p).optimizer_s;
  };
  BOOST_TEST(opt(4, 0) == 2 * opt(2, 0), boost::test_tools::tolerance(1e-9));
}

// The DP/ZeRO traffic likewise: on the CPU the cores copy it, so 4 ranks on 2 cores take twice
// what 4 ranks on 4 cores do (the collective itself priced alike: every fit measured at 1 active).
BOOST_AUTO_TEST_CASE(cpu_dp_traffic_at_the_node_throughput) {
  MachineProfile p = flat_profile(100, 50, 10, 10, 1e-5);
  p.backend = "cpu";
  p.active = {1, 2, 4};
  p.compute_scale = p.stream_scale = {1.0, 0.5, 0.25};
  p.overlap_slowdown = {1.0, 1.0, 1.0};
  PlanInput in = gpt_input(4, 1, 1, 1, 2);
  in.layout.zero = 2;
  in.cluster.gpus_per_node = 4;
  p.cores_per_node = 4;
  const StepPrediction on4 = predict_step(in, p);
  p.cores_per_node = 2;
  const StepPrediction on2 = predict_step(in, p);
  BOOST_TEST(on4.dp_s > 0);
  BOOST_TEST(on2.dp_s == 2 * on4.dp_s, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(on2.optimizer_s == on4.optimizer_s, boost::test_tools::tolerance(1e-9));  // sf x over: 0.25 both
}

// train.precision = "fp8" on the CPU: the casts' bytes of the four linear layers of a step of
// micro-batches of M rows, counted from their shapes: per layer and GEMM (M rows, n out, k in)
// 12 (M k + n k) + 8 M n forward, 12 (M n + n k + M k) + 8 M k + 16 n k backward.
double cpu_fp8_cast_bytes(const ModelConfig& m, double M) {
  const double d = m.d_model, F = m.d_ff;
  double bytes = 0;
  for (auto [n, k] : {std::pair{3 * d, d}, {d, d}, {F, d}, {d, F}})
    bytes += 12 * (M * k + n * k) + 8 * M * n + 12 * (M * n + n * k + M * k) + 8 * M * k + 16 * n * k;
  return m.n_layer * bytes;
}

// train.precision = "fp8" on the CPU adds those bytes at the elementwise rate.
BOOST_AUTO_TEST_CASE(cpu_fp8_casts_at_the_stream_rate) {
  PlanInput in = gpt_input(1, 1, 1, 2, 1);
  const double S = 7;  // GB/s
  const MachineProfile p = flat_profile(100, 50, S, 10, 0);
  const double plain = predict_step(in, p).compute_s;
  in.fp8_linears = true;
  const double fp8 = predict_step(in, p).compute_s;
  BOOST_TEST(fp8 - plain == cpu_fp8_cast_bytes(in.model, 2.0 * in.model.seq_len) / (S * 1e9),
             boost::test_tools::tolerance(1e-9));
}

// Elementwise rates by activation size: log-log between the measured sizes, clamped at the ends;
// a block's kernels (the fp8 casts here, counted as above) at the rate of their activations'
// size, the optimizer's arrays at stream_gbs (larger than the caches); kept through the file.
BOOST_AUTO_TEST_CASE(elementwise_rate_by_activation_size) {
  MachineProfile p = flat_profile(100, 50, 10, 10, 0);
  p.stream_bytes = {1e5, 1e7};
  p.rates[0].stream_gbs_by_size = {40, 10};
  BOOST_TEST(p.stream_gbs(0, 1e5) == 40, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(p.stream_gbs(0, 1e6) == 20, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(p.stream_gbs(0, 1e3) == 40, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(p.stream_gbs(0, 1e9) == 10, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(p.stream_gbs(0, 0) == 10, boost::test_tools::tolerance(1e-9));
  const std::string path = "/tmp/mpitron_test_profile_by_size.toml";
  write_profile(p, path);
  BOOST_TEST(read_profile(path).stream_gbs(0, 1e6) == 20, boost::test_tools::tolerance(1e-6));
  std::string text = profile_to_toml(p);
  const size_t key = text.find("\nstream_gbs_by_size =");  // the key, not the header's comment
  text.erase(key, text.find('\n', key + 1) - key);
  { std::ofstream(path) << text; }
  BOOST_CHECK_EXCEPTION(read_profile(path), UsageError, [](const UsageError& e) {
    return std::string(e.what()).find("stream_gbs_by_size is missing") != std::string::npos;
  });
  std::remove(path.c_str());

  const double S = 7, cached = 21;  // GB/s
  MachineProfile flat = flat_profile(100, 50, S, 10, 0), by_size = flat;
  by_size.stream_bytes = {1, 1e12};
  by_size.rates[0].stream_gbs_by_size = {cached, cached};
  PlanInput in = gpt_input(1, 1, 1, 2, 1);
  const ModelConfig& m = in.model;
  const double plain = predict_step(in, by_size).compute_s;
  in.fp8_linears = true;
  const double fp8 = predict_step(in, by_size).compute_s;
  const double M = 2.0 * m.seq_len, d = m.d_model, F = m.d_ff;
  BOOST_TEST(fp8 - plain == cpu_fp8_cast_bytes(m, M) / (cached * 1e9), boost::test_tools::tolerance(1e-9));
  BOOST_TEST(predict_step(in, by_size).optimizer_s == predict_step(in, flat).optimizer_s, boost::test_tools::tolerance(1e-12));
  // Without fp8, every elementwise byte of the step at the cached rate instead of S, counted here
  // per kernel: a GPT block forward two norms (2 d), two residual adds (3 d), GELU (2 F); backward
  // the norms 4 d, the residuals' gradient adds 3 d, GELU 3 F; the embedding 3 d each way; the
  // head's logits 3 V + 2 d forward, 2 V + 4 d backward.
  in.fp8_linears = false;
  const double V = m.padded_vocab(1);
  const double elementwise = 4 * (m.n_layer * M * ((4 * d + 6 * d + 2 * F) + (8 * d + 6 * d + 3 * F)) + 6 * M * d +
                                  M * (3 * V + 2 * d) + M * (2 * V + 4 * d));
  BOOST_TEST(predict_step(in, flat).compute_s - predict_step(in, by_size).compute_s ==
                 elementwise * (1 / S - 1 / cached) / 1e9,
             boost::test_tools::tolerance(1e-9));
}

// train.precision = "fp8" on a GPU: the four linears' GEMMs at the FP8 rate instead of bf16's, plus
// their casts at the elementwise rate, counted here from the shapes (M rows, n out, k in): 5 B per
// bf16 element cast (amax pass 2, cast 2 + 1), the gradient 6 (its transposed copy too): 5 (M k + n
// k) forward, 6 M n + 5 (n k + M k) backward; the GEMMs' 6 M n k FLOPs at the FP8 rate.
BOOST_AUTO_TEST_CASE(gpu_fp8_linears_at_the_fp8_rate) {
  PlanInput in = gpt_input(1, 1, 1, 2, 1);
  in.precision = Precision::bf16_fp32_grads;
  const ModelConfig& m = in.model;
  const double R = 100, R8 = 300, S = 7;
  MachineProfile p = flat_profile(R, 50, S, 10, 0);
  p.backend = "nccl";
  p.rates[0].gemm_fwd_bf16 = p.rates[0].gemm_bwd_bf16 = p.rates[0].gemm_fwd_f32;
  p.rates[0].gemm_fwd_fp8 = p.rates[0].gemm_bwd_fp8 = std::vector<double>(8, R8);
  const StepPrediction plain = predict_step(in, p);
  in.fp8_linears = true;
  const StepPrediction fp8 = predict_step(in, p);
  const double M = 2.0 * m.seq_len, d = m.d_model, F = m.d_ff;
  double delta = 0;
  for (auto [n, k] : {std::pair{3 * d, d}, {d, d}, {F, d}, {d, F}})
    delta += 6 * M * n * k * (1 / R8 - 1 / R) / 1e9 + (5 * (M * k + n * k) + 6 * M * n + 5 * (n * k + M * k)) / (S * 1e9);
  BOOST_TEST(fp8.compute_s - plain.compute_s == m.n_layer * delta, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(plain.fp8_linears.empty());
  BOOST_REQUIRE(fp8.fp8_linears.size() == 4u);
  BOOST_TEST(fp8.fp8_linears[2].name == "fc");
  // plan --predict says where FP8 loses: on the datasheet H200 a gpt2-124m-sized block at 512 rows
  // loses on every linear, an 8B-sized one at 8192 rows gains on every one.
  const MachineProfile h200 = load_profile("h200");
  const std::string small = format_prediction(in, h200, predict_step(in, h200));
  BOOST_TEST(small.find("fp8 LOSES on qkv, attn out, fc, fc proj") != std::string::npos, small);
  PlanInput big = in;
  big.model = model_preset("llama3-8b");
  big.model.seq_len = 4096, big.layout.micro_batch = 2;
  const StepPrediction b = predict_step(big, h200);
  for (const Fp8LinearCost& c : b.fp8_linears) BOOST_TEST(c.bf16_s / c.fp8_s > 1.3, c.name);
  BOOST_TEST(format_prediction(big, h200, b).find("LOSES") == std::string::npos);
  // A GPU without FP8 tensor cores: refused, naming why.
  BOOST_CHECK_EXCEPTION(predict_step(in, load_profile("a100")), UsageError, [](const UsageError& e) {
    return std::string(e.what()).find("no FP8 tensor cores") != std::string::npos;
  });
}

BOOST_AUTO_TEST_CASE(profile_round_trip_and_errors) {
  const MachineProfile p = flat_profile(123, 45, 67, 8.5, 3e-6);
  const std::string path = "/tmp/mpitron_test_profile.toml";
  write_profile(p, path);
  const MachineProfile q = read_profile(path);
  BOOST_TEST(q.gemm_gflops(100, 200, 300, false, false) == 123, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(q.attention_gflops(128, true) == 45, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(q.stream_gbs() == 67, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(q.collective_s("all_reduce", 4, 1e6, 1, false) == 3e-6 + 1.5 * 1e6 / 8.5e9, boost::test_tools::tolerance(1e-6));
  // A key missing: the error names the file and the key.
  std::string text = profile_to_toml(p);
  text.replace(text.find("\nstream_gbs =") + 1, 10, "stream_gbz");  // the key, not the header's comment
  { std::ofstream(path) << text; }
  try {
    read_profile(path);
    BOOST_FAIL("a profile without stream_gbs was accepted");
  } catch (const Error& e) {
    BOOST_TEST(std::string(e.what()).find("stream_gbs") != std::string::npos);
    BOOST_TEST(std::string(e.what()).find(path) != std::string::npos);
  }
  std::remove(path.c_str());
  BOOST_CHECK_THROW(load_profile("no-such-profile"), UsageError);
  BOOST_CHECK_NO_THROW(load_profile("h100"));
}

// Every value of a profile file is checked where it is read: the message names the file, the
// line, the table and the key, and the error is a usage error (the file is the user's input).
// What `mpitron calibrate` and the datasheet profiles write reads back unchanged.
BOOST_AUTO_TEST_CASE(profile_values_checked_where_read) {
  const std::string path = "/tmp/mpitron_test_profile_values.toml";
  for (const std::string& name : builtin_profile_names()) {
    const MachineProfile p = load_profile(name);
    write_profile(p, path);
    const MachineProfile q = read_profile(path);
    BOOST_TEST(profile_to_toml(q) == profile_to_toml(p), name);
  }
  const std::string good = profile_to_toml(flat_profile(100, 50, 1e6, 10, 0));
  // Replace the first `from` with `to`: the message must name "PATH:LINE:" of the first line
  // holding `line_of` in the changed text, and hold `says`.
  struct Case {
    const char *from, *to, *line_of, *says;
  };
  const Case cases[] = {
      {"stream_gbs = 1e+06", "stream_gbs = inf", "stream_gbs = inf",
       "[[rates]] entry 1: stream_gbs: 'inf' is not allowed (allowed: finite, > 0)"},
      {"cores_per_node = 64", "cores_per_node = -4", "cores_per_node", "[machine] cores_per_node: '-4' is not allowed"},
      {"nodes = 1", "nodes = 1.5", "nodes", "[machine] nodes: '1.5' is not allowed (allowed: an integer"},
      {"seconds = 0.0", "seconds = nan", "seconds", "[machine] seconds: 'nan' is not allowed (allowed: finite, >= 0)"},
      {"op = \"all_reduce\"", "op = \"all_reduse\"", "all_reduse",
       "[[comm]] entry 1: op: 'all_reduse' is not allowed (allowed: all_reduce, all_gather, reduce_scatter, broadcast, "
       "sendrecv, all_to_all)"},
      {"group = 2", "group = 1", "group = 1", "[[comm]] entry 1: group: '1' is not allowed"},
      {"alpha_us = 0", "alpha_us = -1", "alpha_us", "[[comm]] entry 1: alpha_us: '-1' is not allowed (allowed: finite, >= 0)"},
      {"busbw_gbs = 10", "busbw_gbs = \"fast\"", "busbw_gbs", "busbw_gbs: '\"fast\"' is not allowed"},
      {"inter_node = false", "inter_node = 1", "inter_node", "inter_node: '1' is not allowed (allowed: true or false)"},
      {"compute_scale = [1, 1]", "compute_scale = [1, 0]", "compute_scale",
       "[concurrency] compute_scale[1]: '0' is not allowed (allowed: finite, > 0)"},
      {"active = [1, 64]", "active = [64, 1]", "active = [64", "[concurrency] active: must be increasing"},
      {"m = [64, 4096]", "m = [4096, 64]", "m = [4096", "[grid] m: must be increasing"},
      {"attn_fwd = [50, 50]", "attn_fwd = [50]", "attn_fwd", "attn_fwd: has 1 entries, needs 2"},
      {"[concurrency]", "[concurrency]\nactive_ranks = 3", "active_ranks",
       "[concurrency]: unknown key 'active_ranks' (allowed: active, compute_scale, stream_scale, overlap_slowdown)"},
      {"[grid]", "[gird]\nx = 1\n[grid]", "[gird]", "unknown table [gird] (allowed: [machine], [grid], [[rates]]"},
      {"[grid]", "[+grid]", "[+grid]", "TOML error: unexpected character '+'"},
      {"nodes = 1", "nodes = = 1", "nodes", "TOML error"},
      // A quote inside a bare value: toml++ 3.3 reads on through it and had undefined behaviour on
      // the non-ASCII character after it (found by tests/fuzz/fuzz_profile).
      {"nodes = 1", "nodes = 1'\xca\x82'", "nodes", "TOML error: a quote where no string can start"},
  };
  for (const Case& c : cases) {
    std::string text = good;
    BOOST_REQUIRE_MESSAGE(text.find(c.from) != std::string::npos, c.from);
    text.replace(text.find(c.from), std::string(c.from).size(), c.to);
    const size_t line = 1 + std::count(text.begin(), text.begin() + text.find(c.line_of), '\n');
    { std::ofstream(path) << text; }
    try {
      read_profile(path);
      BOOST_ERROR("accepted: " << c.to);
    } catch (const UsageError& e) {
      const std::string m = e.what();
      BOOST_TEST(m.find(fmt::format("{}:{}:", path, line)) != std::string::npos, c.to << " -> " << m);
      BOOST_TEST(m.find(c.says) != std::string::npos, c.to << " -> " << m);
    }
  }
  // The positions of the parser's own errors: the column too.
  std::string text = good;
  text.replace(text.find("[grid]"), 6, "[+grid]");
  { std::ofstream(path) << text; }
  const size_t grid_line = 1 + std::count(text.begin(), text.begin() + text.find("[+grid]"), '\n');
  BOOST_CHECK_EXCEPTION(read_profile(path), UsageError, [&](const UsageError& e) {
    return std::string(e.what()).find(fmt::format("{}:{}:2: TOML error", path, grid_line)) == 0;
  });
  // Whole files: a table of the wrong kind, none at all.
  for (auto [body, says] : {std::pair{"machine = 3\n", "machine must be a table ([machine])"},
                            {"", "[machine] is missing"},
                            {"rates = 3\n[machine]\ndevice = \"x\"\ncores_per_node = 1\nnodes = 1\nranks = 1\nseconds = 0\n"
                             "[grid]\nm = [1]\nn = [1]\nk = [1]\nattn_t = [1]\nattn_hd = 1\n",
                             "rates must be [[rates]] tables"}}) {
    { std::ofstream(path) << body; }
    BOOST_CHECK_EXCEPTION(read_profile(path), UsageError,
                          [&](const UsageError& e) { return std::string(e.what()).find(says) != std::string::npos; });
  }
  std::remove(path.c_str());
}

// calibrate's drift check: a reference GEMM over 10% faster or slower after the compute rates
// than before them is named, with both rates; within 10%, nothing.
BOOST_AUTO_TEST_CASE(calibrate_speed_drift_warning) {
  BOOST_TEST(speed_drift_warning(300, 280, 2).empty());
  BOOST_TEST(speed_drift_warning(300, 325, 2).empty());
  const std::string slow = speed_drift_warning(300, 220, 2);
  BOOST_TEST(slow.find("300.0 GFLOP/s before") != std::string::npos, slow);
  BOOST_TEST(slow.find("220.0 after (-27%)") != std::string::npos, slow);
  BOOST_TEST(slow.find("calibrate again") != std::string::npos, slow);
  BOOST_TEST(!speed_drift_warning(220, 300, 2).empty());
}

// calibrate's passes: each pass's speed is the median over the items of (the item's median over
// all passes / its median in the pass), so one slow item does not move a pass, and a pass 20%
// slower in every item reads 0.8x of the others' 1.0x (the median of all three passes' samples
// being the fast ones'). Passes over 10% apart are named with each pass's speed; within, nothing.
BOOST_AUTO_TEST_CASE(calibrate_pass_drift_warning) {
  // Three items, three passes: pass 1 (the second) 25% longer in every item, except one item's
  // outlier in pass 0 that the median over items outvotes.
  const std::vector<std::vector<std::vector<double>>> seconds = {
      {{1.0, 1.0}, {1.25, 1.25}, {1.0}},
      {{2.0, 2.0}, {2.5}, {2.0}},
      {{9.0}, {3.75}, {3.0}},
      {{1.0}, {}, {1.0}},  // a pass without samples: left out
  };
  const std::vector<double> speeds = relative_pass_speeds(seconds);
  BOOST_TEST_REQUIRE(speeds.size() == 3u);
  BOOST_TEST(speeds[0] == 1.0, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(speeds[1] == 0.8, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(speeds[2] == 1.0, boost::test_tools::tolerance(1e-12));
  const std::string w = pass_drift_warning(speeds, 2);
  BOOST_TEST(w.find("3 passes at 2 thread(s) ran at 1.00x, 0.80x, 1.00x of their median speed (25% apart)") !=
                 std::string::npos,
             w);
  BOOST_TEST(w.find("calibrate again") != std::string::npos, w);
  BOOST_TEST(pass_drift_warning({1.0, 0.92, 1.01}, 1).empty());
  BOOST_TEST(!pass_drift_warning({1.0, 1.12, 1.0}, 1).empty());
  BOOST_TEST(pass_drift_warning({1.0}, 1).empty());
}

BOOST_AUTO_TEST_CASE(gemm_grid_interpolates_in_log_space) {
  MachineProfile p = flat_profile();
  // The rate doubles from m = 64 to m = 4096: at the geometric middle (512) it is sqrt(2)x.
  for (size_t i = 4; i < 8; ++i) p.rates[0].gemm_fwd_f32[i] = 200;
  BOOST_TEST(p.gemm_gflops(64, 64, 64, false, false) == 100, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(p.gemm_gflops(4096, 64, 64, false, false) == 200, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(p.gemm_gflops(512, 64, 64, false, false) == 100 * std::sqrt(2.0), boost::test_tools::tolerance(1e-9));
  BOOST_TEST(p.gemm_gflops(1e6, 64, 64, false, false) == 200, boost::test_tools::tolerance(1e-9));  // clamped
}

BOOST_AUTO_TEST_CASE(moe_compute_counts_the_active_experts) {
  // GEMM-bound, elementwise free: per token the router GEMM, its top_k experts' SwiGLU GEMMs and
  // the shared experts' in MoE blocks, the dense SwiGLU in the others (3 x 2 x params FLOPs
  // forward + backward). Expert parallel spreads the same copies over the ranks' fewer experts
  // (balanced): the same FLOPs per rank.
  for (int lf : {1, 2})
    for (int shared : {0, 1})
      for (int ep : {1, 2}) {
        const PlanInput in = moe_input(2, ep, lf, shared);
        const ModelConfig& m = in.model;
        const double R = 200, A = 80;
        const StepPrediction r = predict_step(in, flat_profile(R, A, 1e15, 1e15, 0));
        const double T = m.seq_len, d = m.d_model, hd = m.head_dim(), tokens = 2 * 3 * T;
        double per_token = double(m.padded_vocab()) * d;  // the head
        for (int l = 0; l < m.n_layer; ++l) {
          per_token += (m.n_head + 2.0 * m.n_kv_head) * hd * d + m.n_head * hd * d;
          per_token += m.moe.is_moe_layer(l) ? d * m.moe.n_experts + 3.0 * d * m.moe.d_ff * (m.moe.top_k + shared)
                                             : 3.0 * d * m.d_ff;
        }
        const double gemm = 3 * 2 * tokens * per_token;
        const double attn = 3 * m.n_layer * m.n_head * 4 * T * T * hd * 2 * 3;
        BOOST_TEST(r.compute_s == gemm / (R * 1e9) + attn / (A * 1e9), boost::test_tools::tolerance(1e-6));
        BOOST_TEST(r.ep_s < 1e-12);  // collectives at 1e15 GB/s
      }
}

BOOST_AUTO_TEST_CASE(ep_all_to_all_per_moe_block) {
  // Per MoE block and micro-batch: the counts' all-gather (E floats from each rank) and 4
  // all-to-alls (dispatch + combine, forward and backward; 6 with recompute) of the rank's
  // M x top_k routed rows of d floats, (ep-1)/ep of each leaving the rank; busbw bw, no latency.
  const double bw = 3.0;
  for (int lf : {1, 2})
    for (int rc : {0, 1}) {
      PlanInput in = moe_input(4, 4, lf);
      in.layout.recompute = rc;
      const StepPrediction r = predict_step(in, flat_profile(100, 50, 1e6, bw, 0));
      const ModelConfig& m = in.model;
      int blocks = 0;
      for (int l = 0; l < m.n_layer; ++l) blocks += m.moe.is_moe_layer(l);
      BOOST_TEST(blocks == (lf == 1 ? 4 : 2));
      const double rows = 2.0 * m.seq_len * m.moe.top_k * m.d_model * 4, f = 3.0 / 4;
      const double a2a = f * rows / (bw * 1e9), counts = f * 4 * m.moe.n_experts * 4 / (bw * 1e9);
      const double n_a2a = rc ? 6 : 4, n_counts = rc ? 2 : 1;
      BOOST_TEST(r.ep_s == blocks * 3 * (n_a2a * a2a + n_counts * counts), boost::test_tools::tolerance(1e-9));
      BOOST_TEST(r.ep_bytes == blocks * 3 * n_a2a * f * rows, boost::test_tools::tolerance(1e-12));
      BOOST_TEST(format_prediction(in, flat_profile(), r).find("EP all-to-all") != std::string::npos);
      in.layout.ep = 1;
      BOOST_TEST(predict_step(in, flat_profile(100, 50, 1e6, bw, 0)).ep_s == 0);
    }
}

BOOST_AUTO_TEST_CASE(advisor_searches_expert_parallel) {
  // A MoE model on 4 ranks: layouts with ep 2 and 4 are tried (ep divides dp x cp and the
  // experts), ranked with their all-to-all; the emitted job keeps ep and the experts. A dense
  // model never gets ep.
  PlanInput in = moe_input(4, 1);
  in.model.seq_len = 64;
  in.layout.microbatches = 1;
  const MachineProfile prof = flat_profile(100, 50, 1e6, 3, 1e-6);
  const Advice a = advise(in, &prof);
  std::vector<int> eps;
  for (const Candidate& c : a.ranked) {
    const PlanLayout& l = c.in.layout;
    BOOST_TEST((l.dp * l.cp % l.ep == 0 && in.model.moe.n_experts % l.ep == 0));
    if (l.ep > 1) BOOST_TEST((c.pred.ep_s > 0 && c.pred.ep_bytes > 0 && c.est.ep_bytes > 0));
    if (std::find(eps.begin(), eps.end(), l.ep) == eps.end()) eps.push_back(l.ep);
  }
  std::sort(eps.begin(), eps.end());
  BOOST_TEST(eps == std::vector<int>({1, 2, 4}), boost::test_tools::per_element());
  const auto ep4 = std::find_if(a.ranked.begin(), a.ranked.end(), [](const Candidate& c) { return c.in.layout.ep == 4; });
  const std::string job = layout_job_toml(ep4->in);
  BOOST_TEST(job.find("ep = 4") != std::string::npos);
  BOOST_TEST(job.find("[model.moe]\nn_experts = 4\ntop_k = 2\nexpert_d_ff = 96") != std::string::npos);
  PlanInput dense = gpt_input(4, 1, 1, 1, 1);
  dense.model.seq_len = 64;
  for (const Candidate& c : advise(dense, &prof).ranked) BOOST_TEST(c.in.layout.ep == 1);
  try {
    in.layout.ep = 3;
    predict_step(in, prof);
    BOOST_FAIL("no error");
  } catch (const UsageError& e) {
    BOOST_TEST(std::string(e.what()).find("parallel.ep = 3 must divide the data x context parallel ranks dp x cp = 4 x 1") !=
               std::string::npos);  // train's message: the grid's rule comes first
  }
}

BOOST_AUTO_TEST_SUITE_END()

// calibrate's throughput timer (calibrate_timing.hpp), on calls that sleep for set durations: the
// slow calls count (a time-sliced rank's), and the call still running when the window ends does
// not.
BOOST_AUTO_TEST_SUITE(calibrate_window)

namespace {
double window_of(const std::vector<int>& ms, double window, size_t& calls) {
  calls = 0;
  return mpitron::calib::window_time(
      [&] { std::this_thread::sleep_for(std::chrono::milliseconds(ms[calls++ % ms.size()])); }, window);
}
}  // namespace

BOOST_AUTO_TEST_CASE(slow_calls_count_in_the_rate) {
  // Three 1 ms calls and a 20 ms one, over and over: 5.75 ms a call (a median would read ~1).
  size_t calls = 0;
  const double t = window_of({1, 1, 1, 20}, 0.1, calls);
  BOOST_TEST(t > 0.0045, "seconds per call " << t << " over " << calls << " calls");
  BOOST_TEST(t < 0.02);
}

BOOST_AUTO_TEST_CASE(alternating_rounds_cancel_a_drift) {
  // The machine slows 10% a round; together runs at 0.8x the rate alone at the same moment
  // (rounds at the half steps between the alone ones): every ratio reads 0.8, where alone before
  // each round alone would read 0.8 / 1.05 = 0.76.
  std::vector<double> alone, together;
  for (int i = 0; i < 5; ++i) alone.push_back(1.0 + 0.1 * i);
  for (int i = 0; i < 4; ++i) together.push_back((1.05 + 0.1 * i) / 0.8);
  const std::vector<double> r = mpitron::calib::alternating_ratios(alone, together);
  BOOST_TEST(r.size() == 4u);
  for (double x : r) BOOST_TEST(x == 0.8, boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(the_call_past_the_window_is_left_out) {
  // Calls end at 5, 10, 15 and 215 ms: three in the 50 ms window, 5 ms each (with the fourth,
  // 54 ms each).
  size_t calls = 0;
  const double t = window_of({5, 5, 5, 200}, 0.05, calls);
  BOOST_TEST(calls == 4u);
  BOOST_TEST(t > 0.0049);
  BOOST_TEST(t < 0.02, "seconds per call " << t);
  // A first call longer than the window is the one measured.
  BOOST_TEST(window_of({30}, 0.001, calls) > 0.029);
  BOOST_TEST(calls == 1u);
}

BOOST_AUTO_TEST_SUITE_END()
