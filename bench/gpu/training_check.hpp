// gpu_check's training section (training_check.cpp): TransformerModelCuda against the CPU
// TransformerModel, and the training step of GPT-2 presets timed.
#pragma once
#include <string>

#include "mpitron/ops/ops.hpp"
#include "report.hpp"

namespace mpitron::gpu_check {

// The tiny model 20 AdamW steps on TransformerModelCuda (attention cudnn and naive; and with a
// padded vocabulary) against the CPU TransformerModel from the same initial parameters: losses,
// first-step gradients, final parameters, with the bounds stated in the report. Failures are
// counted.
void tiny_training_check(Report& rep, Ops& cpu);

// One training step of `preset` at micro-batch B (T = the preset's seq_len) timed: ms, tokens/s,
// MFU against kPeakTflops and against gemm_tflops (<= 0: not measured); before timing, the
// initial loss of the first sequence against the CPU TransformerModel. One table row (see
// training_section). `attention`: model.attention ("cudnn" | "naive").
void time_training_step(Report& rep, Ops& cpu, const std::string& preset, int B, double gemm_tflops,
                        const std::string& attention = "cudnn");

// Both of the above: tiny (when `tiny`), then gpt2-124m (B 8) and gpt2-350m (B 8) at T 1024 (when
// `steps`; a preset whose cudnn step fails is timed again with attention naive).
void training_section(Report& rep, Ops& cpu, double gemm_tflops, bool tiny = true, bool steps = true);

}  // namespace mpitron::gpu_check
