// `mpitron plan`: planning without an MPI launch. One subcommand, several modes, each implemented
// in its own module; this file only parses options and dispatches:
//   (default)        memory ledger per rank                         (src/plan/ledger.cpp)
//   --advise         decision tree + layout search [--emit-job F]   (src/plan/advisor.cpp)
//   --explain        the five strategies side by side               (src/plan/advisor.cpp)
//   --predict        step time on a machine profile                 (src/plan/step_time.cpp)
//   --schedule KIND  pipeline timeline table (pipeline parallel; dispatched by plan_schedule_mode)
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "mpitron/cli/commands.hpp"
#include "option_values.hpp"
#include "mpitron/cli/job_args.hpp"
#include "mpitron/config/job_config.hpp"
#include "mpitron/core/error.hpp"
#include "mpitron/data/shard.hpp"
#include "mpitron/model/config.hpp"
#include "mpitron/plan/advisor.hpp"
#include "mpitron/parallel/schedule.hpp"
#include "mpitron/plan/ledger.hpp"
#include "mpitron/plan/profile.hpp"
#include "mpitron/plan/step_time.hpp"
#include "mpitron/train/train_data.hpp"

namespace mpitron {
namespace {

constexpr const char* kPlanHelp =
    "usage: mpitron plan [JOB.toml] [options] [--section.key=value ...]\n\n"
    "Plans memory and layout without an MPI launch (well under a second). Default mode: the\n"
    "memory ledger, one row per pipeline stage: parameters, gradients, optimizer state (fp32\n"
    "master weights, Adam moments), activations, communication buffers, workspace, total and\n"
    "headroom vs the GPU memory; the heaviest rank is marked. For GPT-2 and LLaMA alike the numbers\n"
    "come from the functions the models allocate with (exact; `train.check_ledger = true` verifies\n"
    "it at run time, on either backend). Activations per layer are\n"
    "shown beside the Korthikanti et al. 2022 estimate.\n\n"
    "modes:\n"
    "  (none)              the memory ledger of the job / flags\n"
    "  --advise            the decision tree (DDP / ZeRO / TP in a node / PP across nodes / 3D), then\n"
    "                      every layout (dp, tp, pp, cp, ep, zero, sp, recompute, micro-batch) that fits,\n"
    "                      ranked by estimated step time (compute + communication model, see --explain)\n"
    "  --emit-job FILE     with --advise: write the best layout as a job file (with --profile: it also\n"
    "                      sets train.profile and train.check_prediction, so the run checks the model)\n"
    "  --predict           the step time of this layout on --profile: compute, TP, CP, pipeline bubble,\n"
    "                      DP/ZeRO (exposed), MoE all-to-all (ep), optimizer; tokens/s and MFU\n"
    "  --profile P         a machine profile: a file from `mpirun ... mpitron calibrate --out FILE`, or\n"
    "                      h100 | h200 | a100 (datasheet figures, not measured). With --advise, layouts\n"
    "                      are ranked by the predicted step time (every pipeline schedule is tried)\n"
    "  --explain           the five strategies (DP, ZeRO/FSDP, TP, PP, SP/CP) for this model and\n"
    "                      cluster: what each splits, its collective and group, bytes per step\n"
    "  --bytes             print the ledger's cells in bytes (what train.check_ledger compares)\n"
    "  --schedule KIND     pipeline timeline of gpipe | 1f1b | interleaved (with --pp, --microbatches,\n"
    "                      --virtual-stages V): time grid, actions per rank, bubble vs (p-1)/(v*m+p-1)\n\n"
    "model and layout (override the job file; without one the defaults are the job keys'):\n"
    "  --model NAME        preset: tiny, gpt2-124m/350m/774m/1.5b, llama-tiny/small/1b, llama2-7b/13b/70b,\n"
    "                      llama3-8b/70b/405b, llama3.1-8b/70b, llama3.2-1b/3b (RoPE scaled),\n"
    "                      llama-moe-tiny, mixtral-8x7b, olmoe-1b-7b (MoE)\n"
    "  --seq N             sequence length (model.seq_len)\n"
    "  --gpus N            GPUs (ranks) in the job; default tp*pp*dp*cp. dp is inferred from it\n"
    "  --gpus-per-node N   GPUs per node (default 8): TP must stay inside a node\n"
    "  --gpu-mem GB        memory per GPU in GB = 1e9 bytes (default 80)\n"
    "  --tp N --pp N --dp N --cp N   parallel sizes (parallel.*)\n"
    "  --ep N              expert parallel (MoE models): the experts split over ep of the dp x cp ranks\n"
    "  --zero S            ZeRO stage 0..3: 1 shards optimizer state, 2 + gradients, 3 + parameters\n"
    "  --sp                sequence parallelism (needs tp > 1): activations outside attention / tp\n"
    "  --recompute MODE    none | full (a layer keeps only its input; 1/3 more compute)\n"
    "  --micro-batch N     sequences per micro-batch (train.micro_batch; default 1 without a job)\n"
    "  --microbatches N    micro-batches per step and pipeline (default global/(micro*dp), or 4*pp)\n"
    "  --global-batch N    sequences per optimizer step (train.global_batch)\n"
    "  --precision P       bf16 (mixed, as the ZeRO paper counts it: 2+2+12 B/param) | bf16-fp32grads\n"
    "                      (mpitron's GPU trainer: bf16 copy 2 + fp32 master 4 + fp32 grads 4 + m,v 8)\n"
    "                      | fp32 (the CPU trainer: 4+4+8). Default bf16; for a job file, what its\n"
    "                      train.backend allocates (cpu: fp32, plus a bf16 copy of the weights, 2 B/param,\n"
    "                      with train.precision = \"bf16\"; nccl: bf16-fp32grads)\n\n"
    "cost model (--advise, --explain):\n"
    "  --nvlink-gbs X      GB/s per GPU inside a node (default 900)\n"
    "  --ib-gbps X         Gbit/s per GPU across nodes (default 400)\n"
    "  --peak-tflops X     dense TFLOP/s per GPU (default 989, H100 bf16)\n"
    "  --mfu X             fraction of peak reached, 0 < X <= 1 (default 0.5)\n"
    "  --headroom X        fraction of GPU memory --advise leaves free, 0 <= X < 1 (default 0.1:\n"
    "                      CUDA context, allocator fragmentation)\n"
    "  --top N             layouts listed by --advise (default 5)\n\n"
    "examples:\n"
    "  mpitron plan --model llama2-7b --seq 2048 --gpus 1 --gpu-mem 80\n"
    "  mpitron plan --model llama3-70b --gpus 64 --gpus-per-node 8 --gpu-mem 80 --tp 8 --pp 4 --zero 1 \\\n"
    "               --sp --recompute full --micro-batch 1 --seq 8192 --precision bf16\n"
    "  mpitron plan jobs/llama-style-70b.toml --advise --emit-job out.toml\n";

struct PlanArgs {
  std::string job_file, model, precision, recompute, emit_job, schedule, profile;
  int gpus = 0, gpus_per_node = 8, tp = 0, pp = 0, dp = 0, cp = 0, ep = 0, zero = -1, micro = 0, microbatches = 0,
      global = 0, seq = 0, top = 5;
  int virtual_stages = 0;  // --schedule interleaved
  bool sp = false, advise = false, explain = false, bytes = false, predict = false;
  double gpu_mem = 80, nvlink = 900, ib = 400, peak = 989, mfu = 0.5, headroom = 0.1;
};

PlanArgs parse(const std::vector<std::string>& rest) {
  PlanArgs a;
  for (size_t i = 0; i < rest.size(); ++i) {
    const std::string& o = rest[i];
    auto val = [&]() -> const std::string& {
      usage_check(i + 1 < rest.size(), "option {} needs a value (see `mpitron plan --help`)", o);
      return rest[++i];
    };
    if (o == "--model") a.model = val();
    else if (o == "--gpus") a.gpus = option_int(o, val(), 1);
    else if (o == "--gpus-per-node") a.gpus_per_node = option_int(o, val(), 1);
    else if (o == "--gpu-mem") a.gpu_mem = option_float(o, val(), above(0));
    else if (o == "--tp") a.tp = option_int(o, val(), 1);
    else if (o == "--pp") a.pp = option_int(o, val(), 1);
    else if (o == "--dp") a.dp = option_int(o, val(), 1);
    else if (o == "--cp") a.cp = option_int(o, val(), 1);
    else if (o == "--ep") a.ep = option_int(o, val(), 1);
    else if (o == "--zero") a.zero = option_int(o, val(), between(0, 3));
    else if (o == "--sp") a.sp = true;
    else if (o == "--recompute") a.recompute = val();
    else if (o == "--micro-batch") a.micro = option_int(o, val(), 1);
    else if (o == "--microbatches") a.microbatches = option_int(o, val(), 1);
    else if (o == "--global-batch") a.global = option_int(o, val(), 1);
    else if (o == "--seq") a.seq = option_int(o, val(), 1);
    else if (o == "--precision") a.precision = val();
    else if (o == "--advise") a.advise = true;
    else if (o == "--bytes") a.bytes = true;
    else if (o == "--explain") a.explain = true;
    else if (o == "--predict") a.predict = true;
    else if (o == "--profile") a.profile = val();
    else if (o == "--emit-job") a.emit_job = val();
    else if (o == "--schedule") a.schedule = val();
    else if (o == "--virtual-stages") a.virtual_stages = option_int(o, val(), 1);
    else if (o == "--nvlink-gbs") a.nvlink = option_float(o, val(), above(0));
    else if (o == "--ib-gbps") a.ib = option_float(o, val(), above(0));
    else if (o == "--peak-tflops") a.peak = option_float(o, val(), above(0));
    else if (o == "--mfu") a.mfu = option_float(o, val(), above_between(0, 1));
    else if (o == "--headroom") a.headroom = option_float(o, val(), between(0, 1, true));
    else if (o == "--top") a.top = option_int(o, val(), 1);
    else if (!o.empty() && o[0] != '-' && a.job_file.empty()) a.job_file = o;
    else usage_fail("unknown option '{}' for plan (see `mpitron plan --help`)", o);
  }
  usage_check(a.emit_job.empty() || a.advise, "--emit-job needs --advise");
  usage_check(!a.predict || !a.profile.empty(), "--predict needs --profile FILE (from `mpitron calibrate`) or h100 | h200 | a100");
  return a;
}

PlanInput build_input(const PlanArgs& a, const std::vector<std::string>& args) {
  JobConfig job;
  if (!a.job_file.empty()) load_job_file(job, a.job_file);
  else job.train.micro_batch = 1;  // planning a big model: one sequence per micro-batch
  apply_job_overrides(job, args);  // already validated by the first pass
  if (!a.model.empty()) {
    job.model = ModelSection{};
    job.model.preset = a.model;
    job.train.init_from.clear();
  }
  if (a.seq) job.model.seq_len = a.seq;
  if (a.tp) job.parallel.tp = a.tp;
  if (a.pp) job.parallel.pp = a.pp;
  if (a.cp) job.parallel.cp = a.cp;
  if (a.dp) job.parallel.dp = a.dp;
  if (a.ep) job.parallel.ep = a.ep;
  if (a.zero >= 0) job.parallel.zero = a.zero;
  if (a.sp) job.parallel.sp = true;
  if (!a.recompute.empty()) {
    usage_check(a.recompute == "none" || a.recompute == "full", "--recompute expects none or full, not '{}'",
                a.recompute);
    job.train.recompute = a.recompute;
  }
  if (a.micro) job.train.micro_batch = a.micro;
  if (a.microbatches) job.parallel.microbatches = a.microbatches;
  if (a.global) job.train.global_batch = a.global;
  ModelConfig mc = job_model_config(job);  // as train resolves it (an HF folder's config.json with init_from)
  // As the trainer does: without model.vocab_size the data's tokenizer decides the vocabulary.
  const std::string& data_dir = job.data.paths.empty() ? job.data.path : job.data.paths.front().path;  // a blend: one tokenizer
  if (!a.job_file.empty() && a.model.empty() && job.model.vocab_size == 0 && !list_shards(data_dir, "train").empty())
    mc.vocab_size = TokenDataset(data_dir, "train").vocab_size();

  const int mp = job.parallel.tp * job.parallel.pp * job.parallel.cp;
  int gpus = a.gpus;
  if (gpus == 0) gpus = job.parallel.dp > 0 ? job.parallel.dp * mp : mp;
  usage_check(mp <= gpus, "layout needs at least {} GPUs (tp {} x pp {} x cp {}) but only {} were given (--gpus)", mp,
              job.parallel.tp, job.parallel.pp, job.parallel.cp, gpus);
  if (job.parallel.dp == 0) {
    usage_check(gpus % mp == 0, "--gpus {} is not a multiple of tp x pp x cp = {}", gpus, mp);
    job.parallel.dp = gpus / mp;
  }
  // A job file's layout passes exactly the rules `train` checks it with, with their messages
  // (parallel/layout_rules.hpp), before the defaults below fill in what a job left out. Not under
  // --advise: there the job's layout is what is being replaced (its global batch is kept).
  if (!a.job_file.empty() && !a.advise)
    check_layout(mc, layout_request(job, GridShape{job.parallel.tp, job.parallel.cp, job.parallel.dp, job.parallel.pp,
                                                   job.parallel.ep}));
  if (job.parallel.microbatches == 0 && job.train.global_batch == 0 && job.parallel.pp > 1)
    job.parallel.microbatches = 4 * job.parallel.pp;
  PlanInput in = plan_input_from_job(job, mc, gpus);
  in.precision = !a.precision.empty()     ? parse_precision(a.precision)
                 : a.job_file.empty()     ? Precision::bf16
                 : job.train.backend == "cpu" ? Precision::fp32
                                              : Precision::bf16_fp32_grads;
  if (!a.precision.empty()) in.cpu_bf16_gemms = false;
  in.cluster.gpus = gpus;
  in.cluster.gpus_per_node = a.gpus_per_node;
  in.cluster.gpu_mem_gb = a.gpu_mem;
  in.cluster.nvlink_gbs = a.nvlink;
  in.cluster.ib_gbps = a.ib;
  in.cluster.peak_tflops = a.peak;
  in.cluster.mfu = a.mfu;
  in.cluster.headroom = a.headroom;
  return in;
}

}  // namespace

// Mode `--schedule KIND`: the pipeline timeline table (owned by pipeline parallel; it replaces the
// body below with its table, built from parallel/schedule.hpp).
// Forward = 1 time unit, backward = 2 per micro-batch and stage (split over virtual stages).
static int plan_schedule_mode(const std::string& kind, const PlanArgs& a) {
  const int pp = a.pp > 0 ? a.pp : 1, m = a.microbatches > 0 ? a.microbatches : 4 * pp;
  const int v = a.virtual_stages > 0 ? a.virtual_stages : (kind == "interleaved" ? 2 : 1);
  const PipelineSchedule s = make_schedule(kind, pp, m, v);
  const PipelineTimeline t = simulate(s);
  std::printf("schedule %s: pp %d, %d micro-batches%s | forward 1, backward 2 time units per micro-batch and stage\n\n",
              kind.c_str(), pp, m, v > 1 ? fmt::format(", {} virtual stages per rank", v).c_str() : "");
  std::fputs(format_timeline(s, t).c_str(), stdout);
  std::printf("\nactions (consecutive sends/receives in { } are posted together):\n%s", format_actions(s).c_str());
  std::printf("\nactivation slots (micro-batches in flight) per rank:");
  for (int r = 0; r < pp; ++r) {
    int most = 0;
    for (int c = 0; c < v; ++c) most += s.max_in_flight(r, c);
    std::printf(" %d", most);
  }
  std::printf("\nbubble: %.1f%% of the step idle (simulated) | theory (p-1)/(v*m+p-1) = %.1f%% | makespan %.1f units\n",
              100.0 * t.bubble(), 100.0 * theoretical_bubble(pp, m, v), t.makespan);
  return 0;
}

int cmd_plan(const Args& args) {
  for (const auto& s : args)
    if (s == "--help" || s == "-h") {
      std::fputs(kPlanHelp, stdout);
      return 0;
    }
  JobConfig scratch;
  const std::vector<std::string> rest = apply_job_overrides(scratch, args);
  const PlanArgs a = parse(rest);
  if (!a.schedule.empty()) {
    return plan_schedule_mode(a.schedule, a);
  }
  const PlanInput in = build_input(a, args);
  if (a.explain) {
    std::fputs(explain_strategies(in).c_str(), stdout);
    return 0;
  }
  MachineProfile profile;
  if (!a.profile.empty()) profile = load_profile(a.profile);
  if (a.predict) {
    std::fputs(format_prediction(in, profile, predict_step(in, profile)).c_str(), stdout);
    return 0;
  }
  if (a.advise) {
    const Advice adv = advise(in, a.profile.empty() ? nullptr : &profile);
    std::fputs(format_advice(adv, a.top).c_str(), stdout);
    const Candidate& best = adv.ranked.front();
    std::printf("\n%s", format_ledger(best.ledger).c_str());
    if (!a.emit_job.empty()) {
      std::ofstream f(a.emit_job);
      usage_check(static_cast<bool>(f), "--emit-job: cannot write {}", a.emit_job);
      f << layout_job_toml(best.in, a.profile);
      usage_check(static_cast<bool>(f), "--emit-job: cannot write {}", a.emit_job);
      std::printf("\nwrote %s\n", a.emit_job.c_str());
    }
    return 0;
  }
  std::fputs(format_ledger(compute_ledger(in), a.bytes).c_str(), stdout);
  return 0;
}

}  // namespace mpitron
