#include "mpitron/train/lr_schedule.hpp"

#include <algorithm>
#include <cmath>

namespace mpitron {

double LrSchedule::at(int step) const {
  if (warmup > 0 && step <= warmup) return lr * step / warmup;
  if (step >= total) return min_lr;
  double progress = static_cast<double>(step - warmup) / std::max(1, total - warmup);
  return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(M_PI * progress));
}

}  // namespace mpitron
