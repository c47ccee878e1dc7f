// Schedule generators (GPipe, 1F1B, interleaved 1F1B), the event simulation that checks them
// for deadlock and times them, and their text forms.
#include "mpitron/parallel/schedule.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <numeric>
#include <tuple>

#include "mpitron/core/error.hpp"

namespace mpitron {

const char* pipe_op_name(PipeOp op) {
  switch (op) {
    case PipeOp::forward: return "F";
    case PipeOp::backward: return "B";
    case PipeOp::recv_act: return "recv_act";
    case PipeOp::send_act: return "send_act";
    case PipeOp::recv_grad: return "recv_grad";
    case PipeOp::send_grad: return "send_grad";
  }
  return "?";
}

int PipelineSchedule::peer(int rank, PipeAction a) const {
  bool to_prev = a.op == PipeOp::recv_act || a.op == PipeOp::send_grad;
  return to_prev ? (rank + pp - 1) % pp : (rank + 1) % pp;
}

int PipelineSchedule::peer_chunk(int rank, PipeAction a) const {
  int vs = virtual_stage(rank, a.chunk);
  bool to_prev = a.op == PipeOp::recv_act || a.op == PipeOp::send_grad;
  return (to_prev ? vs - 1 : vs + 1) / pp;
}

int PipelineSchedule::max_in_flight(int rank, int chunk) const {
  int live = 0, most = 0;
  for (const auto& a : ranks[rank]) {
    if (a.chunk != chunk) continue;
    if (a.op == PipeOp::forward) most = std::max(most, ++live);
    if (a.op == PipeOp::backward) --live;
  }
  return most;
}

namespace {

// Compute order (forward/backward only) of one rank.
std::vector<PipeAction> compute_order(const std::string& kind, int pp, int m, int v, int rank) {
  std::vector<PipeAction> out;
  auto F = [&](int mb, int c) { out.push_back({PipeOp::forward, mb, c}); };
  auto B = [&](int mb, int c) { out.push_back({PipeOp::backward, mb, c}); };
  if (kind == "gpipe") {  // all forwards, then all backwards
    for (int i = 0; i < m; ++i) F(i, 0);
    for (int i = 0; i < m; ++i) B(i, 0);
  } else if (kind == "1f1b") {  // warmup forwards, steady one-forward-one-backward, cooldown
    int warmup = std::min(pp - rank - 1, m);
    for (int i = 0; i < warmup; ++i) F(i, 0);
    for (int i = 0; i < m - warmup; ++i) F(warmup + i, 0), B(i, 0);
    for (int i = m - warmup; i < m; ++i) B(i, 0);
  } else {  // interleaved: Megatron's forward_backward_pipelining_with_interleaving order
    const int total = m * v, group = pp * v;
    auto mb_of = [&](int k) { return (k / group) * pp + k % pp; };
    auto chunk_of = [&](int k, bool fwd) {
      int c = (k % group) / pp;
      return fwd ? c : v - 1 - c;
    };
    int warmup = m == pp ? total : std::min((pp - rank - 1) * 2 + (v - 1) * pp, total);
    for (int k = 0; k < warmup; ++k) F(mb_of(k), chunk_of(k, true));
    for (int k = 0; k < total - warmup; ++k) F(mb_of(warmup + k), chunk_of(warmup + k, true)), B(mb_of(k), chunk_of(k, false));
    for (int k = total - warmup; k < total; ++k) B(mb_of(k), chunk_of(k, false));
  }
  return out;
}

}  // namespace

void check_schedule(const std::string& kind, int pp, int m, int v) {
  usage_check(kind == "gpipe" || kind == "1f1b" || kind == "interleaved",
              "parallel.schedule = \"{}\" is not a schedule (allowed: gpipe, 1f1b, interleaved)", kind);
  usage_check(pp >= 1, "parallel.pp must be >= 1 (got {})", pp);
  usage_check(m >= 1, "the pipeline needs at least 1 micro-batch (got {})", m);
  if (kind == "interleaved") {
    usage_check(v >= 2, "parallel.schedule = \"interleaved\" needs parallel.virtual_stages >= 2 (got {})", v);
    usage_check(pp >= 2, "parallel.schedule = \"interleaved\" needs parallel.pp >= 2 (got {})", pp);
    usage_check(m >= pp && m % pp == 0,
                "parallel.schedule = \"interleaved\" needs the micro-batches per step ({}) to be a multiple of "
                "parallel.pp ({})",
                m, pp);
  } else {
    usage_check(v == 1, "parallel.virtual_stages = {} needs parallel.schedule = \"interleaved\" (got \"{}\")", v, kind);
    usage_check(kind != "1f1b" || m >= pp,
                "parallel.schedule = \"1f1b\" needs at least parallel.pp ({}) micro-batches per step (got {}); raise "
                "train.global_batch or use gpipe",
                pp, m);
  }
}

PipelineSchedule make_schedule(const std::string& kind, int pp, int m, int v) {
  check_schedule(kind, pp, m, v);
  PipelineSchedule s{kind, pp, m, v, {}};
  const int V = pp * v;
  for (int r = 0; r < pp; ++r) {
    std::vector<PipeAction> acts;
    for (const PipeAction& a : compute_order(kind, pp, m, v, r)) {
      int vs = s.virtual_stage(r, a.chunk);
      if (a.op == PipeOp::forward) {
        if (vs > 0) acts.push_back({PipeOp::recv_act, a.mb, a.chunk});
        acts.push_back(a);
        if (vs < V - 1) acts.push_back({PipeOp::send_act, a.mb, a.chunk});
      } else {
        if (vs < V - 1) acts.push_back({PipeOp::recv_grad, a.mb, a.chunk});
        acts.push_back(a);
        if (vs > 0) acts.push_back({PipeOp::send_grad, a.mb, a.chunk});
      }
    }
    s.ranks.push_back(std::move(acts));
  }
  return s;
}

double PipelineTimeline::bubble() const {
  double idle = 0;
  for (double b : busy) idle += 1.0 - b / makespan;
  return busy.empty() ? 0.0 : idle / static_cast<double>(busy.size());
}

double theoretical_bubble(int pp, int m, int v) {
  return static_cast<double>(pp - 1) / (static_cast<double>(v) * m + pp - 1);
}

PipelineTimeline simulate(const PipelineSchedule& s, double t_fwd, double t_bwd) {
  return simulate(s, [&](int, const PipeAction& a) { return (a.op == PipeOp::forward ? t_fwd : t_bwd) / s.virtual_stages; });
}

PipelineTimeline simulate(const PipelineSchedule& s, const std::function<double(int, const PipeAction&)>& duration,
                          double p2p_s) {
  // Message key: (direction 0 act / 1 grad, micro-batch, receiving virtual stage) -> post time.
  using Key = std::tuple<int, int, int>;
  std::map<Key, double> posted;
  auto key = [&](int rank, PipeAction a) {
    int vs = s.virtual_stage(rank, a.chunk);
    switch (a.op) {
      case PipeOp::send_act: return Key{0, a.mb, vs + 1};
      case PipeOp::recv_act: return Key{0, a.mb, vs};
      case PipeOp::send_grad: return Key{1, a.mb, vs - 1};
      default: return Key{1, a.mb, vs};
    }
  };
  const int P = s.pp;
  std::vector<size_t> pos(P, 0);
  std::vector<bool> sends_posted(P, false);
  std::vector<double> t(P, 0.0);
  PipelineTimeline tl;
  tl.busy.assign(P, 0.0);
  size_t received = 0, sent = 0;
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < P; ++r) {
      const auto& acts = s.ranks[r];
      while (pos[r] < acts.size()) {
        PipeAction a = acts[pos[r]];
        if (!is_comm(a.op)) {
          double d = duration(r, a);
          tl.compute.push_back({r, t[r], t[r] + d, a});
          t[r] += d, tl.busy[r] += d, ++pos[r], progress = true;
          continue;
        }
        size_t end = pos[r];
        while (end < acts.size() && is_comm(acts[end].op)) ++end;
        if (!sends_posted[r]) {  // a group posts its sends first; they never block
          for (size_t i = pos[r]; i < end; ++i) {
            if (acts[i].op != PipeOp::send_act && acts[i].op != PipeOp::send_grad) continue;
            check(posted.emplace(key(r, acts[i]), t[r] + p2p_s).second, "schedule {}: rank {} sends {} {} twice", s.kind, r,
                  pipe_op_name(acts[i].op), acts[i].mb);
            ++sent;
          }
          sends_posted[r] = true;
          progress = true;
        }
        double ready = t[r];
        bool all = true;
        for (size_t i = pos[r]; i < end && all; ++i) {
          if (acts[i].op != PipeOp::recv_act && acts[i].op != PipeOp::recv_grad) continue;
          auto it = posted.find(key(r, acts[i]));
          if (it == posted.end()) all = false;
          else ready = std::max(ready, it->second);
        }
        if (!all) break;
        for (size_t i = pos[r]; i < end; ++i) received += acts[i].op == PipeOp::recv_act || acts[i].op == PipeOp::recv_grad;
        t[r] = ready, pos[r] = end, sends_posted[r] = false, progress = true;
      }
    }
  }
  std::string stuck;
  for (int r = 0; r < P; ++r)
    if (pos[r] < s.ranks[r].size())
      stuck += fmt::format(" rank {} at {} mb {}", r, pipe_op_name(s.ranks[r][pos[r]].op), s.ranks[r][pos[r]].mb);
  check(stuck.empty(), "schedule {} (pp {}, m {}) deadlocks:{}", s.kind, s.pp, s.microbatches, stuck);
  check(sent == received, "schedule {}: {} sends but {} receives", s.kind, sent, received);
  tl.makespan = *std::max_element(t.begin(), t.end());
  return tl;
}

std::string format_actions(const PipelineSchedule& s) {
  std::string out;
  for (int r = 0; r < s.pp; ++r) {
    out += fmt::format("rank {}:", r);
    bool in_group = false;
    for (const auto& a : s.ranks[r]) {
      bool c = is_comm(a.op);
      if (c && !in_group) out += " {";
      if (!c && in_group) out += " }";
      in_group = c;
      out += fmt::format(" {}{}", pipe_op_name(a.op), a.mb);
      if (s.virtual_stages > 1) out += fmt::format(".{}", a.chunk);
    }
    out += in_group ? " }\n" : "\n";
  }
  return out;
}

std::string format_timeline(const PipelineSchedule& s, const PipelineTimeline& t) {
  // One column per time unit of the shortest compute slot.
  double unit = 1e300;
  for (const auto& c : t.compute) unit = std::min(unit, c.end - c.start);
  const int cols = static_cast<int>(std::lround(t.makespan / unit));
  auto label = [&](PipeAction a) {
    std::string l = fmt::format("{}{}", pipe_op_name(a.op), a.mb);
    if (s.virtual_stages > 1) l += fmt::format(".{}", a.chunk);
    return l;
  };
  size_t w = 2;
  for (const auto& c : t.compute) w = std::max(w, label(c.action).size());
  std::vector<std::vector<std::string>> grid(s.pp, std::vector<std::string>(cols, "."));
  for (const auto& c : t.compute) {
    int a = static_cast<int>(std::lround(c.start / unit)), b = static_cast<int>(std::lround(c.end / unit));
    for (int i = a; i < b && i < cols; ++i) grid[c.rank][i] = label(c.action);
  }
  std::string out = fmt::format("{:>7} |", "t");
  for (int i = 0; i < cols; ++i) out += fmt::format(" {:>{}}", i, w);
  out += " | busy\n";
  for (int r = 0; r < s.pp; ++r) {
    out += fmt::format("rank {:>2} |", r);
    for (int i = 0; i < cols; ++i) out += fmt::format(" {:>{}}", grid[r][i], w);
    out += fmt::format(" | {:.0f}%\n", 100.0 * t.busy[r] / t.makespan);
  }
  return out;
}

std::vector<int> pipeline_stage_layers(int n_layer, int n_stages, const std::vector<int>& pp_layers) {
  // The layout rules (layout_rules.hpp) have refused a pipeline this cannot split.
  check(n_layer >= n_stages && (pp_layers.empty() || static_cast<int>(pp_layers.size()) == n_stages),
        "pipeline_stage_layers: {} layers over {} stages (pp_layers of {})", n_layer, n_stages, pp_layers.size());
  if (!pp_layers.empty()) return pp_layers;
  // Same rule as model_shard_for (partition.hpp): stage s holds [s*L/n, (s+1)*L/n).
  std::vector<int> out(n_stages);
  for (int i = 0; i < n_stages; ++i) out[i] = (i + 1) * n_layer / n_stages - i * n_layer / n_stages;
  return out;
}

}  // namespace mpitron
