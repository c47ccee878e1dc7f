// gpu_check's training section (training_check.hpp). The CPU reference is the CPU TransformerModel
// and the trainer's AdamW; the GPU side is TransformerModelCuda
// (src/model/cuda/transformer_model_cuda.cpp) on CudaOps.
#include "training_check.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "mpitron/core/error.hpp"
#include "mpitron/core/memory.hpp"
#include "mpitron/model/config.hpp"
#include "mpitron/model/cuda/transformer_model_cuda.hpp"
#include "mpitron/model/param_tables.hpp"
#include "mpitron/model/transformer_model.hpp"
#include "mpitron/ops/cuda/cuda_flat_ops.hpp"
#include "mpitron/ops/cuda/cuda_ops.hpp"
#include "mpitron/parallel/adamw.hpp"

namespace mpitron::gpu_check {

namespace {

constexpr uint64_t kInitSeed = 1234, kDataSeed = 42;

// The trainer's optimizer on one GPU (DataParallel at dp 1, zero 0): AdamW (parallel/adamw.hpp) on
// the fp32 master weights over CudaFlatOps with the gradients clipped to norm `clip` (the factor
// applied as AdamW reads them) and the model's bf16 copy written as it goes. Returns the norm before
// clipping.
struct GpuOptimizer {
  GpuOptimizer(CudaOps& ops, TransformerModelCuda& m)
      : model(m), flat(make_cuda_flat_ops(ops)), adamw(AdamWOptions{}, *flat, m.params(), 0, m.num_params()) {}
  double step(float lr, double clip) {
    const size_t n = model.num_params();
    const double norm = std::sqrt(flat->sum_squares(model.grad_data(), n));
    const float scale = norm > clip ? static_cast<float>(clip / norm) : 1.f;
    adamw.step(model.param_data(), model.param_bf16_data(), model.grad_data(), scale, lr);
    return norm;
  }
  TransformerModelCuda& model;
  std::unique_ptr<FlatOps> flat;
  AdamW adamw;
};

struct MicroBatch {
  int B = 0;
  std::vector<int32_t> inputs, targets;
  int64_t count() const { return std::count_if(targets.begin(), targets.end(), [](int32_t t) { return t >= 0; }); }
};

// `steps` steps of two micro-batches, B 4 and 3 (the second below the model's maximum, so a
// smaller shape runs too), of a random bigram chain from a fixed seed: the next token is
// perm[token] with probability 3/4, else uniform. The model can learn it (the chain's entropy,
// the lowest reachable loss, is 1.94 nats against ln 256 = 5.55 at the start; the CPU run falls
// to ~4.2 in the 20 steps), so the two runs are compared along a moving trajectory.
// The first targets of the second micro-batch are -1 (ignored): the count, not B*T, normalises.
std::vector<std::array<MicroBatch, 2>> tiny_batches(const ModelConfig& cfg, int steps) {
  std::mt19937_64 rng(kDataSeed);
  const int V = cfg.vocab_size, T = cfg.seq_len;
  std::vector<int32_t> perm(V);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<std::array<MicroBatch, 2>> out(steps);
  for (auto& step : out)
    for (int k = 0; k < 2; ++k) {
      MicroBatch& mb = step[k];
      mb.B = k == 0 ? 4 : 3;
      mb.inputs.resize(static_cast<size_t>(mb.B) * T);
      mb.targets.resize(mb.inputs.size());
      for (int b = 0; b < mb.B; ++b) {
        int32_t x = static_cast<int32_t>(rng() % V);
        for (int t = 0; t < T; ++t) {
          mb.inputs[b * T + t] = x;
          x = rng() % 4 != 0 ? perm[x] : static_cast<int32_t>(rng() % V);
          mb.targets[b * T + t] = x;
        }
      }
      if (k == 1) std::fill(mb.targets.begin(), mb.targets.begin() + 5, -1);
    }
  return out;
}

// Per parameter kind ("wte.weight", "h.*.attn.c_attn.weight", ...): max |a - ref| / max |ref|
// over every layer's tensor of that kind.
std::vector<std::pair<std::string, double>> rel_err_by_kind(const std::vector<ParamInfo>& params, const float* a,
                                                            const float* ref) {
  std::map<std::string, std::pair<double, double>> acc;  // kind -> (max diff, max |ref|)
  std::vector<std::string> order;
  for (const ParamInfo& p : params) {
    std::string kind = p.name;
    if (kind.starts_with("h.")) kind = "h.*" + kind.substr(kind.find('.', 2));
    if (kind.starts_with("layers.")) kind = "layers.*" + kind.substr(kind.find('.', 7));
    if (!acc.count(kind)) order.push_back(kind);
    auto& [diff, mag] = acc[kind];
    for (size_t i = p.offset; i < p.offset + p.numel; ++i) {
      diff = std::max(diff, static_cast<double>(std::fabs(a[i] - ref[i])));
      mag = std::max(mag, static_cast<double>(std::fabs(ref[i])));
    }
  }
  std::vector<std::pair<std::string, double>> out;
  for (const auto& k : order) {
    auto [diff, mag] = acc[k];
    out.push_back({k, mag > 0 ? diff / mag : diff});
  }
  return out;
}

double max_rel_err(const float* a, const float* ref, size_t n) {
  double diff = 0, mag = 0;
  for (size_t i = 0; i < n; ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(a[i] - ref[i])));
    mag = std::max(mag, static_cast<double>(std::fabs(ref[i])));
  }
  return mag > 0 ? diff / mag : diff;
}

struct Curve {
  std::vector<double> loss, grad_norm;
  std::vector<float> step1_grads, final_params;
  Fp8Stats fp8{};  // train.precision = "fp8": the casts of the whole run
};

constexpr int kTinySteps = 20;
constexpr double kTinyLr = 3e-3, kClip = 1.0;

// The CPU reference: the CPU TransformerModel and the trainer's AdamW, global grad-norm clipping at
// 1.0.
Curve tiny_cpu_run(Ops& cpu, const ModelConfig& cfg, const std::vector<std::array<MicroBatch, 2>>& data, bool fp8) {
  ModelOptions mo;
  mo.fp8 = fp8;
  TransformerModel model(cfg, ModelShard{}, cpu, 4, mo);
  model.init_weights(kInitSeed);
  AdamWOptions ao;
  AdamW opt(ao, cpu, model.params(), 0, model.num_params());
  const size_t n = model.num_params();
  Curve c;
  for (size_t s = 0; s < data.size(); ++s) {
    const double count = static_cast<double>(data[s][0].count() + data[s][1].count());
    model.zero_grad();
    double sum = 0;
    for (const MicroBatch& mb : data[s]) {
      sum += model.forward(mb.inputs.data(), mb.targets.data(), mb.B, nullptr);
      model.backward(static_cast<float>(1.0 / count));
    }
    if (s == 0) c.step1_grads.assign(model.grad_data(), model.grad_data() + n);
    double norm = std::sqrt(cpu.sum_squares(model.grad_data(), n));
    if (norm > kClip) cpu.scale_inplace(model.grad_data(), static_cast<float>(kClip / norm), n);
    opt.step(model.param_data(), nullptr, model.grad_data(), 1.f, kTinyLr);  // clipped above, as torch does
    c.loss.push_back(sum / count);
    c.grad_norm.push_back(norm);
  }
  c.final_params.assign(model.param_data(), model.param_data() + n);
  c.fp8 = model.take_fp8_stats();
  return c;
}

// The same run on TransformerModelCuda, from the CPU TransformerModel's initial parameters
// (init_weights(kInitSeed)). The LM head runs in chunks of 96 rows (256 rows = 96 + 96 + 64), so
// the chunk offsets are exercised.
Curve tiny_gpu_run(Ops& cpu, const ModelConfig& cfg, const std::vector<std::array<MicroBatch, 2>>& data,
                   const std::string& attention, bool fp8, std::string* memory) {
  std::vector<float> init;
  {
    TransformerModel ref(cfg, ModelShard{}, cpu, 1);
    ref.init_weights(kInitSeed);
    init.assign(ref.param_data(), ref.param_data() + ref.num_params());
  }
  CudaOpsOptions oo;
  oo.attention = attention;
  auto ops = make_cuda_ops(oo);
  ModelOptions go;
  go.logits_chunk_rows = 96;
  go.fp8 = fp8;
  TransformerModelCuda model(cfg, ModelShard{}, *ops, 4, go);
  check(model.num_params() == init.size(), "TransformerModelCuda has {} flat floats, the CPU TransformerModel {}",
        model.num_params(), init.size());
  model.load_params(init.data(), init.size());
  *memory = model.memory_summary();
  GpuOptimizer opt(*ops, model);
  const size_t n = model.num_params();
  Curve c;
  for (size_t s = 0; s < data.size(); ++s) {
    const double count = static_cast<double>(data[s][0].count() + data[s][1].count());
    model.zero_grad();
    double sum = 0;
    for (const MicroBatch& mb : data[s]) {
      sum += model.forward(mb.inputs.data(), mb.targets.data(), mb.B, nullptr);
      model.backward(static_cast<float>(1.0 / count));
    }
    if (s == 0) {
      c.step1_grads.resize(n);
      model.copy_grads_to_host(c.step1_grads.data(), n);
    }
    const double norm = opt.step(static_cast<float>(kTinyLr), kClip);
    c.loss.push_back(sum / count);
    c.grad_norm.push_back(norm);
  }
  c.final_params.resize(n);
  model.copy_params_to_host(c.final_params.data(), n);
  c.fp8 = model.take_fp8_stats();
  return c;
}

// Bounds of the tiny comparison. The GPU rounds every activation, the weights it reads and the
// residual-stream gradient to bf16 (8 significant bits: a rounding is up to 2^-9 ~ 2e-3
// relative); the CPU rounds nothing. At equal weights that moves a per-token loss by O(1e-3)
// relative, and the mean over ~440 tokens by less. Over 20 Adam steps the two trajectories
// separate: Adam's step is ~lr * sign(g) where |g| is small, so rounding noise in tiny gradient
// components turns into lr-sized parameter differences, which the loss feels only weakly (lr 3e-3,
// weights ~0.02-1). TransformerModelCuda on a CPU emulation of CudaOps (each kernel = the CPU op
// with its bf16 tensors rounded) stayed within 5e-4 of the CPU losses over these 20 steps, its
// first-step gradients within 1e-2; the real kernels add their own accumulation orders and cuDNN's
// bf16 probabilities. 2e-2 (~0.1 nats at loss 5.5) leaves a wide margin for that, while wiring
// errors do not fit: an unscaled head gradient gave 9e-2 in that emulation, a misplaced wpe
// gradient 4e-2 (and O(1) first-step gradient errors, which the second bound catches even where the
// loss alone would not, e.g. an unzeroed head wte gradient: loss 1.4e-2, gradient 0.7).
constexpr double kLossBound = 2e-2;
// First-step gradients per parameter kind, max |gpu - cpu| / max |cpu|: bf16 errors compound
// through the two blocks to a few 1e-3 .. 1e-2 (3e-3 .. 8e-3 in the emulation); a wiring error
// gives O(1).
constexpr double kGradBound = 1e-1;
// Under FP8 an element of an operand near a rounding boundary takes the neighbouring code on one side
// (bf16 operands on the GPU, fp32 on the CPU): one E5M2 step is 12-25% of a gradient element, so a few
// elements of a kind differ by that much (8e-2 .. 9.8e-2 measured in the emulation); a wiring error
// (a transposed copy misread, a scale applied twice) still gives O(1).
constexpr double kFp8GradBound = 3e-1;

// One comparison: `cfg` on the CPU and on TransformerModelCuda with each attention path; a table of
// both curves, then the checks.
// fp8: both in FP8 (train.precision = "fp8"), the same bounds (the casts see the GPU's bf16 operands
// and the CPU's fp32 ones: an element near a rounding boundary takes another code, noise of the
// bf16 kind's size), and both must have cast the same operands (counts of casts and elements).
void tiny_training(Report& rep, Ops& cpu, const ModelConfig& cfg, const std::string& title,
                   const std::vector<std::string>& attentions, bool fp8 = false) {
  rep.line("#### {} (L{} H{} d{} V{} padded to {}, T{})\n", title, cfg.n_layer, cfg.n_head, cfg.d_model,
           cfg.vocab_size, cfg.padded_vocab(), cfg.seq_len);
  const auto data = tiny_batches(cfg, kTinySteps);
  auto t0 = std::chrono::steady_clock::now();
  const Curve ref = tiny_cpu_run(cpu, cfg, data, fp8);
  rep.line("CPU run: {:.2f} s\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  struct Run {
    std::string attention;
    Curve c;
    std::string error, memory;
  };
  std::vector<Run> runs;
  for (const std::string& att : attentions) {
    Run r{att, {}, {}, {}};
    try {
      r.c = tiny_gpu_run(cpu, cfg, data, att, fp8, &r.memory);
    } catch (const std::exception& e) {
      r.error = e.what();
      cudaGetLastError();
    }
    runs.push_back(std::move(r));
  }
  std::string head = "| step | CPU loss |", sep = "|---|---|";
  for (const Run& r : runs) {
    head += fmt::format(" GPU loss [{}] | rel diff |", r.attention);
    sep += "---|---|";
  }
  head += " CPU grad norm |";
  sep += "---|";
  for (const Run& r : runs) {
    head += fmt::format(" GPU grad norm [{}] |", r.attention);
    sep += "---|";
  }
  rep.line("{}\n{}", head, sep);
  for (int s = 0; s < kTinySteps; ++s) {
    std::string row = fmt::format("| {} | {:.5f} |", s + 1, ref.loss[s]);
    for (const Run& r : runs) {
      if (r.error.empty())
        row += fmt::format(" {:.5f} | {:.1e} |", r.c.loss[s], std::fabs(r.c.loss[s] - ref.loss[s]) / ref.loss[s]);
      else
        row += " | |";
    }
    row += fmt::format(" {:.4f} |", ref.grad_norm[s]);
    for (const Run& r : runs) row += r.error.empty() ? fmt::format(" {:.4f} |", r.c.grad_norm[s]) : " |";
    rep.line("{}", row);
  }
  rep.line("");
  for (const Run& r : runs) {
    if (!r.error.empty()) {
      ++rep.failures;
      rep.line("- attention {}: **ERROR** {}", r.attention, r.error);
      continue;
    }
    double worst = 0;
    bool finite = true;
    for (int s = 0; s < kTinySteps; ++s) {
      finite = finite && std::isfinite(r.c.loss[s]);
      worst = std::max(worst, std::fabs(r.c.loss[s] - ref.loss[s]) / ref.loss[s]);
    }
    const bool loss_ok = finite && worst <= kLossBound;
    const bool learns = r.c.loss.back() < r.c.loss.front();
    if (!loss_ok) ++rep.failures;
    if (!learns) ++rep.failures;
    rep.line("- attention {}: max relative loss difference {:.2e} (bound {:.0e}) {}; GPU loss {:.4f} -> {:.4f} {}",
             r.attention, worst, kLossBound, loss_ok ? "ok" : "**FAIL**", r.c.loss.front(), r.c.loss.back(),
             learns ? "(falls, ok)" : "**does not fall: FAIL**");
    rep.line("  device memory: {}", r.memory);
    std::string grads;
    int grad_fail = 0;
    const double grad_bound = fp8 ? kFp8GradBound : kGradBound;
    for (auto& [kind, e] : rel_err_by_kind(model_param_table(cfg, ModelShard{}), r.c.step1_grads.data(),
                                           ref.step1_grads.data())) {
      grads += fmt::format("{} {:.1e}{}, ", kind, e, e <= grad_bound ? "" : " **FAIL**");
      grad_fail += !(e <= grad_bound);
    }
    rep.failures += grad_fail;
    rep.line("  first-step gradients (rel err per kind, bound {:.0e}): {}{}", grad_bound, grads,
             grad_fail ? "**FAIL**" : "ok");
    if (fp8) {
      std::string casts;
      bool same = true;
      for (int k = 0; k < kFp8Operands; ++k) {
        const Fp8KindStats &g = r.c.fp8[k], &c = ref.fp8[k];
        same = same && g.casts == c.casts && g.elements == c.elements && g.casts > 0;
        casts += fmt::format("{} {} casts of {} elements (CPU {} of {}), amax {:.3g} (CPU {:.3g}), underflow {:.2e} "
                             "(CPU {:.2e}); ",
                             fp8_operand_name(static_cast<Fp8Operand>(k)), g.casts, g.elements, c.casts, c.elements,
                             g.amax, c.amax, static_cast<double>(g.underflowed) / std::max<int64_t>(1, g.elements),
                             static_cast<double>(c.underflowed) / std::max<int64_t>(1, c.elements));
      }
      rep.failures += !same;
      rep.line("  fp8: {}{}", casts, same ? "the same casts, ok" : "**FAIL: other casts than the CPU's**");
    }
    rep.line("  parameters after {} steps: max |gpu - cpu| / max |cpu| = {:.2e} (not bounded: Adam's lr-sized steps "
             "on near-zero gradients differ)",
             kTinySteps, max_rel_err(r.c.final_params.data(), ref.final_params.data(), ref.final_params.size()));
  }
  rep.line("");
}

// The initial loss at full size, CPU TransformerModel against TransformerModelCuda at the same
// weights: bf16 forward only, no training drift (the tiny comparison's step-1 losses differ by
// O(1e-5 .. 1e-4)).
constexpr double kInitLossBound = 1e-2;

}  // namespace

// One training step (zero_grad, forward + backward of one micro-batch, grad norm + clip, AdamW)
// of a GPT-2 preset at T 1024 on random tokens: median wall time of 5 after 2 warm-up steps.
// FLOPs per step = B*T * gpt_flops_per_token (6 N_nonembedding + 6 V d + 12 L T d: attention
// counted without the causal half, as PaLM's MFU does).
void time_training_step(Report& rep, Ops& cpu, const std::string& preset, int B, double gemm_tflops,
                        const std::string& attention) {
  const ModelConfig cfg = model_preset(preset);
  const int T = cfg.seq_len;
  const int64_t BT = int64_t{B} * T;
  CudaOpsOptions oo;
  oo.attention = attention;
  auto ops = make_cuda_ops(oo);
  TransformerModelCuda model(cfg, ModelShard{}, *ops, B);
  std::mt19937 rng(kDataSeed);
  std::vector<int32_t> inputs(BT), targets(BT);
  for (int64_t i = 0; i < BT; ++i) {
    inputs[i] = static_cast<int32_t>(rng() % cfg.vocab_size);
    targets[i] = static_cast<int32_t>(rng() % cfg.vocab_size);
  }
  // GPT-2 initialisation on the CPU (recompute: only the block outputs are allocated), and the
  // full-size check: the loss of the first sequence at the initial weights, CPU (fp32) against
  // TransformerModelCuda (bf16, forward only: one chunk of 50304-column logits, padded vocabulary).
  double init_diff = 0;
  std::string init_losses;
  {
    TransformerModel ref(cfg, ModelShard{}, cpu, 1, ModelOptions{1, true});
    ref.init_weights(kInitSeed);
    model.load_params(ref.param_data(), ref.num_params());
    ref.set_grad_enabled(false);
    model.set_grad_enabled(false);
    int64_t n_cpu = 0, n_gpu = 0;
    const double l_cpu = ref.forward(inputs.data(), targets.data(), 1, &n_cpu) / static_cast<double>(n_cpu);
    const double l_gpu = model.forward(inputs.data(), targets.data(), 1, &n_gpu) / static_cast<double>(n_gpu);
    model.set_grad_enabled(true);
    init_diff = std::fabs(l_gpu - l_cpu) / l_cpu;
    init_losses = fmt::format("{:.4f} / {:.4f} ({:.1e}{})", l_cpu, l_gpu, init_diff,
                              init_diff <= kInitLossBound ? "" : " **FAIL**");
    if (!(init_diff <= kInitLossBound)) ++rep.failures;
  }
  GpuOptimizer opt(*ops, model);
  std::vector<double> losses, norms;
  auto train_step = [&] {
    model.zero_grad();
    int64_t count = 0;
    double sum = model.forward(inputs.data(), targets.data(), B, &count);
    model.backward(static_cast<float>(1.0 / count));
    const double norm = opt.step(6e-4f, kClip);
    ops->synchronize();
    losses.push_back(sum / count);
    norms.push_back(norm);
  };
  train_step();
  train_step();
  std::vector<double> ms;
  for (int r = 0; r < 5; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    train_step();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  const double med = ms[ms.size() / 2];
  const double tflops = gpt_flops_per_token(cfg) * static_cast<double>(BT) / med / 1e9;
  bool finite = true;
  for (double l : losses) finite = finite && std::isfinite(l);
  for (double g : norms) finite = finite && std::isfinite(g);
  if (!finite) ++rep.failures;
  size_t free_b = 0, total_b = 0;
  cudaMemGetInfo(&free_b, &total_b);
  rep.line("| {}{} | {} x {} | {} | {:.1f} | {:.0f} | {:.0f} | {:.1f}% | {} | {:.3f} -> {:.3f}{} | {} |", preset,
           attention == "cudnn" ? "" : " [attention " + attention + "]", B, T, init_losses, med,
           static_cast<double>(BT) / med * 1e3, tflops, 100 * tflops / kPeakTflops,
           gemm_tflops > 0 ? fmt::format("{:.1f}%", 100 * tflops / gemm_tflops) : std::string("n/a"),
           losses.front(), losses.back(), finite ? "" : " **NOT FINITE: FAIL**",
           fmt::format("{} (device in use {:.1f} GiB)", format_bytes(model.device_bytes()),
                       static_cast<double>(total_b - free_b) / (1ull << 30)));
}

void tiny_training_check(Report& rep, Ops& cpu) {
  try {
    rep.line("### {} steps on TransformerModelCuda against the CPU TransformerModel\n", kTinySteps);
    rep.line(
        "Same initial parameters (CPU TransformerModel init_weights({}) loaded into TransformerModelCuda); per step 2 "
        "micro-batches",
        kInitSeed);
    rep.line("(B 4 + B 3, 5 targets ignored) of a random bigram chain (seed {}); loss scale 1/targets; grad-norm", kDataSeed);
    rep.line("clip {}; AdamW lr {} betas (0.9, 0.95) eps 1e-8 wd 0.1 on 2-D weights (the trainer's AdamW on the", kClip,
             kTinyLr);
    rep.line(
        "CPU); TransformerModelCuda's LM head in chunks of 96 rows. Bounds: max over the steps of |gpu - cpu| / cpu "
        "loss");
    rep.line("<= {:.0e}; first-step gradients, max |gpu - cpu| / max |cpu| per tensor kind, <= {:.0e}.\n", kLossBound,
             kGradBound);
    const ModelConfig tiny = model_preset("tiny");
    // naive first: a fault in a cuDNN kernel would be sticky for the rest of the process.
    tiny_training(rep, cpu, tiny, "preset tiny", {"naive", "cudnn"});
    ModelConfig padded = tiny;  // the padded-vocabulary path: 6 padding rows of wte, never counted
    padded.vocab_size = 250;
    padded.name = "tiny+v250";
    tiny_training(rep, cpu, padded, "preset tiny with vocab_size 250", {"cudnn"});
    // LLaMA: RMSNorm, RoPE, grouped-query attention (4 query heads on 2 kv heads), SwiGLU, untied head.
    tiny_training(rep, cpu, model_preset("llama-tiny"), "preset llama-tiny", {"naive", "cudnn"});
    // train.precision = "fp8": the four linears of every block in FP8 on both (fp8_recipe.hpp).
    tiny_training(rep, cpu, tiny, "preset tiny, FP8 linears", {"cudnn"}, true);
    tiny_training(rep, cpu, model_preset("llama-tiny"), "preset llama-tiny, FP8 linears", {"cudnn"}, true);
  } catch (const std::exception& e) {
    ++rep.failures;
    rep.line("\n**ERROR** in the tiny training comparison: {}\n", e.what());
  }
}

void training_section(Report& rep, Ops& cpu, double gemm_tflops, bool tiny, bool steps) {
  if (tiny) {
    rep.line("## Training on TransformerModelCuda (src/model/cuda/transformer_model_cuda.cpp)\n");
    tiny_training_check(rep, cpu);
  }
  if (!steps) return;
  rep.line("### Training step timings (the preset's T: 1024 GPT-2, 2048 llama-1b; one batch of random tokens repeated, attention cudnn)\n");
  rep.line("One step = zero_grad + forward + backward (one micro-batch) + grad norm and clip + AdamW (fp32 master ->");
  rep.line("bf16 copy), wall time, median of 5 after 2 warm-up steps. FLOPs/step = B*T * gpt_flops_per_token");
  rep.line("(6 N_nonembedding + 6 V d + 12 L T d). MFU against the {:.0f} TFLOP/s dense bf16 datasheet peak and", kPeakTflops);
  rep.line("against the cuBLASLt 8192^3 GEMM rate measured above ({}).\n",
           gemm_tflops > 0 ? fmt::format("{:.0f} TFLOP/s", gemm_tflops) : std::string("not measured"));
  rep.line(
      "Before timing, the loss of the first sequence at the initial weights: CPU TransformerModel (fp32) / "
      "TransformerModelCuda, relative");
  rep.line("difference bounded by {:.0e} (bf16 forward only, no training drift: O(1e-3) expected).\n", kInitLossBound);
  rep.line("| model | micro-batch | initial loss CPU / GPU (rel diff) | ms/step | tokens/s | TFLOP/s | MFU (peak) | MFU (GEMM rate) | loss (first -> last of 7 steps) | model device memory |");
  rep.line("|---|---|---|---|---|---|---|---|---|---|");
  for (auto [preset, B] : {std::pair<const char*, int>{"gpt2-124m", 8}, std::pair<const char*, int>{"gpt2-350m", 8},
                           std::pair<const char*, int>{"llama-1b", 4}}) {
    try {
      time_training_step(rep, cpu, preset, B, gemm_tflops);
    } catch (const std::exception& e) {
      ++rep.failures;
      rep.line("| {} | {} | **ERROR** {} | | | | | | | |", preset, B, e.what());
      cudaGetLastError();
      // Still time the step (the GEMMs, kernels and optimizer) with the other attention path, so
      // one failing cuDNN graph does not cost the MFU numbers; the failure above stays counted.
      try {
        time_training_step(rep, cpu, preset, B, gemm_tflops, "naive");
      } catch (const std::exception& e2) {
        ++rep.failures;
        rep.line("| {} [attention naive] | {} | **ERROR** {} | | | | | | | |", preset, B, e2.what());
        cudaGetLastError();
      }
    }
  }
  rep.line("");
}


}  // namespace mpitron::gpu_check
