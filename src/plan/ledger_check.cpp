#include "mpitron/plan/ledger_check.hpp"

#include <fmt/format.h>

#include <cmath>

namespace mpitron {

LedgerCheck check_against_ledger(const RankLedger& p, const MemStats& m, const std::string& when) {
  LedgerCheck c;
  std::string s = fmt::format("ledger rank {} {}:", p.rank, when);
  auto exact = [&](const char* name, int64_t tracked, int64_t predicted) {
    bool ok = tracked == predicted;
    c.ok &= ok;
    s += fmt::format(" {} tracked {} predicted {} {} |", name, tracked, predicted, ok ? "EXACT" : "MISMATCH");
  };
  exact("params", m.of(Mem::params), p.params);
  exact("grads", m.of(Mem::grads), p.grads);
  exact("optim", m.of(Mem::optim), p.optim());
  const int64_t act = m.peak_of(Mem::activations);
  const double rel = p.activations > 0 ? std::abs(static_cast<double>(act - p.activations)) / p.activations : (act ? 1.0 : 0.0);
  const bool act_ok = rel <= 0.10;
  c.ok &= act_ok;
  s += fmt::format(" activations peak tracked {} predicted {} ({:+.2f}%) {} |", act, p.activations,
                   p.activations ? 100.0 * (act - p.activations) / p.activations : 0.0, act_ok ? "OK" : "OFF BY >10%");
  s += fmt::format(" comm tracked {} predicted {} | workspace tracked {} predicted {} |", m.of(Mem::comm),
                   p.comm_predicted ? std::to_string(p.comm) : "(measured)", m.of(Mem::workspace),
                   p.workspace_predicted ? std::to_string(p.workspace) : "(measured)");
  if (p.ckpt_snapshot > 0 || m.of(Mem::checkpoint) > 0) exact("checkpoint snapshot", m.of(Mem::checkpoint), p.ckpt_snapshot);
  s += c.ok ? " ledger OK" : " ledger MISMATCH";
  c.text = std::move(s);
  return c;
}

}  // namespace mpitron
