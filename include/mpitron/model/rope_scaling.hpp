// RoPE scaling (config.hpp: RopeScaling) turned into the table both Ops::rope implementations read
// (ops/rope_freqs.hpp), computed once on the host as Hugging Face transformers computes it
// (modeling_rope_utils.py: _compute_llama3_parameters, _compute_yarn_parameters), in double; and
// the names and checks the job keys, config.json and the checkpoint share.
#pragma once
#include <optional>
#include <string>
#include <string_view>

#include "mpitron/model/config.hpp"
#include "mpitron/ops/rope_freqs.hpp"

namespace mpitron {

// The frequencies of a head of head_dim with RoPE base theta: plain RoPE's theta^(-2i/hd), then the
// scaling's; YaRN's attention factor as the table's scale. Throws if a frequency is not finite.
RopeFreqs rope_frequencies(double theta, int head_dim, const RopeScaling& s);
inline RopeFreqs rope_frequencies(const ModelConfig& c) {
  return rope_frequencies(c.rope_theta, c.head_dim(), c.rope_scaling);
}

// YaRN's attention factor: the configured one, else transformers' default 0.1 ln(factor) + 1 (1 for
// factor <= 1).
double yarn_attention_factor(const RopeScaling& s);

const char* rope_scaling_name(RopeScalingType t);  // "none" | "llama3" | "yarn"
std::optional<RopeScalingType> rope_scaling_type(std::string_view name);

// What the frequencies need beyond each field's own range (the job keys', config.json's): for
// llama3 high_freq_factor >= low_freq_factor (else the ramp runs backwards); every field finite and
// in range for a file that skipped those checks (a checkpoint). UsageError "WHERE: ...".
void check_rope_scaling(const RopeScaling& s, const std::string& where);

// For the start-up line: "" for none, else e.g. ", llama3 scaling x8 (original context 8192,
// low/high frequency factors 1/4)".
std::string rope_scaling_summary(const RopeScaling& s);

}  // namespace mpitron
