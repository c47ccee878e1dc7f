#include "mpitron/model/rope_scaling.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include <fmt/format.h>

#include "mpitron/core/error.hpp"

namespace mpitron {
namespace {

constexpr double kPi = std::numbers::pi;

// transformers' _compute_llama3_parameters: a pair whose wavelength 2 pi / f is below
// original / high_freq_factor keeps f (it turns many times within the pretraining context), one
// above original / low_freq_factor is slowed to f / factor (as if the positions were divided by
// it), and those between mix the two by how many turns they make in the original context. The
// expressions in transformers' order.
void scale_llama3(std::vector<double>& inv_freq, const RopeScaling& s) {
  const double old_context = s.original_max_pos;
  const double low_freq_wavelen = old_context / s.low_freq_factor;
  const double high_freq_wavelen = old_context / s.high_freq_factor;
  for (double& f : inv_freq) {
    const double wavelen = 2 * kPi / f;
    if (wavelen < high_freq_wavelen) continue;
    if (wavelen > low_freq_wavelen) {
      f = f / s.factor;
      continue;
    }
    const double smooth = (old_context / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
    f = (1 - smooth) * f / s.factor + smooth * f;
  }
}

// transformers' _compute_yarn_parameters (truncate = true, its default): the pairs are split by the
// "correction dims" where beta_fast and beta_slow rotations fit in the original context; pair i
// (compared with those dims as transformers does, index against dim) takes f below `low`,
// f / factor above `high`, and a linear mix between.
void scale_yarn(std::vector<double>& inv_freq, double theta, int head_dim, const RopeScaling& s) {
  const double dim = head_dim;
  auto correction_dim = [&](double rotations) {
    return (dim * std::log(s.original_max_pos / (rotations * 2 * kPi))) / (2 * std::log(theta));
  };
  const double low = std::max(std::floor(correction_dim(s.beta_fast)), 0.0);
  double high = std::min(std::ceil(correction_dim(s.beta_slow)), dim - 1);
  if (low == high) high += 0.001;  // transformers' guard against a ramp of zero width
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    const double extrapolation = 1 - ramp;  // inv_freq_extrapolation_factor: the share of f kept
    const double interpolated = inv_freq[i] / s.factor;
    inv_freq[i] = interpolated * (1 - extrapolation) + inv_freq[i] * extrapolation;
  }
}

}  // namespace

RopeFreqs rope_frequencies(double theta, int head_dim, const RopeScaling& s) {
  RopeFreqs f = rope_freqs_plain(theta, head_dim);
  if (s.type == RopeScalingType::llama3) scale_llama3(f.inv_freq, s);
  if (s.type == RopeScalingType::yarn) {
    scale_yarn(f.inv_freq, theta, head_dim, s);
    f.scale = yarn_attention_factor(s);
  }
  for (double x : f.inv_freq)
    usage_check(std::isfinite(x) && x > 0 && std::isfinite(f.scale),
                "RoPE {} scaling of theta {} gives a frequency {} (scale {}): not a usable rotation",
                rope_scaling_name(s.type), theta, x, f.scale);
  return f;
}

double yarn_attention_factor(const RopeScaling& s) {
  if (s.attention_factor > 0) return s.attention_factor;
  return s.factor <= 1 ? 1.0 : 0.1 * std::log(s.factor) + 1.0;
}

const char* rope_scaling_name(RopeScalingType t) {
  switch (t) {
    case RopeScalingType::llama3: return "llama3";
    case RopeScalingType::yarn: return "yarn";
    case RopeScalingType::none: break;
  }
  return "none";
}

std::optional<RopeScalingType> rope_scaling_type(std::string_view name) {
  for (RopeScalingType t : {RopeScalingType::none, RopeScalingType::llama3, RopeScalingType::yarn})
    if (name == rope_scaling_name(t)) return t;
  return std::nullopt;
}

void check_rope_scaling(const RopeScaling& s, const std::string& where) {
  if (!s.enabled()) return;
  const char* type = rope_scaling_name(s.type);
  auto finite = [](double v) { return std::isfinite(v); };
  usage_check(finite(s.factor) && s.factor >= 1, "{}: {} scaling factor {} (allowed: finite, >= 1)", where, type,
              s.factor);
  usage_check(s.original_max_pos >= 1, "{}: {} scaling original context {} (allowed: >= 1)", where, type,
              s.original_max_pos);
  usage_check(finite(s.low_freq_factor) && s.low_freq_factor > 0 && finite(s.high_freq_factor) &&
                  s.high_freq_factor >= s.low_freq_factor,
              "{}: llama3 scaling: high_freq_factor {} must be >= low_freq_factor {} > 0 (the wavelengths kept "
              "must be the shorter ones)",
              where, s.high_freq_factor, s.low_freq_factor);
  usage_check(finite(s.beta_fast) && s.beta_fast > 0 && finite(s.beta_slow) && s.beta_slow > 0,
              "{}: yarn scaling beta_fast {} and beta_slow {} (allowed: finite, > 0)", where, s.beta_fast, s.beta_slow);
  usage_check(finite(s.attention_factor) && s.attention_factor >= 0,
              "{}: yarn scaling attention_factor {} (allowed: finite, > 0; 0: 0.1 ln(factor) + 1)", where,
              s.attention_factor);
}

std::string rope_scaling_summary(const RopeScaling& s) {
  if (s.type == RopeScalingType::llama3)
    return fmt::format(", llama3 scaling x{:g} (original context {}, low/high frequency factors {:g}/{:g})", s.factor,
                       s.original_max_pos, s.low_freq_factor, s.high_freq_factor);
  if (s.type == RopeScalingType::yarn)
    return fmt::format(", yarn scaling x{:g} (original context {}, beta {:g}/{:g}, attention factor {:g})", s.factor,
                       s.original_max_pos, s.beta_fast, s.beta_slow, yarn_attention_factor(s));
  return "";
}

}  // namespace mpitron
