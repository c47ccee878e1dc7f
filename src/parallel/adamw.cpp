#include "mpitron/parallel/adamw.hpp"

#include <algorithm>

namespace mpitron {

AdamW::AdamW(const AdamWOptions& opt, FlatOps& ops, const std::vector<ParamInfo>& params, size_t begin, size_t end)
    : opt_(opt),
      ops_(ops),
      begin_(begin),
      end_(end),
      m_(Mem::optim, end - begin, ops.allocator()),
      v_(Mem::optim, end - begin, ops.allocator()) {
  // Intersect every parameter with [begin, end); merge neighbours with the same decay flag so a
  // step is a handful of long kernel calls.
  std::vector<Segment> segs;
  for (const auto& p : params) {
    size_t lo = std::max(begin, p.offset), hi = std::min(end, p.offset + p.numel);
    if (lo >= hi) continue;
    segs.push_back({lo, hi - lo, p.decay});
  }
  std::sort(segs.begin(), segs.end(), [](const Segment& a, const Segment& b) { return a.offset < b.offset; });
  for (const auto& s : segs) {
    if (!segments_.empty() && segments_.back().decay == s.decay &&
        segments_.back().offset + segments_.back().n == s.offset)
      segments_.back().n += s.n;
    else
      segments_.push_back(s);
  }
}

void AdamW::step(float* params, bf16* params_bf16, const float* grads, float grad_scale, double lr) {
  ++step_;
  for (const auto& s : segments_) {
    size_t local = s.offset - begin_;
    ops_.adamw(params + s.offset, params_bf16 ? params_bf16 + s.offset : nullptr, grads + s.offset, grad_scale,
               m_.data() + local, v_.data() + local, s.n,
               static_cast<float>(lr), static_cast<float>(opt_.beta1), static_cast<float>(opt_.beta2),
               static_cast<float>(opt_.eps), s.decay ? static_cast<float>(opt_.weight_decay) : 0.0f, step_);
  }
}

}  // namespace mpitron
