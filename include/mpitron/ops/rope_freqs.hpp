// The rotary embedding's angular frequencies, computed once on the host and handed to both Ops::rope
// implementations (CPU and CUDA), so that every device, every layout and the exporters turn the
// pairs by the same angles. Plain RoPE is rope_freqs_plain; the scaled variants (LLaMA 3.1's
// "llama3", YaRN) are built from the model config by model/rope_scaling.hpp.
#pragma once
#include <cmath>
#include <vector>

namespace mpitron {

struct RopeFreqs {
  // Pair i of a head (elements 2i, 2i+1) at position p turns by the angle p * inv_freq[i] (double:
  // position x frequency grows large); head_dim / 2 entries.
  std::vector<double> inv_freq;
  // Multiplies cos and sin (YaRN's attention factor, which scales q and k and so the logits by its
  // square); 1 otherwise, where the product is exact and plain RoPE keeps its bits.
  double scale = 1.0;
};

// Plain RoPE: theta^(-2i/hd), the exact expression Ops::rope used before the table existed (the
// same double operations, so plain RoPE's cos and sin did not change by a bit).
inline RopeFreqs rope_freqs_plain(double theta, int hd) {
  RopeFreqs f;
  for (int i = 0; i < hd / 2; ++i) f.inv_freq.push_back(std::pow(theta, -2.0 * i / hd));
  return f;
}

}  // namespace mpitron
