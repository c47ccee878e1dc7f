// train.check_ledger: the trainer's tracked allocator against the ledger's prediction for this
// rank (plan/ledger.hpp), at start-up and after the first step. Parameters, gradients and
// optimizer state must match exactly (live bytes); the activation peak within 10%. Communication
// buffers and workspace are printed beside their prediction (or "measured") but not judged.
#pragma once
#include <string>

#include "mpitron/core/memory.hpp"
#include "mpitron/plan/ledger.hpp"

namespace mpitron {

struct LedgerCheck {
  bool ok = true;
  std::string text;  // "ledger rank 3 at start: params 1.2 MB = 1.2 MB OK | ... | ledger OK"
};

// `when`: "at start" or "after step 1". Activations compare the category's peak (the planned
// buffers are allocated once, so at start-up the peak is what is live).
LedgerCheck check_against_ledger(const RankLedger& predicted, const MemStats& tracked, const std::string& when);

}  // namespace mpitron
