// Learning rate: linear warmup from lr/warmup to lr over `warmup` steps, then cosine decay to
// min_lr at `total` steps (and min_lr after). Steps count from 1, like the logged step.
#pragma once

namespace mpitron {

struct LrSchedule {
  double lr = 6e-4, min_lr = 6e-5;
  int warmup = 0, total = 1;
  double at(int step) const;
};

}  // namespace mpitron
